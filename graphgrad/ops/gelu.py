"""Layer ``ops``: GELU, exact (``x * Phi(x)`` with the normal CDF) or with the tanh
approximation, and its derivative as one array kernel (``GeluBackward``) for a plain
eager backward: the vjp written in graphgrad ops is a dozen recorded ops (erf, exp,
products), each with its own temporaries; the kernel is a few in-place NumPy steps.
Under ``create_graph`` or a transform the vjp runs as graphgrad ops, so it
differentiates again.
"""

from __future__ import annotations

import math

from graphgrad.backend import xp

from . import taylor as ts
from .base import Spec
from .elementwise import Elementwise
from .fused import array_backward
from .special import Erf, erf_array
from .unary import Tanh, _Unary

__all__ = ["gelu"]

_SQRT_2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_TANH_K = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


def _erf_of(t):
    """erf of the float array ``t`` in its dtype (a new array: the buffer the rest of
    the kernel works in)."""
    r = erf_array(t)
    if r.dtype != t.dtype:
        r = r.astype(t.dtype)
    return r


class Gelu(_Unary):
    """GELU, exact (``x * Phi(x)`` with the normal CDF) or ``approximate="tanh"``."""

    @staticmethod
    def forward(a, *, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise RuntimeError("approximate argument must be either none or tanh.")
        if a.dtype.kind in "biu":  # (PyTorch's dispatch gives floats; kept for NumPy callers)
            return Gelu.forward(a.astype(xp.float64), approximate=approximate)
        # 0.5 a (1 + phi) with phi = tanh(k (a + c a^3)) or erf(a / sqrt 2): one buffer
        if approximate == "tanh":
            t = xp.multiply(a, a, out=xp.empty_like(a))  # (an array even for 0-d input)
            t *= a.dtype.type(_CUBIC)
            t += 1
            t *= a
            t *= a.dtype.type(_TANH_K)
            xp.tanh(t, out=t)
        else:
            t = _erf_of(a / a.dtype.type(_SQRT_2))
        t += 1
        t *= a
        t *= a.dtype.type(0.5)
        return t

    @staticmethod
    def vjp(g, out, a, *, approximate="none"):
        # (no ``kernel_vjp``, ops/fused.py: in a compiled backward the rule below fuses into
        # one kernel, 41 ms for a forward+backward on (4096, 1024) float32 against 53 ms
        # with GeluBackward; 64 against 69 ms for the erf form)
        if array_backward() and a._array.dtype.kind == "f":
            return (GeluBackward.apply(g, a, approximate=approximate),)
        if approximate == "tanh":
            k = math.sqrt(2.0 / math.pi)
            inner = k * (a + 0.044715 * a * a * a)
            t = inner.tanh()
            d = 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * k * (1 + 3 * 0.044715 * a * a)
            return (g * d,)
        cdf = 0.5 * (1 + (a / _SQRT_2).erf())
        pdf = (-0.5 * a * a).exp() / _SQRT_2PI
        return (g * (cdf + a * pdf),)

    @staticmethod
    def taylor(series, out, a, *, approximate="none"):
        # x * Phi(x): the jet of Phi (erf of x / sqrt 2, or the tanh form), then Leibniz
        k = ts.order_of(series)
        x = ts.full(a, series[0], k)
        if approximate == "tanh":
            c = math.sqrt(2.0 / math.pi)
            cube = ts.mul_series(x, [a * a, *ts.mul_series(x, x, k)], k)
            u0 = c * (a + 0.044715 * a * a * a)
            u = [ts.plus(ts.times(s, c), ts.times(q, 0.044715 * c))
                 for s, q in zip(series[0], cube, strict=True)]
            t0 = u0.tanh()
            half = [0.5 * (1 + t0), *ts.scale_series(Tanh.taylor((u,), t0, u0), 0.5)]
        else:
            z0 = a / _SQRT_2
            z = ts.scale_series(series[0], 1 / _SQRT_2)
            e0 = z0.erf()
            half = [0.5 * (1 + e0), *ts.scale_series(Erf.taylor((z,), e0, z0), 0.5)]
        return ts.mul_series(x, half, k)


class GeluBackward(Elementwise):
    """``grad * gelu'(input)`` on arrays (see the module docstring); only a plain eager
    backward runs it, so it carries no gradient."""

    differentiable = False
    saves_inputs = ()

    @staticmethod
    def forward(g, a, *, approximate="none"):
        one = a.dtype.type
        if approximate == "tanh":
            # 0.5 (1 + t) + 0.5 a (1 - t^2) k (1 + 3 c a^2), t = tanh(k (a + c a^3))
            sq = xp.multiply(a, a, out=xp.empty_like(a))  # (arrays even for 0-d input)
            t = xp.multiply(sq, one(_CUBIC), out=xp.empty_like(a))
            t += 1
            t *= a
            t *= one(_TANH_K)
            xp.tanh(t, out=t)
            d = xp.multiply(t, t, out=xp.empty_like(a))
            xp.subtract(1, d, out=d)
            d *= a
            d *= one(0.5 * _TANH_K)
            sq *= one(3 * _CUBIC)
            sq += 1
            d *= sq
            t += 1
            t *= one(0.5)
            d += t
        else:
            # Phi(a) + a phi(a): 0.5 (1 + erf(a / sqrt 2)) + a exp(-a^2 / 2) / sqrt(2 pi)
            d = _erf_of(a / one(_SQRT_2))
            d += 1
            d *= one(0.5)
            e = xp.multiply(a, a, out=xp.empty_like(a))
            e *= one(-0.5)
            xp.exp(e, out=e)
            e *= a
            e *= one(1 / _SQRT_2PI)
            d += e
        if d.shape != xp.broadcast_shapes(d.shape, g.shape):  # (vmap: g batched, a not)
            return d * g
        d *= g
        return d

    @classmethod
    def infer(cls, g, a, **_) -> Spec:
        return Spec(tuple(xp.broadcast_shapes(g.shape, a.shape)), a.dtype)


def gelu(input, approximate: str = "none"):
    return Gelu.apply(input, approximate=approximate) if approximate != "none" \
        else Gelu.apply(input)
