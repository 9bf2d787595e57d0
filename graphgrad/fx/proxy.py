"""Layer ``fx``: ``Proxy``, the value a symbolically traced function computes on.

A Proxy is a ``graph.Symbol`` (so every graphgrad op, tensor method and operator
applied to it goes through the dispatch stack to the ``Tracer`` and becomes a node)
with torch.fx's behaviour where Python needs a concrete value: ``bool(proxy)``
(``if``, ``while``, ``and``/``or``, ``assert``) and ``iter(proxy)`` (``for``, ``a, b =
proxy``, ``*proxy``) raise ``TraceError``; ``len(proxy)`` raises torch's RuntimeError.
(torch.fx 2.x reads the caller's bytecode and lets ``a, b = proxy`` through as
``proxy[0], proxy[1]``; the lecture's table, which graphgrad follows, has symbolic
tracing fail at ``n, m = x.shape``, so here every iteration raises.) In-place ops on a
Proxy raise too: the IR is functional, and rebinding silently would break aliasing.

``x.shape`` and ``x.size()`` in the user's code are Proxies too (a ``shape`` node), so
``x.shape[0]`` is a node and ``x.reshape(x.shape[0], -1)`` stays symbolic. graphgrad's
own functions (``softmax``, ``flatten``...) read the static metadata instead, and only
what is known: the rank, and a size where the graph is traced for the example's sizes.
Reading an unknown one (no example inputs; sizes left open) raises a TraceError that
says so rather than guess; with example inputs, ``symbolic_trace`` then traces again for
the examples' exact shapes. ``ProxyArray`` applies the same rule to code that reads the
metadata off the stand-in array.
"""

from __future__ import annotations

import inspect
import sys
import types
from math import prod

from graphgrad.backend import xp
from graphgrad.graph import Spec, Symbol
from graphgrad.graph.symbol import StandIn  # the Symbol stand-in a Proxy's refines
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Size

from .errors import UnknownShapeError, in_graphgrad, trace_error
from .python_calls import catching_method

__all__ = ["Proxy", "ProxyArray"]

_I64 = xp.dtype(xp.int64)
_LEN = ("'len' is not supported in symbolic tracing by default. If you want this call to be "
        "recorded, please call graphgrad.fx.wrap('len') at module scope")


def _unknown(proxy: Proxy, what: str) -> UnknownShapeError:
    return trace_error(
        f"the {what} of {proxy!r} is not known to symbolic tracing, and graphgrad code needs "
        f"it here (graphgrad records ops with their shape rules, where torch.fx records "
        f"Python calls); pass example inputs, symbolic_trace(fn, example_inputs=(...)), so "
        f"that the inputs' ranks are known (a leaf module's output rank is found from its "
        f"input's shape; where sizes are needed, the graph is traced for the example's)",
        UnknownShapeError)


class ProxyArray(StandIn):
    """A Proxy's stand-in array. graphgrad code that reads metadata off the array itself
    (``zeros_like`` reads ``_array.shape``) gets only what is known, so that no tensor
    made from a guessed shape is frozen into the graph; reading its dtype is recorded
    (the traced graph then bakes the dtype in, and the GraphModule checks its inputs')."""

    def _spec(self) -> tuple:
        proxy = self.__dict__.get("_proxy")
        return (None, None) if proxy is None else (proxy, proxy._node.spec)

    @property
    def shape(self) -> tuple:
        proxy, spec = self._spec()
        if proxy is not None:
            if spec.shape is None:
                raise _unknown(proxy, "rank")
            if any(d is None for d in spec.shape):
                raise _unknown(proxy, "size")
        return xp.ndarray.shape.__get__(self)

    @property
    def size(self) -> int:
        return int(prod(self.shape))

    @property
    def ndim(self) -> int:
        proxy, spec = self._spec()
        if proxy is not None and spec.shape is None:
            raise _unknown(proxy, "rank")
        return xp.ndarray.ndim.__get__(self)

    @property
    def dtype(self):
        proxy, _ = self._spec()
        if proxy is not None:
            if proxy._tracer.attempting:   # without example inputs the dtype is unknown
                raise _unknown(proxy, "dtype")   # too: the call is recorded (python_calls)
            proxy._tracer.dtype_read = True
        return xp.ndarray.dtype.__get__(self)


def _caller_is_graphgrad() -> bool:
    """Whether the code reading a Proxy's metadata is graphgrad's (two frames up)."""
    return in_graphgrad(sys._getframe(2))


class Proxy(Symbol):
    """A symbolically traced value: the output of one node of the graph being traced."""

    __slots__ = ("_tracer",)

    def __repr__(self) -> str:
        return f"Proxy({self._node.name})"

    __str__ = __repr__

    @property
    def node(self):
        return self._node

    @property
    def tracer(self):
        return self._tracer

    # ---- where Python needs a concrete value -------------------------------------------

    def __bool__(self):
        return self._tracer.to_bool(self)

    def __iter__(self):
        return self._tracer.iter(self)

    def __len__(self) -> int:
        raise RuntimeError(_LEN)

    def _no_value(self, *args, **kwargs):
        raise trace_error(f"symbolically traced variable {self!r} has no value at trace time, "
                          f"so it cannot be converted to a Python number or array "
                          f"(int(), float(), .item(), .tolist(), .numpy(), range())")

    item = tolist = numpy = __int__ = __float__ = __index__ = __complex__ = _no_value

    def __array__(self, dtype=None, copy=None):
        self._no_value()

    def _in_place(self, name: str):
        raise trace_error(f"in-place op {name} on the traced value {self!r}: graphgrad.fx "
                          f"records a functional graph (the IR has no in-place ops), so a "
                          f"traced value cannot be updated in place; write it out of place "
                          f"(y = y + 1, y = y.mul(2), y = graphgrad.index_put(y, (i,), v))")

    # ---- metadata: symbolic for the user, static for graphgrad's own code ---------------

    def _rank(self) -> int:
        shape = self._node.spec.shape if isinstance(self._node.spec, Spec) else None
        if shape is None:
            raise _unknown(self, "rank")
        return len(shape)

    def _static_shape(self) -> Size:
        """The shape, for graphgrad code: it must not decide anything on a guessed size, so
        an unknown one raises (with example inputs, the graph is then traced for theirs)."""
        self._rank()
        if any(d is None for d in self._node.spec.shape):
            raise _unknown(self, "size")
        return Size(self._node.spec.shape)

    @property
    def shape(self):
        if _caller_is_graphgrad():
            return self._static_shape()
        return self._tracer.shape_proxy(self)

    def size(self, dim: int | None = None):
        if _caller_is_graphgrad():
            if dim is None:
                return self._static_shape()
            self._rank()
            d = self._node.spec.shape[dim]
            if d is None:
                raise _unknown(self, "size")
            return d
        shape = self._tracer.shape_proxy(self)
        return shape if dim is None else shape[dim]

    @property
    def ndim(self) -> int:
        return self._rank()

    def dim(self) -> int:
        return self._rank()

    ndimension = dim

    def numel(self):
        if _caller_is_graphgrad():
            return self._static_shape().numel()
        return self._tracer.shape_proxy(self).prod()

    # ---- reshapes whose sizes are Proxies (bound when the graph runs) -------------------

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if any(isinstance(s, Symbol) for s in shape):
            return REGISTRY["Reshape"].apply(self, shape=tuple(shape))
        return Symbol.reshape(self, *shape)

    view = reshape


def _refusing(name: str):
    def method(self, *args, **kwargs):
        self._in_place(name)
    method.__name__ = name
    return method


# every in-place method of Tensor, and the augmented assignments that call them
for _name in [n for n in dir(Symbol) if n.endswith("_") and not n.startswith("__")
              and n != "requires_grad_"] + ["__setitem__", "__iadd__", "__isub__", "__imul__",
                                            "__itruediv__"]:
    setattr(Proxy, _name, _refusing(_name))


# methods that read metadata, convert to Python values or are Python's object protocol:
# not calls to record
_NOT_CALLS = {"__init__", "__new__", "__repr__", "__str__", "__hash__", "__bool__",
              "__array__", "__len__", "__iter__", "__getattribute__", "__setattr__",
              "__getattr__", "__delattr__", "__init_subclass__", "__class__", "__reduce__",
              "__reduce_ex__", "__sizeof__", "__dir__", "__format__", "__subclasshook__",
              "__deepcopy__", "__copy__", "__array_ufunc__", "__array_function__",
              "__index__", "__int__", "__float__", "__complex__", "__contains__",
              "size", "dim", "ndimension", "numel", "item", "tolist", "numpy", "eval",
              "get_shape", "element_size", "nelement", "data_ptr", "is_contiguous",
              "contiguous", "storage", "untyped_storage", "stride", "type", "is_floating_point",
              "is_complex", "register_hook", "retain_grad", "backward", "dim_order"}


def _install_catching() -> None:
    """Wrap Proxy's tensor methods and operators (python_calls.catching_method)."""
    for name in dir(Proxy):
        if name in _NOT_CALLS or (name.startswith("_") and not name.startswith("__")) or \
                (name.endswith("_") and not name.endswith("__")):
            continue
        attr = getattr(Proxy, name, None)
        if isinstance(attr, types.FunctionType) and not isinstance(
                inspect.getattr_static(Proxy, name), (staticmethod, classmethod)):
            setattr(Proxy, name, catching_method(name, attr))


_install_catching()


class ShapeProxy(Proxy):
    """``x.shape`` of a Proxy: an int64 vector node; ``shape[i]`` is a 0-d node (the Tracer
    gives it its Spec: the vector's length may be unknown)."""

    __slots__ = ()
