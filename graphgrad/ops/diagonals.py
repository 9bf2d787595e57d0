"""Layer ``ops``: diagonals of a tensor: diagonal (over any two dims, with an offset) and
trace.

Both are composites: ``diagonal`` moves the two dims last and indexes them with two
index ranges, so the gradient is Getitem's (it puts the cotangent back on the
diagonal); ``trace`` sums the diagonal. The result is a copy, not a view as in PyTorch:
writing into it does not reach the input.
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor.creation import _leaf

from .base import normalize_dim

__all__ = ["diagonal", "trace"]


def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The elements ``input[..., i, i + offset]`` of dims ``dim1`` and ``dim2`` (below the
    main diagonal for a negative ``offset``), as a new last dim; the other dims keep
    their order."""
    d1 = normalize_dim(dim1, input.ndim, "diagonal")
    d2 = normalize_dim(dim2, input.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rest = [d for d in range(input.ndim) if d not in (d1, d2)]
    moved = input.permute(*rest, d1, d2)
    n1, n2 = input.shape[d1], input.shape[d2]
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    steps = xp.arange(length, dtype=xp.int64)
    rows = _leaf(steps - min(offset, 0))
    cols = _leaf(steps + max(offset, 0))
    return moved[(Ellipsis, rows, cols)]


def trace(input):
    """The sum of the main diagonal of a matrix."""
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    return diagonal(input).sum()
