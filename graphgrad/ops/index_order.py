"""Layer ``ops``: where PyTorch and NumPy put the dims of an advanced index.

Both put the broadcast dims of the index tensors in place of the first one when the
index tensors stand together, and first otherwise. They differ in what "together"
means:

* NumPy counts integers (and 0-d integer arrays) as index tensors once any index tensor
  is present; PyTorch applies them first, as ``select``. So ``x[0, :, idx]`` has the
  ``idx`` dims first in NumPy (the int and ``idx`` are separated by the slice) and in
  place in PyTorch (it is ``x[0][:, idx]``);
* an Ellipsis that stands for no dims separates index tensors in NumPy, not in PyTorch.

``getitem`` (``Tensor.__getitem__``) indexes in two steps where the two differ: first
the ints, slices and None (basic indexing, where they agree), then the index tensors
with slices for every other dim, where NumPy's placement is PyTorch's. ``setitem``
(``x[index] = v``) writes with one ``index_put`` in NumPy's layout: ``torch_order``
gives the permutation from NumPy's result dims to PyTorch's, which lays ``v`` out.
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, Value
from graphgrad.tensor.creation import fitted_scalar

from .index import (FULL_SLICE, TENSOR_SLOT, Getitem, IndexPut, apply_getitem, build_index,
                    parse_index)
from .inplace import apply_inplace, setitem_name

__all__ = ["torch_order", "getitem", "setitem"]



def _is_tensor(s) -> bool:
    return isinstance(s, str) and s == TENSOR_SLOT


def _items(spec: tuple, index_arrays, ndim: int) -> tuple[list[tuple[str, int]], int]:
    """Each index item as ``(kind, result dims it makes)``, kind ``"int"`` (an integer or
    0-d integer tensor), ``"tensor"`` (an advanced index: its dims are counted apart),
    ``"basic"`` (a slice or None) or ``"..."``; and the number of implicit trailing
    slices (they come after everything, so they never separate index tensors)."""
    arrays = iter(index_arrays)
    items, used = [], 0
    for s in spec:
        if _is_tensor(s):
            a = next(arrays)
            is_int = a.ndim == 0 and a.dtype != xp.bool_
            items.append(("int" if is_int else "tensor", 0))
            used += a.ndim if a.dtype == xp.bool_ else 1  # a mask stands for its dims
        elif type(s) is int:
            items.append(("int", 0))
            used += 1
        elif s is None:
            items.append(("basic", 1))
        elif s is Ellipsis:
            items.append(("...", 0))
        else:  # a slice
            items.append(("basic", 1))
            used += 1
    rest = max(ndim - used, 0)
    if any(kind == "..." for kind, _ in items):
        return [("...", rest) if kind == "..." else (kind, n) for kind, n in items], 0
    return items, rest


def _placement(items: list, index_kinds: tuple) -> int | None:
    """How many basic result dims come before the index dims: the count before the
    first index item when the index items stand together, 0 when they do not (None:
    no index items)."""
    where = [i for i, (kind, _) in enumerate(items) if kind in index_kinds]
    if not where:
        return None
    if where[-1] - where[0] + 1 != len(where):
        return 0
    return sum(n for _, n in items[:where[0]])


def torch_order(spec: tuple, index_arrays, ndim: int) -> tuple | None:
    """The permutation ``p`` with ``torch_result = numpy_result.permute(p)`` for the
    index ``spec`` (with its index arrays) of a tensor with ``ndim`` dims, or None when
    both put the dims in the same place."""
    if TENSOR_SLOT not in spec:
        return None
    items, trailing = _items(spec, index_arrays, ndim)
    numpy_at = _placement(items, ("tensor", "int"))
    # PyTorch: ints are gone before the index tensors are placed, and so is an empty "..."
    torch_at = _placement([(k, n) for k, n in items if k != "int" and (k, n) != ("...", 0)],
                          ("tensor",))
    if torch_at is None or torch_at == numpy_at:
        return None
    # a mask gives one dim (its True count); a 0-d mask one dim of length 1 or 0
    index_ndim = len(xp.broadcast_shapes(*[(1,) if a.dtype == xp.bool_ else a.shape
                                           for a in index_arrays]))
    basic = sum(n for _, n in items) + trailing
    numpy_dims, torch_dims = list(range(basic)), list(range(basic))
    numpy_dims[numpy_at:numpy_at] = range(basic, basic + index_ndim)
    torch_dims[torch_at:torch_at] = range(basic, basic + index_ndim)
    return tuple(numpy_dims.index(d) for d in torch_dims)


def _consumed(spec: tuple, tensors: list) -> int:
    """How many dims of the indexed tensor the items other than "..." stand for."""
    it = iter(tensors)
    n = 0
    for s in spec:
        if _is_tensor(s):
            t = next(it)
            n += t.ndim if t._array.dtype == xp.bool_ else 1
        elif s is not None and s is not Ellipsis:
            n += 1
    return n


def _two_steps(spec: tuple, tensors: list, ndim: int) -> tuple:
    """Split an index into its basic part (ints, 0-d integer tensors, slices, None) and
    the index tensors with full slices for every dim the basic part leaves."""
    basic, basic_tensors, rest, rest_tensors = [], [], [], []
    it = iter(tensors)
    for s in spec:
        if _is_tensor(s):
            t = next(it)
            is_bool = t._array.dtype == xp.bool_
            if t.ndim == 0 and not is_bool:  # an int: PyTorch selects with it first
                basic.append(TENSOR_SLOT)
                basic_tensors.append(t)
                continue
            if t.ndim:  # a mask stands for as many dims as it has; a 0-d one for none
                basic += [FULL_SLICE] * (t.ndim if is_bool else 1)
            rest.append(TENSOR_SLOT)
            rest_tensors.append(t)
        elif s is Ellipsis:
            basic.append(s)
            rest += [FULL_SLICE] * (ndim - _consumed(spec, tensors))  # an empty one: no gap
        else:
            basic.append(s)
            if type(s) is not int:
                rest.append(FULL_SLICE)  # a slice, or a None's new axis
    return tuple(basic), basic_tensors, tuple(rest), rest_tensors


def getitem(input, index):
    """``input[index]`` with PyTorch's placement of the index tensors' dims."""
    spec, tensors = parse_index(index)
    if not tensors:
        return apply_getitem(input, spec, tensors)
    if all(t.ndim for t in tensors) and all(type(s) is tuple or _is_tensor(s) for s in spec):
        return Getitem.apply(input, *tensors, spec=spec)  # slices and tensors: they agree
    basic, basic_tensors, rest, rest_tensors = _two_steps(spec, tensors, input.ndim)
    return Getitem.apply(apply_getitem(input, basic, basic_tensors), *rest_tensors, spec=rest)


def _fit(value, target: tuple):
    """``value`` less the leading dims of size 1 that PyTorch drops when it writes into an
    indexing result of shape ``target`` (their gradient would have nowhere to go)."""
    extra = value.ndim - len(target)
    if extra <= 0:
        return value
    if any(d != 1 for d in value.shape[:extra]):
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot "
                           f"be broadcast to indexing result of shape {list(target)}")
    return value.reshape(tuple(value.shape[extra:]))


def _numpy_layout(value, torch_shape: tuple, perm: tuple):
    """``value`` broadcast to PyTorch's indexing result and laid out as NumPy's."""
    v = _fit(value, torch_shape)
    try:
        xp.broadcast_shapes(tuple(v.shape), torch_shape)
    except ValueError:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(v.shape)} cannot be "
                           f"broadcast to indexing result of shape {list(torch_shape)}") from None
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return v.expand(*torch_shape).permute(*inverse)


def _result_shape(t, spec: tuple, arrays) -> tuple:
    dummy = xp.broadcast_to(xp.zeros((), t._array.dtype), t._array.shape)
    return dummy[build_index(spec, arrays)].shape


def setitem(self, index, value) -> None:
    """``self[index] = value`` in place, with PyTorch's placement of the index tensors'
    dims: one ``index_put`` with ``value`` laid out as NumPy's assignment expects."""
    spec, tensors = parse_index(index)
    value = fitted_scalar(value, self._array.dtype)
    if not isinstance(value, (Value, bool, int, float, complex)):
        value = Tensor._make(xp.asarray(value, self._array.dtype))  # lists and arrays
    if isinstance(value, Value) and value._array.dtype != self._array.dtype:
        value = value.to(self.dtype)
    name = setitem_name(index, value,
                        lambda: _result_shape(self, spec, [t._array for t in tensors]))
    perm = None
    if any(t.ndim or t._array.dtype == xp.bool_ for t in tensors):  # advanced indexing
        arrays = [t._array for t in tensors]
        perm = torch_order(spec, arrays, self.ndim)
        if perm is not None and isinstance(value, Value):
            shape = _result_shape(self, spec, arrays)
            value = _numpy_layout(value, tuple(shape[p] for p in perm), perm)
        if any(type(s) is int for s in spec):
            # ints as 0-d index tensors: NumPy treats them alike, and the batching rules
            # read every advanced index from the tensors
            spec, tensors = parse_index(tuple(
                Tensor._make(xp.asarray(s, xp.int64)) if type(s) is int else s
                for s in build_index(spec, tensors)))
    if perm is None and isinstance(value, Value) and value.ndim and value.shape[0] == 1:
        value = _fit(value, _result_shape(self, spec, [t._array for t in tensors]))

    def put(old, v):
        return IndexPut.apply(old, v, *tensors, spec=spec, accumulate=False)
    apply_inplace(self, put, value, name=name)
