"""Layer ``ops``: ``copysign``, the magnitude of one tensor with the sign of another: a
binary op whose gradient flows to the magnitude only."""

from __future__ import annotations

from graphgrad.backend import xp

from .arithmetic import needs_grad
from .compare import where
from .elementwise import Elementwise
from . import taylor as ts

__all__ = ["copysign"]


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

    # +-a_k by the signs of a_0 and b_0; 0 where a_0 = 0, as the vjp (abs's convention)
    taylor = classmethod(ts.linear_taylor)


def copysign(input, other):
    """Elementwise ``|input|`` with the sign of ``other`` (a float result)."""
    return Copysign.apply(input, other)
