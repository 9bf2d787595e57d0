"""erf's NumPy kernel (ops/special.py): accuracy against math.erf (the C library's erf)
in ulp on dense grids, wide random inputs and the special values; float32 within 2 ulp
of float64 erf rounded; the same results whether or not SciPy can be imported; and the
op against PyTorch, first and second derivatives included."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad.ops.special import erf_array

RNG = np.random.default_rng(0)


def _ulp_error(got, x) -> np.ndarray:
    """|got - erf(x)| in units of the spacing at erf(x), erf by math.erf in float64."""
    ref = np.array([math.erf(v) for v in x.astype(np.float64).tolist()])
    if got.dtype == np.float32:  # against float64 erf rounded to float32: bit distance
        a = got.view(np.int32).astype(np.int64)
        b = ref.astype(np.float32).view(np.int32).astype(np.int64)
        return np.abs(a - b)
    return np.abs(got - ref) / np.spacing(np.abs(ref))


def _wide(n: int) -> np.ndarray:
    """Uniform on [-7, 7], normal, and log-uniform magnitudes from denormals to 30."""
    mags = 10.0 ** RNG.uniform(-320, 1.5, n)
    return np.concatenate([RNG.uniform(-7, 7, n), RNG.standard_normal(n),
                           mags * RNG.choice([-1.0, 1.0], n)])


def test_float64_within_one_ulp_of_libm():
    grid = np.linspace(-6.5, 6.5, 200_001)  # every range boundary of fdlibm's crossed
    edges = np.array([0.84375, 1.25, 1 / 0.35, 6.0])
    near = (edges[:, None] * (1 + np.arange(-4, 5) * 2.0 ** -52)).ravel()
    x = np.concatenate([grid, _wide(100_000), near, -near, [5e-324, 2.0 ** -1022, 1e-300]])
    err = _ulp_error(erf_array(x), x)
    assert err.max() <= 1.0, x[err.argmax()]
    assert np.mean(err > 0) < 0.1  # mostly exact: a scheme rounding loosely fails here


def test_float32_within_two_ulp_of_float64_rounded():
    # every 509th float32 in [0, 4.5] (above 3.92 erf rounds to 1), both signs
    bits = np.arange(0, np.float32(4.5).view(np.int32), 509, dtype=np.int32)
    grid = bits.view(np.float32)
    x = np.concatenate([grid, -grid, _wide(50_000).astype(np.float32)])
    got = erf_array(x)
    assert got.dtype == np.float32
    err = _ulp_error(got, x)
    assert err.max() <= 2, x[err.argmax()]
    assert np.mean(err > 1) < 0.01  # (a float32 evaluation: 1 ulp is common, 2 is rare)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_special_values(dtype):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 30.0, -30.0], dtype)
    got = erf_array(x)
    assert got.dtype == dtype
    assert got[0] == 0 and not np.signbit(got[0]) and got[1] == 0 and np.signbit(got[1])
    assert got[2:4].tolist() == [1.0, -1.0] and got[5:].tolist() == [1.0, -1.0]
    assert np.isnan(got[4])
    tiny = np.array([np.finfo(dtype).smallest_subnormal, -np.finfo(dtype).tiny], dtype)
    # math.erf rounded: PyTorch's float16 erf goes through its vectorized float erf, whose
    # absolute error (1e-7) gives 0 for the smallest subnormal and is off by 1 ulp at tiny
    want = np.array([math.erf(v) for v in tiny.astype(np.float64).tolist()]).astype(dtype)
    np.testing.assert_array_equal(erf_array(tiny), want)


def test_odd_and_shapes():
    x = RNG.standard_normal((3, 4, 5))
    np.testing.assert_array_equal(erf_array(-x), -erf_array(x))
    assert erf_array(x).shape == (3, 4, 5) and erf_array(np.float64(0.5)).shape == ()
    big = RNG.standard_normal(200_000)  # several blocks: each block lands in its place
    np.testing.assert_array_equal(erf_array(big)[150_000:], erf_array(big[150_000:]))


def test_integers_compute_in_float64():
    got = erf_array(np.array([-2, 0, 3]))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, [math.erf(-2), 0.0, math.erf(3)])


def test_results_do_not_depend_on_scipy(monkeypatch):
    x = _wide(2000)
    before = erf_array(x), erf_array(x.astype(np.float32))
    monkeypatch.setitem(sys.modules, "scipy", None)  # any import of scipy now fails
    monkeypatch.setitem(sys.modules, "scipy.special", None)
    after = erf_array(x), erf_array(x.astype(np.float32))
    for b, a in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_refused_as_in_pytorch(dtype):
    name = "ComplexFloat" if dtype == "complex64" else "ComplexDouble"
    with pytest.raises(NotImplementedError, match=f"\"erf_vml_cpu\" not implemented for '{name}'"):
        gg.erf(gg.ones(2, dtype=getattr(gg, dtype)))
    with pytest.raises(NotImplementedError, match="erf_vml_cpu"):
        torch.erf(torch.ones(2, dtype=getattr(torch, dtype)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_op_and_derivatives_match_pytorch(dtype):
    a = (RNG.standard_normal(300) * 2).astype(dtype)
    x, xt = gg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, yt = gg.erf(x), torch.erf(xt)
    tol = dict(rtol=2e-7, atol=1e-7) if dtype == "float32" else dict(rtol=1e-15, atol=1e-16)
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), **tol)
    (g,) = gg.autograd.grad(y.sum(), x, create_graph=True)
    (gt,) = torch.autograd.grad(yt.sum(), xt, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), gt.detach().numpy(), rtol=1e-6, atol=1e-7)
    (h,) = gg.autograd.grad((g * g).sum(), x)
    (ht,) = torch.autograd.grad((gt * gt).sum(), xt)
    np.testing.assert_allclose(h.numpy(), ht.numpy(), rtol=1e-5, atol=1e-6)


def test_exact_gelu_matches_pytorch_to_second_order():
    a = RNG.standard_normal(500) * 3
    x, xt = gg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, yt = gg.nn.functional.gelu(x), torch.nn.functional.gelu(xt)
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-13, atol=1e-15)
    (g,) = gg.autograd.grad(y.sum(), x, create_graph=True)
    (gt,) = torch.autograd.grad(yt.sum(), xt, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), gt.detach().numpy(), rtol=1e-14, atol=1e-15)
    (h,) = gg.autograd.grad(g.sum(), x)
    (ht,) = torch.autograd.grad(gt.sum(), xt)
    np.testing.assert_allclose(h.numpy(), ht.numpy(), rtol=1e-13, atol=1e-14)
