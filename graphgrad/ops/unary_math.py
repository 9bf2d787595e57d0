"""Layer ``ops``: more elementwise math under PyTorch's names: the inverse hyperbolic
functions (asinh, acosh, atanh), exp2, and copysign (a binary op whose gradient flows to
the magnitude only)."""

from __future__ import annotations

import math

from graphgrad.backend import xp

from .arithmetic import needs_grad
from .compare import where
from .elementwise import Elementwise
from .unary import _FromOutput, _Unary, _unary

__all__ = ["asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh", "exp2", "copysign"]

_LN2 = math.log(2.0)


class Asinh(_Unary):
    holomorphic = True
    forward = staticmethod(xp.arcsinh)

    @staticmethod
    def vjp(g, out, a):
        return (g * (a * a + 1).rsqrt(),)


class Acosh(_Unary):
    holomorphic = True
    forward = staticmethod(xp.arccosh)

    @staticmethod
    def vjp(g, out, a):
        return (g * (a * a - 1).rsqrt(),)


class Atanh(_Unary):
    holomorphic = True
    forward = staticmethod(xp.arctanh)

    @staticmethod
    def vjp(g, out, a):
        return (g / (1 - a * a),)


class Exp2(_FromOutput):
    holomorphic = True
    forward = staticmethod(xp.exp2)

    @staticmethod
    def vjp(g, out, a):
        return (g * out * _LN2,)


class Copysign(Elementwise):
    """``|a|`` with the sign of ``b``. d/da is ``out / a`` (0 where a is 0, as PyTorch
    masks it); ``b``'s sign alone matters: its gradient is zeros (PyTorch's, not None)."""

    saves_inputs = (0,)
    saves_output = True

    @staticmethod
    def forward(a, b):
        return xp.copysign(a, b)

    @staticmethod
    def _ratio(out, a):
        return where(a == 0, 0.0, out / a)

    @classmethod
    def vjp(cls, g, out, a, b):
        gb = g.new_zeros(tuple(g.shape)) if needs_grad(b) else None
        return g * cls._ratio(out, a), gb

    @classmethod
    def jvp(cls, dots, out, a, b):
        return None if dots[0] is None else dots[0] * cls._ratio(out, a)


asinh = arcsinh = _unary(Asinh, "asinh")
acosh = arccosh = _unary(Acosh, "acosh")
atanh = arctanh = _unary(Atanh, "atanh")
exp2 = _unary(Exp2, "exp2")


def copysign(input, other):
    """Elementwise ``|input|`` with the sign of ``other`` (a float result)."""
    return Copysign.apply(input, other)
