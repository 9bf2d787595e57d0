"""Layer ``graph``: ``Symbol``, the symbolic tensor that stands for one node of a Graph.

Like vmap's BatchedTensor, it is a Tensor whose ``_array`` is a zero-stride stand-in
(unknown dims stand in as 1) so that code reading metadata works; its values exist
only when the graph runs. ``shape`` reports unknown dims as None. Used outside a
graph builder, a Symbol's Tensor methods activate its own graph's builder, so
``x + 1`` or ``x.sum()`` on a placeholder always add nodes (TF1's "ops are only added").
"""

from __future__ import annotations

import functools

from graphgrad.backend import stand_in, xp
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Size, Tensor
from graphgrad.tensor.modes import Mode, current_mode

from .node import Node
from .spec import Spec
from .spec import tf_dtype_name, tf_shape

__all__ = ["Symbol", "symbol"]

_BOOL = ("Using a `tf.Tensor` as a Python `bool` is not allowed. Use `if t is not None:` "
         "instead of `if t:` to test if a tensor is defined, and use TensorFlow ops such as "
         "tf.cond to execute subgraphs conditioned on the value of a tensor.")


class StandIn(xp.ndarray):
    """The stand-in array: metadata only. NumPy math on it is a bug (a Symbol reached
    eager code): say so instead of computing on zeros."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        raise TypeError(f"a symbolic tensor (graph node) reached eager NumPy code "
                        f"({ufunc.__name__}); build it inside its graph")

    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ in ("shape", "ndim", "size", "result_type", "may_share_memory",
                             "broadcast_to", "shares_memory"):
            return super().__array_function__(func, types, args, kwargs)
        raise TypeError(f"a symbolic tensor (graph node) reached eager NumPy code "
                        f"({func.__name__}); build it inside its graph")


def _stand_in(spec) -> xp.ndarray:
    shape = tuple(1 if d is None else d for d in (spec.shape or ()))
    return stand_in(shape, spec.dtype, own=True).view(StandIn)


class Symbol(Tensor):
    """A symbolic tensor: the value of ``_node`` once its graph runs."""

    __slots__ = ("_node",)
    symbolic = True   # its value exists only when the graph runs (ops/shape.run_time_size)

    @property
    def shape(self) -> Size | None:
        """The static shape: None for an unknown dim; None itself for an unknown rank.
        While graph differentiation runs a vjp rule (``GraphBuilder.sizes_at_run_time``),
        an unknown dim is a 0-d int64 Symbol instead, read from the value at run time, so
        that a rule which needs the size builds graph ops with it."""
        shape = self._node.spec.shape
        if shape is None:
            return None
        if any(d is None for d in shape):
            mode = current_mode()
            if getattr(mode, "run_time_sizes", False) and mode.graph is self._node.graph:
                return mode.sizes_of(self._node)
        return Size(shape)

    def numel(self):
        """The number of elements: an int, or (in a vjp rule, as ``shape``) a Symbol. A
        dim known only at run time has no int: say so (the stand-in's count is wrong).
        Of an unknown rank, the stand-in's (jit.script notes the read, needs_rank)."""
        shape = self.shape
        if shape is None:
            return Tensor.numel(self)
        if any(d is None for d in shape):
            raise TypeError(f"numel of the symbolic tensor {self!r} is known only at run "
                            f"time; use static.size(x) for it as a tensor of the graph")
        return shape.numel()

    nelement = numel

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    @property
    def ndim(self) -> int:
        """The rank. Ops normalize ``dim=-1`` against it when the node is built, so an
        unknown rank raises here: answering 0 (the stand-in's) would build a wrong node."""
        shape = self._node.spec.shape
        if shape is None:
            raise ValueError(
                f"the rank of '{self._node.name}' is unknown, and this op needs it (to place "
                f"a dim such as -1, or to check its arguments); give the placeholder a "
                f"shape, e.g. shape=(None, None) for a matrix of unknown size")
        return len(shape)

    def dim(self) -> int:
        return self.ndim

    ndimension = dim

    @property
    def graph(self):
        return self._node.graph

    @property
    def node(self) -> Node:
        return self._node

    @property
    def name(self) -> str:
        return f"{self._node.name}:0"

    @property
    def op_name(self) -> str:
        return self._node.name

    def get_shape(self):
        return self.shape

    def __repr__(self) -> str:
        s = self._node.spec
        return (f'Tensor("{self.name}", shape={tf_shape(s.shape)}, '
                f"dtype={xp.dtype(s.dtype).name})") if s is not None else \
            f'<Operation "{self._node.name}">'

    __str__ = __repr__

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self):
        raise TypeError(_BOOL)

    def item(self):
        raise TypeError(f"{self!r} is symbolic: its value exists only when the graph runs "
                        f"(use Session.run)")

    def numpy(self, *, force: bool = False):
        return self.item()

    tolist = item
    __float__ = item
    __int__ = item
    __index__ = item

    def __array__(self, dtype=None, copy=None):
        return self.item()

    def __len__(self) -> int:
        d = self.shape[0] if self.shape else None  # unknown rank or dim: no len
        if d is None:
            raise TypeError(f"len is not well defined for a symbolic tensor of shape "
                            f"{tf_shape(self.shape)}")
        return d

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def detach(self) -> Symbol:
        """Stop-gradient as a ``Detach`` node (Tensor.detach makes an eager leaf, which
        for a Symbol would freeze its stand-in array into the graph)."""
        from .builder import building
        with building(self._node.graph):
            return REGISTRY["Detach"].apply(self)

    @property
    def data(self) -> Symbol:
        return self.detach()

    # A graph's values have no memory layout (its in-place writes are functional), so
    # eager's copy of a strided tensor is the value itself here.
    def contiguous(self, memory_format=None) -> Symbol:
        return self

    def is_contiguous(self, memory_format=None) -> bool:
        return True

    @property
    def dtype_name(self) -> str:
        return tf_dtype_name(self._node.spec.dtype)

    def eval(self, feed_dict=None, session=None):
        if session is None:
            raise ValueError("Cannot evaluate tensor using `eval()`: No default session is "
                             "registered. Use `with sess.as_default()` or pass an explicit "
                             "session to `eval(session=sess)`")
        return session.run(self, feed_dict=feed_dict)


def symbol(node: Node, cls: type = Symbol) -> Symbol:
    """The Symbol of a node (a fresh wrapper: Symbols are cheap views of nodes)."""
    spec = node.spec if isinstance(node.spec, Spec) else None
    t = cls._make(_stand_in(spec) if spec is not None else _stand_in_none())
    t._node = node
    return t


def _stand_in_none():
    return stand_in((), xp.float32, own=True).view(StandIn)


_SKIP = {"__init__", "__new__", "__repr__", "__str__", "__hash__", "__bool__", "__array__",
         "__len__", "__iter__", "__getattribute__", "__setattr__", "__getattr__",
         "__init_subclass__", "__class__", "__reduce__", "__reduce_ex__", "__sizeof__",
         "__dir__", "__format__", "__subclasshook__", "__delattr__", "__array_priority__",
         "_ensure_extras", "_make", "_init", "item", "numpy", "tolist", "__float__", "__int__",
         "__index__",
         "size", "eval", "__deepcopy__", "__copy__", "dim", "__eq__", "__ne__"}


def _activating(name: str, fn):
    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        from .builder import building
        with building(self._node.graph):
            return fn(self, *args, **kwargs)
    return method


def _install() -> None:
    """Wrap Tensor's methods so that a Symbol used outside a builder activates its own."""
    for name in dir(Tensor):
        if name in _SKIP or name in Symbol.__dict__:
            continue
        attr = getattr(Tensor, name, None)
        if callable(attr) and not isinstance(attr, type):
            setattr(Symbol, name, _activating(name, attr))
    for name in ("__eq__", "__ne__"):  # elementwise comparisons build nodes too
        attr = getattr(Tensor, name)
        setattr(Symbol, name, _activating(name, attr))
    Symbol.__hash__ = lambda self: id(self)


_install()


# ``t += 1`` on a graph value: a graph's values are immutable, so Python's meaning for
# immutable operands (TF1's for its tensors) applies, and the name is rebound to a new node.
# Writing in place instead would go to the stand-in array (an error, or a silent no-op).
# Only a capture that handles writes itself (Dynamo's functionalizing builder overrides
# ``process_inplace``) keeps PyTorch's in-place meaning, which other references observe.
_COMPOUND = {"__iadd__": "__add__", "__isub__": "__sub__", "__imul__": "__mul__",
             "__itruediv__": "__truediv__", "__ipow__": "__pow__",
             "__ifloordiv__": "__floordiv__", "__imod__": "__mod__", "__iand__": "__and__",
             "__ior__": "__or__", "__ixor__": "__xor__", "__imatmul__": "__matmul__"}


def _compound(name: str, plain: str):
    in_place, out_of_place = getattr(Symbol, name, None), getattr(Symbol, plain)

    def method(self, other):
        top = current_mode()
        owns = getattr(top, "owns_graph", None)   # a graph builder's
        if owns is not None and type(top).process_inplace is not Mode.process_inplace \
                and in_place is not None and owns(self._node.graph):
            return in_place(self, other)
        return out_of_place(self, other)
    method.__name__ = name
    return method


for _name, _plain in _COMPOUND.items():
    setattr(Symbol, _name, _compound(_name, _plain))
