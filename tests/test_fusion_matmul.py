"""Matmuls in fused graphs (``graphgrad.passes.matmul_scaling``): a scaling by a Python
number moves to the smallest of the operands and the product; transposed operands reach
``numpy.matmul`` as views, never copied. Results equal eager forward and backward."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad.dynamo import CompiledFunction
from graphgrad.ops import REGISTRY
from graphgrad.passes import optimize
from graphgrad.passes.matmul_scaling import fold_matmul_scalars, matmul_scalar_plan


def _graph(fn, *args):
    cf = CompiledFunction(fn, backend="eager", share=False)
    cf(*args)
    return optimize(cf.graphs[0])[0]


def _where(fn, *args) -> list[str]:
    return [w for _, _, _, w, _ in matmul_scalar_plan(_graph(fn, *args)).values()]


def _scaled_shapes(g) -> list[tuple]:
    """The shapes each Python-number multiply of the graph writes."""
    return [tuple(n.spec.shape) for n in g.nodes if n.kind == "call"
            and n.op.__name__ == "Mul" and any(not isinstance(a, type(n)) for a in n.inputs)]


def test_scalings_move_to_the_smallest_array():
    wide, narrow = gg.randn(256, 64), gg.randn(64, 4)
    # (s * x) @ w with a narrow w: scale w (64 x 4), not x (256 x 64)
    assert _where(lambda x, w: (0.125 * x) @ w, wide, narrow) == ["b"]
    # a long inner dim: the (8, 8) product is the smallest
    long_a, long_b = gg.randn(8, 1024), gg.randn(1024, 8)
    assert _where(lambda x, w: (0.125 * x) @ w, long_a, long_b) == ["out"]
    # (x @ w) * s with few rows: scale x (8 x 64) rather than the (8, 512) product
    assert _where(lambda x, w: (x @ w) * 3.0, gg.randn(8, 64), gg.randn(64, 512)) == ["a"]
    # both sides scaled: one multiply, by the product of the two numbers
    g = fold_matmul_scalars(_graph(lambda x, w: (2.0 * x) @ (w * 0.3), wide, narrow))
    assert _scaled_shapes(g) == [(64, 4)]
    # ... none when they cancel
    g = fold_matmul_scalars(_graph(lambda x, w: (2.0 * x) @ (w * 0.5), wide, narrow))
    assert _scaled_shapes(g) == []
    assert "fold_matmul_scalars" in g.code
    # already on the smallest: nothing moves
    assert _where(lambda x, w: (x @ w) * 3.0, long_a, long_b) == []


def test_what_never_moves():
    x, w = gg.randn(256, 64), gg.randn(64, 4)
    # the scaled operand read elsewhere too: its multiply stays
    assert _where(lambda x, w: ((2.0 * x) @ w, 2.0 * x), x, w) == []
    # the unscaled product is a result too
    assert _where(lambda x, w: ((x @ w), (x @ w) * 2.0), gg.randn(4, 64),
                  gg.randn(64, 512)) == []
    # integer tensors: scaling changes overflow, never moved
    xi, wi = gg.randint(0, 5, (256, 64)), gg.randint(0, 5, (64, 4))
    assert _where(lambda x, w: (3 * x) @ w, xi, wi) == []
    # a tensor scale is not a Python number
    assert _where(lambda x, w, s: (x * s) @ w, x, w, gg.randn(())) == []


@pytest.mark.parametrize("fn", [
    lambda x, w: (0.125 * x) @ w,
    lambda x, w: (x @ w) * 3.0 + 1,
    lambda x, w: (2.0 * x) @ (w * 0.3),
    lambda x, w: ((x * 1.7) @ w).relu() * 0.5,
    lambda x, w: (x.t() * 0.25).t() @ w,
])
@pytest.mark.parametrize("dtype", [gg.float32, gg.float64])
def test_results_equal_eager_forward_and_backward(fn, dtype):
    x = gg.randn(128, 64, dtype=dtype, requires_grad=True)
    w = gg.randn(64, 4, dtype=dtype, requires_grad=True)
    cf = CompiledFunction(fn, backend="default", share=False)
    tol = 1e-5 if dtype == gg.float32 else 1e-12
    got, want = cf(x, w), fn(x, w)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=tol, atol=tol)
    g_got = gg.autograd.grad(got.sum(), [x, w])
    g_want = gg.autograd.grad(want.sum(), [x, w])
    for a, b in zip(g_got, g_want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)


def test_powers_of_two_scale_bit_for_bit():
    x, w = gg.randn(128, 64), gg.randn(64, 4)
    fn = lambda x, w: (0.125 * x) @ w   # noqa: E731
    with gg.no_grad():
        got = CompiledFunction(fn, backend="default", share=False)(x, w)
    np.testing.assert_array_equal(got.numpy(), fn(x, w).numpy())


def test_transposed_operands_reach_matmul_as_views(monkeypatch):
    seen = []
    matmul = REGISTRY["Matmul"]
    real = matmul.forward

    def spy(a, b):
        seen.append((a, b))
        return real(a, b)
    monkeypatch.setattr(matmul, "forward", staticmethod(spy))
    x, w = gg.randn(64, 128), gg.randn(32, 64)
    for fn in (lambda x, w: x.t() @ w.t(), lambda x, w: x.transpose(0, 1) @ w.T):
        seen.clear()
        cf = CompiledFunction(fn, backend="default", share=False)
        with gg.no_grad():
            got = cf(x, w)
        np.testing.assert_array_equal(got.numpy(), fn(x, w).numpy())
        a, b = seen[-1]   # the compiled program's call
        assert np.shares_memory(a, x.numpy()) and np.shares_memory(b, w.numpy())
        assert a.flags.f_contiguous and b.flags.f_contiguous   # views, not copies
    # and with a gradient: the compiled forward and backward read views too
    xr, wr = gg.randn(64, 128, requires_grad=True), gg.randn(32, 64, requires_grad=True)
    seen.clear()
    cf = CompiledFunction(lambda x, w: (x.t() @ w.t()).tanh(), backend="default", share=False)
    cf(xr, wr).sum().backward()
    a, b = seen[0]   # the compiled forward's matmul
    assert np.shares_memory(a, xr.detach().numpy()) and np.shares_memory(b, wr.detach().numpy())
    np.testing.assert_allclose(xr.grad.numpy(), gg.autograd.grad(
        (xr.t() @ wr.t()).tanh().sum(), [xr])[0].numpy(), rtol=1e-5, atol=1e-5)
