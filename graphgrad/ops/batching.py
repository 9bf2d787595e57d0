"""Layer ``ops``: helpers shared by the batching rules (vmap) that each op defines.

A batching rule receives the physical values (tensors holding the whole batch, or
unbatched tensors and scalars) with their batch dims (an int, or None for unbatched)
and rewrites the call into ops on the physical values, returning ``(out, out_bdim)``.
The helpers below move batch dims to the front and line ranks up for broadcasting.
"""

from __future__ import annotations

from graphgrad.tensor import Value

__all__ = ["batch_size", "to_front", "logical_ndim", "align", "materialize", "all_to_front",
           "by_example"]


def batch_size(vals, bdims) -> int:
    for v, d in zip(vals, bdims, strict=True):
        if d is not None:
            return v.shape[d]
    raise ValueError("batching rule called without a batched input")


def to_front(v, bdim):
    """The physical tensor with its batch dim first (unbatched values pass through)."""
    if bdim is None or bdim == 0:
        return v
    return v.movedim(bdim, 0)


def logical_ndim(v, bdim) -> int:
    if not isinstance(v, Value):
        return 0
    return v.ndim - (bdim is not None)


def align(v, bdim, rank: int):
    """Batch dim first, then size-1 dims so the example has ``rank`` dims: NumPy's
    right-aligned broadcasting then lines the example dims up with unbatched values."""
    v = to_front(v, bdim)
    missing = rank - (v.ndim - 1)
    if missing > 0:
        v = v.reshape(v.shape[0], *([1] * missing), *v.shape[1:])
    return v


def materialize(v, bdim, size: int):
    """A batched physical tensor with the batch first: unbatched values are expanded."""
    if bdim is not None:
        return to_front(v, bdim)
    return v.unsqueeze(0).expand(size, *v.shape)


def all_to_front(vals, bdims) -> list:
    size = batch_size(vals, bdims)
    return [materialize(v, d, size) for v, d in zip(vals, bdims, strict=True)]


def by_example(op, vals, bdims, **params):
    """A batching rule for an op without a batched form (a backward kernel, a fused
    layer): the op once per example, the results stacked along a new leading dim."""
    from .join import Stack  # (join's ops batch through this module)
    size = batch_size(vals, bdims)
    return Stack.apply(*(op.apply(*(v if d is None else v.select(d, b)
                                    for v, d in zip(vals, bdims, strict=True)), **params)
                         for b in range(size)), dim=0), 0

