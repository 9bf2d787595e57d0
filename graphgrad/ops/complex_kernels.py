"""Layer ``ops``: array kernels for complex operands that NumPy computes slowly: the
product of a real and a complex matrix (``Matmul``'s and ``Linear``'s forwards, and the
complex-step mode's uncast products) and tanh (the complex-step mode runs it for
``Tanh``). The complex step (``graphgrad.numdiff``) is what sends complex arrays through
a whole program.

Both compute NumPy's function for *any* complex input (tanh to a few ulp, products to
rounding: tested against NumPy on grids of hard values) and are faster on the structure
a complex-step batch has: every point ``x + i h e_j`` of the batch has the same real
part, and so does every intermediate whose real part does not depend on the imaginary
parts (to rounding, as the complex step's real parts are). The structure is found by
comparing values (O(size)), never assumed; without it the product still takes real
GEMMs when one factor is real, and tanh is NumPy's.
"""

from __future__ import annotations

from graphgrad.backend import xp

__all__ = ["complex_tanh", "real_times_complex", "mixed_matmul"]

# |b| below this: tan(b) rounds to b (tan b = b (1 + b^2/3 + ...), b^2/3 < 2^-54)
_TAN_IS_IDENTITY = 2.0 ** -27
# |a| below this: tanh(a) from NumPy's tanh, sech^2 = (1 - t)(1 + t) with no
# cancellation (t < 0.51); above it both from e = exp(-2|a|) <= 0.333, where 1 - e and
# 1 + e are exact to rounding (exp is NumPy's SIMD loop: a third of tanh's time)
_SMALL_REAL = 0.55
# below this many elements NumPy's scalar loop is as fast (the formula's fixed cost:
# ~20 NumPy calls)
_MIN_SIZE = 2048


def complex_tanh(z):
    """``tanh(a + i b)`` for a complex128 array. Where the real parts repeat along the
    first axis (a complex-step batch: checked on values), in vectorized real arithmetic:

        t = tanh(a), s = sech(a)^2, u = tan(b), d = 1 + t^2 u^2
        tanh(a + i b) = t (1 + u^2) / d + i u s / d

    (the addition theorem; every step multiplies, divides or adds numbers of one sign,
    so both parts are accurate to a few ulp, as NumPy's are), with t and s computed once
    per row and u = b where every |b| < 2^-27 (the complex step's are ~1e-20): ~10 ns an
    element, where NumPy's complex tanh is a scalar libm loop, ~45. Other arrays are
    NumPy's (the formula computed on every element measured no faster: tan and the
    temporaries cost what the scalar loop does), as are elements with a non-finite
    result (inf or nan inputs: C99's special cases)."""
    if z.dtype != xp.complex128 or z.size < _MIN_SIZE or not _repeated_rows(z.real):
        return xp.tanh(z)
    out = xp.empty(z.shape, z.dtype)
    with xp.errstate(all="ignore"):  # inf and nan inputs take NumPy's values below
        t, s = _tanh_sech2(z.real[:1])
        _tanh_parts(t, s, _tan(z.imag), out.real, out.imag)
        check = out.view(xp.float64).sum()
    if not xp.isfinite(check):  # non-finite inputs (or an overflowing sum): NumPy's values
        bad = ~(xp.isfinite(out.real) & xp.isfinite(out.imag))
        out[bad] = xp.tanh(z[bad])
    return out


def _tan(b):
    """tan(b); b itself where every |b| < 2^-27 (nan compares false)."""
    if b.max() < _TAN_IS_IDENTITY and b.min() > -_TAN_IS_IDENTITY:
        return b
    return xp.tan(b)


def _tanh_parts(t, s, u, re, im) -> None:
    """re, im = t (1 + u^2) / d, u s / d with d = 1 + t^2 u^2 (t, s broadcast to u),
    the intermediates in re and im (a temporary would cost fresh pages)."""
    xp.multiply(u, u, out=im)
    xp.multiply(im, t, out=re)  # t u^2
    xp.multiply(re, t, out=im)
    im += 1.0  # d
    re += t  # t (1 + u^2)
    re /= im
    xp.divide(s, im, out=im)
    im *= u


def _tanh_sech2(a):
    """tanh(a) and sech(a)^2 for a real array, both to a few ulp everywhere."""
    e = xp.abs(a)
    e *= -2.0
    xp.exp(e, out=e)  # e = exp(-2|a|) in [0, 1]
    one_plus = e + 1.0
    t = 1.0 - e
    t /= one_plus
    xp.copysign(t, a, out=t)  # tanh(a) = sign(a) (1 - e) / (1 + e)
    e *= 4.0
    e /= one_plus
    e /= one_plus  # sech(a)^2 = 4 e / (1 + e)^2
    small = xp.abs(a) < _SMALL_REAL  # 1 - e cancels: tanh from NumPy
    if small.any():
        ts = xp.tanh(a[small])
        t[small] = ts
        e[small] = (1.0 - ts) * (1.0 + ts)
    return t, e


def _repeated_rows(a) -> bool:
    """Whether every row of ``a`` along its first axis equals the first row (checked
    on one row before the whole array: a batch without the structure is rejected after
    O(row) work)."""
    if a.ndim < 2 or a.shape[0] < 2:
        return False
    if not (a[1] == a[0]).all():
        return False
    return bool((a[2:] == a[:1]).all())


def real_times_complex(r, z):
    """``r @ z``, ``r`` real (..., m, k), ``z`` complex (..., k, n), both at least 2-D.

    A ``z`` whose real part has equal columns (a complex-step batch: every point has the
    real part x) takes one matrix-vector product for the real part of the product,
    broadcast, and one real GEMM for the imaginary part. Otherwise a C-contiguous complex
    (..., k, n) read as real is (..., k, 2n), real and imaginary parts interleaved, so one
    real GEMM gives both parts, already in complex layout. Either way the products and
    sums are zgemm's less its terms of exact zeros (0 * imaginary part of ``r``), up to
    their order."""
    if not (r.flags.c_contiguous or r.swapaxes(-1, -2).flags.c_contiguous):
        r = xp.ascontiguousarray(r)  # BLAS reads a matrix or its transpose in place
    if z.shape[-1] >= 2 and _equal_columns(z.real):
        re = xp.matmul(r, xp.ascontiguousarray(z.real[..., :, :1]))
        im = _one_per_column(r, z.imag)
        if im is None:
            im = xp.matmul(r, xp.ascontiguousarray(z.imag))  # (unit strides, as r's)
        out = xp.empty(im.shape, z.dtype)
        out.real[...] = re
        out.imag[...] = im
        return out
    z = xp.ascontiguousarray(z)
    return xp.matmul(r, z.view(r.dtype)).view(z.dtype)


def _one_per_column(r, b):
    """``r @ b`` for 2-D ``b`` with at most one nonzero in each column (the complex
    step's directions h e_j, before they mix) and a finite ``r``: column j is column
    k_j of ``r`` times b[k_j, j], the one term of the GEMM's sum that is not an exact
    zero. None for other operands (checked on values, O(size))."""
    if b.ndim != 2 or r.ndim != 2:
        return None
    nonzero = b != 0
    if nonzero.sum() > b.shape[1] or (nonzero.sum(axis=0) > 1).any():
        return None
    if not xp.isfinite(r).all():  # (inf * 0 is nan in the GEMM's sum)
        return None
    k = nonzero.argmax(axis=0)  # the nonzero's row (0 for a zero column: b[0, j] = 0)
    return r[:, k] * b[k, xp.arange(b.shape[1])]


def _equal_columns(a) -> bool:
    """Whether every column of ``a`` (..., k, n) equals its first (one row is compared
    before the whole: a matrix without the structure is rejected after O(n) work)."""
    if not (a[..., 0, 1:] == a[..., 0, :1]).all():
        return False
    return bool((a[..., 1:, 1:] == a[..., 1:, :1]).all())


def mixed_matmul(a, b):
    """``a @ b`` where one of ``a``, ``b`` is real (floating) and the other complex, both
    at least 2-D with matching inner dimensions: the real factor is used as it is, where
    casting it to complex first (as the complex step's operands are, PyTorch refusing
    mixed dtypes) makes a complex copy of it and then, to multiply, a real copy of its
    real part."""
    if a.dtype.kind != "c":
        return real_times_complex(a, b)
    return real_times_complex(b.swapaxes(-1, -2), a.swapaxes(-1, -2)).swapaxes(-1, -2)
