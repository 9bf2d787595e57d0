"""Cumulative and shifting ops against PyTorch beyond the op tables: cumprod's
derivatives at zeros to third order, cummax/cummin at ties, NaN and infinities,
integer cumprod, roll and diff."""


from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import gg_and_torch, to_numpy

import graphgrad as gg

# ---- roll, diff ---------------------------------------------------------------------------


def test_roll_errors():
    with pytest.raises(RuntimeError, match="shifts and dimensions must align. shifts: 2, dims:1"):
        gg.roll(gg.ones(3, 3), (1, 2), (0,))
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        gg.roll(gg.ones(3, 3), (1, 2))


def test_roll_result_is_a_new_tensor():
    x = gg.tensor([1.0, 2.0, 3.0])
    y = x.roll(3)
    assert y is not x and to_numpy(y).tolist() == [1.0, 2.0, 3.0]


def test_roll_same_dim_twice_and_0d():
    a = np.arange(12.0).reshape(3, 4)
    g, t = gg_and_torch(a)
    np.testing.assert_array_equal(to_numpy(g.roll((1, 2), (1, 1))), t.roll((1, 2), (1, 1)).numpy())
    np.testing.assert_array_equal(to_numpy(gg.roll(gg.tensor(2.0), 1)), 2.0)


def test_diff_errors():
    with pytest.raises(RuntimeError, match="diff expects input to be at least one-dimensional"):
        gg.diff(gg.tensor(1.0))
    with pytest.raises(RuntimeError, match="order must be non-negative but got -1"):
        gg.diff(gg.ones(3), n=-1)
    with pytest.raises(RuntimeError, match="diff expects prepend or append to be the same "
                                           "dimension as input"):
        gg.diff(gg.ones(3, 2), prepend=gg.ones(2))


def test_diff_more_times_than_elements():
    g, t = gg_and_torch(np.array([1.0, 4.0, 9.0]))
    for n in range(5):
        np.testing.assert_array_equal(to_numpy(gg.diff(g, n)), torch.diff(t, n).numpy())


# ---- cumprod at zeros, third order ----------------------------------------------------------


@pytest.mark.parametrize("x", [[2.0, 0.0, 3.0, 0.0, 1.5], [0.0, 0.0, 0.0], [1.0, 2.0, 0.0],
                               [0.5, -1.0, 2.0]])
def test_cumprod_derivatives_to_third_order_match_torch(x):
    rng = np.random.default_rng(1)
    r, s, u = (rng.standard_normal(len(x)) for _ in range(3))

    def third(m):
        a = m.tensor(np.array(x), requires_grad=True)
        y = (m.cumprod(a, 0) * m.tensor(r)).sum()
        (g1,) = m.autograd.grad(y, a, create_graph=True)
        (g2,) = m.autograd.grad((g1 * m.tensor(s)).sum(), a, create_graph=True)
        (g3,) = m.autograd.grad((g2 * m.tensor(u)).sum(), a, allow_unused=True)
        return [to_numpy(v) if v is not None else np.zeros(len(x)) for v in (g1, g2, g3)]

    for got, want in zip(third(gg), third(torch), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_cumprod_first_order_backward_is_one_linear_op():
    """Plain backward runs CumprodBackward (O(n) along the dim) and nothing quadratic:
    the n-copies construction appears only when the gradient is differentiated again."""
    from graphgrad.tensor import Mode, dispatch, pop_mode, push_mode

    class Recorder(Mode):
        def __init__(self):
            self.seen = []

        def process(self, op, args, params):
            self.seen.append(op.__name__)
            with self.lowered():
                return dispatch(op, args, params)

    x = gg.tensor(np.array([[2.0, 0.0, 3.0, 0.5], [1.0, -1.0, 0.0, 0.0]]), requires_grad=True)
    y = gg.cumprod(x, 1)
    rec = Recorder()
    push_mode(rec)
    try:
        (grad,) = gg.autograd.grad(y.sum(), x)
    finally:
        pop_mode(rec)
    assert "CumprodBackward" in rec.seen and "Cumprod" not in rec.seen, rec.seen
    xt = torch.tensor(to_numpy(x), requires_grad=True)
    (want,) = torch.autograd.grad(torch.cumprod(xt, 1).sum(), xt)
    np.testing.assert_allclose(to_numpy(grad), want.numpy(), rtol=1e-14)


@pytest.mark.parametrize("fn", ["cummax", "cummin"])
def test_running_extremum_ties_nan_and_inf_follow_torch(fn):
    rng = np.random.default_rng(3)
    for _ in range(50):
        shape = tuple(rng.integers(1, 5, rng.integers(1, 4)))
        a = rng.integers(-2, 3, shape).astype(np.float64)
        a[rng.random(shape) < 0.15] = np.nan
        a[rng.random(shape) < 0.1] = np.inf
        dim = int(rng.integers(-len(shape), len(shape)))
        g, t = gg_and_torch(a)
        got, want = getattr(gg, fn)(g, dim), getattr(torch, fn)(t, dim)
        np.testing.assert_array_equal(to_numpy(got.indices), want.indices.numpy())
        np.testing.assert_array_equal(to_numpy(got.values), want.values.numpy())


def test_cumprod_int_and_bool_give_int64():
    assert gg.cumprod(gg.tensor([1, 2, 3]), 0).dtype == gg.int64
    assert gg.cumprod(gg.tensor([True, False]), 0).dtype == gg.int64
    assert gg.cumprod(gg.tensor([1, 2]), 0, dtype=gg.float32).dtype == gg.float32
