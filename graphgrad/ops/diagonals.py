"""Layer ``ops``: diagonals of a tensor: diagonal (over any two dims, with an offset),
trace, and the matrices made from a diagonal, diag and diag_embed.

All are composites: ``diagonal`` moves the two dims last and indexes them with two
index ranges, so the gradient is Getitem's (it puts the cotangent back on the
diagonal); ``trace`` sums the diagonal; ``diag_embed`` writes the values into zeros
with an index_put (whose gradient reads them back). ``diagonal``'s result is a copy,
not a view as in PyTorch: writing into it does not reach the input.
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor import Tensor

from .base import normalize_dim, int_arg

__all__ = ["diagonal", "trace", "diag", "diag_embed"]


def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The elements ``input[..., i, i + offset]`` of dims ``dim1`` and ``dim2`` (below the
    main diagonal for a negative ``offset``), as a new last dim; the other dims keep
    their order."""
    offset = int_arg(offset, "diagonal", "offset", 1)
    d1 = normalize_dim(dim1, input.ndim, "diagonal")
    d2 = normalize_dim(dim2, input.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rest = [d for d in range(input.ndim) if d not in (d1, d2)]
    moved = input.permute(*rest, d1, d2)
    rows, cols = _diagonal_positions(input.shape[d1], input.shape[d2], offset)
    return moved[(Ellipsis, rows, cols)]


_diagonal_of = diagonal  # for diag, whose parameter is named diagonal (as in PyTorch)


def _diagonal_positions(n1: int, n2: int, offset: int):
    """Row and column indices (int64 tensors) of the ``offset``-th diagonal of an
    ``n1`` x ``n2`` matrix."""
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    steps = xp.arange(length, dtype=xp.int64)
    return Tensor._make(steps - min(offset, 0)), Tensor._make(steps + max(offset, 0))


def trace(input):
    """The sum of the main diagonal of a matrix."""
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    return diagonal(input).sum()


def diag_embed(input, offset: int = 0, dim1: int = -2, dim2: int = -1):
    """Square matrices with the last dim of ``input`` on their ``offset``-th diagonal,
    zeros elsewhere; the two new dims are ``dim1`` and ``dim2`` of the result."""
    from .index import TENSOR_SLOT, IndexPut
    ndim = input.ndim + 1
    d1, d2 = normalize_dim(dim1, ndim, "diag_embed"), normalize_dim(dim2, ndim, "diag_embed")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = input.shape[-1] + abs(offset)
    rows, cols = _diagonal_positions(n, n, offset)
    zeros = input.new_zeros(*input.shape[:-1], n, n)
    out = IndexPut.apply(zeros, input, rows, cols, spec=(Ellipsis, TENSOR_SLOT, TENSOR_SLOT),
                         accumulate=False)
    # the matrix dims are last; move them to dim1 and dim2, the others keep their order
    rest = [d for d in range(ndim) if d not in (d1, d2)]
    order = [0] * ndim
    for src, dst in enumerate([*rest, d1, d2]):
        order[dst] = src
    return out.permute(*order)


def diag(input, diagonal: int = 0):
    """A vector: the square matrix with it on the ``diagonal``-th diagonal; a matrix:
    its ``diagonal``-th diagonal."""
    if input.ndim == 1:
        return diag_embed(input, diagonal)
    if input.ndim == 2:
        return _diagonal_of(input, diagonal)
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
