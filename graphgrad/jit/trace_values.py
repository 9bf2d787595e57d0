"""Layer ``jit``: the values a JIT trace runs on: ``TracedTensor``, a real tensor that also
knows the graph node computing it, and ``TracedInt``/``TracedFloat``, Python numbers
(``x.shape[0]``, ``n * 2``) that remember how they were computed from tensor sizes.

The function under ``jit.trace`` runs on real values, so every Python decision it makes
is the one eager mode would make; the values carry their nodes along so the recorder
(``trace_recorder.py``) can append one node per op. Where Python takes a value out of
the graph (``bool(x)``, ``float(x)``, ``x.item()``, ``int(n)``) the trace can only keep
the value seen now: ``TracerWarning`` says so in PyTorch's words and the trace goes on
specialized. Sizes stay in the graph as long as Python only does arithmetic on them, so
``x.reshape(m, n) * n`` is right for inputs of other shapes.

Warnings about conversions made *inside* graphgrad (a shape check in an op wrapper) are
not shown, as PyTorch filters its own library's tracer warnings, with one exception: a
traced size that graphgrad turns into a plain int or float (``gg.zeros(n)``, a slice
bound) warns wherever it happens, blamed on the user's line and naming the graphgrad
function, because from there on the trace no longer follows the input's shape.
"""

from __future__ import annotations

import dis
import operator
import os
import sys
import warnings
from types import FrameType

from graphgrad.backend import xp
from graphgrad.nn import functional as F
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Size, Tensor, Value, creation

from .trace_external import is_user_code, user_frame

__all__ = ["TracerWarning", "TracedTensor", "TracedInt", "TracedFloat", "TracedNumber",
           "warn_at", "dataflow", "plain"]


# graphgrad's random functions: their draws become random nodes, sizes included
_DRAWS = frozenset(f.__code__ for f in (
    creation.rand, creation.randn, creation.randint, creation.rand_like, creation.randn_like,
    creation.randint_like, creation.random_tensor, F.dropout))


class TracerWarning(Warning):
    """A trace may be incorrect for other inputs (PyTorch's ``torch.jit.TracerWarning``)."""


_DATAFLOW = ("Converting a tensor to {} might cause the trace to be incorrect. We can't record "
             "the data flow of Python values, so this value will be treated as a constant in "
             "the future. This means that the trace might not generalize to other inputs!")
_WHAT = {"bool": "a Python boolean", "int": "a Python integer", "float": "a Python float",
         "index": "a Python index", "numpy": "a NumPy array", "list": "a Python list",
         "number": "a Python number"}
_LEN = ("Using len to get tensor shape might cause the trace to be incorrect. Recommended usage "
        "would be tensor.shape[0]. Passing a tensor of different shape might lead to errors or "
        "silently give incorrect results.")
_ITER = ("Iterating over a tensor might cause the trace to be incorrect. Passing a tensor of "
         "different shape won't change the number of iterations executed (and might lead to "
         "errors or silently give incorrect results).")
_PLUMBING = os.sep + "graphgrad" + os.sep + "ops" + os.sep
_OPERATOR_OPS = frozenset({"BINARY_OP", "COMPARE_OP"})
_REFLECTED = {"add": "__radd__", "subtract": "__rsub__", "multiply": "__rmul__",
              "true_divide": "__rtruediv__", "divide": "__rtruediv__",
              "floor_divide": "__rfloordiv__", "remainder": "__rmod__", "power": "__rpow__",
              "matmul": "__rmatmul__", "less": "__gt__", "less_equal": "__ge__",
              "greater": "__lt__", "greater_equal": "__le__", "equal": "__eq__",
              "not_equal": "__ne__", "bitwise_and": "__rand__", "bitwise_or": "__ror__",
              "bitwise_xor": "__rxor__"}


def warn_at(frame: FrameType | None, message: str) -> None:
    """A TracerWarning attributed to ``frame``'s line (the user's code)."""
    if frame is None:
        warnings.warn(message, TracerWarning, stacklevel=3)
        return
    glb = frame.f_globals
    warnings.warn_explicit(message, TracerWarning, frame.f_code.co_filename, frame.f_lineno,
                           module=glb.get("__name__"),
                           registry=glb.setdefault("__warningregistry__", {}))


def dataflow(kind: str, *, internal_too: bool = False) -> None:
    """Warn that a traced value became a Python ``kind``. The caller of the converting
    method is two frames up; a conversion made by graphgrad itself is silent unless
    ``internal_too``."""
    caller = sys._getframe(2)
    message = _DATAFLOW.format(_WHAT[kind])
    if not is_user_code(caller.f_code):
        if not internal_too or _in_random_draw(caller):
            return
        frame = caller  # name the graphgrad function that did it, above the plumbing
        while frame.f_back is not None and _PLUMBING in frame.f_code.co_filename \
                and not is_user_code(frame.f_back.f_code):
            frame = frame.f_back
        code = frame.f_code
        message += (f" (converted inside graphgrad: "
                    f"{code.co_qualname.split('.<locals>')[0]} at "
                    f"{os.path.basename(code.co_filename)}:{frame.f_lineno})")
    warn_at(user_frame(caller), message)


def _in_random_draw(frame: FrameType | None) -> bool:
    """Whether graphgrad code below the user's line is drawing random numbers: the sizes it
    converts are recorded as the random node's run-time dims (``batched_random``)."""
    while frame is not None and not is_user_code(frame.f_code):
        if frame.f_code in _DRAWS:
            return True
        frame = frame.f_back
    return False


def plain(value):
    """``value`` with every traced number replaced by its Python number (nested in
    tuples, lists and dicts: the form op params take)."""
    if isinstance(value, TracedNumber):
        return value._v
    if type(value) is tuple:
        return tuple(plain(v) for v in value)
    if type(value) is list:
        return [plain(v) for v in value]
    if type(value) is dict:
        return {k: plain(v) for k, v in value.items()}
    return value


# ---- tensors -----------------------------------------------------------------------------

class TracedTensor(Tensor):
    """A tensor of a running trace: its real value (``_array``) and the node that computes
    it (``_node``), valid while the tensor's version is ``_nv`` (in-place ops bump the
    version; the recorder then finds the node that computed the new value)."""

    __slots__ = ("_node", "_nv", "_tracer")

    # ---- sizes stay symbolic ----------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._tracer.size(self, d) for d in range(self._array.ndim))

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        self._array.shape[dim]  # noqa: B018 - raises IndexError for a bad dim
        return self._tracer.size(self, dim % self._array.ndim)

    def numel(self):
        shape = self.shape
        if not shape:
            return 1
        n = shape[0]
        for s in shape[1:]:
            n = n * s
        return n

    nelement = numel

    def __len__(self) -> int:
        if is_user_code(sys._getframe(1).f_code):
            warn_at(user_frame(sys._getframe(1)), _LEN)
        return Tensor.__len__(self)

    def __iter__(self):
        if is_user_code(sys._getframe(1).f_code):
            warn_at(user_frame(sys._getframe(1)), _ITER)
        return Tensor.__iter__(self)

    # ---- values leaving the graph ------------------------------------------------------
    def __bool__(self) -> bool:
        dataflow("bool")
        return bool(self._scalar("bool"))

    def __float__(self) -> float:
        dataflow("float")
        return float(self._scalar("float"))

    def __int__(self) -> int:
        dataflow("int")
        return int(self._scalar("int"))

    def __index__(self) -> int:
        dataflow("index")
        return Tensor.__index__(self)

    def item(self):
        dataflow("number")
        return Tensor.item(self)

    def tolist(self):
        dataflow("list")
        return self._array.tolist()

    # ---- NumPy: external code -----------------------------------------------------------
    def numpy(self, *, force: bool = False):
        self._numpy_use("Tensor.numpy", sys._getframe(1))
        return self._array

    def __array__(self, dtype=None, copy=None):
        self._numpy_use("Tensor.__array__ (conversion to a NumPy array)", sys._getframe(1))
        a = self._array
        return a if dtype is None else a.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        caller = sys._getframe(1)
        if method == "__call__" and len(inputs) == 2 and inputs[1] is self \
                and ufunc.__name__ in _REFLECTED \
                and dis.opname[caller.f_code.co_code[caller.f_lasti]] in _OPERATOR_OPS:
            # ``array + x`` (an operator, not np.add): what eager mode does, x.__radd__
            return getattr(self, _REFLECTED[ufunc.__name__])(inputs[0])
        self._numpy_use(f"numpy.{ufunc.__name__}", caller)
        inputs = [i._array if isinstance(i, Value) else i for i in inputs]
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        self._numpy_use(f"numpy.{func.__name__}", sys._getframe(1))
        return func(*_arrays(args), **_arrays(kwargs))

    def _numpy_use(self, name: str, caller: FrameType) -> None:
        """NumPy reads this tensor's values: external code when the user's line does it;
        when graphgrad itself does (``gg.tensor(x)``), the value becomes a constant, which
        is PyTorch's "Converting a tensor to a NumPy array" warning."""
        if is_user_code(caller.f_code):
            self._tracer.external(name, caller, _DATAFLOW.format(_WHAT["numpy"]))
        else:
            warn_at(user_frame(caller), _DATAFLOW.format(_WHAT["numpy"]))

    # ---- detach: a Detach node (stop-gradient) ---------------------------------------------
    def detach(self) -> Tensor:
        return self._tracer.detach(self)

    def detach_(self) -> Tensor:
        self._node, self._nv = self._tracer.detach(self)._node, self._version
        self._requires_grad = False
        return self

    @property
    def data(self) -> Tensor:
        return self._tracer.detach(self)

    @data.setter
    def data(self, value) -> None:
        Tensor.data.fset(self, value)
        self._node, self._nv = self._tracer.node_of(value), self._version

    # ---- new tensors sized by traced sizes ---------------------------------------------
    def new_zeros(self, *size, dtype=None, device=None, requires_grad: bool = False):
        return self._new_filled(size, 0, dtype, requires_grad, Tensor.new_zeros)

    def new_ones(self, *size, dtype=None, device=None, requires_grad: bool = False):
        return self._new_filled(size, 1, dtype, requires_grad, Tensor.new_ones)

    new_empty = new_zeros

    def new_full(self, size, fill_value, *, dtype=None, device=None,
                 requires_grad: bool = False):
        return self._new_filled((size,), fill_value, dtype, requires_grad,
                                lambda t, s, **kw: Tensor.new_full(t, s, fill_value, **kw))

    def _new_filled(self, size, value, dtype, requires_grad: bool, eager):
        """A constant broadcast to ``size``, recorded as Expand (and Clone, so that it can
        be written in place) when the size holds traced numbers: other shapes work."""
        size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) \
            else size
        if requires_grad or not any(isinstance(s, TracedNumber) for s in size):
            return eager(self, size, dtype=dtype, requires_grad=requires_grad)
        return Tensor.new_full(self, (), value, dtype=dtype).expand(*size).clone()

    # ---- in-place writes that run no op ------------------------------------------------
    def fill_(self, value):
        return self._overwrite(value, Tensor.fill_)

    def zero_(self):
        return self._overwrite(0, Tensor.fill_)

    def copy_(self, src, non_blocking: bool = False):
        return self._overwrite(src, Tensor.copy_)

    def _overwrite(self, value, write):
        """``fill_``/``copy_`` write the array directly (no op): record the new value as
        ``value`` cast and broadcast to this tensor's (symbolic) shape."""
        v = value if isinstance(value, Value) else Tensor(value, dtype=self.dtype)
        v = v.to(self.dtype).expand(*self.shape)
        write(self, value)
        self._node, self._nv = self._tracer.node_of(v), self._version
        return self


def _arrays(tree):
    if isinstance(tree, Value):
        return tree._array
    if isinstance(tree, (tuple, list)):
        return type(tree)(_arrays(t) for t in tree)
    if isinstance(tree, dict):
        return {k: _arrays(v) for k, v in tree.items()}
    return tree


# ---- numbers -----------------------------------------------------------------------------

class TracedNumber:
    """Mixin of ``TracedInt``/``TracedFloat``: the Python value ``_v`` and ``_make``, which
    records the nodes computing it (a 0-d tensor) the first time the graph needs it."""

    _v: int | float

    def _init(self, value, tracer, make) -> None:
        self._v = value
        self._tracer = tracer
        self._make = make
        self._tensor = None

    def tensor(self) -> TracedTensor:
        """The 0-d tensor (and its nodes) computing this number; made once."""
        if self._tensor is None:
            self._tensor = self._make()
        return self._tensor

    def __bool__(self) -> bool:
        dataflow("bool")
        return bool(self._v)

    def __int__(self) -> int:
        dataflow("int", internal_too=True)
        return int(self._v)

    def __float__(self) -> float:
        dataflow("float", internal_too=True)
        return float(self._v)

    def __index__(self) -> int:
        dataflow("index", internal_too=True)
        return int(self._v)

    def __neg__(self):
        return _traced(-self._v, self._tracer,
                       lambda: self._tracer.apply(REGISTRY["Neg"], (self.tensor(),), {}))

    def __pos__(self):
        return self

    def __abs__(self):
        return _traced(abs(self._v), self._tracer,
                       lambda: self._tracer.apply(REGISTRY["Abs"], (self.tensor(),), {}))


def _traced(value, tracer, make):
    if type(value) is int:
        return TracedInt(value, tracer, make)
    if type(value) is float:
        return TracedFloat(value, tracer, make)
    return value


def _operand(x):
    """A traced number's tensor, or the Python number itself."""
    return x.tensor() if isinstance(x, TracedNumber) else x


def _arith(op_name: str, fn):
    op = REGISTRY[op_name]

    def compute(a, b):
        if isinstance(a, bool) or isinstance(b, bool) or not (
                isinstance(a, (int, float)) and isinstance(b, (int, float))):
            return NotImplemented  # tensors and the rest answer with their own methods
        va = a._v if isinstance(a, TracedNumber) else a
        vb = b._v if isinstance(b, TracedNumber) else b
        value = fn(va, vb)
        tracer = (a if isinstance(a, TracedNumber) else b)._tracer

        def make():
            ta, tb = _operand(a), _operand(b)
            if isinstance(value, float) and isinstance(ta, Tensor) \
                    and ta._array.dtype.kind in "iub":
                # Python's int / int is float64 math, not an int64 tensor's default float
                ta = tracer.apply(REGISTRY["Cast"], (ta,), {"dtype": xp.dtype(xp.float64)})
            return tracer.apply(op, (ta, tb), {})
        return _traced(value, tracer, make)

    def forward(self, other):
        return compute(self, other)

    def reverse(self, other):
        return compute(other, self)
    return forward, reverse


_ARITH = {"add": ("Add", operator.add), "sub": ("Sub", operator.sub),
          "mul": ("Mul", operator.mul), "truediv": ("Div", operator.truediv),
          "floordiv": ("FloorDivide", operator.floordiv), "mod": ("Remainder", operator.mod),
          "pow": ("Pow", operator.pow)}
for _name, (_op, _fn) in _ARITH.items():
    _f, _r = _arith(_op, _fn)
    setattr(TracedNumber, f"__{_name}__", _f)
    setattr(TracedNumber, f"__r{_name}__", _r)


def _comparison(fn):
    def method(self, other):
        if isinstance(other, TracedNumber):
            other = other._v
        elif not isinstance(other, (int, float)):
            return NotImplemented  # ``n == x`` with a tensor x: x.__eq__ records it
        dataflow("bool")
        return fn(self._v, other)
    return method


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(TracedNumber, f"__{_name}__", _comparison(getattr(operator, _name)))


class TracedInt(TracedNumber, int):
    """An int computed from tensor sizes during a trace (``x.shape[0] * 2``)."""

    def __new__(cls, value: int, tracer, make):
        obj = int.__new__(cls, value)
        obj._init(value, tracer, make)
        return obj

    __hash__ = int.__hash__
    __repr__ = int.__repr__
    __str__ = int.__repr__


class TracedFloat(TracedNumber, float):
    """A float computed from tensor sizes during a trace (``x.shape[0] / 2``)."""

    def __new__(cls, value: float, tracer, make):
        obj = float.__new__(cls, value)
        obj._init(value, tracer, make)
        return obj

    __hash__ = float.__hash__
    __repr__ = float.__repr__
    __str__ = float.__repr__
