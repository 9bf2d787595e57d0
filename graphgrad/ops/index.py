"""Layer ``ops``: indexing. ``x[index]`` (ints, slices, None, Ellipsis, bool masks,
integer arrays), ``index_put`` (behind ``x[index] = v``), nonzero, index_select,
masked_fill. gather/scatter_add/one_hot live in ``gathering``.

Index tensors are data inputs of the op; the rest of the index is a hashable ``spec``
(slices as ``("slice", start, stop, step)``; ``"T"`` marks where a tensor goes).
"""

from __future__ import annotations

import warnings

from graphgrad.backend import xp
from graphgrad.tensor import Value
from graphgrad.tensor import Tensor
from graphgrad.tensor.creation import fitted_scalar, invalid_arguments, is_number

from .arithmetic import needs_grad
from .base import C_NAMES, Op, Spec, int_arg, normalize_dim
from .refusals import (SEQUENCE_AS_TUPLE, check_index_range, narrow_dim,
                       narrow_start, sequence_as_tuple)
from .batching import align, batch_size, materialize, to_front
from . import taylor as ts

__all__ = ["getitem", "index_put", "nonzero", "index_select", "masked_fill", "parse_index",
           "masked_select", "select", "narrow", "check_index_range"]

TENSOR_SLOT = "T"  # where an index tensor stands in a spec (see ``parse_index``)


def parse_index(index) -> tuple[tuple, list]:
    """Split a Python index into (hashable spec, list of index tensors)."""
    if sequence_as_tuple(index):
        warnings.warn(SEQUENCE_AS_TUPLE, UserWarning, stacklevel=3)
        index = tuple(index)
    if not isinstance(index, tuple):
        index = (index,)
    spec, tensors = [], []
    for item in index:
        if isinstance(item, Value):
            if item._array.dtype.kind not in "biu":
                raise IndexError("tensors used as indices must be long, int, byte or bool "
                                 "tensors")
            if item._array.dtype == xp.uint8:  # a byte tensor is a mask, as in PyTorch
                warnings.warn("indexing with dtype graphgrad.uint8 is now deprecated, please "
                              "use a dtype graphgrad.bool instead.", UserWarning, stacklevel=3)
                item = item != 0
            spec.append(TENSOR_SLOT)
            tensors.append(item)
        elif isinstance(item, bool):
            spec.append(TENSOR_SLOT)
            tensors.append(Tensor._make(xp.asarray(item)))
        elif isinstance(item, int) or item is None or item is Ellipsis:
            spec.append(item)
        elif isinstance(item, slice):
            spec.append(("slice", _as_int(item.start), _as_int(item.stop), _as_int(item.step)))
        elif isinstance(item, (list, tuple, xp.ndarray, range)):  # a sequence: a tensor
            try:
                arr = xp.asarray(item)
            except ValueError:  # ragged, or holding tensors
                raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long "
                                 f"or byte Variables are valid indices (got "
                                 f"{type(item).__name__})") from None
            if arr.dtype.kind not in "biu":
                if arr.size == 0:
                    arr = arr.astype(xp.int64)
                else:
                    raise IndexError("tensors used as indices must be long, int, byte or bool "
                                     "tensors")
            spec.append(TENSOR_SLOT)
            tensors.append(Tensor._make(arr))
        elif hasattr(item, "__index__"):
            spec.append(int(item.__index__()))
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or "
                             f"byte Variables are valid indices (got {type(item).__name__})")
    return tuple(spec), tensors


def _as_int(v):
    return None if v is None else int(v.__index__()) if hasattr(v, "__index__") else v


def build_index(spec: tuple, arrays) -> tuple:
    """The NumPy index for ``spec`` with the index arrays filled in."""
    it = iter(arrays)
    out = []
    for s in spec:
        if s == TENSOR_SLOT and isinstance(s, str):
            out.append(next(it))
        elif isinstance(s, tuple):
            out.append(slice(s[1], s[2], s[3]))
        else:
            out.append(s)
    return tuple(out)


def _check_bounds(a, idx: tuple) -> None:
    """NumPy's IndexError, reworded as PyTorch's for integer indices."""
    dim = 0
    for item in idx:
        if item is Ellipsis:
            dim = a.ndim - sum(1 for i in idx if i is not None and i is not Ellipsis
                               and not (isinstance(i, xp.ndarray) and i.dtype == xp.bool_))
            dim += sum(1 for i in idx[:idx.index(Ellipsis)] if i is not None)
            continue
        if item is None:
            continue
        if isinstance(item, int) and dim < a.ndim:
            size = a.shape[dim]
            if not -size <= item < size:
                raise IndexError(f"index {item} is out of bounds for dimension {dim} with size "
                                 f"{size}")
        dim += item.ndim if isinstance(item, xp.ndarray) and item.dtype == xp.bool_ else 1


def _advanced_split(spec: tuple) -> bool:
    """True when the index tensors are separated by other items: NumPy then puts the
    broadcast index dims first instead of in place."""
    where_t = [i for i, s in enumerate(spec) if s == TENSOR_SLOT and isinstance(s, str)]
    return bool(where_t) and where_t[-1] - where_t[0] + 1 != len(where_t)


def _index_ndim(arrays) -> int:
    return max((a.ndim if a.dtype != xp.bool_ else 1 for a in arrays), default=0)


FULL_SLICE = ("slice", None, None, None)
_BOOL_MASK = ("vmap: We do not support batching operators that can support dynamic shape. "
              "Attempting to batch over indexing with a boolean mask.")


class _BatchedIndex:
    """An index with batched index tensors, rewritten as one index of the physical
    tensor (batch first): an ``arange`` over the batch joins the index tensors, so
    example ``b`` reads row ``b`` with its own indices. NumPy then puts the broadcast
    index dims first (the arange is an advanced index at position 0), while PyTorch
    keeps them in place when the example's index tensors are adjacent: ``perm`` moves
    the physical result into the logical layout (None when they agree)."""

    def __init__(self, example_shape: tuple, spec: tuple, vals, bdims, size: int):
        for v, d in zip(vals, bdims, strict=True):
            if d is not None and v._array.dtype == xp.bool_:
                raise RuntimeError(_BOOL_MASK)
        ranks = [(v.ndim - (d is not None)) if v._array.dtype != xp.bool_ else 1
                 for v, d in zip(vals, bdims, strict=True)]
        rank = max(ranks, default=0)
        self.tensors = [align(v, d, rank) if d is not None else v
                        for v, d in zip(vals, bdims, strict=True)]
        batch = Tensor._make(xp.arange(size, dtype=xp.int64).reshape(size, *([1] * rank)))
        self.tensors.insert(0, batch)
        self.spec = (TENSOR_SLOT, *spec)
        examples = [xp.zeros(v.shape[1:] if d is not None else v.shape, v._array.dtype)
                    if v._array.dtype != xp.bool_ else v._array
                    for v, d in zip(vals, bdims, strict=True)]
        dummy = xp.broadcast_to(xp.zeros((), xp.int8), example_shape)
        self.logical_shape = dummy[build_index(spec, examples)].shape
        before = self._dims_before_tensors(example_shape, spec, examples)
        self.perm = None
        if before and not _advanced_split(spec):
            # physical (B, bcast, before, after) -> logical (B, before, bcast, after)
            self.perm = (0, *range(1 + rank, 1 + rank + before), *range(1, 1 + rank),
                         *range(1 + rank + before, 1 + len(self.logical_shape)))

    @staticmethod
    def _dims_before_tensors(example_shape: tuple, spec: tuple, examples) -> int:
        """Result dims that the items before the first index tensor give."""
        consumed = 0
        it = iter(examples)
        for s in spec:
            if s == TENSOR_SLOT and isinstance(s, str):
                e = next(it)
                consumed += e.ndim if e.dtype == xp.bool_ else 1
            elif s is not Ellipsis:
                consumed += 1
        before = 0
        for s in spec:
            if s == TENSOR_SLOT and isinstance(s, str):
                break
            if s is Ellipsis:
                before += len(example_shape) - consumed
            elif isinstance(s, tuple):
                before += 1
        return before

    def to_logical(self, out):
        return out.permute(*self.perm) if self.perm else out

    def to_physical(self, values):
        """Values laid out as the physical indexed result (batch first)."""
        if self.perm is None:
            return values
        inverse = [0] * len(self.perm)
        for i, p in enumerate(self.perm):
            inverse[p] = i
        return values.permute(*inverse)


class Getitem(Op):
    holomorphic = True
    saves_inputs = ()
    promotes = False
    view = True  # basic indexing gives a view; dispatch checks the memory

    @staticmethod
    def forward(a, *index_arrays, spec):
        idx = build_index(spec, index_arrays)
        if not index_arrays and Ellipsis not in idx:
            idx = idx + (Ellipsis,)  # a[0] of a vector: a 0-d view, not a NumPy scalar copy
        try:
            return xp.asarray(a[idx])
        except IndexError:
            _check_bounds(a, idx)
            raise

    @staticmethod
    def vjp(g, out, a, *index_tensors, spec):
        zeros = g.new_zeros(tuple(a.shape))
        return (IndexPut.apply(zeros, g, *index_tensors, spec=spec, accumulate=True),
                *([None] * len(index_tensors)))

    @staticmethod
    def jvp(dots, out, a, *index_tensors, spec):
        return Getitem.apply(dots[0], *index_tensors, spec=spec)

    taylor = classmethod(ts.linear_taylor)

    @staticmethod
    def cotangent_window(a, *index_tensors, spec):
        """Basic indexing (a view): the cotangent lands at the same index. Advanced
        indexing may repeat positions, so it keeps its vjp."""
        if index_tensors:
            return None
        idx = build_index(spec, ())
        return idx if Ellipsis in idx else idx + (Ellipsis,)

    @classmethod
    def batch(cls, vals, bdims, *, spec):
        if any(d is not None for d in bdims[1:]):
            size = batch_size(vals, bdims)
            a = materialize(vals[0], bdims[0], size)
            index = _BatchedIndex(tuple(a.shape[1:]), spec, vals[1:], bdims[1:], size)
            return index.to_logical(cls.apply(a, *index.tensors, spec=index.spec)), 0
        a = to_front(vals[0], bdims[0])
        out = cls.apply(a, *vals[1:], spec=(FULL_SLICE, *spec))
        bdim = _index_ndim([v._array for v in vals[1:]]) if _advanced_split(spec) else 0
        return out, bdim


class IndexPut(Op):
    """``out = base.clone(); out[index] = values`` (or ``+=`` with ``accumulate``,
    where repeated indices add up)."""

    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(base, values, *index_arrays, spec, accumulate):
        out = base.copy()
        idx = build_index(spec, index_arrays)
        if accumulate:
            if index_arrays:
                xp.add.at(out, idx, values)
            else:
                out[idx] += values
        else:
            out[idx] = values
        return out

    @staticmethod
    def vjp(g, out, base, values, *index_tensors, spec, accumulate):
        gb = None
        if needs_grad(base):
            gb = g if accumulate else IndexPut.apply(g, 0.0, *index_tensors, spec=spec,
                                                     accumulate=False)
        gv = Getitem.apply(g, *index_tensors, spec=spec) if needs_grad(values) else None
        return (gb, gv, *([None] * len(index_tensors)))

    @classmethod
    def infer(cls, base, values, *index, spec, accumulate) -> Spec:
        return Spec(base.shape, base.dtype)

    @staticmethod
    def jvp(dots, out, base, values, *index_tensors, spec, accumulate):
        db, dv = dots[0], dots[1]
        if db is None:
            db = out.new_zeros(tuple(out.shape))
        return IndexPut.apply(db, 0.0 if dv is None else dv, *index_tensors, spec=spec,
                              accumulate=accumulate)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def batch(cls, vals, bdims, *, spec, accumulate):
        base, values = vals[0], vals[1]
        size = batch_size(vals, bdims)
        # forward copies base: an expanded (read-only) unbatched base is fine
        base = materialize(base, bdims[0], size)
        if any(d is not None for d in bdims[2:]) or (bdims[1] is not None
                                                      and _advanced_split(spec)):
            index = _BatchedIndex(tuple(base.shape[1:]), spec, vals[2:], bdims[2:], size)
            if isinstance(values, Value):  # (a Python number broadcasts as it is)
                shape = index.logical_shape
                values = align(materialize(values, bdims[1], size), 0, len(shape))
                values = index.to_physical(values.expand(size, *shape))
            out = cls.apply(base, values, *index.tensors, spec=index.spec, accumulate=accumulate)
            return out, 0
        if bdims[1] is not None:
            example = xp.broadcast_to(xp.zeros((), base._array.dtype), base.shape[1:])
            rank = example[build_index(spec, [v._array for v in vals[2:]])].ndim
            values = align(values, bdims[1], rank)
        out = cls.apply(base, values, *vals[2:], spec=(FULL_SLICE, *spec), accumulate=accumulate)
        return out, 0


def getitem(input, index):
    spec, tensors = parse_index(index)
    if _ints_among_index_tensors(tensors, spec):
        return _ints_first(input, spec, tensors)
    return apply_getitem(input, spec, tensors)


def _is_int_scalar(t) -> bool:
    """A 0-d integer index tensor, which PyTorch indexes with as with an int."""
    return t.ndim == 0 and t._array.dtype != xp.bool_


def _ints_among_index_tensors(tensors: list, spec: tuple) -> bool:
    if any(t.ndim == 0 and not _is_int_scalar(t) for t in tensors):
        return False  # a 0-d bool index adds an axis: NumPy's rule stands
    ints = sum(type(s) is int for s in spec) + sum(_is_int_scalar(t) for t in tensors)
    return ints > 0 and any(not _is_int_scalar(t) for t in tensors)


def _ints_first(input, spec: tuple, tensors: list):
    """PyTorch applies integer indices (ints and 0-d integer tensors) first, as ``select``,
    so they never join the index tensors in NumPy's rule that separated index tensors put
    their dims first: ``x[0, :, idx]`` is ``x[0][:, idx]``. Index with the ints, then with
    the tensors."""
    basic, basic_tensors, rest, rest_tensors = [], [], [], []
    it = iter(tensors)
    for s in spec:
        if s == TENSOR_SLOT and isinstance(s, str):
            t = next(it)
            if _is_int_scalar(t):
                basic.append(TENSOR_SLOT)
                basic_tensors.append(t)
                continue
            # a bool mask stands for as many dims as it has
            basic += [FULL_SLICE] * (t.ndim if t._array.dtype == xp.bool_ else 1)
            rest.append(TENSOR_SLOT)
            rest_tensors.append(t)
        elif type(s) is int:
            basic.append(s)
        else:
            basic.append(s)
            rest.append(s if s is Ellipsis else FULL_SLICE)  # a None's new axis now exists
    inner = apply_getitem(input, tuple(basic), basic_tensors)
    return apply_getitem(inner, tuple(rest), rest_tensors)


def apply_getitem(input, spec: tuple, tensors: list):
    if None in spec:
        # numpy puts new axes where None stands; index without them, then reshape
        no_none = tuple(s for s in spec if s is not None)
        dummy = xp.broadcast_to(xp.zeros((), input._array.dtype), input._array.shape)
        shape = dummy[build_index(spec, [t._array for t in tensors])].shape
        return Getitem.apply(input, *tensors, spec=no_none).reshape(shape)
    return Getitem.apply(input, *tensors, spec=spec)


def index_put(input, indices, values, accumulate: bool = False):
    spec, tensors = parse_index(tuple(indices))
    return IndexPut.apply(input, values, *tensors, spec=spec, accumulate=accumulate)


def select(input, dim: int, index: int):
    index = int_arg(index, "select", "index", 2)
    d = normalize_dim(dim, input.ndim, "select")
    return getitem(input, (slice(None),) * d + (index,))


def narrow(input, dim: int, start: int, length: int):
    """``length`` elements from ``start`` along ``dim``; a negative ``start`` counts from
    the end. PyTorch's checks, in its order."""
    d = narrow_dim(input, dim, start, length)
    start = narrow_start(start, length, input.shape[d])
    return getitem(input, (slice(None),) * d + (slice(start, start + length),))


class Nonzero(Op):
    differentiable = False
    promotes = False
    saves_inputs = ()

    @staticmethod
    def forward(a):
        return xp.argwhere(a).astype(xp.int64)

    @classmethod
    def infer(cls, a) -> Spec:  # the count of nonzeros is known only at run time
        return Spec((None, len(a.shape)), xp.dtype(xp.int64))

    @classmethod
    def batch(cls, vals, bdims):
        raise RuntimeError("vmap: nonzero has a data-dependent output shape, which cannot be "
                           "batched (the number of nonzeros differs between examples)")


def nonzero(input, *, as_tuple: bool = False):
    out = Nonzero.apply(input)
    if as_tuple:
        if input.ndim == 0:
            return (out.reshape(-1),)
        return tuple(out[:, i] for i in range(input.ndim))
    return out


def index_select(input, dim: int, index):
    d = normalize_dim(dim, input.ndim, "index_select")
    if not isinstance(index, Value):
        raise TypeError(f"index_select(): argument 'index' (position 3) must be Tensor, not "
                        f"{type(index).__name__}")
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index._array.dtype not in (xp.int32, xp.int64):
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    check_index_range(index, input.shape[d] if input.ndim else 1, d if input.ndim > 1 else None)
    if input.ndim == 0:  # a 0-d tensor has one element to pick, as a 1-d tensor would
        if index.numel() != 1:
            raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got "
                               f"{index.numel()} value(s)")
        return getitem(input.reshape(1), (index.reshape(-1),)).reshape(())
    return getitem(input, (slice(None),) * d + (index.reshape(-1),))


def masked_fill(input, mask, value):
    """``input`` with ``value`` where ``mask`` is True, in ``input``'s dtype (a float
    value in an int tensor is truncated, as in PyTorch); both broadcast."""
    from .compare import where
    if not (isinstance(value, Value) or is_number(value)):
        raise invalid_arguments("masked_fill", (mask, value), ("Tensor mask, Tensor value",
                                                             "Tensor mask, Number value"))
    mask_dtype = mask._array.dtype if isinstance(mask, Value) else None
    if mask_dtype != xp.bool_:
        name = C_NAMES.get(mask_dtype.name, mask_dtype.name) if mask_dtype else "float"
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with "
                           f"dtype {name}")
    dtype = input._array.dtype
    if isinstance(value, Value):
        if value.ndim != 0:
            raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but "
                               f"got tensor with {value.ndim} dimension(s).")
        if value._array.dtype != dtype:
            value = value.to(dtype)
    else:
        value = fitted_scalar(value, dtype)
        value = Tensor._make(xp.asarray(value).astype(dtype))
    return where(mask, value, input)


def masked_select(input, mask):
    from .shape import broadcast_tensors
    if not isinstance(mask, Value) or mask._array.dtype != xp.bool_:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    x, m = broadcast_tensors(input, mask)
    return getitem(x, m)

