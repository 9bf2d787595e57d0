"""Layer ``ops``: in-place ops (``add_``, ``x[i] = v``, ``zero_``...).

Each in-place op runs the out-of-place op and writes its result into the tensor's
buffer, bumping the version counter that saved-tensor checks compare against. When
the graph is being recorded, the tensor is *rebased*: it becomes the node of the new
op, while its previous identity lives on as a separate node (``ext.previous``) that the
edges created before the change still lead to.

Views share their base's version counter. A view whose base changed since its history
was made gets a fresh one when it is next read (``tensor.value.refresh_if_stale``), and
views of a tensor that starts requiring grad through an in-place op follow it into the
graph (``views_follow_grad``). Forward-AD tangents of views are derived from the base's
again in the same way (``fresh_tangents``), PyTorch's aliasing of a view's tangent with
its base's.
"""

from __future__ import annotations

from collections.abc import Callable

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, Value, is_grad_enabled
from graphgrad.tensor.value import old_identity as _old_identity
from graphgrad.tensor.value import views_follow_grad
from graphgrad.tensor.creation import _leaf
from graphgrad.tensor.dispatch import _stack

from .arithmetic import needs_grad
from .base import saved_inputs

__all__ = ["apply_inplace", "fill_inplace", "fresh_tangents", "setitem_name"]


def _check_allowed(t: Tensor) -> None:
    if t._requires_grad and t.op is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    ext = t._extras
    if ext is not None and ext.base is not None:
        base = ext.base
        while base._extras is not None and base._extras.base is not None:
            base = base._extras.base
        if base._requires_grad and base.op is None:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in "
                               "an in-place operation.")


def _check_not_a_no_grad_view(t: Tensor) -> None:
    """An in-place op with grad mode on, on a view that does not require grad of a base that
    does (the view was made under no_grad): PyTorch forbids it as ambiguous."""
    ext = t._extras
    if ext is None or ext.base is None or t._requires_grad or not is_grad_enabled():
        return
    base = ext.base
    while base._extras is not None and base._extras.base is not None:
        base = base._extras.base
    if base._requires_grad:
        raise RuntimeError(
            "A view was created in no_grad mode and is being modified inplace with grad mode "
            "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. "
            "You can clarify your code by moving both the view and the inplace either both "
            "inside the no_grad block (if you don't want the inplace to be tracked) or both "
            "outside (if you want the inplace to be tracked).")


def _bump(t: Value) -> int:
    if t._version_counter is None:
        t._version_counter = [0]
    t._version_counter[0] += 1
    return t._version_counter[0]


def _write(t: Tensor, arr, name: str) -> None:
    if arr.shape != t._array.shape:
        raise RuntimeError(f"{name}: output with shape {list(t._array.shape)} doesn't match the "
                           f"broadcast shape {list(arr.shape)}")
    if not xp.can_cast(arr.dtype, t._array.dtype, "same_kind"):
        raise RuntimeError(f"result type {_type_name(arr.dtype)} can't be cast to the desired "
                           f"output type {_type_name(t._array.dtype)}")
    if not t._array.flags.writeable:
        raise RuntimeError(f"{name}: unsupported operation: the tensor's memory is read-only "
                           "(it is an expanded view); clone() it first")
    t._array[...] = arr


def _type_name(dt) -> str:
    return {"float32": "Float", "float64": "Double", "int64": "Long", "int32": "Int",
            "bool": "Bool", "float16": "Half"}.get(xp.dtype(dt).name, xp.dtype(dt).name)


_VMAP_INPLACE = ("vmap: inplace arithmetic(self, *extra_args) is not possible because there "
                 "exists a Tensor `other` in extra_args that has more elements than `self`. This "
                 "happened due to `other` being vmapped over but `self` not being vmapped over "
                 "in a vmap. Please try to use out-of-place operators instead of inplace "
                 "arithmetic.")
_VMAP_INPLACE_NAMED = ("vmap: {name}(self, *extra_args) is not possible because there exists a "
                       "Tensor `other` in extra_args that has more elements than `self`. This "
                       "happened due to `other` being vmapped over but `self` not being vmapped "
                       "over in a vmap. Please try to use out-of-place operators instead of "
                       "{name}. If said operator is being called inside the PyTorch framework, "
                       "please file a bug report instead.")


def _is_wrapper(t) -> bool:
    """vmap's batched tensors hold their values elsewhere; their _array is a stand-in."""
    return hasattr(type(t), "_unwrap_for_autograd")


def _carry_tangents(t: Tensor, result: Tensor) -> None:
    """Forward-AD tangents of the new value move to the tensor written in place."""
    fw = result._extras.tangents if result._extras is not None else None
    old = t._extras.tangents if t._extras is not None else None
    if not fw and not old:
        return
    ext = t._ensure_extras()
    for level in list(old or ()):
        if not fw or level not in fw:
            del ext.tangents[level]  # the new value does not depend on that level's input
    for level, tangent in (fw or {}).items():
        level.attach(t, tangent)
    _derived_now(t)


def _derived_now(t: Value) -> None:
    """``t``'s tangents were just set for its current value: a view needs no new
    derivation from its base until the storage changes again."""
    ext = t._extras
    if ext.base is not None and t._version_counter is not None:
        ext.tangents_at = t._version_counter[0]


def _copy_tangents(t: Tensor, old: Tensor) -> None:
    """The old identity keeps ``t``'s forward-AD tangents: the new value's jvp (and, in
    forward-over-reverse, the backward rules reading the saved old value) need them."""
    fresh_tangents(t)
    fw = t._extras.tangents if t._extras is not None else None
    for level, tangent in (fw or {}).items():
        level.attach(old, tangent)


def _owns(ext, level) -> bool:
    """Whether a tensor's tangent at ``level`` is its own rather than its base's seen
    through the view: tensors that are not views, and make_dual's views."""
    return ext is None or ext.base is None or ext.view_call is None or (
        ext.own_tangents is not None and level in ext.own_tangents)


def _tangents_to_base(t: Tensor) -> None:
    """A write through a view changes its base: so does the view's new tangent (the
    recorded path gets this from the write-back op's jvp; this is the unrecorded one),
    up to the tensor that owns the tangent (PyTorch: the view's tangent is a view of
    that tensor's tangent, written in place)."""
    for level, tangent in list((t._extras.tangents or {}).items() if t._extras is not None else ()):
        v = t
        while not _owns(v._extras, level):
            ext = v._extras
            base = ext.base
            write_back = _write_back(ext.view_call, "forward AD: an in-place op", "a tensor")
            before = level.tangent(base)  # (derived again first, when base is a view)
            if before is None:
                before = _leaf(xp.zeros(base._array.shape, base._array.dtype))
            tangent = write_back(before, tangent)
            level.attach(base, tangent)
            _derived_now(base)
            v = base


def fresh_tangents(t: Value) -> None:
    """A view's forward-AD tangents are its base's seen through the view (in PyTorch the
    view's tangent is a view of the base's, so in-place changes of either show in
    both). When the storage changed in place since they were derived (an unrecorded
    write into the base or another view of it), derive them again: at each level, the
    view op applied to the base's tangent, except where the view has its own
    (``make_dual``). Iterative over chains of views, innermost base first."""
    chain = []
    v = t
    while True:
        ext = v._extras
        if ext is None or ext.base is None or ext.view_call is None or v._version_counter is None or \
                ext.tangents_at == v._version_counter[0]:
            break
        chain.append(v)
        v = ext.base
    for v in reversed(chain):
        ext = v._extras
        ext.tangents_at = v._version_counter[0]
        base_fw = ext.base._extras.tangents if ext.base._extras is not None else None
        view_op, view_args, params = ext.view_call
        for level in set(base_fw or ()) | set(ext.tangents or ()):
            if _owns(ext, level):
                continue
            base_tangent = base_fw.get(level) if base_fw else None
            if base_tangent is None:
                del ext.tangents[level]
                continue
            if level in _stack:  # tangents are computed below their own level
                with level.lowered():
                    tangent = view_op.apply(base_tangent, *view_args[1:], **params)
            else:
                tangent = view_op.apply(base_tangent, *view_args[1:], **params)
            level.attach(v, tangent)


def _vmap_levels(t) -> set:
    levels = set()
    while _is_wrapper(t):
        t, _, level = t._unwrap_for_autograd()
        levels.add(level)
    return levels


def _inplace_batched(t: Tensor, fn, args, kw, name: str) -> Tensor:
    """An in-place op on a vmap-batched tensor (the ``BatchedTensor`` of vmap): the new
    logical value is computed out of place, written into the physical tensor (an
    in-place op one level down, so the tensors that alias it see the change, as in
    PyTorch), and the batched tensor becomes its node in the logical graph."""
    recording = is_grad_enabled() and (t._requires_grad or any(needs_grad(a) for a in args))
    if recording:
        _check_allowed(t)
        if t._extras is not None and t._extras.base is not None:
            return _inplace_on_batched_view(t, fn, args, kw, name)
    old = t._snapshot() if recording else t
    result = fn(old, *args, **kw)
    if not _vmap_levels(result) <= _vmap_levels(t):
        raise _vmap_inplace_error(name)
    if tuple(result.shape) != tuple(t.shape):
        raise RuntimeError(f"{name}: output with shape {list(t.shape)} doesn't match the "
                           f"broadcast shape {list(result.shape)}")
    fill_inplace(t._unwrap_for_autograd()[0], t._physical_value(result), name)
    if recording and result.op is not None:
        # rebase t in the logical graph, as for a plain tensor: edges made before the
        # change lead to its old identity (the snapshot) through the version counter
        version = _bump(t)
        ext = t._ensure_extras()
        ext.previous, ext.rebased_at = old, version
        t.op, t.inputs, t.params, t._requires_grad, t._saved_versions = (result.op, result.inputs, result.params,
                                                  result._requires_grad, result._saved_versions)
    _carry_tangents(t, result)
    return t


def _write_back(view: tuple, what: str, of: str):
    """``(base, values) -> new base`` for a view made by ``view`` = (op, args, params):
    ``index_put`` for views made by indexing, the view op's ``write_back`` for the others."""
    from .index import Getitem, IndexPut
    view_op, view_args, view_params = view
    index = view_args[1:]
    if view_op is Getitem:
        def write_back(b, v):
            return IndexPut.apply(b, v, *index, spec=view_params["spec"], accumulate=False)
    elif getattr(view_op, "write_back", None) is not None:
        def write_back(b, v):
            return view_op.write_back(b, v, **view_params)
    else:
        raise NotImplementedError(
            f"{what} on a view made by {view_op.__name__.lower()} of {of} in a recorded graph "
            f"is not supported; clone() the view first")
    return write_back


def _inplace_on_batched_view(t: Tensor, fn, args, kw, name: str) -> Tensor:
    """An in-place op on a view of a batched tensor, while recording: the base takes the
    new values (an in-place op on it, so its logical history sees the change) and the
    view becomes a fresh view of the rebased base."""
    view_op, view_args, view_params = t._extras.view_call
    base, index = t._extras.base, view_args[1:]
    write_back = _write_back(t._extras.view_call, f"vmap: {name}", "a batched tensor")
    old = t._snapshot()
    new_values = fn(old, *args, **kw)
    apply_inplace(base, write_back, new_values, name=name)
    fresh = view_op.apply(base, *index, **view_params)
    version = _bump(t)
    t._extras.previous, t._extras.rebased_at = old, version
    t.op, t.inputs, t.params, t._requires_grad, t._saved_versions = (fresh.op, fresh.inputs, fresh.params, fresh._requires_grad,
                                              fresh._saved_versions)
    _carry_tangents(t, fresh)
    return t


# the in-place ops whose vmap error PyTorch words as "inplace arithmetic" (fill_ is not
# one: PyTorch names it)
_ARITHMETIC = {"add_", "sub_", "mul_", "div_", "pow_", "neg_", "true_divide_", "copy_",
               "zero_", "inplace"}


def setitem_name(index, value, result_shape: Callable[[], tuple]) -> str:
    """The in-place op PyTorch runs for ``x[index] = value``, as its errors (vmap's
    among them) name it: ``index_put_`` when the index holds tensors or lists (batched
    tensors too; unbatched 0-d integer tensors select like ints, Python bools add a dim);
    otherwise the indexing result is a view that ``copy_`` writes, or ``fill_`` when a
    0-d value meets a result of another shape (PyTorch's ``copy_to``).
    ``result_shape()`` is the indexing result's shape."""
    for i in index if isinstance(index, tuple) else (index,):
        if isinstance(i, (list, xp.ndarray)) or isinstance(i, Value) and (
                _is_wrapper(i) or i.ndim or i._array.dtype == xp.bool_):
            return "index_put_"
    if isinstance(value, Value) and value.ndim == 0 and tuple(result_shape()) != ():
        return "fill_"
    return "copy_"


def _vmap_inplace_error(name: str) -> RuntimeError:
    """Writing a batched value into a tensor that is not batched there."""
    if name in _ARITHMETIC:
        return RuntimeError(_VMAP_INPLACE)
    return RuntimeError(_VMAP_INPLACE_NAMED.format(name=name))


def apply_inplace(t: Tensor, fn, *args, name: str = "inplace", **kw) -> Tensor:
    """``t <- fn(t, *args, **kw)`` in place; returns ``t``."""
    if _is_wrapper(t):
        return _inplace_batched(t, fn, args, kw, name)
    recording = is_grad_enabled() and (t._requires_grad or any(needs_grad(a) for a in args))
    if not recording:
        _check_not_a_no_grad_view(t)
        result = fn(t, *args, **kw)
        if _is_wrapper(result):
            raise _vmap_inplace_error(name)
        _write(t, result._array, name)
        _bump(t)
        _carry_tangents(t, result)
        _tangents_to_base(t)
        return t
    _check_allowed(t)
    if t._extras is not None and t._extras.base is not None:
        return _inplace_on_view(t, fn, args, kw, name)
    if t._version_counter is None:
        t._version_counter = [0]
    old = _old_identity(t)
    _copy_tangents(t, old)
    result = fn(old, *args, **kw)
    if _is_wrapper(result):
        raise _vmap_inplace_error(name)
    if result._array.shape != t._array.shape:
        _write(t, result._array, name)  # raises the shape error
    _keep_if_saved(old, result, t._version_counter[0])
    _write(t, result._array, name)
    version = _bump(t)
    if result.op is None:  # the op did not record (e.g. not differentiable)
        return t
    t.op, t.inputs, t.params, t._saved_versions = result.op, result.inputs, result.params, result._saved_versions
    t._requires_grad = True
    ext = t._ensure_extras()
    ext.previous = old
    ext.rebased_at = version
    _carry_tangents(t, result)
    if not old._requires_grad and ext.views:
        views_follow_grad(t)
    return t


def _keep_if_saved(old: Tensor, result: Tensor, version: int) -> None:
    """When the new node's rule reads the old value (input 0), keep a copy of it with its
    own counter: the write is about to change the shared buffer."""
    saves = saved_inputs(result.op, result.inputs, result.params) if result.op is not None \
        else ()
    if saves is True or (saves and 0 in saves):
        old._array = old._array.copy()
        old._version_counter = [version]


def _inplace_on_view(t: Tensor, fn, args, kw, name: str) -> Tensor:
    """An in-place op on a view, while recording: the new values are written into the
    base (with ``index_put`` for views made by indexing, with the view op's
    ``write_back`` for reshape/permute/expand views), rebasing the base so its history
    sees the change, and the view becomes a fresh view of the rebased base."""
    ext = t._extras
    view_op, view_args, view_params = ext.view_call
    base, index = ext.base, view_args[1:]
    write_back = _write_back(ext.view_call, f"graphgrad: {name}", "a tensor")
    if t._version_counter is None:
        t._version_counter = [0]
    old = _old_identity(t)
    _copy_tangents(t, old)
    new_values = fn(old, *args, **kw)
    _keep_if_saved(old, new_values, t._version_counter[0])
    apply_inplace(base, write_back, new_values, name=name)
    fresh = view_op.apply(base, *index, **view_params)
    t.op, t.inputs, t.params, t._requires_grad = fresh.op, fresh.inputs, fresh.params, fresh._requires_grad
    if fresh.op is not None:
        t._saved_versions = fresh._saved_versions
    ext.previous, ext.rebased_at = old, t._version_counter[0]
    _carry_tangents(t, fresh)
    return t


def _has_tangents(x) -> bool:
    """Whether ``x`` carries a forward-AD tangent (then a write into it changes it)."""
    if not isinstance(x, Value) or x._extras is None:
        return False
    fresh_tangents(x)
    return bool(x._extras.tangents)


def fill_inplace(t: Tensor, value, name: str = "fill_") -> Tensor:
    """``t[...] = value`` (a number or a tensor broadcast to t's shape)."""
    from .compare import where
    if _is_wrapper(value) and not _is_wrapper(t):
        raise _vmap_inplace_error(name)
    if not _is_wrapper(t) and not (is_grad_enabled() and (t._requires_grad or needs_grad(value))) and \
            not _has_tangents(t) and not _has_tangents(value):
        _check_not_a_no_grad_view(t)
        src = value._array if isinstance(value, Value) else value
        if isinstance(value, Value) and xp.broadcast_shapes(src.shape, t._array.shape) \
                != t._array.shape:
            _write(t, xp.broadcast_to(src, xp.broadcast_shapes(src.shape, t._array.shape)), name)
        if not t._array.flags.writeable:
            _write(t, t._array, name)
        t._array[...] = src
        _bump(t)
        return t
    everywhere = _leaf(xp.ones(t._array.shape, xp.bool_))
    if isinstance(value, Value):
        value = value.to(t.dtype)
    return apply_inplace(t, lambda old, v: where(everywhere, v, old), value, name=name)
