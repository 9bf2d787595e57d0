"""ops/complex_kernels.py: complex tanh in real arithmetic and the real-times-complex
product, against NumPy's complex results (hard grids, random shapes, inputs with and
without the complex-step structure), and the complex-step mode's product of a real
matrix with a complex one."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphgrad as gg
from graphgrad.numdiff.complex_step import complex_step_mode, cs_hessian
from graphgrad.ops import complex_kernels as ck

_HARD = np.array([
    0.0, 5e-324, 1e-310, 1e-300, 1e-200, 1e-20, 1e-9, 1.5e-8, 1e-5, 0.1, 0.3, 0.5, 0.549,
    0.55, 0.551, 0.7, 1.0, 2.0, 5.0, 10.0, 18.0, 19.1, 20.0, 22.0, 30.0, 100.0, 300.0,
    354.0, 355.0, 360.0, 372.0, 375.0, 380.0, 700.0, 710.0, 745.0, 800.0, 1e10, 1e300,
    1.7e308, np.pi / 2, np.pi, 3 * np.pi / 2, 1e16 * np.pi / 2, 1e22, np.inf, np.nan])
_POLES = np.pi / 2 * np.arange(1, 12)
_HARD = np.concatenate([_HARD, -_HARD, np.nextafter(_POLES, 0), np.nextafter(_POLES, 9e9)])


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of want's last place (values below 1e-300 count as
    absolute: subnormal results have fewer significant bits); 0 where both are the
    same number or both nan."""
    with np.errstate(all="ignore"):
        err = np.abs(got - want) / np.maximum(np.spacing(np.abs(want)), 1e-300 * 2 ** -52)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    return np.where(same, 0.0, err)


def _assert_tanh_close(z: np.ndarray, ulps: float = 10.0) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got, want = ck.complex_tanh(z), np.tanh(z)
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        assert np.array_equal(np.isnan(g), np.isnan(w))
        assert np.array_equal(np.signbit(g[~np.isnan(w)]), np.signbit(w[~np.isnan(w)]))
        assert _ulps(g, w).max() <= ulps
    return got


def test_tanh_hard_grid_with_repeated_rows():
    """Row j, column k: a_k + i b_j, every real part repeated down the rows (the
    formula's case), over tiny, huge, subnormal, pole-adjacent, inf and nan parts of
    both signs (a nan real part is not equal to itself: NumPy's route)."""
    a, b = np.meshgrid(_HARD[~np.isnan(_HARD)], _HARD)
    z = np.empty(a.shape, complex)
    z.real[:] = a  # (a + 1j * b would turn inf * 1j into nan + inf j)
    z.imag[:] = b
    assert ck._repeated_rows(z.real)
    _assert_tanh_close(z)
    z.real[:, 3] = np.nan
    assert not ck._repeated_rows(z.real)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(ck.complex_tanh(z), np.tanh(z))


@pytest.mark.parametrize("scale", [1e-20, 1e-3, 1.0, 30.0, 1e3])
def test_tanh_random_repeated_rows(scale):
    rng = np.random.default_rng(int(np.log10(scale) + 30))
    z = np.empty((64, 50), complex)
    z.real[:] = rng.standard_normal(50) * 3
    z.imag[:] = rng.standard_normal((64, 50)) * scale
    _assert_tanh_close(z)
    # the complex step's batch: the step on the diagonal, as the transposed view vmap
    # hands the op
    z.imag[:] = 0.0
    z.imag[np.arange(50), np.arange(50)] = 1e-20
    _assert_tanh_close(z.T.copy().T)


def test_tanh_without_the_structure_is_numpys():
    rng = np.random.default_rng(3)
    z = rng.standard_normal((64, 50)) + 1j * rng.standard_normal((64, 50))
    np.testing.assert_array_equal(ck.complex_tanh(z), np.tanh(z))
    z.real[:] = z.real[0]
    z.real[40, 7] += 1e-15  # one element breaks the repetition
    assert not ck._repeated_rows(z.real)
    np.testing.assert_array_equal(ck.complex_tanh(z), np.tanh(z))
    small = z[:8, :8]  # below the size where the formula pays
    np.testing.assert_array_equal(ck.complex_tanh(small), np.tanh(small))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(2, 70), cols=st.integers(1, 90), extra=st.integers(1, 3),
       log_a=st.floats(-3, 2.5), log_b=st.floats(-25, 1), seed=st.integers(0, 2 ** 16))
def test_tanh_shapes(rows, cols, extra, log_a, log_b, seed):
    rng = np.random.default_rng(seed)
    shape = (rows, cols, extra)
    z = np.empty(shape, complex)
    z.real[:] = rng.standard_normal(shape[1:]) * 10 ** log_a
    z.imag[:] = rng.standard_normal(shape) * 10 ** log_b
    _assert_tanh_close(z)


def test_tanh_in_complex_step_mode():
    """Tensor.tanh of a complex tensor is NumPy's; in complex-step mode the kernel's
    (recorded as eager dispatch records the op: its backward is Tanh's)."""
    rng = np.random.default_rng(4)
    z = np.empty((60, 40), complex)
    z.real[:] = rng.standard_normal(40)
    z.imag[:] = rng.standard_normal((60, 40))
    np.testing.assert_array_equal(gg.tensor(z).tanh().numpy(), np.tanh(z))
    t = gg.tensor(z, requires_grad=True)
    with complex_step_mode():
        y = t.tanh()
        assert y.grad_fn.name() == "TanhBackward0"
        y.sum().backward(gg.tensor(np.complex128(1)))
    got = y.detach().numpy()
    np.testing.assert_array_equal(got, ck.complex_tanh(z))
    assert _ulps(got.real, np.tanh(z).real).max() <= 10
    assert not np.array_equal(got, np.tanh(z))  # (the kernel's route was taken)
    np.testing.assert_allclose(t.grad.numpy(), 1 - got ** 2, rtol=1e-14)


_SHAPES = [((40, 50), (50, 30)), ((3, 40, 50), (50, 30)), ((40, 50), (2, 50, 30)),
           ((1, 300), (300, 200)), ((200, 300), (300, 1)), ((20, 30), (30, 2))]


@pytest.mark.parametrize("shapes", _SHAPES)
@pytest.mark.parametrize("structured", [True, False])
@pytest.mark.parametrize("layout", ["C", "transposed", "strided"])
def test_real_times_complex(shapes, structured, layout):
    """Equal to NumPy's product (to rounding) with and without equal real columns in
    the complex factor, for real factors BLAS reads in place and ones it cannot."""
    rng = np.random.default_rng(1)
    r = rng.standard_normal(shapes[0])
    if layout == "transposed":
        r = np.ascontiguousarray(r.swapaxes(-1, -2)).swapaxes(-1, -2)
    elif layout == "strided":
        r = (r + 0j).real
    z = rng.standard_normal(shapes[1]) + 1j * rng.standard_normal(shapes[1])
    if structured:
        z.real[...] = z.real[..., :, :1]
    if z.shape[-1] > 1:
        assert ck._equal_columns(z.real) == structured
    want = np.matmul(r, z)
    np.testing.assert_allclose(ck.real_times_complex(r, z), want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ck.mixed_matmul(r, z), want, rtol=1e-13, atol=1e-13)
    zt, rt = z.swapaxes(-1, -2), r.swapaxes(-1, -2)  # complex on the left
    np.testing.assert_allclose(ck.mixed_matmul(zt, rt), np.matmul(zt, rt), rtol=1e-13,
                               atol=1e-13)


def test_one_nonzero_per_column():
    """The complex step's first product: an imaginary part h e_j (at most one nonzero a
    column) takes one column of r per column, equal to the GEMM; other operands and an
    r with inf (whose GEMM has inf * 0 = nan) take the GEMM."""
    rng = np.random.default_rng(2)
    r = rng.standard_normal((30, 40))
    b = np.zeros((40, 50))
    rows = rng.integers(0, 40, 50)
    b[rows, np.arange(50)] = rng.standard_normal(50) * 1e-20
    b[:, 7] = 0.0  # a column with no nonzero
    np.testing.assert_array_equal(ck._one_per_column(r, b), r @ b)
    z = np.empty((40, 50), complex)
    z.real[:] = rng.standard_normal((40, 1))
    z.imag[:] = b
    np.testing.assert_allclose(ck.real_times_complex(r, z), np.matmul(r, z), rtol=1e-13,
                               atol=1e-13)
    b[(rows[9] + 1) % 40, 9] = 1.0  # two nonzeros in one column
    assert ck._one_per_column(r, b) is None
    b = np.eye(40)[:, :50 - 10]
    r[4, 5] = np.inf
    assert ck._one_per_column(r, b) is None


def test_equal_columns_needs_every_row():
    z = np.ones((30, 20))
    assert ck._equal_columns(z)
    z[29, 19] = 2.0  # the first row agrees, a later one does not
    assert not ck._equal_columns(z)


def _casts(f, *args) -> int:
    """How many Cast ops ``f`` runs (the complex step casts real operands it cannot
    use as they are)."""
    from graphgrad.ops.copies import Cast
    calls = []
    forward = Cast.__dict__["forward"]

    def counting(*a, **k):
        calls.append(1)
        return forward.__func__(*a, **k)
    Cast.forward = staticmethod(counting)
    try:
        f(*args)
    finally:
        Cast.forward = forward
    return len(calls)


def test_complex_step_mode_mixed_matmul():
    """In complex-step mode a large real matrix that needs no gradient multiplies a
    complex one as it is (no cast); the Hessian is the AD one."""
    n = 40
    rng = np.random.default_rng(5)
    a = gg.tensor(rng.standard_normal((n, n)) / np.sqrt(n))
    b = gg.tensor(rng.standard_normal((n, n)) / np.sqrt(n))
    x = rng.standard_normal(n)

    def f(v):
        u = (a @ v).tanh()
        w = (v.unsqueeze(0) @ b).squeeze(0)  # complex on the left
        return (u ** 2).sum() + (w * u).sum() + 0.5 * (v @ v)
    h = cs_hessian(f, x)
    np.testing.assert_allclose(h, gg.func.hessian(f)(gg.tensor(x)).numpy(), rtol=1e-12,
                               atol=1e-13)
    np.testing.assert_allclose(h, cs_hessian(f, x, batched=False), rtol=1e-13, atol=1e-14)
    assert _casts(cs_hessian, f, x) == 0  # (a and b were cast twice each before)


def test_complex_step_mode_product_values_and_errors():
    rng = np.random.default_rng(6)
    r = gg.tensor(rng.standard_normal((2, 40, 50)))
    z = gg.tensor(rng.standard_normal((50, 60)) + 1j * rng.standard_normal((50, 60)))
    with complex_step_mode():
        got = (r @ z).numpy()
        with pytest.raises(RuntimeError, match="cannot be multiplied|size"):
            r @ gg.tensor(np.ones((40, 60), complex))
    np.testing.assert_allclose(got, np.matmul(r.numpy(), z.numpy()), rtol=1e-13, atol=1e-13)
