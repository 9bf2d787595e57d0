"""Layer ``tensor``: ``Value``, the graph node, and ``Tensor``, the user's class.

A ``Value`` is one node of the computational graph, as in the lecture's homework:
the op that created it (``op``, None for a leaf), its ``inputs`` (Values and Python
scalars) with the op's keyword ``params``, and its cached array. ``Tensor`` adds the
user-facing API. ``record`` is the one place a node is added to the graph.

Ops install the arithmetic methods on Tensor (layer ``ops``); ``backward`` reaches
the ``autograd`` layer lazily. Those are the two documented upward edges.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any
from collections.abc import Callable

from graphgrad.backend import dtype as _dtype
from graphgrad.backend import from_numpy_dtype, xp
from graphgrad.backend import get_default_dtype as _default_dtype

from .device import device as _device

__all__ = ["Value", "Tensor", "Extras", "record", "Size", "mark_view", "refresh_if_stale",
           "views_follow_grad"]


_CPU = _device("cpu")  # what every tensor's .device is


class Size(tuple):
    """``tensor.shape``: a tuple that prints like ``torch.Size([2, 3])``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"graphgrad.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    # slices and concatenations stay Sizes, as torch.Size's
    def __getitem__(self, i):
        out = tuple.__getitem__(self, i)
        return Size(out) if isinstance(i, slice) else out

    def __add__(self, other) -> Size:
        return Size(tuple.__add__(self, tuple(other)))

    def __radd__(self, other) -> Size:
        return Size(tuple(other) + tuple(self))

    def __mul__(self, n) -> Size:
        return Size(tuple.__mul__(self, n))

    __rmul__ = __mul__


class Extras:
    """Rarely-needed per-node state, kept out of the hot slots: hooks, ``retain_grad``,
    the identity a tensor had before an in-place op rebased it, forward-AD tangents."""

    __slots__ = ("hooks", "post_hooks", "retains_grad", "previous", "rebased_at", "base", "view_call",
                 "tangents", "tangents_at", "own_tangents", "views")

    def __init__(self):
        self.hooks: list | None = None
        self.post_hooks: list | None = None
        self.retains_grad = False
        self.previous: Value | None = None   # the node this tensor was before an in-place op
        self.rebased_at = 0                    # version at which this identity became current
        self.base: Value | None = None   # for views: the tensor they look into
        self.view_call: tuple | None = None   # ... and how: (op, args, params) of the view op
        self.tangents: dict | None = None      # forward-AD tangents, keyed by their level
        # for views: the version their tangents were derived from the base's at, and the
        # levels where the tangent is the view's own (make_dual), not the base's seen
        # through the view
        self.tangents_at = -1
        self.own_tangents: set | None = None
        # weak references to the views of this tensor that do not require grad: an
        # in-place op that makes it require grad makes them require grad too
        self.views: list | None = None


class Value:
    """A node of the computational graph: creator op, inputs, params, cached array."""

    __slots__ = ("_array", "op", "inputs", "params", "_requires_grad", "_grad", "_version_counter", "_extras", "_saved_versions",
                 "__weakref__")

    def _ensure_extras(self) -> Extras:
        e = self._extras
        if e is None:
            e = self._extras = Extras()
        return e

    @property
    def _version(self) -> int:
        vc = self._version_counter
        return 0 if vc is None else vc[0]


def record(op, args: tuple, params: dict, out) -> Tensor:
    """Make the output tensor of ``op`` as a graph node that requires grad."""
    t = Tensor.__new__(Tensor)
    t._array = out
    t.op = op
    t.inputs = args
    t.params = params
    t._requires_grad = True
    t._grad = None
    t._version_counter = None
    t._extras = None
    # Versions of the inputs as this node saw them: backward checks them against
    # in-place changes. None stands for "all zero", the common case.
    sv = None
    for a in args:
        if isinstance(a, Value) and a._version_counter is not None:
            sv = _versions(args)
            break
    t._saved_versions = sv
    if op.view:
        mark_view(t, op, args, params)
    return t


def _versions(args: tuple) -> tuple:
    """The inputs' versions as a new node sees them. An input that is a view whose base
    changed in place since the view's history was made (through the base or another
    view of it) first gets a fresh history, so the new node's gradient goes through
    that change (PyTorch regenerates the view's grad_fn the same way)."""
    for a in args:
        if isinstance(a, Value) and a._extras is not None:
            refresh_if_stale(a)
    return tuple(a._version_counter[0] if isinstance(a, Value) and a._version_counter is not None else 0 for a in args)


def mark_view(t: Value, op, args: tuple, params: dict) -> None:
    """When a view op's result shares memory with its input, it shares the input's
    version counter (in-place writes through either are seen by saved-tensor checks)
    and remembers how it looks into it (in-place ops on views update the base) and at
    which version of the base its history was made."""
    base = args[0]
    if xp.may_share_memory(t._array, base._array):
        if base._version_counter is None:
            base._version_counter = [0]
        t._version_counter = base._version_counter
        ext = t._ensure_extras()
        ext.base = base
        ext.view_call = (op, args, params)
        ext.rebased_at = ext.tangents_at = base._version_counter[0]
        if not t._requires_grad:
            _register_view(base, t)


def _register_view(base: Value, view: Value) -> None:
    """Remember ``view`` (weakly) on ``base``; dead entries are dropped each time the
    list reaches a power of two, so a loop of temporary views costs O(1) each."""
    e = base._ensure_extras()
    views = e.views
    if views is None:
        views = e.views = []
    views.append(weakref.ref(view))
    n = len(views)
    if n >= 32 and not n & (n - 1):
        views[:] = [r for r in views if r() is not None]


def views_follow_grad(base: Value) -> None:
    """``base`` was just made to require grad by an in-place op: its views made before,
    which did not require grad, now do, with a fresh history (the view op applied to
    the base as it is now), as in PyTorch, where their grad_fn becomes a view replay of
    the base. Views of those views follow too."""
    stack = [base]
    while stack:
        e = stack.pop()._extras
        if e is None or not e.views:
            continue
        views, e.views = e.views, None
        for ref in views:
            v = ref()
            if v is not None and not v._requires_grad and v._extras.base is not None:
                refresh_view(v)
                stack.append(v)


def refresh_if_stale(t: Value) -> None:
    """Give view ``t`` a fresh history when its base changed in place since its history
    was made, as PyTorch regenerates a view's grad_fn when it is read: ``grad_fn``,
    ``backward`` and ``autograd.grad`` then see the change."""
    e = t._extras
    if e is not None and e.base is not None and t._requires_grad and t._version_counter is not None \
            and e.rebased_at != t._version_counter[0]:
        refresh_view(t)


def old_identity(t: Tensor) -> Tensor:
    """A node standing for ``t`` as it was: same op, inputs and buffer, same counter (an
    in-place op, or a view's fresh history, rebases ``t`` and keeps this as ``ext.previous``
    for the edges made before)."""
    old = Tensor.__new__(Tensor)
    old._array = t._array
    old.op = t.op
    old.inputs = t.inputs
    old.params = t.params
    old._requires_grad = t._requires_grad
    old._grad = None
    old._version_counter = t._version_counter
    old._extras = None
    if t.op is not None:
        old._saved_versions = t._saved_versions
    if t._extras is not None:
        e = old._ensure_extras()
        e.previous, e.rebased_at, e.base = t._extras.previous, t._extras.rebased_at, t._extras.base
    return old


def refresh_view(v: Tensor) -> None:
    """Rebase view ``v`` onto its base as the base is now: the view op applied again."""
    ext = v._extras
    view_op, view_args, params = ext.view_call
    old = old_identity(v)
    fresh = view_op.apply(ext.base, *view_args[1:], **params)
    v.op, v.inputs, v.params, v._requires_grad = fresh.op, fresh.inputs, fresh.params, fresh._requires_grad
    if fresh.op is not None:
        v._saved_versions = fresh._saved_versions
    ext.previous, ext.rebased_at = old, v._version_counter[0]


def _leaf(array, requires_grad: bool = False) -> Tensor:
    t = Tensor.__new__(Tensor)
    t._array = array
    t.op = None
    t.inputs = ()
    t.params = None
    t._requires_grad = requires_grad
    t._grad = None
    t._version_counter = None
    t._extras = None
    return t


class Tensor(Value):
    """A multi-dimensional array that records how it was computed.

    Create one with ``graphgrad.tensor(data, dtype=None, requires_grad=False)``.
    """

    __slots__ = ()
    __array_priority__ = 1000  # ndarray OP tensor defers to Tensor's reflected method

    def __init__(self, data: Any = None, *size: int, dtype=None, requires_grad: bool = False):
        """PyTorch's legacy constructor: ``Tensor([1, 2])`` is a float tensor of the default
        dtype, ``Tensor(2, 3)`` a (2, 3) one (zeros: PyTorch leaves it uninitialised). An
        array or tensor keeps its dtype (graphgrad wraps arrays with it)."""
        from .creation import as_array  # tensor(...)'s conversion rules, in one place
        if isinstance(data, int) and not isinstance(data, bool) or size:
            dims = (data, *size) if data is not None else size
            if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
                raise TypeError(f"Tensor(): sizes must be ints, got {dims}")
            data = xp.zeros(dims, dtype if dtype is not None else _default_dtype().np)
        elif dtype is None and not isinstance(data, (xp.ndarray, xp.generic, Value)):
            dtype = _default_dtype()
        self._array = as_array(data if data is not None else [], dtype)
        self.op = None
        self.inputs = ()
        self.params = None
        self._requires_grad = False
        self._grad = None
        self._version_counter = None
        self._extras = None
        if requires_grad:
            self.requires_grad_(True)

    # ---- metadata -------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._array.shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return Size(self._array.shape)
        return self._array.shape[dim]

    @property
    def dtype(self) -> _dtype:
        return from_numpy_dtype(self._array.dtype)

    @property
    def ndim(self) -> int:
        return self._array.ndim

    def dim(self) -> int:
        return self._array.ndim

    ndimension = dim

    def numel(self) -> int:
        return int(self._array.size)

    nelement = numel

    def element_size(self) -> int:
        return self._array.itemsize

    def is_floating_point(self) -> bool:
        return self._array.dtype.kind == "f"

    def is_complex(self) -> bool:
        return self._array.dtype.kind == "c"

    @property
    def device(self) -> str:
        return _CPU

    @property
    def is_cuda(self) -> bool:
        return False

    def __len__(self) -> int:
        if self._array.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._array.shape[0]

    def __hash__(self) -> int:  # __eq__ is elementwise; identity hashing as in PyTorch
        return id(self)

    # ---- conversion -----------------------------------------------------------
    def numpy(self, *, force: bool = False):
        if self._requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        return self._array

    def __array__(self, dtype=None, copy=None):
        if self._requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        a = self._array
        return a if dtype is None else a.astype(dtype, copy=False)

    def item(self):
        if self._array.size != 1:
            raise RuntimeError(f"a Tensor with {self._array.size} elements cannot be converted "
                               "to Scalar")
        return self._array.reshape(()).item()

    def tolist(self):
        return self._array.tolist()

    def _scalar(self, kind: str):
        if self._array.size != 1:
            raise RuntimeError(f"a Tensor with {self._array.size} elements cannot be converted "
                               "to Scalar" if kind != "bool" else
                               "Boolean value of Tensor with more than one value is ambiguous")
        return self._array.reshape(()).item()

    def __bool__(self) -> bool:
        top = _interp()
        if top is not None and hasattr(top, "to_python"):
            return bool(top.to_python(self, "bool"))
        return bool(self._scalar("bool"))

    def __float__(self) -> float:
        top = _interp()
        if top is not None and hasattr(top, "to_python"):
            return float(top.to_python(self, "float"))
        return float(self._scalar("float"))

    def __int__(self) -> int:
        top = _interp()
        if top is not None and hasattr(top, "to_python"):
            return int(top.to_python(self, "int"))
        return int(self._scalar("int"))

    def __index__(self) -> int:
        if self._array.dtype.kind not in "iub" or self._array.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self._array.reshape(()).item())

    def __iter__(self):
        if self._array.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._array.shape[0]))

    def __repr__(self) -> str:
        from .format import tensor_repr
        return tensor_repr(self)

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        """As PyTorch: a 0-d tensor formats as its number (``f"{loss}"`` is ``1.5``), any
        other as ``str`` (and a format spec is an error)."""
        if self._array.ndim == 0 and type(self) is Tensor:
            return format(self.item(), spec)
        return object.__format__(self, spec)

    # ---- autograd state -------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        refresh_if_stale(self)
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        if self.op is not None:
            msg = "you can only change requires_grad flags of leaf variables."
            if not flag:
                msg += (" If you want to use a computed variable in a subgraph that doesn't "
                        "require differentiation use var_no_grad = var.detach().")
            raise RuntimeError(msg)
        if flag and self._array.dtype.kind not in "fc":
            raise RuntimeError("only Tensors of floating point and complex dtype can require "
                               "gradients")
        self._requires_grad = bool(flag)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if self.op is not None and not requires_grad:
            self.requires_grad = requires_grad  # raises PyTorch's message
        if requires_grad and self._array.dtype.kind not in "fc":
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if self.op is None:
            self._requires_grad = bool(requires_grad)
        return self

    @property
    def is_leaf(self) -> bool:
        return self.op is None

    @property
    def grad(self) -> Tensor | None:
        g = self._grad
        if g is None and self.op is not None and self._requires_grad and not (
                self._extras is not None and self._extras.retains_grad):
            warnings.warn(
                "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. "
                "Its .grad attribute won't be populated during autograd.backward(). If you "
                "indeed want the .grad field to be populated for a non-leaf Tensor, use "
                ".retain_grad() on the non-leaf Tensor. If you access the non-leaf Tensor by "
                "mistake, make sure you access the leaf Tensor instead.", UserWarning,
                stacklevel=2)
        return g

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad "
                                f"of type {type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(f"attempting to assign a gradient of size "
                                   f"'{list(value.shape)}' to a tensor of size "
                                   f"'{list(self.shape)}'. Please ensure that the gradient and "
                                   f"the tensor are the same size")
        self._grad = value

    @property
    def retains_grad(self) -> bool:
        return self._extras is not None and self._extras.retains_grad

    def retain_grad(self) -> None:
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.op is not None:
            self._ensure_extras().retains_grad = True

    @property
    def grad_fn(self):
        refresh_if_stale(self)
        if self.op is None:
            return None
        return BackwardNode(self)

    def register_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(grad) -> Tensor | None`` runs when the gradient w.r.t. this tensor is
        computed; a returned tensor replaces the gradient."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        ext = self._ensure_extras()
        if ext.hooks is None:
            ext.hooks = []
        ext.hooks.append(hook)
        return RemovableHandle(ext.hooks, hook)

    def register_post_accumulate_grad_hook(self, hook: Callable) -> RemovableHandle:
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.op is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        ext = self._ensure_extras()
        if ext.post_hooks is None:
            ext.post_hooks = []
        ext.post_hooks.append(hook)
        return RemovableHandle(ext.post_hooks, hook)

    def detach(self) -> Tensor:
        """A new leaf sharing storage and version counter, outside the graph."""
        t = _leaf(self._array)
        if self._version_counter is None:
            self._version_counter = [0]
        t._version_counter = self._version_counter
        return t

    def detach_(self) -> Tensor:
        if self._extras is not None and self._extras.base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self.op = None
        self.inputs = ()
        self.params = None
        self._requires_grad = False
        return self

    @property
    def data(self) -> Tensor:
        """The array behind this tensor as a new leaf (own version counter: changes
        through ``.data`` are invisible to autograd, as in PyTorch)."""
        return _leaf(self._array)

    @data.setter
    def data(self, value: Tensor) -> None:
        self._array = value._array if isinstance(value, Value) else xp.asarray(value)

    def backward(self, gradient=None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs=None) -> None:
        """Compute the gradient of this tensor w.r.t. graph leaves (see
        ``graphgrad.autograd.backward``)."""
        from graphgrad.autograd import backward  # the documented lazy upward edge
        backward(self, gradient, retain_graph, create_graph, inputs=inputs)


def _interp():
    from .dispatch import current_interpreter
    return current_interpreter()


class RemovableHandle:
    """Returned by ``register_hook``; ``remove()`` takes the hook out again."""

    __slots__ = ("_hooks", "_hook")

    def __init__(self, hooks: list, hook: Callable):
        self._hooks = hooks
        self._hook = hook

    def remove(self) -> None:
        try:
            self._hooks.remove(self._hook)
        except ValueError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def op_backward_name(op) -> str:
    return f"{op.__name__}Backward0"


class BackwardNode:
    """What ``tensor.grad_fn`` returns: a view of the node from autograd's side, named
    like PyTorch's (``MulBackward0``) with ``next_functions``."""

    __slots__ = ("_value",)

    def __init__(self, value: Value):
        self._value = value

    def name(self) -> str:
        return op_backward_name(self._value.op)

    @property
    def next_functions(self) -> tuple:
        out = []
        for a in self._value.inputs:
            if not isinstance(a, Value) or not a._requires_grad:
                out.append((None, 0))
            elif a.op is None:
                out.append((AccumulateGrad(a), 0))
            else:
                out.append((BackwardNode(a), 0))
        return tuple(out)

    @property
    def metadata(self) -> dict:
        return {}

    def __eq__(self, other) -> bool:
        return isinstance(other, BackwardNode) and other._value is self._value

    def __hash__(self) -> int:
        return id(self._value)

    def __repr__(self) -> str:
        return f"<{self.name()} object at {hex(id(self._value))}>"


class AccumulateGrad:
    """The node a leaf's gradient lands in (``next_functions`` shows it)."""

    __slots__ = ("variable",)

    def __init__(self, variable: Value):
        self.variable = variable

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    @property
    def next_functions(self) -> tuple:
        return ()  # a leaf's node leads nowhere (graph walkers iterate it)

    def __repr__(self) -> str:
        return f"<AccumulateGrad object at {hex(id(self.variable))}>"
