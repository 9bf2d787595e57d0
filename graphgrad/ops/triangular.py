"""Layer ``ops``: the triangles of matrices: tril and triu, on the last two dims (the
dims before them are a batch).

Both keep some elements and zero the rest, a fixed mask: each is linear, so its vjp and
jvp are the op itself applied to the cotangent or tangent.
"""

from __future__ import annotations

from graphgrad.backend import xp

from .base import Op
from .batching import to_front

__all__ = ["tril", "triu"]


class _Triangle(Op):
    """Keeps one triangle of the last two dims, bounded by the ``diagonal``-th diagonal
    (0: the main one, > 0 above it, < 0 below it)."""

    holomorphic = True
    promotes = False
    saves_inputs = ()
    _keep = None  # NumPy's tril or triu

    @classmethod
    def forward(cls, a, *, diagonal):
        if a.ndim < 2:
            raise RuntimeError(f"{cls.__name__.lower()}: input tensor must have at least 2 "
                               f"dimensions")
        return cls._keep(a, k=diagonal)

    @classmethod
    def vjp(cls, g, out, a, *, diagonal):
        return (cls.apply(g, diagonal=diagonal),)

    @classmethod
    def jvp(cls, dots, out, a, *, diagonal):
        return cls.apply(dots[0], diagonal=diagonal)

    @classmethod
    def batch(cls, vals, bdims, *, diagonal):
        # the batch dim goes first: the last two dims stay the matrix
        a = to_front(vals[0], bdims[0])
        if a.ndim < 3:
            raise RuntimeError(f"{cls.__name__.lower()}: input tensor must have at least 2 "
                               f"dimensions")
        return cls.apply(a, diagonal=diagonal), 0


class Tril(_Triangle):
    _keep = staticmethod(xp.tril)


class Triu(_Triangle):
    _keep = staticmethod(xp.triu)


def tril(input, diagonal: int = 0):
    """The lower triangle of the (batched) matrix ``input``: elements on and below the
    ``diagonal``-th diagonal; the rest are zero."""
    return Tril.apply(input, diagonal=int(diagonal))


def triu(input, diagonal: int = 0):
    """The upper triangle: elements on and above the ``diagonal``-th diagonal."""
    return Triu.apply(input, diagonal=int(diagonal))
