"""Layer ``ops``: tensor contractions beyond matmul: ``tensordot``.

A composite: the contracted dims of each operand are moved together and flattened, and
one matmul of the two resulting matrices does the sum; the gradient (to any order) is
that of permute, reshape and matmul.
"""

from __future__ import annotations

import math

from .base import normalize_dim

__all__ = ["tensordot"]


def _dims_lists(a, b, dims) -> tuple[list, list]:
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > a.ndim or dims > b.ndim:
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got "
                               f"dims={dims}")
        return list(range(-dims, 0)), list(range(dims))
    dims_a, dims_b = dims
    dims_a = [dims_a] if isinstance(dims_a, int) else list(dims_a)
    dims_b = [dims_b] if isinstance(dims_b, int) else list(dims_b)
    if len(dims_a) != len(dims_b):
        raise RuntimeError("both dimension lists should have same length")
    return dims_a, dims_b


def tensordot(a, b, dims=2):
    """The sum over the dims ``dims[0]`` of ``a`` paired with ``dims[1]`` of ``b`` (an
    int ``n``: the last ``n`` of ``a`` with the first ``n`` of ``b``); the result has
    ``a``'s other dims, then ``b``'s."""
    dims_a, dims_b = _dims_lists(a, b, dims)
    for da, db in zip(dims_a, dims_b, strict=True):
        na, nb = a.shape[normalize_dim(da, a.ndim)], b.shape[normalize_dim(db, b.ndim)]
        if na != nb:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {na} "
                               f"in dim {da} and second has size {nb} in dim {db}")
    sum_a = [normalize_dim(d, a.ndim, "tensordot") for d in dims_a]
    sum_b = [normalize_dim(d, b.ndim, "tensordot") for d in dims_b]
    free_a = [d for d in range(a.ndim) if d not in sum_a]
    free_b = [d for d in range(b.ndim) if d not in sum_b]
    rows, cols = [a.shape[d] for d in free_a], [b.shape[d] for d in free_b]
    n_sum = math.prod(a.shape[d] for d in sum_a)
    left = a.permute(*free_a, *sum_a).reshape(math.prod(rows), n_sum)
    right = b.permute(*sum_b, *free_b).reshape(n_sum, math.prod(cols))
    return (left @ right).reshape(*rows, *cols)
