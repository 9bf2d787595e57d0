"""Layer ``ops``: ops that take elements more than once, by an integer index along one
dim: ``repeat_interleave`` (each element ``repeats[i]`` times in a row) and
``Tensor.unfold`` (sliding windows, which overlap when ``step < size``).

``repeat_interleave`` is a composite of indexing with an int64 index tensor, so its
gradients (to any order), forward-mode and batching rules are Getitem's: the cotangent of
an element taken several times is the sum of its copies' cotangents. ``unfold`` is a
view op, ``Unfold``, whose vjp sums the same way (an accumulating index_put).
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, Value, active_modes

from .base import Op, normalize_dim, scalar_name
from .batching import to_front
from .index import index_put
from . import taylor as ts

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
            raise NotImplementedError(f'"repeat_interleave_cpu" not implemented for '
                                      f"'{scalar_name(repeats._array.dtype)}'")
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


def _window_index(count: int, size: int, step: int):
    """(count, size) int64: window ``i`` takes elements ``i * step ... i * step + size - 1``."""
    return Tensor._make(xp.arange(count, dtype=xp.int64)[:, None] * step
                        + xp.arange(size, dtype=xp.int64)[None, :])


def _count(length: int, size: int, step: int) -> int:
    return (length - size) // step + 1


class Unfold(Op):
    """``Tensor.unfold``: a view of the windows (NumPy's sliding windows, every ``step``-th
    one). Overlapping windows (``step < size``) are a read-only view: a write would reach
    one element through several windows. The rules are index_put and the op itself."""

    view = True
    holomorphic = True
    promotes = False
    saves_inputs = ()

    @staticmethod
    def forward(a, *, dim, size, step):
        windows = xp.lib.stride_tricks.sliding_window_view(
            a, size, axis=dim, writeable=a.flags.writeable and step >= size)
        return windows[(slice(None),) * dim + (slice(None, None, step),)]

    @staticmethod
    def vjp(g, out, a, *, dim, size, step):
        # each element's cotangent is the sum over the windows it is in
        moved = g.movedim(dim, -2)  # (..., count, size), as a.movedim(dim, -1)[..., index]
        zeros = g.new_zeros(tuple(a.movedim(dim, -1).shape))
        index = _window_index(moved.shape[-2], size, step)
        return (index_put(zeros, (Ellipsis, index), moved, accumulate=True).movedim(-1, dim),)

    @staticmethod
    def jvp(dots, out, a, *, dim, size, step):
        return Unfold.apply(dots[0], dim=dim, size=size, step=step)

    taylor = classmethod(ts.linear_taylor)

    @staticmethod
    def write_back(base, values, *, dim, size, step):
        """``base`` with the (non-overlapping) windows replaced by ``values``."""
        moved = base.movedim(dim, -1)
        index = _window_index(_count(moved.shape[-1], size, step), size, step)
        return index_put(moved, (Ellipsis, index), values.movedim(dim, -2)).movedim(-1, dim)

    @classmethod
    def batch(cls, vals, bdims, *, dim, size, step):
        return cls.apply(to_front(vals[0], bdims[0]), dim=dim + 1, size=size, step=step), 0


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
    return Unfold.apply(input, dim=d, size=size, step=step)
