"""Layer ``ops``: the triangles of matrices: tril and triu, on the last two dims (the
dims before them are a batch), and the indices of a triangle, tril_indices and
triu_indices.

Both keep some elements and zero the rest, a fixed mask: each is linear, so its vjp and
jvp are the op itself applied to the cotangent or tangent.
"""

from __future__ import annotations

from graphgrad.backend import xp

from . import taylor as ts
from .base import Op, Spec, int_arg
from .batching import to_front

__all__ = ["tril", "triu", "tril_indices", "triu_indices"]


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
    def infer(cls, a, *, diagonal) -> Spec:  # unknown dims pass through
        if a.ndim < 2:
            raise RuntimeError(f"{cls.__name__.lower()}: input tensor must have at least 2 "
                               f"dimensions")
        return Spec(a.shape, a.dtype)

    @classmethod
    def vjp(cls, g, out, a, *, diagonal):
        return (cls.apply(g, diagonal=diagonal),)

    @classmethod
    def jvp(cls, dots, out, a, *, diagonal):
        return cls.apply(dots[0], diagonal=diagonal)

    taylor = classmethod(ts.linear_taylor)

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
    return Tril.apply(input, diagonal=int_arg(diagonal, "tril", "diagonal", 1))


def triu(input, diagonal: int = 0):
    """The upper triangle: elements on and above the ``diagonal``-th diagonal."""
    return Triu.apply(input, diagonal=int_arg(diagonal, "triu", "diagonal", 1))


def _triangle_indices(pick, row: int, col: int, offset: int, dtype):
    from graphgrad.backend import to_dtype
    from graphgrad.tensor import Tensor
    rows, cols = pick(row, offset, col)
    out = xp.stack([rows, cols]).astype(xp.int64 if dtype is None else to_dtype(dtype).np)
    return Tensor._make(out.reshape(2, -1))


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None,
                 layout=None):
    """A (2, N) tensor: the row and column indices of the lower triangle of a
    ``row`` x ``col`` matrix (on and below the ``offset``-th diagonal), row by row."""
    return _triangle_indices(xp.tril_indices, row, col, offset, dtype)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None,
                 layout=None):
    """A (2, N) tensor: the indices of the upper triangle, row by row."""
    return _triangle_indices(xp.triu_indices, row, col, offset, dtype)
