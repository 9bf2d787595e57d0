"""Layer ``ops``: in-place ops (``add_``, ``x[i] = v``, ``zero_``...).

An in-place op runs the out-of-place op and writes its result into the tensor's
buffer, bumping the version counter that saved-tensor checks compare against. When
the graph is being recorded, the tensor is *rebased*: it becomes the node of the new
op, while its previous identity lives on as a separate node (``extras.previous``)
that the edges created before the change still lead to (``tensor.views``).

In-place writes go down the dispatch stack like every other op call: each mode's
``process_inplace`` sees the write first (vmap writes its batched tensors, forward
AD carries tangents: their rules live next to their ``process``), and the eager write
with reverse mode's bookkeeping, here, is the bottom of the stack.
"""

from __future__ import annotations

from collections.abc import Callable

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, Value, active_modes, is_grad_enabled
from graphgrad.tensor.creation import fitted_scalar
from graphgrad.tensor.views import (bump_version, old_identity, rebase, root_base,
                                    views_follow_grad)

from .arithmetic import needs_grad
from .base import broadcast_shapes, saved_inputs, scalar_name

__all__ = ["apply_inplace", "fill_inplace", "setitem_name", "check_allowed", "write_back_of",
           "keep_if_saved", "inplace_error_of_vmap"]


def apply_inplace(t: Tensor, fn: Callable, *args, name: str = "inplace", **kw) -> Tensor:
    """``t <- fn(t, *args, **kw)`` in place; returns ``t``. ``name`` is the op users
    called (``add_``), for errors."""
    modes = active_modes()
    if not modes:
        return _eager_inplace(t, fn, args, kw, name)
    return _through(modes, len(modes) - 1, t, fn, args, kw, name)


def _through(modes: tuple, i: int, t: Tensor, fn: Callable, args: tuple, kw: dict,
             name: str) -> Tensor:
    """The write as mode ``i`` sees it; ``below`` hands it to the modes under it."""
    if i < 0:
        if not getattr(t, "symbolic", False) and any(getattr(a, "symbolic", False)
                                                     for a in args):
            _refuse_graph_value(t, name)
        return _eager_inplace(t, fn, args, kw, name)
    return modes[i].process_inplace(
        t, fn, args, kw, name, lambda f: _through(modes, i - 1, t, f, args, kw, name))


def _refuse_graph_value(t: Tensor, name: str) -> None:
    """A graph value (a Symbol: it exists only when its graph runs) written into an eager
    tensor that no mode captured: the write would store the Symbol's stand-in, silently."""
    raise RuntimeError(
        f"{name}: the value written into this eager tensor (shape {list(t._array.shape)}, "
        f"{t._array.dtype}) is a graph node, which has a value only when its graph runs; "
        f"an in-place write into a tensor outside the graph cannot take it. In a static "
        f"graph, hold the state in a static.Variable and write it with assign(), run by the "
        f"Session (as TF1's UPDATE_OPS); for a module, call it in eval mode (module.eval()) "
        f"or with track_running_stats=False so that no buffer is written")


def check_allowed(t: Tensor) -> None:
    """PyTorch's errors for writing into a leaf that requires grad (or a view of one)."""
    if t._requires_grad and t.op is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    base = root_base(t)
    if base is not None and base._requires_grad and base.op is None:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in "
                           "an in-place operation.")


def _check_not_a_no_grad_view(t: Tensor) -> None:
    """An in-place op with grad mode on, on a view that does not require grad of a base that
    does (the view was made under no_grad): PyTorch forbids it as ambiguous."""
    if t._requires_grad or not is_grad_enabled():
        return
    base = root_base(t)
    if base is not None and base._requires_grad:
        raise RuntimeError(
            "A view was created in no_grad mode and is being modified inplace with grad mode "
            "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. "
            "You can clarify your code by moving both the view and the inplace either both "
            "inside the no_grad block (if you don't want the inplace to be tracked) or both "
            "outside (if you want the inplace to be tracked).")


def _write(t: Tensor, arr, name: str) -> None:
    if arr.shape != t._array.shape:
        raise RuntimeError(f"{name}: output with shape {list(t._array.shape)} doesn't match the "
                           f"broadcast shape {list(arr.shape)}")
    if not xp.can_cast(arr.dtype, t._array.dtype, "same_kind"):
        raise RuntimeError(f"result type {scalar_name(arr.dtype)} can't be cast to the desired "
                           f"output type {scalar_name(t._array.dtype)}")
    if not t._array.flags.writeable:
        raise RuntimeError(f"{name}: unsupported operation: the tensor's memory is read-only "
                           "(it is an expanded view, or windows that overlap); clone() it first")
    t._array[...] = arr


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

# the in-place ops whose vmap error PyTorch words as "inplace arithmetic" (fill_ is not
# one: PyTorch names it)
_ARITHMETIC = {"add_", "sub_", "mul_", "div_", "pow_", "neg_", "true_divide_", "copy_",
               "zero_", "inplace"}


def inplace_error_of_vmap(name: str) -> RuntimeError:
    """vmap's error for writing a batched value into a tensor not batched at its level
    (worded here because it depends on which in-place op it was)."""
    if name in _ARITHMETIC:
        return RuntimeError(_VMAP_INPLACE)
    return RuntimeError(_VMAP_INPLACE_NAMED.format(name=name))


def write_back_of(view_call: tuple, what: str, of: str) -> Callable:
    """``(base, values) -> new base`` for a view made by ``view_call`` = (op, args,
    params): ``index_put`` for views made by indexing, the view op's ``write_back`` for
    the others."""
    from .index import Getitem, IndexPut
    view_op, view_args, view_params = view_call
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


def setitem_name(index, value, result_shape: Callable[[], tuple]) -> str:
    """The in-place op PyTorch runs for ``x[index] = value``, as its errors (vmap's
    among them) name it: ``index_put_`` when the index holds tensors or lists (batched
    tensors too; unbatched 0-d integer tensors select like ints, Python bools add a dim);
    otherwise the indexing result is a view that ``copy_`` writes, or ``fill_`` when a
    0-d value meets a result of another shape (PyTorch's ``copy_to``).
    ``result_shape()`` is the indexing result's shape."""
    modes = active_modes()
    for i in index if isinstance(index, tuple) else (index,):
        if isinstance(i, (list, xp.ndarray)) or isinstance(i, Value) and (
                i.ndim or i._array.dtype == xp.bool_ or any(m.batches(i) for m in modes)):
            return "index_put_"
    if isinstance(value, Value) and value.ndim == 0 and tuple(result_shape()) != ():
        return "fill_"
    return "copy_"


def _eager_inplace(t: Tensor, fn: Callable, args: tuple, kw: dict, name: str) -> Tensor:
    """The write itself, at the bottom of the dispatch stack, with reverse mode's
    bookkeeping when the graph is recorded."""
    recording = is_grad_enabled() and (t._requires_grad or any(needs_grad(a) for a in args))
    if not recording:
        _check_not_a_no_grad_view(t)
        if fn is _fill:  # no mode changed the fill: write the value directly
            _fill_array(t, args[0], name)
        else:
            _write(t, fn(t, *args, **kw)._array, name)
        bump_version(t)
        return t
    check_allowed(t)
    if t._extras is not None and t._extras.base is not None:
        return _inplace_on_view(t, fn, args, kw, name)
    if t._version_counter is None:
        t._version_counter = [0]
    old = old_identity(t)
    result = fn(old, *args, **kw)
    if result.op is None and old._requires_grad:
        # a result that is not differentiable (eq_, logical_not_...): as in PyTorch, the
        # tensor keeps requiring grad, and its gradient through the write is zero
        result = _fill(old, result)
    if result._array.shape != t._array.shape:
        _write(t, result._array, name)  # raises the shape error
    keep_if_saved(old, result, t._version_counter[0])
    _write(t, result._array, name)
    bump_version(t)
    if result.op is None:  # the op did not record (e.g. not differentiable)
        return t
    had_grad = old._requires_grad
    rebase(t, result, old)
    t._requires_grad = True
    if not had_grad and t._extras.views:
        views_follow_grad(t)
    return t


def keep_if_saved(old: Tensor, result: Tensor, version: int) -> None:
    """When the new node's rule reads the old value (input 0), keep a copy of it with its
    own counter: the write is about to change the shared buffer."""
    saves = saved_inputs(result.op, result.inputs, result.params) if result.op is not None \
        else ()
    if saves is True or (saves and 0 in saves):
        old._array = old._array.copy()
        old._version_counter = [version]


def _inplace_on_view(t: Tensor, fn: Callable, args: tuple, kw: dict, name: str) -> Tensor:
    """An in-place op on a view, while recording: the new values are written into the
    base (with ``index_put`` for views made by indexing, with the view op's
    ``write_back`` for reshape/permute/expand views), rebasing the base so its history
    sees the change, and the view becomes a fresh view of the rebased base."""
    ext = t._extras
    view_op, view_args, view_params = ext.view_call
    base = ext.base
    write_back = write_back_of(ext.view_call, f"graphgrad: {name}", "a tensor")
    if t._version_counter is None:
        t._version_counter = [0]
    old = old_identity(t)
    new_values = fn(old, *args, **kw)
    keep_if_saved(old, new_values, t._version_counter[0])
    apply_inplace(base, write_back, new_values, name=name)
    rebase(t, view_op.apply(base, *view_args[1:], **view_params), old)
    return t


def _fill(old: Tensor, value) -> Tensor:
    """The new value of a tensor filled with ``value`` (a number or a tensor that
    broadcasts to its shape), as an op on the old value the graph can record."""
    from .compare import where
    everywhere = Tensor._make(xp.ones(old._array.shape, xp.bool_))
    if isinstance(value, Value):
        value = value.to(old.dtype)
    return where(everywhere, value, old)


def _fill_array(t: Tensor, value, name: str) -> None:
    src = value._array if isinstance(value, Value) else value
    if isinstance(value, Value) and broadcast_shapes(name, t._array.shape, src.shape) \
            != t._array.shape:
        _write(t, xp.broadcast_to(src, xp.broadcast_shapes(src.shape, t._array.shape)), name)
    if not t._array.flags.writeable:
        _write(t, t._array, name)  # raises the read-only error
    with xp.errstate(invalid="ignore"):  # NaN into an int tensor: INT_MIN, silently as in PyTorch
        t._array[...] = src


def fill_inplace(t: Tensor, value, name: str = "fill_") -> Tensor:
    """``t[...] = value`` (a number or a tensor broadcast to t's shape)."""
    value = fitted_scalar(value, t._array.dtype)
    return apply_inplace(t, _fill, value, name=name)
