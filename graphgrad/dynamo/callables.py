"""Layer ``dynamo``: the trace values the bytecode interpreter makes for calls it has not
made yet (bound methods of graph values and outside objects, ``super()``), and the small
tests on trace values it shares with them."""

from __future__ import annotations

import operator
import types
from typing import Any

from graphgrad.graph import Symbol
from graphgrad.graph.symbol import StandIn
from graphgrad.tensor import Tensor

from .capture import Capture, SymInt, Unsupported
from .values import Attr, Extras, Obj

__all__ = ["SuperOf", "SizeMethod", "BoundExt", "EagerMethod", "InplaceMethod", "MethodCall",
           "INPLACE_NAME", "FUNCTIONAL", "mutating", "has_symint", "leaks_stand_in",
           "has_real_tensor"]


class SuperOf:
    """``super()`` of an inlined method: attribute reads find the function on the MRO
    after ``cls`` and guard its identity there (a patched base method recompiles)."""

    __slots__ = ("cls", "obj")

    def __init__(self, cls: type, obj: Any):
        self.cls, self.obj = cls, obj

    def attr(self, cap: Capture, name: str) -> Any:
        real = self.obj.obj if isinstance(self.obj, Extras) else self.obj
        mro = type(real).__mro__
        for c in mro[mro.index(self.cls) + 1:]:
            if name in c.__dict__:
                v = c.__dict__[name]
                if not isinstance(v, types.FunctionType):
                    break
                return types.MethodType(cap.wrap(v, Attr(Obj(c, c.__qualname__), name)),
                                        self.obj)
        raise Unsupported(f"super().{name} (not a plain method)")


class SizeMethod:
    """``x.size``/``x.numel`` of a tensor with dynamic dims: sizes are graph values."""

    __slots__ = ("interp", "obj", "name")

    def __init__(self, interp, obj, name):
        self.interp, self.obj, self.name = interp, obj, name

    def __call__(self, dim=None):
        shape = self.interp.sym_shape(self.obj)
        if self.name == "size":
            return shape if dim is None else shape[dim]
        out = 1
        for d in shape:
            out = self.interp.binary(operator.mul, out, d)
        return out


class BoundExt:
    __slots__ = ("ext", "name")

    def __init__(self, ext: Extras, name: str):
        self.ext, self.name = ext, name


class EagerMethod:
    """``tensor.item`` and friends: called for real."""

    __slots__ = ("obj", "name")

    def __init__(self, obj, name):
        self.obj, self.name = obj, name

    def __call__(self, *args, **kwargs):
        return getattr(self.obj, self.name)(*args, **kwargs)


class InplaceMethod(EagerMethod):
    __slots__ = ()


class MethodCall:
    """``lambda obj, *a, **k: obj.name(*a, **k)`` that prints well."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __call__(self, obj, *args, **kwargs):
        return getattr(obj, self.name)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<method {self.name}>"


INPLACE_NAME = {operator.iadd: "add_", operator.isub: "sub_", operator.imul: "mul_",
                 operator.itruediv: "div_"}
FUNCTIONAL = {"add_": operator.add, "sub_": operator.sub, "mul_": operator.mul,
               "div_": operator.truediv}


def mutating(obj, name: str) -> bool:
    return name in ("append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
                    "update", "setdefault", "popitem", "__setitem__", "__delitem__")


def has_symint(vals) -> bool:
    for v in vals:
        if type(v) is SymInt:
            return True
        if type(v) in (tuple, list) and has_symint(v):
            return True
    return False


def leaks_stand_in(v) -> bool:
    """A real Tensor built around a Symbol's stand-in array (``Symbol.detach()`` makes
    one): its values are not the graph's; the call must run for real instead."""
    if isinstance(v, Tensor) and not isinstance(v, Symbol):
        return isinstance(v._array, StandIn)
    if isinstance(v, StandIn):
        return True
    if type(v) in (tuple, list):
        return any(leaks_stand_in(x) for x in v)
    if type(v) is dict:
        return any(leaks_stand_in(x) for x in v.values())
    return False


def has_real_tensor(v) -> bool:
    if isinstance(v, Tensor) and not isinstance(v, Symbol):
        return True
    if type(v) in (tuple, list):
        return any(has_real_tensor(x) for x in v)
    return False

