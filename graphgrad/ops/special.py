"""Layer ``ops``: the special functions of one tensor (erf, softplus): the ones NumPy
has no kernel for, or that need care at the ends of their range."""

from __future__ import annotations

import math

from graphgrad.backend import xp

from .compare import where
from .elementwise import Diagonal
from . import taylor as ts

__all__ = ["erf", "special_erf", "softplus"]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf_array(a):
    try:
        from scipy.special import erf as scipy_erf
    except ImportError:  # NumPy has no erf: fall back on math.erf, element by element
        flat = [math.erf(v) for v in a.reshape(-1).tolist()]
        return xp.asarray(flat, dtype=xp.float64).reshape(a.shape)
    return scipy_erf(a)


class Erf(Diagonal):
    holomorphic = True
    saves_inputs = True

    @staticmethod
    def forward(a):
        a = xp.asarray(a)
        out = _erf_array(a)
        return out.astype(a.dtype if a.dtype.kind == "f" else out.dtype, copy=False)

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
