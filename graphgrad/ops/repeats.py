"""Layer ``ops``: ops that take elements more than once, by an integer index along one
dim: ``repeat_interleave`` (each element ``repeats[i]`` times in a row) and
``Tensor.unfold`` (sliding windows, which overlap when ``step < size``).

Both are composites of indexing with an int64 index tensor, so their gradients (to any
order), forward-mode and batching rules are Getitem's: the cotangent of an element
taken several times is the sum of its copies' cotangents. ``unfold``'s result is a copy,
not a view as in PyTorch: writing into it does not reach the input (as ``diagonal``).
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, Value, active_modes

from .base import normalize_dim

__all__ = ["repeat_interleave", "unfold"]


def _counts_array(repeats):
    """The values of a counts tensor; under vmap a batched one stands for counts that may
    differ between examples, and so for outputs of different sizes."""
    if any(m.batches(repeats) for m in active_modes()):
        raise RuntimeError("vmap: repeat_interleave with a batched repeats tensor has a "
                           "data-dependent output shape, which cannot be batched (the counts "
                           "may differ between examples)")
    return repeats._array


def _repeat_counts(repeats, n: int, dim: int = 0):
    """``repeats`` (an int, or a 0-d or 1-d integer tensor) as n counts, checked."""
    if isinstance(repeats, Value):
        r = _counts_array(repeats)
        if r.dtype.kind not in "iu":
            from .compound import scalar_type_name
            raise NotImplementedError(f'"repeat_interleave_cpu" not implemented for '
                                      f"'{scalar_type_name(repeats)}'")
        if r.ndim > 1:
            raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
        if r.ndim == 1 and r.shape[0] != 1:
            if r.shape[0] != n:
                raise RuntimeError("repeats must have the same size as input along dim, but "
                                   f"got repeats.size(0) = {r.shape[0]} and input.size({dim}) "
                                   f"= {n}")
            if r.size and r.min() < 0:
                raise RuntimeError("repeats can not be negative")
            return r.astype(xp.int64)
        repeats = int(r.reshape(()))
    if repeats < 0:
        raise RuntimeError("Repeats must be non-negative")
    return xp.full(n, repeats, xp.int64)


def repeat_interleave(input, repeats=None, dim: int | None = None, *,
                      output_size: int | None = None):
    """Each element of ``input`` along ``dim`` repeated ``repeats`` times (per element
    when ``repeats`` is a tensor); without ``dim`` the input is flattened first. With
    only a tensor of counts, ``repeat_interleave(repeats)`` gives the indices
    ``0, 0, ..., 1, ...`` repeated by those counts."""
    if repeats is None:  # repeat_interleave(repeats): the index each output copies
        counts = _repeat_counts(input, input.shape[0] if input.ndim else 1)
        return Tensor._make(xp.repeat(xp.arange(counts.size, dtype=xp.int64), counts))
    if dim is None:
        input, dim = input.reshape(-1), 0
    elif input.ndim == 0:  # PyTorch refuses a dim of a 0-d input (its wording differs)
        if isinstance(repeats, Value):
            raise IndexError("Dimension specified as 0 but tensor has no dimensions")
        raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but got "
                         "1)")
    d = normalize_dim(dim, input.ndim, "repeat_interleave")
    n = input.shape[d]
    counts = _repeat_counts(repeats, n, d)
    total = int(counts.sum())
    if output_size is not None and output_size != total:
        if isinstance(repeats, Value) and repeats.ndim == 1 and repeats.shape[0] != 1:
            raise RuntimeError("allocated size does not match required size")
        raise RuntimeError(f"repeat_interleave: Invalid output_size, expected {total} but got "
                           f"{output_size}")
    index = Tensor._make(xp.repeat(xp.arange(n, dtype=xp.int64), counts))
    return input[(slice(None),) * d + (index,)]


def unfold(input, dimension: int, size: int, step: int):
    """``Tensor.unfold``: the windows of ``size`` elements, ``step`` apart, along
    ``dimension``; that dim becomes the window count and the window is a new last dim."""
    d = normalize_dim(dimension, input.ndim, "unfold")
    length = input.shape[d] if input.ndim else 1
    if size > length:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {length} but size is "
                           f"{size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if input.ndim == 0:
        return input.reshape(1)
    count = (length - size) // step + 1
    index = (xp.arange(count, dtype=xp.int64)[:, None] * step
             + xp.arange(size, dtype=xp.int64)[None, :])
    windows = input.movedim(d, -1)[..., Tensor._make(index)]  # (..., count, size)
    return windows.movedim(-2, d)
