"""Prod's and scatter_reduce(reduce='prod')'s vjp at zeros, differentiated again to order 4.

Both vjps are "the product of the others", written without division so that they stay exact
when differentiated again with any number of zeros in a slice (or sent to one slot). The
oracles: PyTorch's nested autograd (float64) for prod; for scatter_reduce, PyTorch where it
differentiates twice, and the same products spelled out with Mul where it refuses (two or
more zero sources at one slot: "Double backward is unsupported").
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg

ORDER = 4


def _nested(lib, fn, xs, vs, w) -> list[float]:
    """[d^k/dt^k <w, fn(x + t v)> at t = 0, k = 0..ORDER] by nested grad in ``lib``."""
    t = lib.zeros((), dtype=lib.float64, requires_grad=True)
    cur = (fn(*[x + t * v for x, v in zip(xs, vs, strict=True)]) * w).sum()
    values = [float(cur.detach())]
    for _ in range(ORDER):
        g = None
        if cur.requires_grad:  # else constant in t: the next derivatives are 0
            (g,) = lib.autograd.grad(cur, t, create_graph=True, allow_unused=True)
        cur = g if g is not None else lib.zeros((), dtype=lib.float64)
        values.append(float(cur.detach()))
    return values


def _both(fn_gg, fn_torch, arrays, seed=0):
    rng = np.random.default_rng(seed)
    vs = [rng.standard_normal(a.shape) for a in arrays]
    out_shape = tuple(fn_torch(*[torch.tensor(a) for a in arrays]).shape)
    w = rng.standard_normal(out_shape)
    got = _nested(gg, fn_gg, [gg.tensor(a) for a in arrays], [gg.tensor(v) for v in vs],
                  gg.tensor(w))
    want = _nested(torch, fn_torch, [torch.tensor(a) for a in arrays],
                   [torch.tensor(v) for v in vs], torch.tensor(w))
    return got, want


def _with_zeros(shape, zeros, seed=1):
    a = np.random.default_rng(seed).uniform(0.5, 1.5, shape)
    a[zeros] = 0.0
    return a


# (shape, zero positions, dim, keepdim): one, two, three and four zeros in a slice, an
# all-zero slice, zeros spread over slices, reductions over the first, last, all dims
PROD_CASES = [
    ((5,), [0], None, False),
    ((5,), [0, 3], None, False),
    ((5,), [0, 2, 3], None, False),
    ((4,), [0, 1, 2, 3], None, False),
    ((3, 4), (np.array([0, 0, 0, 1]), np.array([0, 1, 2, 3])), 1, False),
    ((3, 4), (np.array([0, 0, 0, 1]), np.array([0, 1, 2, 3])), 1, True),
    ((3, 4), (np.array([0, 0, 1, 2]), np.array([0, 1, 1, 1])), 0, True),
    ((4, 3), (np.array([0, 1, 2, 3, 1]), np.array([1, 1, 1, 1, 0])), 0, False),
    ((2, 3, 4), (np.array([0, 0, 0, 1, 1]), np.array([1, 1, 1, 2, 0]),
                 np.array([0, 2, 3, 1, 1])), 2, True),
    ((2, 3, 4), (np.array([1, 1, 1]), np.array([0, 1, 2]), np.array([3, 3, 3])), 1, False),
    ((2, 3, 2), (np.array([0, 0, 0, 1]), np.array([0, 1, 2, 0]), np.array([0, 0, 1, 1])),
     None, False),
]


@pytest.mark.parametrize("shape, zeros, dim, keepdim", PROD_CASES)
def test_prod_at_zeros_matches_torch_to_order_4(shape, zeros, dim, keepdim):
    a = _with_zeros(shape, zeros)

    def fn(x):
        return x.prod() if dim is None else x.prod(dim, keepdim)
    got, want = _both(fn, fn, [a])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert any(abs(v) > 1e-3 for v in want[3:]), "the case must test order 3 or 4"


def test_prod_over_several_dims_equals_the_products_of_the_slices():
    """Prod over a tuple of dims (what gradient rules use): the same derivatives as the
    product of the per-dim products, three zeros in one (2, 3) block."""
    from graphgrad.ops.reduce import Prod
    a = _with_zeros((2, 3, 2), (np.array([0, 0, 1]), np.array([0, 1, 2]), np.array([1, 1, 1])))
    rng = np.random.default_rng(3)
    v, w = rng.standard_normal(a.shape), rng.standard_normal(2)
    got = _nested(gg, lambda x: Prod.apply(x, dim=(0, 1), keepdim=False), [gg.tensor(a)],
                  [gg.tensor(v)], gg.tensor(w))
    want = _nested(torch, lambda x: x.prod(0).prod(0), [torch.tensor(a)], [torch.tensor(v)],
                   torch.tensor(w))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


INDEX = np.array([[0, 1, 2, 0], [2, 2, 1, 0], [2, 0, 1, 0]])


def _spelled(include_self):
    """scatter_reduce(0, INDEX, s, 'prod') written with Mul and stack."""
    def fn(a, s):
        cols = []
        for j in range(INDEX.shape[1]):
            col = []
            for p in range(a.shape[0]):
                arrived = [k for k in range(INDEX.shape[0]) if INDEX[k, j] == p]
                v = a[p, j] if include_self or not arrived else gg.ones((), dtype=gg.float64)
                for k in arrived:
                    v = v * s[k, j]
                col.append(v)
            cols.append(gg.stack(col))
        return gg.stack(cols, dim=1)
    return fn


def _scatter(lib, include_self):
    def fn(a, s):
        return a.scatter_reduce(0, lib.tensor(INDEX), s, reduce="prod",
                                include_self=include_self)
    return fn


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("pattern", ["two_zero_sources", "three_zero_sources",
                                     "zero_input_and_sources", "all_zero"])
def test_scatter_reduce_prod_with_zeros_meeting_at_a_slot(include_self, pattern):
    rng = np.random.default_rng(5)
    a, s = rng.uniform(0.5, 1.5, (3, 4)), rng.uniform(0.5, 1.5, (3, 4))
    if pattern == "two_zero_sources":      # sources 1, 2 at slot 2 (column 0), 0, 1 at 2
        s[1, 0], s[2, 0], s[0, 2], s[1, 2] = 0.0, 0.0, 0.0, 0.0
    elif pattern == "three_zero_sources":  # column 3: all three sources go to slot 0
        s[:, 3] = 0.0
    elif pattern == "zero_input_and_sources":
        s[:, 3], a[0, 3], a[2, 1] = 0.0, 0.0, 0.0
    else:
        a[:], s[:] = 0.0, 0.0
    v_a, v_s = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    w = rng.standard_normal((3, 4))
    xs, vs = [gg.tensor(a), gg.tensor(s)], [gg.tensor(v_a), gg.tensor(v_s)]
    got = _nested(gg, _scatter(gg, include_self), xs, vs, gg.tensor(w))
    want = _nested(gg, _spelled(include_self), xs, vs, gg.tensor(w))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    if pattern != "all_zero":
        assert any(abs(x) > 1e-3 for x in want[2:]), "the case must test order 2 and up"
    # PyTorch refuses the double backward here; its first derivative is the oracle
    want_torch = _nested_first(torch, _scatter(torch, include_self),
                               [torch.tensor(a), torch.tensor(s)],
                               [torch.tensor(v_a), torch.tensor(v_s)], torch.tensor(w))
    np.testing.assert_allclose(got[:2], want_torch, rtol=1e-10, atol=1e-12)


def _nested_first(lib, fn, xs, vs, w) -> list[float]:
    t = lib.zeros((), dtype=lib.float64, requires_grad=True)
    cur = (fn(*[x + t * v for x, v in zip(xs, vs, strict=True)]) * w).sum()
    (g,) = lib.autograd.grad(cur, t)
    return [float(cur.detach()), float(g)]


@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_prod_with_single_zeros_matches_torch_to_order_4(include_self):
    """One zero (input or source) per slot at most: PyTorch differentiates it again."""
    rng = np.random.default_rng(6)
    a, s = rng.uniform(0.5, 1.5, (3, 4)), rng.uniform(0.5, 1.5, (3, 4))
    s[0, 0], s[1, 3], a[1, 2] = 0.0, 0.0, 0.0
    got, want = _both(_scatter(gg, include_self), _scatter(torch, include_self), [a, s])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)



@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_prod_first_order_value_path_matches_torch(include_self):
    """A backward that records no graph takes the quotient form (its values are right
    with any zeros; only its derivatives are not): the gradients equal PyTorch's and the
    recorded (exact) form's, with two and three zero sources at a slot."""
    rng = np.random.default_rng(11)
    a, s = rng.uniform(0.5, 1.5, (3, 4)), rng.uniform(0.5, 1.5, (3, 4))
    s[1, 0] = s[2, 0] = s[0, 2] = s[1, 2] = 0.0
    s[:, 3], a[0, 1] = 0.0, 0.0
    w = rng.standard_normal((3, 4))
    grads = []
    for create_graph in (False, True):
        ga, gs = gg.tensor(a, requires_grad=True), gg.tensor(s, requires_grad=True)
        out = (_scatter(gg, include_self)(ga, gs) * gg.tensor(w)).sum()
        grads.append([g.detach().numpy() for g in gg.autograd.grad(
            out, (ga, gs), create_graph=create_graph)])
    ta, ts = torch.tensor(a, requires_grad=True), torch.tensor(s, requires_grad=True)
    want = torch.autograd.grad((_scatter(torch, include_self)(ta, ts) * torch.tensor(w)).sum(),
                               (ta, ts))
    for got in grads:
        for g, t in zip(got, want, strict=True):
            np.testing.assert_allclose(g, t.numpy(), rtol=1e-12, atol=1e-15)
