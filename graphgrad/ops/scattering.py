"""Layer ``ops``: writing ``src`` into a copy of ``input`` at positions given by an
index along one dim: ``scatter`` (overwrite, or PyTorch's legacy ``reduce='add'`` /
``'multiply'``) and ``scatter_reduce`` (sum, prod, mean, amax, amin, with or without
the input's own values); ``index_add``/``index_copy``/``index_fill`` (whole slices
along a dim, as ``index_put`` with one index tensor, whose rules they use).
``scatter_add`` and ``gather`` live in ``gathering``.

``out[p]`` depends only on ``input[p]`` and the ``src`` elements sent to ``p``, so each
reduction's rules come from two tensors of partial derivatives, ``A = d out / d input``
(input's shape) and ``B = d out[index[k]] / d src[k]`` (index's shape), built from
graphgrad ops as PyTorch's ``scatter_reduce_backward`` builds them: the vjp is
``(g * A, gather(g) * B)``, the jvp ``A * d_input + scatter_add(B * d_src)``, and both
differentiate again through those ops.
"""

from __future__ import annotations

import warnings

from graphgrad.backend import xp
from graphgrad.tensor import Value, active_modes, is_grad_enabled

from .arithmetic import needs_grad
from .base import Op, normalize_dim, scalar_name
from .batching import all_to_front
from .compare import where
from .gathering import Gather, OneHot, ScatterAdd, along_axis_index
from .refusals import check_index_range
from .join import Pad
from .taylor_products import product_tree
from . import taylor as ts

__all__ = ["scatter", "scatter_reduce", "index_add", "index_copy", "index_fill"]

_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")
# PyTorch's forward also takes 'max' and 'min' (as amax, amin), its backward refuses them
_FORWARD_ONLY = {"max": "amax", "min": "amin"}
_LEGACY = {"add": "sum", "multiply": "prod"}


def _check_index(name: str, a, index, src=None) -> tuple:
    """PyTorch's checks of a scatter's index (and src): the full NumPy index it gives."""
    if index.dtype.kind not in "iu":
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if index.ndim != a.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as self "
                           "tensor")
    if isinstance(src, xp.ndarray) and src.dtype != a.dtype:
        raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    return index


def _positions(a, index, dim: int) -> tuple:
    """The NumPy index of the scattered positions, bounds checked as PyTorch does."""
    n = a.shape[dim] if a.ndim else 1
    if index.size and (index.max() >= n or index.min() < 0):
        bad = index.max() if index.max() >= n else index.min()
        raise RuntimeError(f"index {int(bad)} is out of bounds for dimension {dim} with size "
                           f"{n}")
    if a.ndim == 0:
        return ()
    return along_axis_index(index.astype(xp.int64) % n, dim)


class Scatter(Op):
    """``out = input.clone(); out[index[i][j]][j] = src[i][j]`` for dim 0. ``src`` is a
    tensor of index's shape or a number; ``reduce`` ('sum'/'prod') is PyTorch's legacy
    ``reduce='add'/'multiply'``, for which PyTorch has no derivative."""

    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(a, index, src, *, dim, reduce=None):
        _check_index("scatter", a, index, src)
        out = a.copy()
        where_ = _positions(a, index, dim)
        if reduce is None:
            out[where_] = src
        else:
            ufunc = xp.add if reduce == "sum" else xp.multiply
            ufunc.at(out, where_, xp.broadcast_to(xp.asarray(src, a.dtype), index.shape))
        return out

    @staticmethod
    def vjp(g, out, a, index, src, *, dim, reduce=None):
        if reduce is not None:
            raise RuntimeError("derivative for aten::scatter is not implemented")
        ga = Scatter.apply(g, index, 0.0, dim=dim) if needs_grad(a) else None
        gs = Gather.apply(g, index, dim=dim) if needs_grad(src) else None
        return ga, None, gs

    @staticmethod
    def jvp(dots, out, a, index, src, *, dim, reduce=None):
        if reduce is not None:
            raise RuntimeError("Trying to use forward AD with scatter that does not support it")
        da, ds = dots[0], dots[2]
        if da is None:
            da = out.new_zeros(tuple(out.shape))
        if ds is None:
            ds = 0.0
        return Scatter.apply(da, index, ds, dim=dim)

    # linear in (input, src); the legacy reduce= forms raise as their jvp does
    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def batch(cls, vals, bdims, *, dim, reduce=None):
        if isinstance(vals[2], Value):
            a, index, src = all_to_front(vals, bdims)
        else:
            a, index = all_to_front(vals[:2], bdims[:2])
            src = vals[2]
        return cls.apply(a, index, src, dim=dim + 1, reduce=reduce), 0


class ScatterReduce(Op):
    """``scatter_reduce``: each position reduces ``input[p]`` (when ``include_self``)
    with the ``src`` elements sent to it; positions nothing is sent to keep input."""

    saves_output = True
    promotes = False

    @staticmethod
    def forward(a, index, src, *, dim, reduce, include_self=True):
        _check_index("scatter_reduce", a, index, src)
        reduce = _FORWARD_ONLY.get(reduce, reduce)
        where_ = _positions(a, index, dim)
        out = a.copy()
        if a.ndim == 0:
            src, where_ = src.reshape(-1), xp.zeros(src.size, xp.int64)
            out = out.reshape(1)
        if not include_self:  # scattered positions start from the reduction's identity
            start = {"sum": 0, "mean": 0, "prod": 1,
                     "amax": -xp.inf if a.dtype.kind == "f" else xp.iinfo(a.dtype).min,
                     "amin": xp.inf if a.dtype.kind == "f" else xp.iinfo(a.dtype).max}
            out[where_] = start[reduce]
        ufunc = {"sum": xp.add, "mean": xp.add, "prod": xp.multiply, "amax": xp.maximum,
                 "amin": xp.minimum}[reduce]
        ufunc.at(out, where_, src)
        if reduce == "mean":
            count = xp.full(out.shape, 1 if include_self else 0, xp.int64)
            xp.add.at(count, where_, 1)
            count = xp.maximum(count, 1)
            out = out // count if a.dtype.kind in "iub" else (out / count).astype(a.dtype)
        return out.reshape(a.shape)

    @staticmethod
    def partials(out, a, index, src, *, dim, reduce, include_self):
        """(A, B): d out / d input (input's shape), d out / d src at each src element."""
        if reduce in _FORWARD_ONLY:
            raise RuntimeError("Expected 'reduce' to be one of 'sum', 'prod', 'mean', 'amax', "
                               f"'amin' but got {reduce}.")
        if reduce == "sum":
            a_part, s_part = out.new_ones(tuple(a.shape)), 1.0
        elif reduce == "mean":
            n = ScatterAdd.apply(out.new_full(tuple(a.shape), 1.0 if include_self else 0.0),
                                 index, src.new_ones(tuple(index.shape)), dim=dim)
            a_part = 1.0 / where(n == 0, 1.0, n)
            s_part = Gather.apply(a_part, index, dim=dim)
        elif reduce == "prod":
            # the products of the others, division-free so that they are exact where input
            # or src holds zeros, to every order (any number of zeros meeting at a slot)
            masked_a = where(a == 0, 1.0, a)
            a_part = ScatterReduce.apply(masked_a, index, src, dim=dim, reduce="prod",
                                         include_self=include_self) / masked_a
            if is_grad_enabled() or active_modes():
                s_part = _same_slot_others(src, index, dim)
                if include_self:
                    s_part = s_part * Gather.apply(a, index, dim=dim)
            else:  # a value nothing differentiates (a backward that records no graph)
                s_part = _others_value(out, a, index, src, dim, include_self)
        else:  # amax, amin: the gradient is shared evenly between the ties
            a_is = (a == out).to(a.dtype)
            s_is = (src == Gather.apply(out, index, dim=dim)).to(a.dtype)
            share = 1.0 / ScatterAdd.apply(a_is, index, s_is, dim=dim)
            a_part, s_part = a_is * share, s_is * Gather.apply(share, index, dim=dim)
        if not include_self:  # the input's values at scattered positions were left out
            a_part = Scatter.apply(a_part, index, 0.0, dim=dim)
        return a_part, s_part

    @classmethod
    def vjp(cls, g, out, a, index, src, **params):
        a_part, s_part = cls.partials(out, a, index, src, **params)
        gs = Gather.apply(g, index, dim=params["dim"]) * s_part if needs_grad(src) else None
        return (g * a_part if needs_grad(a) else None), None, gs

    @classmethod
    def jvp(cls, dots, out, a, index, src, **params):
        a_part, s_part = cls.partials(out, a, index, src, **params)
        da, ds = dots[0], dots[2]
        tangent = out.new_zeros(tuple(out.shape)) if da is None else da * a_part
        if ds is None:
            return tangent
        return ScatterAdd.apply(tangent, index, ds * s_part, dim=params["dim"])

    @classmethod
    def taylor(cls, series, out, a, index, src, *, dim, reduce, include_self=True):
        # sum and mean are linear; amax/amin select the extreme element's series (ties
        # averaged, as the vjp shares the gradient)
        if reduce != "prod":
            return ts.linear_taylor(cls, series, out, a, index, src, dim=dim, reduce=reduce,
                                    include_self=include_self)
        return _prod_series(series, a, index, src, dim, include_self)

    @classmethod
    def batch(cls, vals, bdims, *, dim, **params):
        a, index, src = all_to_front(vals, bdims)
        return cls.apply(a, index, src, dim=dim + 1, **params), 0


def _others_value(out, a, index, src, dim: int, include_self: bool):
    """The products of the others by division (the product at the slot over the source),
    the one zero source of a slot recomputed with a 1 in its place: the right values with
    any zeros, in a third of the scan's ops, but wrong derivatives where two zero sources
    meet (0 where the derivative is not): for a backward pass that records nothing."""
    src_zero = src == 0
    zeros_at = ScatterAdd.apply(a.new_zeros(tuple(a.shape)), index, src_zero.to(a.dtype),
                                dim=dim)
    single = src_zero & (Gather.apply(zeros_at, index, dim=dim) == 1)
    without_zero = ScatterReduce.apply(a, index, where(single, 1.0, src), dim=dim,
                                       reduce="prod", include_self=include_self)
    return where(single, Gather.apply(without_zero, index, dim=dim),
                 Gather.apply(out, index, dim=dim) / where(src_zero, 1.0, src))


def _segmented_products(v, key, dim: int):
    """Inclusive running products along ``dim`` of ``v`` within runs of equal ``key``
    (Hillis-Steele: log2(n) rounds of Mul, no division)."""
    n, step = v.shape[dim], 1
    while step < n:
        shift = [0, 0] * (v.ndim - 1 - dim) + [step, -step]
        same = key == Pad.apply(key, pad=tuple(shift), value=-1)
        v = where(same, v * Pad.apply(v, pad=tuple(shift), value=1.0), v)
        step *= 2
    return v


def _same_slot_others(src, index, dim: int):
    """For each scattered element of ``src`` (index's shape): the product of the other
    elements sent to the same slot. The sources are sorted by slot (a constant
    permutation), the exclusive products from the left and from the right within each
    run are multiplied, and the order is undone."""
    if tuple(src.shape) != tuple(index.shape):
        src = src[tuple(slice(0, k) for k in index.shape)]
    if index.ndim == 0 or index.shape[dim] == 0:
        return src.new_ones(tuple(index.shape))
    order = index.argsort(dim=dim)
    key, v = Gather.apply(index, order, dim=dim), Gather.apply(src, order, dim=dim)
    shift = [0, 0] * (v.ndim - 1 - dim)
    same_before = key == Pad.apply(key, pad=tuple(shift + [1, -1]), value=-1)
    before = where(same_before, Pad.apply(_segmented_products(v, key, dim),
                                          pad=tuple(shift + [1, -1]), value=1.0), 1.0)
    flip_key, flip_v = key.flip(dim), v.flip(dim)
    same_after = flip_key == Pad.apply(flip_key, pad=tuple(shift + [1, -1]), value=-1)
    after = where(same_after, Pad.apply(_segmented_products(flip_v, flip_key, dim),
                                        pad=tuple(shift + [1, -1]), value=1.0), 1.0).flip(dim)
    return ScatterAdd.apply((before * after).new_zeros(tuple(key.shape)), order,
                            before * after, dim=dim)


def _prod_series(series, a, index, src, dim: int, include_self: bool) -> list:
    """scatter_reduce's 'prod' series: each source spread over a one-hot axis of the
    n positions along ``dim`` (the constant 1 elsewhere), a product tree over the
    sources (Leibniz's rule, exact at zeros), then the product with the input's series
    (or 1 where a source arrives, without ``include_self``). Costs index.numel() * n."""
    order = ts.order_of(series)
    shape = tuple(a.shape)
    if a.ndim == 0:  # one position: every source goes to it
        a, index, src, dim = a.reshape(1), index.reshape(-1), src.reshape(-1), 0
        series = [None if s is None else [None if t is None else t.reshape(-1) for t in s]
                  for s in series]
    sa, _, ss = series
    hit = OneHot.apply(index, num_classes=a.shape[dim]) == 1  # index's shape + (n,)

    def spread(t, k):  # the sources on the one-hot axis, moved next to the source axis
        if t is None:
            return None
        return where(hit, t.unsqueeze(-1), 1.0 if k == 0 else 0.0).movedim(dim, -1)
    spread_full = [spread(src, 0)] + [spread(t, k) for k, t in enumerate(
        ss if ss is not None else [None] * order, start=1)]
    widths = []  # to the input's shape (sources cover a leading block of it)
    for d in reversed(range(a.ndim)):
        widths += [0, a.shape[d] - index.shape[d] if d != dim else 0]
    products = [None if t is None else Pad.apply(t.squeeze(-1).movedim(-1, dim),
                                                 pad=tuple(widths), value=1.0 if k == 0
                                                 else 0.0)
                for k, t in enumerate(product_tree(spread_full, order))]
    base = ts.full(a, sa, order)
    if not include_self:  # the input's value does not count where a source arrives
        arrived = Pad.apply(hit.to(a.dtype).sum(dim=dim).movedim(-1, dim),
                            pad=tuple(widths), value=0.0) > 0
        base = [where(arrived, 1.0, base[0])] + [
            None if t is None else where(arrived, 0.0, t) for t in base[1:]]
    return [None if t is None else t.reshape(shape) for t in ts.mul_series(
        base, products, order)]


def _leading_block(input, dim: int, index, src):
    """Only src's leading block of index's shape is scattered (PyTorch's rule); index may
    not be larger than src, nor than input apart from ``dim``."""
    if isinstance(index, Value) and index.ndim == input.ndim:
        too_large = any(i > s for d, (i, s) in enumerate(zip(index.shape, input.shape))
                        if d != dim)
        if isinstance(src, Value):
            too_large |= src.ndim != index.ndim or any(
                i > s for i, s in zip(index.shape, src.shape))
        if too_large:
            raise RuntimeError(
                f"Expected index {list(index.shape)} to be no larger than self "
                f"{list(input.shape)} apart from dimension {dim}"
                + (f" and to be no larger size than src {list(src.shape)}"
                   if isinstance(src, Value) else ""))
    if isinstance(src, Value) and tuple(src.shape) != tuple(index.shape):
        return src[tuple(slice(0, s) for s in index.shape)]
    return src


def scatter(input, dim: int, index, src=None, *, value=None, reduce: str | None = None):
    """``input`` with ``src`` (a tensor, or a number ``value``) written at ``index`` along
    ``dim``; ``reduce='add'`` or ``'multiply'`` combines instead of overwriting."""
    if src is None:
        src = value
    if reduce is not None and reduce not in _LEGACY:
        raise RuntimeError("reduce argument must be either add or multiply.")
    if reduce is not None and isinstance(src, Value):
        warnings.warn("The reduce argument of torch.scatter with Tensor src is deprecated and "
                      "will be removed in a future PyTorch release. Use torch.scatter_reduce "
                      "instead for more reduction options.", UserWarning, stacklevel=2)
    d = normalize_dim(dim, input.ndim, "scatter")
    if not isinstance(src, Value):
        src = float(src) if input._array.dtype.kind in "fc" else src
    return Scatter.apply(input, index, _leading_block(input, d, index, src), dim=d,
                         reduce=_LEGACY.get(reduce))


def scatter_reduce(input, dim: int, index, src, reduce: str, *, include_self: bool = True):
    """``input`` with the ``src`` elements sent to each position along ``dim`` reduced
    into it by ``reduce`` (sum, prod, mean, amax, amin)."""
    if reduce not in _REDUCTIONS and reduce not in _FORWARD_ONLY:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, "
                           f"got {reduce}")
    d = normalize_dim(dim, input.ndim, "scatter_reduce")
    return ScatterReduce.apply(input, index, _leading_block(input, d, index, src), dim=d,
                               reduce=reduce,
                               include_self=include_self)




def _out_of_bounds(index, n: int, dim: int, error: type, prefix: str = "",
                   negative: bool = False) -> None:
    """PyTorch's bounds error for the index's values, known here in eager mode only (under
    a transform or while a graph is built, index_put's forward checks them). Only
    ``index_fill`` counts a ``negative`` index from the end, as in PyTorch."""
    if active_modes():
        return
    arr = index._array
    bad = arr[(arr >= n) | (arr < (-n if negative else 0))]
    if bad.size:
        raise error(f"{prefix}index {int(bad[0])} is out of bounds for dimension {dim} with "
                    f"size {n}")


def _slices_at(input, d: int, index) -> tuple:
    return (slice(None),) * d + (index.reshape(-1),)


def index_add(input, dim: int, index, source, *, alpha=1):
    """``input`` with ``alpha * source[..., i, ...]`` added to slice ``index[i]`` along
    ``dim`` (repeated indices add up)."""
    from .index import index_put
    d = normalize_dim(dim, input.ndim, "index_add")
    if index._array.dtype.kind not in "iu":
        raise RuntimeError(f"index_add_(): Expected dtype int32/int64 for index but got: "
                           f"{scalar_name(index._array.dtype)}")
    if index.ndim > 1:
        raise IndexError(f"index_add_(): Index is supposed to be a vector, but got dim: "
                         f"{index.ndim} with type: {scalar_name(index._array.dtype)} and size: "
                         f"{list(index.shape)}")
    if source._array.dtype != input._array.dtype:
        raise RuntimeError(f"index_add_(): self ({scalar_name(input._array.dtype)}) and source "
                           f"({scalar_name(source._array.dtype)}) must have the same scalar type")
    if source.ndim != input.ndim or any(a != b for i, (a, b) in enumerate(
            zip(input.shape, source.shape)) if i != d):
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the "
                           f"specified dimension. Got self.shape = {list(input.shape)} "
                           f"source.shape = {list(source.shape)}")
    if index.numel() != (source.shape[d] if source.ndim else 1):
        raise RuntimeError(f"index_add_(): Number of indices ({index.numel()}) should be equal "
                           f"to source.size(dim): ({source.shape[d]}), for dim: {d}")
    if input.ndim <= 1:  # PyTorch's kernel for one dim words it as index_select does
        check_index_range(index, input.shape[0] if input.ndim else 1)
    _out_of_bounds(index, input.shape[d] if input.ndim else 1, d, RuntimeError)
    return index_put(input, _slices_at(input, d, index),
                     source * alpha if alpha != 1 else source, accumulate=True)


def index_copy(input, dim: int, index, source):
    """``input`` with slice ``index[i]`` along ``dim`` replaced by ``source``'s i-th."""
    from .index import index_put
    d = normalize_dim(dim, input.ndim, "index_copy")
    if index._array.dtype.kind not in "iu":
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got "
                           f"{scalar_name(index._array.dtype)}")
    if index.ndim > 1:
        raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got {index.ndim})")
    if source._array.dtype != input._array.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, "
                           f"but got (self) {scalar_name(input._array.dtype)} and (source) "
                           f"{scalar_name(source._array.dtype)}")
    count = source.shape[d] if source.ndim == input.ndim and source.ndim else None
    if count is not None and index.numel() != count:
        raise IndexError(f"index_copy_(): Number of indices ({index.numel()}) should be equal "
                         f"to source.size(dim) ({count})")
    if source.ndim != input.ndim or any(a != b for i, (a, b) in enumerate(
            zip(input.shape, source.shape)) if i != d):
        raise RuntimeError("index_copy_(): Source/destination tensor must have same slice "
                           f"shapes (self {list(input.shape)}, source {list(source.shape)}, "
                           f"dim {d})")
    _out_of_bounds(index, input.shape[d] if input.ndim else 1, d, IndexError, "index_copy_(): ")
    return index_put(input, _slices_at(input, d, index), source)


def index_fill(input, dim: int, index, value):
    """``input`` with the slices ``index`` along ``dim`` set to ``value``."""
    from .index import index_put
    d = normalize_dim(dim, input.ndim, "index_fill")
    if index._array.dtype != xp.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if index.ndim > 1:
        raise RuntimeError("Index has to be a vector/scalar")
    if isinstance(value, Value) and value.ndim:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.ndim} dimension(s).")
    _out_of_bounds(index, input.shape[d] if input.ndim else 1, d, IndexError, negative=True)
    if not isinstance(value, Value):
        value = input.new_full((), value)
    return index_put(input, _slices_at(input, d, index), value.to(input.dtype))
