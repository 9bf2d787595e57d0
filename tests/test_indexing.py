"""``x[index]`` and ``x[index] = v`` against PyTorch for mixed indices: ints, 0-d integer
tensors, slices, None, Ellipsis (also standing for no dims), Python ``True``, integer
index tensors (1-d and 2-d) and bool masks, in every order. PyTorch places the index
tensors' dims differently from NumPy where ints or an empty Ellipsis stand between them
(``x[0, :, idx]``); values, dtypes and gradients (of the indexed tensor and of the written
values, in a recorded graph) must match PyTorch's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad.ops.index import parse_index
from graphgrad.ops.index_order import torch_order

SHAPE = (2, 3, 4, 5)
KINDS = ("int", "int0d", "slice", "none", "ellipsis", "true", "array", "array2d", "mask")


def _draw(rng) -> list[str]:
    """A random index pattern that fits SHAPE (at most one Ellipsis)."""
    while True:
        kinds = list(rng.choice(KINDS, size=rng.integers(1, 6)))
        used = sum(k in ("int", "int0d", "slice", "array", "array2d", "mask") for k in kinds)
        if kinds.count("ellipsis") <= 1 and used <= len(SHAPE):
            return kinds


def _build(kinds, rng):
    """The index for graphgrad and for torch (index tensors drawn without repeats, so
    writes have one winner)."""
    used = sum(k in ("int", "int0d", "slice", "array", "array2d", "mask") for k in kinds)
    g, t, dim = [], [], 0
    for k in kinds:
        if k in ("none", "true", "ellipsis"):
            item = {"none": None, "true": True, "ellipsis": Ellipsis}[k]
            g.append(item)
            t.append(item)
            dim += len(SHAPE) - used if k == "ellipsis" else 0
            continue
        size = SHAPE[dim]
        dim += 1
        if k == "int":
            g.append(int(rng.integers(-size, size)))
            t.append(g[-1])
            continue
        if k == "slice":
            g.append(slice(None))
            t.append(slice(None))
            continue
        if k == "int0d":
            arr = np.array(rng.integers(0, size))
        elif k == "array":
            arr = rng.permutation(size)[:2]
        elif k == "array2d":
            arr = rng.permutation(size)[:2].reshape(1, 2)
        else:
            arr = np.zeros(size, bool)
            arr[[0, -1]] = True
        g.append(gg.tensor(arr))
        t.append(torch.tensor(arr))
    return tuple(g), tuple(t)


def _patterns(n: int, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        kinds = _draw(rng)
        g, t = _build(kinds, rng)
        try:
            shape = tuple(torch.zeros(SHAPE)[t].shape)
        except (IndexError, RuntimeError):
            continue  # PyTorch refuses it (index tensors that do not broadcast)
        out.append((" ".join(kinds), g, t, shape))
    return out


X = np.arange(np.prod(SHAPE), dtype=np.float64).reshape(SHAPE)
FIXED = [  # the cases where NumPy's placement differs, named
    ("int slice array", (0, slice(None), [1, 3])),
    ("none int slice array", (None, 0, slice(None), [1, 3])),
    ("array none array", ([0, 1], None, [2, 0])),
    ("slice array ellipsis array", (slice(None), [0, 2], Ellipsis, [1, 3], slice(None))),
    ("int slice true", (1, slice(None), True)),
    ("int ellipsis mask", (0, Ellipsis, [True, False, True, False, True])),
]


def _fixed():
    out = []
    for name, index in FIXED:
        g = tuple(gg.tensor(i) if isinstance(i, list) else i for i in index)
        t = tuple(torch.tensor(i) if isinstance(i, list) else i for i in index)
        out.append((name, g, t, tuple(torch.zeros(SHAPE)[t].shape)))
    return out


CASES = _fixed() + _patterns(150, seed=0)


def test_torch_order_matches_torch():
    """The placement rule alone: NumPy's result, permuted, is PyTorch's."""
    for name, g, t, _ in CASES:
        spec, tensors = parse_index(g)
        perm = torch_order(spec, [x._array for x in tensors], X.ndim)
        numpy_result = X[tuple(x._array if isinstance(x, gg.Tensor) else x for x in g)]
        moved = numpy_result if perm is None else np.transpose(numpy_result, perm)
        np.testing.assert_array_equal(moved, torch.tensor(X)[t].numpy(), err_msg=name)


@pytest.mark.parametrize("name,g,t,shape", CASES, ids=[c[0] for c in CASES])
def test_getitem_matches_torch(name, g, t, shape):
    ga, ta = gg.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    go, to = ga[g], ta[t]
    np.testing.assert_array_equal(go.detach().numpy(), to.detach().numpy())
    w = np.random.default_rng(1).standard_normal(shape)
    (go * gg.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(ga.grad.numpy(), ta.grad.numpy())


@pytest.mark.parametrize("name,g,t,shape", CASES, ids=[c[0] for c in CASES])
def test_setitem_matches_torch(name, g, t, shape):
    """Values shaped as PyTorch's indexing result (whole, without the leading dim, with
    an extra leading 1, a number), written into a non-leaf in a recorded graph."""
    rng = np.random.default_rng(2)
    for v_shape in {shape, shape[1:], (1, *shape), ()}:
        v = rng.standard_normal(v_shape)
        results = []
        for lib, index in ((gg, g), (torch, t)):
            a = lib.tensor(X, requires_grad=True)
            value = lib.tensor(v, requires_grad=True)
            out = a * 1.0
            out[index] = value
            (out * lib.tensor(X)).sum().backward()
            results.append((out.detach().numpy(), a.grad.numpy(), value.grad.numpy()))
        for mine, theirs in zip(*results, strict=True):
            np.testing.assert_allclose(mine, theirs, err_msg=f"{name}, values {v_shape}")
    for lib, index in ((gg, g), (torch, t)):  # a Python number, nothing recorded
        y = lib.zeros(SHAPE)
        y[index] = 7.0
        results.append(y.numpy())
    np.testing.assert_array_equal(results[-2], results[-1])


def test_setitem_shape_mismatch_wording():
    for lib in (gg, torch):
        x = lib.zeros(2, 3, 4)
        with pytest.raises(RuntimeError, match=r"shape mismatch: value tensor of shape \[2, 3\] "
                                               r"cannot be broadcast to indexing result of "
                                               r"shape \[3, 2\]"):
            x[0, :, lib.tensor([0, 1])] = lib.ones(2, 3)


def test_byte_tensor_index_is_a_mask_and_masked_select_wants_bool():
    outs = []
    for lib in (torch, gg):
        x = lib.tensor([10.0, 20.0, 30.0], requires_grad=True)
        with pytest.warns(UserWarning, match="indexing with dtype .*uint8 is now deprecated"):
            y = x[lib.tensor([1, 0, 1], dtype=lib.uint8)]
        y.sum().backward()
        with pytest.raises(RuntimeError, match="masked_select: expected BoolTensor for mask"):
            x.masked_select(lib.tensor([1, 0, 1]))
        outs.append((y.tolist(), x.grad.tolist()))
    assert outs[0] == outs[1] == ([10.0, 30.0], [1.0, 0.0, 1.0])
