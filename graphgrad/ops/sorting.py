"""Layer ``ops``: sorting along a dim: argsort, sort, topk, msort, kthvalue, median; and
searching sorted sequences: searchsorted, bucketize.

One op, ``Argsort``, computes the order (int64 indices, not differentiable); the values
are ``gather(input, dim, indices)``, so their gradient is Gather's scatter, correct to any
order with no rule of its own. The order is PyTorch's: ascending or descending, ties in
their original order (the sort is always stable, which ``stable=False`` allows), NaN
sorting as the largest value (last ascending, first descending).
"""

from __future__ import annotations

from graphgrad.backend import xp

from .base import Op, Spec, normalize_dim, int_arg
from .batching import all_to_front, to_front
from .reduce import MaxMin
from .refusals import NOT_GIVEN

__all__ = ["argsort", "sort", "topk", "msort", "kthvalue", "median", "searchsorted",
           "bucketize"]


class Argsort(Op):
    """The indices that sort input 0 along ``dim``."""

    differentiable = False
    promotes = False
    saves_inputs = ()
    # the order of a complex input is that of its real part: a complex step (x + ih)
    # then leaves the order of x unchanged and rides through the gather of the values
    holomorphic = True

    @staticmethod
    def forward(a, *, dim, descending):
        if a.ndim == 0:
            return xp.zeros((), xp.int64)
        a = xp.real(a)
        if not descending:
            # NumPy's stable sort puts NaN last, as PyTorch's ascending sort does
            return xp.argsort(a, axis=dim, kind="stable").astype(xp.int64)
        # descending with ties in their original order: sort the reversed slice
        # ascending (stably), read the order backwards and map back to the positions
        # of the unreversed slice; NaN, last ascending, then comes first, as in PyTorch
        n = a.shape[dim]
        reverse = xp.flip(a, axis=dim)
        order = xp.flip(xp.argsort(reverse, axis=dim, kind="stable"), axis=dim)
        return (n - 1 - order).astype(xp.int64)

    @classmethod
    def infer(cls, a, *, dim, descending) -> Spec:  # unknown dims pass through
        return Spec(a.shape, xp.dtype(xp.int64))

    @classmethod
    def batch(cls, vals, bdims, *, dim, descending):
        a = to_front(vals[0], bdims[0])
        if a.ndim == 1:  # 0-d examples: each is its own sorted order
            return cls.apply(a.unsqueeze(1), dim=1, descending=descending).squeeze(1), 0
        return cls.apply(a, dim=dim + 1, descending=descending), 0


def _dim(input, dim: int, name: str) -> int:
    return normalize_dim(dim, input.ndim, name)  # a 0-d tensor takes dim 0 or -1


def argsort(input, dim: int = -1, descending: bool = False, *, stable: bool = False):
    """The indices that sort ``input`` along ``dim``. Ties keep their order whatever
    ``stable`` says (PyTorch allows that order without it)."""
    return Argsort.apply(input, dim=_dim(input, dim, "argsort"), descending=bool(descending))


def _pick(input, indices, dim: int):
    """The elements of ``input`` at ``indices`` along ``dim`` (differentiable)."""
    if input.ndim == 0:
        return input.clone()
    return input.gather(dim, indices)


def sort(input, dim: int = -1, descending: bool = False, *, stable: bool = False):
    """``(values, indices)`` sorted along ``dim`` (``torch.return_types.sort``)."""
    d = _dim(input, dim, "sort")
    indices = Argsort.apply(input, dim=d, descending=bool(descending))
    return MaxMin(_pick(input, indices, d), indices)


def msort(input):
    """``sort(input, dim=0).values``."""
    return sort(input, dim=0).values


def topk(input, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices
    (``torch.return_types.topk``). They always come sorted; with ``sorted=False``
    PyTorch leaves the order unspecified, and sorted is one such order."""
    k = int_arg(k, "topk", "k", 1)
    d = _dim(input, dim, "topk")
    size = input.shape[d] if input.ndim else 1
    if not 0 <= k <= size:
        raise RuntimeError("selected index k out of range")
    indices = Argsort.apply(input, dim=d, descending=bool(largest))
    if input.ndim == 0:
        return MaxMin(input.clone(), indices)
    indices = indices.narrow(d, 0, k)
    return MaxMin(_pick(input, indices, d), indices)


def _one_per_slice(input, indices, d: int, keepdim: bool):
    """``(values, indices)`` for ``indices`` holding one index per slice along ``d``
    (size 1 there)."""
    values = input.gather(d, indices)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return MaxMin(values, indices)


def kthvalue(input, k: int, dim: int = -1, keepdim: bool = False):
    """The ``k``-th smallest element along ``dim`` (k from 1) and its index
    (``torch.return_types.kthvalue``); NaN counts as the largest value."""
    k = int_arg(k, "kthvalue", "k", 1)
    d = _dim(input, dim, "kthvalue")
    size = input.shape[d] if input.ndim else 1
    if not 1 <= k <= size:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    if input.ndim == 0:
        return MaxMin(input.clone(), Argsort.apply(input, dim=0, descending=False))
    order = Argsort.apply(input, dim=d, descending=False)
    return _one_per_slice(input, order.narrow(d, k - 1, 1), d, keepdim)


def median(input, dim=NOT_GIVEN, keepdim: bool = False):
    """``median(x)``: the lower median of all elements; ``median(x, dim)``: the lower
    median of each slice and its index (``torch.return_types.median``). A slice with
    NaN has median NaN (the index of its first NaN), as in PyTorch."""
    from .compare import isnan, where
    if dim is not NOT_GIVEN:
        dim = int_arg(dim, "median", "dim", 2)
    if input._array.dtype.kind == "b":
        kernel = "median_cpu" if dim is NOT_GIVEN else "median_out"
        raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')
    if dim is NOT_GIVEN:
        if input.numel() == 0:
            return input.new_full((), float("nan"))
        return median(input.reshape(-1), 0).values
    d = _dim(input, int_arg(dim, "median", "dim", 2), "median")
    if input.ndim == 0:
        return MaxMin(input.clone(), Argsort.apply(input, dim=0, descending=False))
    n = input.shape[d]
    if n == 0:
        raise IndexError(f"median(): Expected reduction dim {d} to have non-zero size.")
    order = Argsort.apply(input, dim=d, descending=False)
    # NaN sorts last, in its original order: the first NaN of a slice is at n - (count)
    nans = isnan(input).sum(dim=d, keepdim=True)
    position = where(nans > 0, n - nans, (n - 1) // 2)
    return _one_per_slice(input, order.gather(d, position), d, keepdim)


class Searchsorted(Op):
    """For each value, the index where it would go in the sorted last dim of ``seq``
    (before equal elements; after them with ``right``). A 1-D ``seq`` serves values of
    any shape; otherwise ``seq``'s leading dims are those of the values, row by row."""

    differentiable = False
    promotes = False
    saves_inputs = ()
    holomorphic = True  # positions by the real parts, as Argsort's order

    @staticmethod
    def forward(seq, values, *, right, out_int32):
        seq, values = xp.real(seq), xp.real(values)
        side = "right" if right else "left"
        dtype = xp.int32 if out_int32 else xp.int64
        if seq.ndim == 1:
            return xp.asarray(xp.searchsorted(seq, values, side=side)).astype(dtype)
        rows = seq.reshape(-1, seq.shape[-1])
        wanted = values.reshape(rows.shape[0], -1)
        out = xp.empty(wanted.shape, dtype)
        for i in range(rows.shape[0]):
            out[i] = xp.searchsorted(rows[i], wanted[i], side=side)
        return out.reshape(values.shape)

    @classmethod
    def infer(cls, seq, values, *, right, out_int32) -> Spec:
        return Spec(values.shape, xp.dtype(xp.int32 if out_int32 else xp.int64))

    @classmethod
    def batch(cls, vals, bdims, *, right, out_int32):
        seq, values = vals
        if bdims[0] is None and seq.ndim == 1:  # one sequence for every value
            return cls.apply(seq, values, right=right, out_int32=out_int32), bdims[1]
        seq, values = all_to_front(vals, bdims)
        if seq.ndim == 2:  # one sequence per example: the example's values are its row
            flat = values.reshape(values.shape[0], -1)
            out = cls.apply(seq, flat, right=right, out_int32=out_int32)
            return out.reshape(*values.shape), 0
        return cls.apply(seq, values, right=right, out_int32=out_int32), 0


def searchsorted(sorted_sequence, input, *, out_int32: bool = False, right: bool = False,
                 side=None, sorter=None):
    """The indices at which ``input``'s values would be inserted into the sorted last dim
    of ``sorted_sequence`` (int64; int32 with ``out_int32``); ``right`` (or
    ``side="right"``) puts them after equal elements. ``sorter`` gives the order of an
    unsorted sequence."""
    from graphgrad.tensor import Tensor
    seq = sorted_sequence
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' "
                               f"but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to "
                               "opposites, got side of left while right was True")
        right = side == "right"
    if seq.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive "
                           "dimension, but got 0 dimension")
    if not hasattr(input, "ndim"):  # a Python number: a 0-d tensor of it
        input = Tensor._make(xp.asarray(input))
    if seq.ndim > 1 and tuple(seq.shape[:-1]) != tuple(input.shape[:-1]):
        raise RuntimeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or "
                           f"the first N-1 dimensions of boundaries tensor and input value "
                           f"tensor must match, but we got boundaries tensor "
                           f"{list(seq.shape)} and input value tensor {list(input.shape)}")
    if sorter is not None:
        seq = seq.gather(seq.ndim - 1, sorter)
    return Searchsorted.apply(seq, input, right=bool(right), out_int32=bool(out_int32))


def bucketize(input, boundaries, *, out_int32: bool = False, right: bool = False):
    """The bucket of each element of ``input`` between the sorted 1-D ``boundaries``:
    ``i`` with ``boundaries[i - 1] < x <= boundaries[i]`` (``<= x <`` with ``right``)."""
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got "
                           f"dim({boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)
