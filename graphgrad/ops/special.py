"""Layer ``ops``: the special functions of one tensor (erf, softplus): the ones NumPy
has no kernel for, or that need care at the ends of their range."""

from __future__ import annotations

import functools
import math

from graphgrad.backend import xp

from .compare import where
from .elementwise import Diagonal
from . import taylor as ts

__all__ = ["erf", "special_erf", "softplus"]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# ---- erf on arrays ---------------------------------------------------------------------
# NumPy has no erf, and results must not depend on whether SciPy is installed, so erf is
# evaluated here with NumPy alone: float64 by fdlibm's s_erf.c (Sun, 1993; the algorithm
# of glibc's, musl's and Go's erf, under 1 ulp), float32 and float16 by interpolation
# from a table in float32 (within 2 ulp of float64 erf rounded). Both run on blocks
# small enough to stay in cache: a NumPy evaluation is a sequence of whole-array passes.

# elements per block: fdlibm's float64 path makes many more calls per block than
# float32's, so longer blocks amortize them
_BLOCK_FLOAT32, _BLOCK_FDLIBM = 1 << 14, 1 << 16

# fdlibm's coefficients, lowest degree first
_ERX = 8.45062911510467529297e-01  # erf(1) rounded to 24 bits: erf = erx + P/Q near 1
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02,
       5.08130628187576562776e-03, 1.32494738004321644526e-04, -3.96022827877536812320e-06)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01,
       7.18286544141962662868e-02, 1.26171219808761642112e-01, 1.36370839120290507362e-02,
       1.19844998467991074170e-02)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02,
       4.34565877475229228821e+02, 6.45387271733267880336e+02, 4.29008140027567833386e+02,
       1.08635005541779435134e+02, 6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02,
       1.53672958608443695994e+03, 3.19985821950859553908e+03, 2.55305040643316442583e+03,
       4.74528541206955367215e+02, -2.24409524465858183362e+01)

# float32 and float16: erf(x) = x g(|x|) with g = erf(x)/x interpolated linearly between
# math.erf's values (the C library's erf) at 4096 points per unit of [0, 4] (beyond,
# float32 erf is +-1): relative error under 6e-9 in exact arithmetic; evaluated in
# float32, within 2 ulp of float64 erf rounded. Interpolating g, not erf, keeps the
# relative accuracy near 0; two gathers and a handful of whole-array steps: fewer
# NumPy calls than any rational or polynomial of that accuracy (at small sizes a
# NumPy evaluation is its number of calls)
_TABLE_PER_UNIT, _TABLE_END = 4096, 4.0


@functools.cache
def _erf_table() -> tuple:
    """(c0, c1) float32 arrays: g(i/4096 + f/4096) = c0[i] + f c1[i], f in [0, 1]."""
    n = int(_TABLE_END * _TABLE_PER_UNIT)
    x = (xp.arange(n + 1) / _TABLE_PER_UNIT).tolist()
    g = xp.array([_TWO_OVER_SQRT_PI] + [math.erf(v) / v for v in x[1:]])
    return g[:-1].astype(xp.float32), xp.diff(g).astype(xp.float32)


def _horner(s, coefs):
    """sum(coefs[k] s^k) as a new array, in place after the first product."""
    acc = s * coefs[-1]
    for c in coefs[-2:0:-1]:
        acc += c
        acc *= s
    acc += coefs[0]
    return acc


def _erf_fdlibm(x, out) -> None:
    """``out[:] = erf(x)`` for 1-d float64 ``x``, fdlibm's four ranges of ``|x|`` each
    evaluated on its own elements only (NaN is in none: it stays as copied)."""
    ax = xp.abs(x)
    xp.copyto(out, ax)  # NaN stays NaN
    small = ax < 0.84375
    rest = ~small
    if small.all():  # the common case of activations: one range, no gathers
        _erf_small(ax, out)
    else:
        idx = xp.flatnonzero(small)
        if idx.size:
            out[idx] = _erf_small(ax[idx])
        near1 = rest & (ax < 1.25)
        idx = xp.flatnonzero(near1)
        if idx.size:  # erx + P/Q in s = |x| - 1
            s = ax[idx] - 1.0
            v = _horner(s, _PA)
            v /= _horner(s, _QA)
            v += _ERX
            out[idx] = v
        for lo, hi, r, q in ((1.25, 1 / 0.35, _RA, _SA), (1 / 0.35, 6.0, _RB, _SB)):
            idx = xp.flatnonzero((ax >= lo) & (ax < hi))
            if idx.size:
                out[idx] = _erf_tail(ax[idx], r, q)
        out[ax >= 6.0] = 1.0  # (and inf)
    xp.copysign(out, x, out=out)


def _erf_small(a, out=None):
    """fdlibm's |x| < 0.84375: x + x P(x^2)/Q(x^2)."""
    z = a * a
    y = _horner(z, _PP)
    y /= _horner(z, _QQ)
    y *= a
    return xp.add(y, a, out=y if out is None else out)


def _erf_tail(a, r, q):
    """fdlibm's 1.25 <= |x| < 6: 1 - exp(-x^2 - 0.5625 + R/S)/x, with x^2 split at a
    20-bit z (low word cleared) so that z*z is exact and exp sees no rounding of x^2."""
    s = 1.0 / (a * a)
    rs = _horner(s, r)
    rs /= _horner(s, q)
    z = (a.view(xp.uint64) & xp.uint64(0xFFFFFFFF00000000)).view(xp.float64)
    e = xp.exp(-z * z - 0.5625)
    rs += (z - a) * (z + a)
    e *= xp.exp(rs)
    e /= a
    return xp.subtract(1.0, e, out=e)


def _erf_interpolated(x, out) -> None:
    """``out[:] = erf(x)`` for 1-d ``x`` of float32 or float16, in float32."""
    c0, c1 = _erf_table()
    xc = xp.clip(x, -_TABLE_END, _TABLE_END,  # NaN stays; inf: 4; float16 in float32
                 dtype=None if x.dtype == xp.float32 else xp.float32)
    u = xp.abs(xc)
    u *= xp.float32(_TABLE_PER_UNIT)
    i = xp.floor(u)
    xp.fmin(i, xp.float32(len(c0) - 1), out=i)  # 4 itself: the last interval's end; NaN: any
    u -= i  # where in its interval, [0, 1]
    i = i.astype(xp.intp)
    g = xp.take(c1, i)
    g *= u
    g += xp.take(c0, i)
    xp.multiply(xc, g, out=out, casting="same_kind")


def erf_array(a):
    """erf of a NumPy array, elementwise, with NumPy alone: floating inputs keep their
    dtype; integers and bools give float64."""
    a = xp.asarray(a)
    if a.dtype.kind == "c":
        name = "ComplexFloat" if a.dtype == xp.complex64 else "ComplexDouble"
        raise NotImplementedError(f"\"erf_vml_cpu\" not implemented for '{name}'")
    if a.dtype.kind != "f":
        a = a.astype(xp.float64)
    kernel, block = ((_erf_fdlibm, _BLOCK_FDLIBM) if a.dtype == xp.float64 else
                     (_erf_interpolated, _BLOCK_FLOAT32))
    flat = a.reshape(-1)
    out = xp.empty(flat.shape, a.dtype)
    if flat.size <= block:  # (most calls: no slicing)
        kernel(flat, out)
    else:
        for i in range(0, flat.size, block):
            kernel(flat[i:i + block], out[i:i + block])
    return out.reshape(a.shape)


class Erf(Diagonal):
    # holomorphic, but there is no complex kernel (PyTorch has none either), so a complex
    # step cannot pass through it
    saves_inputs = True

    @staticmethod
    def forward(a):
        return erf_array(a)

    @staticmethod
    def vjp(g, out, a):
        return (g * _TWO_OVER_SQRT_PI * (-a * a).exp(),)

    @staticmethod
    def taylor(series, out, a):
        # y' = g x' with g = (2/sqrt(pi)) exp(-x^2): the jet of -x*x, then of exp
        k = ts.order_of(series)
        x = ts.full(a, series[0], k)
        e0 = (-a * a).exp()
        e = ts.exp_series(ts.full(-a * a, ts.scale_series(ts.mul_series(x, x, k), -1.0), k),
                          e0, k)
        g = ts.scale_series([e0, *e], _TWO_OVER_SQRT_PI)
        return [ts.ode_term(x, g, i) for i in range(1, k + 1)]


class Softplus(Diagonal):
    """``log(1 + exp(beta x)) / beta``, linear where ``beta x > threshold``."""

    saves_inputs = True

    @staticmethod
    def forward(a, *, beta=1.0, threshold=20.0):
        z = a * beta
        return xp.where(z > threshold, a, xp.logaddexp(0, z) / beta).astype(a.dtype, copy=False)

    @staticmethod
    def vjp(g, out, a, *, beta=1.0, threshold=20.0):
        z = a * beta
        return (g * where(z > threshold, 1.0, z.sigmoid()),)

    @staticmethod
    def taylor(series, out, a, *, beta=1.0, threshold=20.0):
        # y' = sigmoid(beta x) x'; where beta x > threshold the op is the identity
        k = ts.order_of(series)
        x = ts.full(a, series[0], k)
        z = a * beta
        s0 = z.sigmoid()
        s = [s0, *ts.sigmoid_series(ts.full(z, ts.scale_series(series[0], beta), k), s0, k)]
        linear = z > threshold
        return [where(linear, 0.0 if x[i] is None else x[i], ts.ode_term(x, s, i))
                for i in range(1, k + 1)]


def erf(input):
    """Elementwise ``erf`` (op ``Erf``)."""
    return Erf.apply(input)


special_erf = erf


def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    return Softplus.apply(input, beta=beta, threshold=threshold)
