"""Layer ``ops``: sorting along a dim: argsort, sort, topk, msort, kthvalue, median.

One op, ``Argsort``, computes the order (int64 indices, not differentiable); the values
are ``gather(input, dim, indices)``, so their gradient is Gather's scatter, correct to any
order with no rule of its own. The order is PyTorch's: ascending or descending, ties in
their original order (the sort is always stable, which ``stable=False`` allows), NaN
sorting as the largest value (last ascending, first descending).
"""

from __future__ import annotations

from graphgrad.backend import xp

from .base import Op, normalize_dim
from .batching import to_front
from .reduce import MaxMin

__all__ = ["argsort", "sort", "topk", "msort", "kthvalue", "median"]


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
    d = _dim(input, dim, "kthvalue")
    size = input.shape[d] if input.ndim else 1
    if not 1 <= k <= size:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    if input.ndim == 0:
        return MaxMin(input.clone(), Argsort.apply(input, dim=0, descending=False))
    order = Argsort.apply(input, dim=d, descending=False)
    return _one_per_slice(input, order.narrow(d, k - 1, 1), d, keepdim)


def median(input, dim=None, keepdim: bool = False):
    """``median(x)``: the lower median of all elements; ``median(x, dim)``: the lower
    median of each slice and its index (``torch.return_types.median``). A slice with
    NaN has median NaN (the index of its first NaN), as in PyTorch."""
    from .compare import isnan, where
    if dim is None:
        if input.numel() == 0:
            return input.new_full((), float("nan"))
        return median(input.reshape(-1), 0).values
    d = _dim(input, dim, "median")
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
