"""Random fused chains (hypothesis) against eager, forward and backward, with the Numba
path on and off: op sequences over broadcast shapes, float32/float64, 0-d and size-0
tensors, non-contiguous inputs, NaN and inf."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphgrad as gg
from graphgrad.backends import fused as fused_mod
from graphgrad.dynamo import CompiledFunction

_BINARY = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b,
           gg.maximum, gg.minimum, lambda a, b: gg.where(a > b, a, b * 0.5)]
_UNARY = [lambda a: a.relu(), lambda a: -a, lambda a: a.abs(), lambda a: a * 2.5 + 1,
          lambda a: a.tanh(), lambda a: a.exp() * 0.1, lambda a: (a * a + 1).sqrt()]
_SHAPES = [((3, 4), (4,)), ((3, 4), (3, 1)), ((), (2, 3)), ((0, 3), (3,)), ((5, 2), (5, 2))]


@st.composite
def programs(draw):
    # (binary?, which op, which earlier value is the second operand): values read twice
    # make groups that recompute cheap ops and values kept on their own
    ops = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 6), st.integers(0, 9)),
                        min_size=2, max_size=8))
    shapes = draw(st.sampled_from(_SHAPES))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    special = draw(st.booleans())
    transpose = draw(st.booleans())
    reduce = draw(st.sampled_from([None, "sum", "amax"]))
    return ops, shapes, dtype, special, transpose, reduce


def _build(ops, reduce):
    def f(x, y):
        a, vals = x, [x, y]
        for binary, k, src in ops:
            a = _BINARY[k](a, vals[src % len(vals)]) if binary else _UNARY[k](a)
            vals.append(a)
        if reduce == "sum":
            return a.sum(-1) if a.ndim else a
        if reduce == "amax" and a.ndim and a.numel():
            return a.amax(-1)
        return a
    return f


def _inputs(shapes, dtype, special, transpose, seed):
    rng = np.random.default_rng(seed)
    arrs = []
    for shape in shapes:
        a = rng.standard_normal(shape).astype(dtype)
        if special and a.size:
            a.reshape(-1)[0] = np.nan
            a.reshape(-1)[-1] = np.inf
        arrs.append(a)
    if transpose and arrs[0].ndim == 2:   # the same values through a non-contiguous view
        arrs[0] = np.ascontiguousarray(arrs[0].T).T
    return arrs


@pytest.mark.parametrize("numba", [True, False])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(prog=programs(), seed=st.integers(0, 10))
def test_random_fused_chains_equal_eager(numba, prog, seed, monkeypatch, tmp_path):
    if numba and not fused_mod.fused_numba.numba_available():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(fused_mod.config, "numba", numba)
    monkeypatch.setenv("GRAPHGRAD_KERNEL_CACHE", str(tmp_path))
    ops, shapes, dtype, special, transpose, reduce = prog
    f = _build(ops, reduce)
    xa, ya = _inputs(shapes, dtype, special, transpose, seed)
    with np.errstate(all="ignore"):
        with gg.no_grad():
            want = f(gg.from_numpy(xa), gg.from_numpy(ya)).numpy()
            got = CompiledFunction(f, backend="default", share=False)(
                gg.from_numpy(xa), gg.from_numpy(ya)).numpy()
        np.testing.assert_array_equal(got, want)   # bit for bit, NaN where eager has NaN
        if special or not xa.size:
            return
        x = gg.from_numpy(xa).requires_grad_()
        y = gg.from_numpy(ya).requires_grad_()
        want_g = gg.autograd.grad(f(x, y).sum(), [x, y], allow_unused=True)
        got_g = gg.autograd.grad(CompiledFunction(f, backend="default", share=False)(x, y).sum(),
                                 [x, y], allow_unused=True)
    for a, b in zip(got_g, want_g, strict=True):
        if a is None or b is None:
            assert a is None and b is None or (a is not None and not a.numpy().any()) \
                or (b is not None and not b.numpy().any())
            continue
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)


# integer and bool chains: PyTorch's promotion (bool with int gives int, comparisons
# give bool), wrapping on overflow, where, and bool logic
_INT_BINARY = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, gg.maximum,
               gg.minimum, lambda a, b: gg.where(a > b, a, b - 1),
               lambda a, b: a * (a >= b),
               lambda a, b: gg.where((a > 0) & (b < 2) | (a == b), a, b),
               lambda a, b: a + ((a < b) ^ (b != 0))]
_INT_UNARY = [lambda a: a * 3 + 1, lambda a: -a, lambda a: a.abs(), lambda a: a * a,
              lambda a: a + 100, lambda a: gg.where(~(a > 1), a, 0), lambda a: (a <= 0) | (a > 7)]
_INT_DTYPES = [np.int32, np.int64, np.int16, np.uint8]


@st.composite
def int_programs(draw):
    ops = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 8), st.integers(0, 9)),
                        min_size=2, max_size=8))
    shapes = draw(st.sampled_from(_SHAPES))
    dtype = draw(st.sampled_from(_INT_DTYPES))
    other = draw(st.sampled_from(["same", "bool"]))   # the second input's dtype
    transpose = draw(st.booleans())
    return ops, shapes, dtype, other, transpose


def _build_int(ops):
    def f(x, y):
        a, vals = x, [x, y]
        for binary, k, src in ops:
            a = _INT_BINARY[k](a, vals[src % len(vals)]) if binary \
                else _INT_UNARY[k % len(_INT_UNARY)](a)
            vals.append(a)
        return a
    return f


def _int_inputs(shapes, dtype, other, transpose, seed):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -(1 << 20)), min(info.max, 1 << 20)   # products overflow
    xa = rng.integers(lo, hi, shapes[0], endpoint=True).astype(dtype)
    ya = (rng.integers(0, 2, shapes[1]).astype(bool) if other == "bool"
          else rng.integers(lo, hi, shapes[1], endpoint=True).astype(dtype))
    if transpose and xa.ndim == 2:
        xa = np.ascontiguousarray(xa.T).T
    return xa, ya


@pytest.mark.parametrize("numba", [True, False])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(prog=int_programs(), seed=st.integers(0, 10))
def test_random_integer_and_bool_chains_equal_eager(numba, prog, seed, monkeypatch, tmp_path):
    if numba and not fused_mod.fused_numba.numba_available():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(fused_mod.config, "numba", numba)
    monkeypatch.setenv("GRAPHGRAD_KERNEL_CACHE", str(tmp_path))
    ops, shapes, dtype, other, transpose = prog
    f = _build_int(ops)
    xa, ya = _int_inputs(shapes, dtype, other, transpose, seed)
    x, y = gg.from_numpy(xa), gg.from_numpy(ya)
    cf = CompiledFunction(f, backend="default", share=False)
    with np.errstate(all="ignore"), gg.no_grad():
        try:
            want = f(x, y)
        except (RuntimeError, TypeError) as err:   # e.g. PyTorch refuses bool - bool
            with pytest.raises(type(err)):
                cf(x, y)
            return
        got = cf(x, y)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want.numpy())   # wrapped bit for bit
