"""``F.interpolate`` against PyTorch: trilinear, nearest-exact and 5-D nearest (float64
values and gradients), PyTorch's float32 source indices, uint8 bilinear compared exactly
(PyTorch's fixed-point kernel), and the errors with PyTorch's types and wording."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import close, rand, raises_as_torch, step_both, twin_layers

import graphgrad as gg

CASES = [
    ("trilinear_x2", (2, 2, 3, 4, 5), {"scale_factor": 2, "mode": "trilinear"}),
    ("trilinear_align", (1, 2, 3, 4, 5), {"size": (5, 2, 7), "mode": "trilinear",
                                          "align_corners": True}),
    ("trilinear_scales", (1, 2, 3, 4, 5), {"scale_factor": (1.5, 0.7, 2.2),
                                           "mode": "trilinear"}),
    ("trilinear_recompute", (1, 2, 3, 4, 5), {"scale_factor": 1.7, "mode": "trilinear",
                                              "recompute_scale_factor": True}),
    ("nearest_5d_scale", (2, 2, 3, 4, 5), {"scale_factor": 1.7}),
    ("nearest_5d_size", (2, 2, 3, 4, 5), {"size": (4, 7, 3)}),
    ("nearest_down", (1, 1, 13, 11), {"scale_factor": 0.37}),
    ("nearest_exact_5d", (2, 2, 3, 4, 5), {"scale_factor": 1.7, "mode": "nearest-exact"}),
    ("nearest_exact_1d", (2, 2, 7), {"size": 10, "mode": "nearest-exact"}),
    ("nearest_exact_down", (2, 2, 7, 9), {"size": (3, 4), "mode": "nearest-exact"}),
    ("nearest_exact_scale_down", (1, 1, 13, 11), {"scale_factor": 0.37,
                                                  "mode": "nearest-exact"}),
]


@pytest.mark.parametrize("name,shape,kw", CASES, ids=[c[0] for c in CASES])
def test_interpolate_matches_torch(name, shape, kw):
    x = rand(*shape)
    results = []
    for lib in (gg, torch):
        xt = lib.tensor(x, requires_grad=True)
        out = lib.nn.functional.interpolate(xt, **kw)
        (g,) = lib.autograd.grad((out * lib.tensor(rand(*out.shape, seed=2))).sum(), xt)
        results.append([out, g])
        x32 = lib.tensor(x.astype(np.float32))
        results[-1].append(lib.nn.functional.interpolate(x32, **kw).double())
    for a, b in zip(results[0][:2], results[1][:2], strict=True):
        close(a, b)
    # float32: nearest picks PyTorch's float32 indices bit for bit; a linear blend
    # (PyTorch's is one 2^n-term sum, graphgrad's n separable ones) rounds differently
    exact = kw.get("mode", "nearest").startswith("nearest")
    close(results[0][2], results[1][2], 0 if exact else 1e-6, 0 if exact else 1e-6)
    if "recompute_scale_factor" not in kw:
        g_mod, t_mod = twin_layers(lambda m: m.Upsample(**kw))
        step_both(g_mod, t_mod, x)


def _uint8_cases(n: int, seed: int = 1):
    """Random uint8 images and bilinear resizes: sizes, scales, align_corners, recompute."""
    rng = np.random.default_rng(seed)
    for trial in range(n):
        c = int(rng.choice([1, 2, 3, 4, 5, 8]))
        h, w = (int(v) for v in rng.integers(1, 16, 2))
        x = rng.integers(0, 256, (int(rng.integers(1, 3)), c, h, w)).astype(np.uint8)
        kind = trial % 4
        if kind == 0:
            kw = {"size": tuple(int(v) for v in rng.integers(1, 24, 2))}
        elif kind == 1:
            kw = {"scale_factor": float(rng.choice([0.5, 1.5, 2.0, 2.7, 0.3, 1.0]))}
        elif kind == 2:
            kw = {"size": tuple(int(v) for v in rng.integers(1, 24, 2)), "align_corners": True}
        else:
            kw = {"scale_factor": tuple(float(v) for v in rng.uniform(0.4, 3, 2)),
                  "recompute_scale_factor": bool(rng.integers(2))}
        yield x, kw


def test_uint8_bilinear_equals_torch_exactly():
    """All of 400 random cases equal PyTorch's bytes, except where PyTorch's generic
    (more than 4 channels) uint8 path itself is off: an output width of 1 with the
    height resized, where it repeats one row (graphgrad gives the interpolated rows)."""
    compared = 0
    for x, kw in _uint8_cases(400):
        if min(int(s * f) for s, f in zip(x.shape[2:], np.broadcast_to(
                kw.get("scale_factor", 1.0), 2), strict=True)) == 0:
            raises_as_torch(lambda lib, x=x, kw=kw: lib.nn.functional.interpolate(
                lib.tensor(x), mode="bilinear", **kw), RuntimeError)
            continue
        expected = torch.nn.functional.interpolate(torch.tensor(x), mode="bilinear", **kw)
        out = gg.nn.functional.interpolate(gg.tensor(x), mode="bilinear", **kw)
        assert out.dtype == gg.uint8 and tuple(out.shape) == tuple(expected.shape)
        if x.shape[1] > 4 and out.shape[-1] == 1 and out.shape[-2] != x.shape[-2]:
            continue
        np.testing.assert_array_equal(out.numpy(), expected.numpy(), err_msg=str(kw))
        compared += 1
    assert compared > 350
    # the old blend cast its weights to uint8 and returned the lower neighbour
    x = np.array([[[[0, 200]]]], dtype=np.uint8)
    out = gg.nn.functional.interpolate(gg.tensor(x), size=(1, 3), mode="bilinear",
                                       align_corners=True)
    assert out.numpy().tolist() == [[[[0, 100, 200]]]]


ERRORS = [
    (NotImplementedError, lambda lib: lib.nn.functional.interpolate(lib.ones(2, 2), size=3)),
    (NotImplementedError, lambda lib: lib.nn.functional.interpolate(lib.ones(1, 1, 2, 2, 2, 2),
                                                                    size=3)),
    (NotImplementedError, lambda lib: lib.nn.functional.interpolate(
        lib.ones(1, 1, 2, 2), size=3, mode="trilinear")),
    (NotImplementedError, lambda lib: lib.nn.functional.interpolate(
        lib.ones(1, 1, 2, 2, 2), size=3, mode="bilinear")),
    (NotImplementedError, lambda lib: lib.nn.functional.interpolate(
        lib.ones(1, 1, 2, 2), size=3, mode="foo")),
    (NotImplementedError, lambda lib: lib.nn.functional.interpolate(
        lib.ones(1, 1, 2, 2, 2, dtype=lib.uint8), size=3, mode="trilinear")),
    (ValueError, lambda lib: lib.nn.functional.interpolate(
        lib.ones(1, 1, 2, 2), size=3, mode="bilinear", recompute_scale_factor=True)),
    (ValueError, lambda lib: lib.nn.functional.interpolate(
        lib.ones(1, 1, 2, 2), scale_factor=(2, 2, 2))),
    (ValueError, lambda lib: lib.nn.functional.interpolate(
        lib.ones(1, 1, 2, 2, 2), size=(2, 2), mode="trilinear")),
    (ValueError, lambda lib: lib.nn.functional.interpolate(
        lib.ones(1, 1, 2, 2, 2), size=3, mode="nearest-exact", align_corners=False)),
]


@pytest.mark.parametrize("error,call", ERRORS, ids=range(len(ERRORS)))
def test_interpolate_errors_as_torch(error, call):
    raises_as_torch(call, error)
