"""The convolution kernels (ops/conv_kernels.py) against PyTorch on both of their paths:
im2col columns (few input channels per group) and tap by tap over phase-split inputs
(many), for the convolution, the transposed convolution by output phases and the weight
gradient, with first and second derivatives; which path ran is asserted from the code's
own decisions, never from timing. The op tables (op_cases.py) sweep small channel counts
with hypothesis."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest
import torch

import graphgrad as gg

kernels = sys.modules["graphgrad.ops.conv_kernels"]  # (the package's name is a function)

# (nd, stride, padding, dilation, output_padding): stride 2 and 3, padding past the
# stride, dilation sharing a factor with the stride (phases no tap reaches), and
# output_padding below max(stride, dilation)
GEOMETRIES = [
    (1, 3, 2, 2, 1), (1, 2, 0, 3, 2), (1, 1, 1, 2, 1),
    (2, (2, 3), (1, 0), (1, 2), (1, 0)), (2, 2, 2, 2, 1), (2, 1, 0, 1, 0),
    (3, (2, 1, 2), (0, 1, 1), (2, 1, 1), (1, 0, 1)),
]


def _close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-10)


def _check(nd, transposed, stride, padding, dilation, output_padding, groups, c_in, c_out,
           n=2, k=3):
    """Forward, first and second derivatives of conv or conv_transpose against torch."""
    rng = np.random.default_rng(nd * 100 + groups * 10 + int(transposed))
    size = (7, 6, 5)[:nd]
    w_shape = (c_in, c_out // groups) if transposed else (c_out, c_in // groups)
    arrays = [rng.standard_normal((n, c_in, *size)),
              rng.standard_normal((*w_shape, *(k,) * nd)), rng.standard_normal(c_out)]
    name = f"conv_transpose{nd}d" if transposed else f"conv{nd}d"
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    if transposed:
        kw["output_padding"] = output_padding
    outs = []
    for m in (gg, torch):
        x, w, b = (m.tensor(a, requires_grad=True) for a in arrays)
        y = getattr(m.nn.functional, name)(x, w, b, **kw)
        gx, gw = m.autograd.grad((y ** 2).sum(), (x, w), create_graph=True)
        second = m.autograd.grad((gx ** 2).sum() + (gw * gw.tanh()).sum(), (x, w, b))
        outs.append((y, gx, gw, *second))
    for a, b in zip(*outs, strict=True):
        _close(a, b)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("by_taps", [False, True])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_both_paths_match_torch_to_second_order(monkeypatch, geometry, by_taps, transposed):
    monkeypatch.setattr(kernels, "_TAP_CHANNELS", 1 if by_taps else 1 << 30)
    nd, *rest = geometry
    stride, padding, dilation, output_padding = (
        v if isinstance(v, tuple) else (v,) * nd for v in rest)
    if transposed and any(op >= max(s, d) for op, s, d in
                          zip(output_padding, stride, dilation, strict=True)):
        pytest.skip("output_padding must be smaller than stride or dilation")
    _check(nd, transposed, stride, padding, dilation, output_padding, groups=2,
           c_in=4, c_out=6)


@pytest.mark.parametrize("groups", [1, 3])
def test_many_channels_take_the_tap_path_and_match_torch(monkeypatch, groups):
    """32+ input channels per group: the convolution and the weight gradient run tap by
    tap over phase-split inputs; values and gradients stay torch's."""
    seen = []
    real = kernels._split
    monkeypatch.setattr(kernels, "_split", lambda x, *a: seen.append(x.shape[1]) or real(x, *a))
    _check(2, False, (2, 2), (1, 1), (1, 1), (0, 0), groups, c_in=32 * groups,
           c_out=3 * groups, n=1)
    # the input split into phases: by the forward and by the weight gradient (twice: the
    # first derivative and again in the second)
    assert seen.count(32 * groups) >= 3


def test_transposed_runs_one_stride_1_correlation_per_reached_phase(monkeypatch):
    """stride (2, 3), dilation (2, 1): phases of odd rows get no tap (they are zeros),
    the others one stride-1 correlation each with the taps of their residue."""
    calls = []
    real = kernels.correlate
    monkeypatch.setattr(kernels, "correlate",
                        lambda x, w, stride, *a, **kw: calls.append((w.shape, stride))
                        or real(x, w, stride, *a, **kw))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((3, 2, 3, 4))
    y = kernels.transposed(x, w, (2, 3), (1, 1), (2, 1), (1, 0), 1)
    want = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), stride=(2, 3),
                                                padding=1, dilation=(2, 1), output_padding=(1, 0))
    np.testing.assert_allclose(y, want.numpy(), rtol=1e-12, atol=1e-12)
    assert [s for _, s in calls] == [(1, 1)] * 3  # 3 of 6 phases: the even rows
    # row taps all 3 (dilation 2 keeps them in one phase), column taps split 2/1/1
    assert sorted(shape[2:] for shape, _ in calls) == [(3, 1), (3, 1), (3, 2)]


@pytest.mark.parametrize("n", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transposed_and_weight_grad_keep_dtype_and_take_empty_batches(n, dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 40, 6, 5)).astype(dtype)
    w = rng.standard_normal((40, 3, 3, 3)).astype(dtype)
    xg, wg = gg.tensor(x, requires_grad=True), gg.tensor(w, requires_grad=True)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    yg = gg.nn.functional.conv_transpose2d(xg, wg, stride=2, padding=1, output_padding=1)
    yt = torch.nn.functional.conv_transpose2d(xt, wt, stride=2, padding=1, output_padding=1)
    (yg ** 2).sum().backward()
    (yt ** 2).sum().backward()
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for a, b in ((yg, yt), (xg.grad, xt.grad), (wg.grad, wt.grad)):
        assert a.detach().numpy().dtype == dtype and a.shape == tuple(b.shape)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def test_complex_transposed_convolution_matches_torch():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 2, 5)) + 1j * rng.standard_normal((2, 2, 5))
    w = rng.standard_normal((2, 3, 3)) + 1j * rng.standard_normal((2, 3, 3))
    for stride, dilation in itertools.product((1, 2), (1, 2)):
        got = kernels.transposed(x, w, (stride,), (1,), (dilation,), (0,), 1)
        want = torch.nn.functional.conv_transpose1d(torch.tensor(x), torch.tensor(w),
                                                    stride=stride, padding=1, dilation=dilation)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)
