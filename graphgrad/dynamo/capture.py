"""Layer ``dynamo``: one capture: the graph being built for a segment, its inputs and its
guards, and the conversions between runtime values, trace values and templates.

* ``wrap(value, source)``: a runtime value as the interpreter sees it: a tensor becomes a
  placeholder Symbol (guarded on type, shape, dtype, requires_grad), an int/bool/str is
  specialized (guarded by value), a tuple is unpacked item by item, a list/dict/object
  the function did not create becomes an ``Extras`` whose reads are guarded one by one.
* ``templatize``: at a graph break, the whole frame stack with every Symbol replaced by a
  ``SlotRef`` to a graph output, so that interpretation can restart from it later.
* ``instantiate``: a template back into trace values for the next segment's capture.
"""

from __future__ import annotations

import sys
import types
from collections import OrderedDict
from typing import Any

import numpy as np

from graphgrad.backend import dtype as gg_dtype
from graphgrad.graph import Graph, GraphBuilder, Spec, Symbol, symbol
from graphgrad.graph.random_calls import describe_draw, draw_frame
from graphgrad.graph.random_node import add_random
from graphgrad.nn import Module
from graphgrad.tensor import Tensor, Value

from .guards import GuardSet
from .policy import user_code
from .structure import rebuild
from .values import (Arg, Attr, Extras, Glob, IntOf, Item, Kw, Obj, Slot, SlotRef, Source, SrcRef,
                     Stored, rebase)

__all__ = ["Capture", "SymInt", "SymFloat", "Unsupported", "eval_source", "opaque"]

_SCALARS = (int, bool, str, type(None), bytes, complex, float, range, type(Ellipsis))


_CONTAINERS = (list, dict, OrderedDict)


def opaque(v: Any) -> bool:
    """An object the function did not create and the interpreter does not look into
    (anything but a list or dict): operations on it run for real."""
    return type(v) is Extras and type(v.obj) not in _CONTAINERS


class Unsupported(RuntimeError):  # noqa: N818 - torch._dynamo.exc.Unsupported's name
    """Something the interpreter cannot represent (``fullgraph=True`` raises it with the
    reason and the source line; otherwise the code runs eagerly)."""


class SymInt(Symbol):
    """A Python int known only at run time (a dynamic size): a 0-d int64 graph value."""

    __slots__ = ()


class SymFloat(Symbol):
    """A Python float known only at run time (the result of an eager call)."""

    __slots__ = ()


def eval_source(src: Source, a: tuple, k: dict, s: tuple) -> Any:
    if isinstance(src, Arg):
        return a[src.key[0]]
    if isinstance(src, Kw):
        return k[src.key]
    if isinstance(src, Slot):
        return s[src.key]
    if isinstance(src, Obj):
        return src.obj
    if isinstance(src, Glob):
        return src.g[src.name]
    if isinstance(src, Attr):
        return getattr(eval_source(src.base, a, k, s), src.name)
    if isinstance(src, Item):
        return eval_source(src.base, a, k, s)[src.index]
    raise TypeError(f"unknown source {src!r}")


class _CaptureBuilder(GraphBuilder):
    """The capture's graph builder. A random draw made by graphgrad's own code for a graph
    value (dropout in training mode) becomes a ``random`` node that draws anew on every
    run from the default generator, as the eager call does (``manual_seed`` reproduces
    it), instead of one draw frozen into the graph."""

    randomness = "different"

    def batched_random(self, sample, shape: tuple):
        draw = describe_draw(draw_frame(sys._getframe(1)))
        if draw is None:
            return sample(shape)
        return symbol(add_random(self, draw.dist, list(draw.shape), draw.dtype, draw.params))

    def process_inplace(self, t, fn, args: tuple, kw: dict, name: str, below):
        """A write into a graph value by graphgrad's own code (``running_mean.copy_`` in
        ``batch_norm``): functionalized, as Dynamo/AOTAutograd do: the new value is a node
        that ``t`` stands for from now on, and a graph input's new value is written back
        by the compiled function (``Capture.mutate``)."""
        if not isinstance(t, Symbol) or t._node.graph is not self.graph:
            return below(fn)
        value = args[0] if name == "copy_" and len(args) == 1 and not kw else None
        if isinstance(value, Symbol) and tuple(value.shape) == tuple(t.shape):
            new = value.to(t.dtype)   # (not fn's where(ones, value, old))
        else:
            new = fn(t, *args, **kw)
        if not self.capture.mutate(t, new):
            raise RuntimeError(f"{name} on a graph value that a view or a tensor requiring "
                               f"grad shares")
        return t


class Capture:
    """The state of one segment's capture."""

    def __init__(self, name: str, a: tuple, k: dict, s: tuple, dynamic: Any,
                 concrete: bool = False, trusted: frozenset = frozenset()):
        self.concrete = concrete          # run on real values: no graph, no guards
        self.trusted = trusted            # slots the previous graph made with static specs
        self.graph = Graph(name)
        self.builder = _CaptureBuilder(self.graph)
        self.builder.capture = self
        self.guards = GuardSet()
        self.a, self.k, self.s = a, k, s
        self.dynamic = dynamic            # True (all dims), or a set of (source, dim)
        self.inputs: list[tuple[Source, Any]] = []   # (source, placeholder node)
        self.examples: list = []
        self._by_source: dict[Source, Symbol] = {}
        self._by_id: dict[int, tuple] = {}         # id(tensor) -> (source, Symbol)
        self.eager_types: dict[Any, type] = {}     # placeholder node -> the tensor's type
        self.where = ""                   # user location of the instruction being run
        self.slot_names: dict[int, str] = {}   # for placeholder names
        self.raw_sources: dict[int, Source] = {}   # id(class) -> where it was read
        self.fn_parts: dict[int, tuple] = {}       # id(function) -> guarded defaults
        self.mutated: dict[Any, Symbol] = {}       # placeholder node -> its Symbol, changed

    # ---- runtime values in --------------------------------------------------------------

    def _placeholder(self, value: Any, source: Source, spec: Spec, cls: type) -> Symbol:
        sym = self._by_source.get(source)
        if sym is None and cls is Symbol:
            seen = self._by_id.get(id(value))
            if seen is not None:   # one tensor reached twice (f(t, t)): one graph value
                self.guards.add("alias", source, seen[0], self.where)
                self._by_source[source] = seen[1]
                return seen[1]
        if sym is None:
            node = self.graph.placeholder(spec, _ph_name(source))
            sym = symbol(node, cls)
            self._by_source[source] = sym
            self.inputs.append((source, node))
            self.examples.append(value)
            self.eager_types[node] = type(value)
            if cls is Symbol:
                self._by_id[id(value)] = (source, sym)
        return sym

    def mutate(self, t: Symbol, new: Any) -> bool:
        """``t`` changed in place to ``new``: ``t`` stands for the new node from now on
        (its reads, by source or identity, find the same Symbol). A graph input that does
        not require grad (a buffer) is written back after the graph runs. False (the
        write must run for real) when a view could see the old value or the input
        requires grad, whose eager write has autograd bookkeeping of its own."""
        node = t._node
        if not isinstance(new, Symbol) or new.shape != t.shape or \
                new._node.spec.dtype != node.spec.dtype or getattr(node.op, "view", False):
            return False
        if any(n.kind == "call" and getattr(n.op, "view", False) and node in n.inputs
               for n in self.graph.nodes):
            return False
        if node.kind == "placeholder":
            example = self.examples[[n for _, n in self.inputs].index(node)]
            if not isinstance(example, Tensor) or example.requires_grad or \
                    (example._extras is not None and example._extras.base is not None):
                return False
            self.mutated[node] = t
        elif node.kind != "call" or node.graph is not self.graph:
            return False
        t._node = new._node
        return True

    def dims_for(self, source: Source, shape: tuple) -> tuple:
        if not self.dynamic:
            return tuple(shape)
        if self.dynamic is True:
            return tuple(None if d >= 2 else d for d in shape)
        return tuple(None if (source, i) in self.dynamic and d >= 2 else d
                     for i, d in enumerate(shape))

    def wrap(self, value: Any, source: Source) -> Any:
        """The trace value for runtime ``value`` read from ``source`` (guards installed)."""
        if self.concrete:
            return value
        t = type(value)
        if isinstance(value, Value):
            arr = value._array
            dims = self.dims_for(source, arr.shape)
            if not (type(source) is Slot and source.key in self.trusted):
                # (a trusted slot's type, shape and dtype follow from the previous graph)
                self.guards.add("tensor", source, (t, dims, arr.dtype,
                                                   bool(value.requires_grad)), self.where)
            return self._placeholder(value, source, Spec(dims, arr.dtype), Symbol)
        if t is float and isinstance(source.root(), Slot):
            # a float made by an eager call (a random number...): a graph input, not a
            # constant, so that a new value does not recompile
            self.guards.add("type", source, float, self.where)
            return self._placeholder(value, source, Spec((), np.dtype(np.float64)), SymFloat)
        if t in _SCALARS:
            self.guards.add("equals", source, value, self.where)
            return value
        if t is tuple:
            self.guards.add("len", source, (tuple, len(value)), self.where)
            return tuple(self.wrap(v, Item(source, i)) for i, v in enumerate(value))
        if t is list or t is dict or t is OrderedDict:
            self.guards.add("type", source, t, self.where)
            return Extras(value, source)
        if isinstance(source.root(), Slot) and not isinstance(
                value, (types.ModuleType, types.FunctionType, type)):
            # a run-time object (an eager call's result, or a method bound to one): a new
            # one each call, fetched from its source when used; reads from it are guarded
            self.guards.add("type", source, t, self.where)
            return Extras(value, source)
        if isinstance(value, types.MethodType) and isinstance(value.__func__,
                                                                types.FunctionType):
            # a bound method stored on an instance (``obj.f = MethodType(g, obj)``): its
            # function and its self, each read through its source
            fn = self.wrap(value.__func__, Attr(source, "__func__"))
            return types.MethodType(fn, self.wrap(value.__self__, Attr(source, "__self__")))
        if isinstance(value, (types.MethodType, types.BuiltinMethodType)) and not isinstance(
                getattr(value, "__self__", None), types.ModuleType):
            return value   # bound to an object whose identity was guarded where it was read
        if isinstance(value, Module):
            # modules by type, not identity (Dynamo's inlined nn modules): every read from
            # one is guarded through its source, its parameters are graph inputs, so all
            # instances of a class share the cached graphs and none is kept alive
            self.guards.add("type", source, t, self.where)
            return Extras(value, source)
        self.guards.add("id", source, value, self.where)
        if isinstance(value, types.FunctionType):
            self._guard_function(value, source)
            return value
        if isinstance(value, type):
            self.raw_sources.setdefault(id(value), source)   # its attributes are read guarded
            return value
        if isinstance(value, (types.BuiltinFunctionType, np.dtype, gg_dtype)):
            return value   # immutable: its identity says everything
        return Extras(value, source)

    def _guard_function(self, fn: types.FunctionType, source: Source) -> None:
        """A Python function the capture may inline: what inlining reads of it (its code,
        its defaults; closure cells are read on use) is guarded through its source, and
        the defaults are bound as the guarded trace values (``function_parts``)."""
        if id(fn) in self.fn_parts or not user_code(fn):
            return
        self.guards.add("id", Attr(source, "__code__"), fn.__code__, self.where)
        defaults = self.wrap(fn.__defaults__, Attr(source, "__defaults__"))
        kwdefaults = self.realize(self.wrap(fn.__kwdefaults__, Attr(source, "__kwdefaults__")))
        self.fn_parts[id(fn)] = (fn, defaults, kwdefaults)

    def function_parts(self, fn: types.FunctionType) -> tuple:
        """``(defaults, kwdefaults)`` to inline ``fn`` with (guarded when read from a source)."""
        got = self.fn_parts.get(id(fn))
        if got is not None and got[0] is fn:
            return got[1], got[2]
        return fn.__defaults__, fn.__kwdefaults__

    def class_attr(self, cls: type, name: str) -> Any:
        """``cls.name`` of a class read from a source: guarded (a class is mutable)."""
        src = self.raw_sources.get(id(cls))
        value = getattr(cls, name)
        if src is None or self.concrete or not user_code(cls):
            return value
        return self.wrap(value, Attr(src, name))

    def wrap_symint(self, value: Any, source: Source) -> Any:
        if self.concrete:
            return int(value)
        self.guards.add("tensor", source, (type(value), (), np.dtype(np.int64), False),
                        self.where)
        return self._placeholder(value, source, Spec((), np.dtype(np.int64)), SymInt)

    def realize(self, v: Any) -> Any:
        """An ``Extras`` list/tuple/dict as an owned copy whose items are read (and guarded);
        other objects as themselves (their identity is guarded)."""
        if not isinstance(v, Extras):
            return v
        obj, src = v.obj, v.source
        if isinstance(src.root(), Slot) and type(obj) not in _CONTAINERS:
            raise Unsupported(f"the contents of a run-time {type(obj).__name__}")
        if type(obj) is list:
            self.guards.add("len", src, (list, len(obj)), self.where)
            return [self.wrap(x, Item(src, i)) for i, x in enumerate(obj)]
        if type(obj) in (dict, OrderedDict):
            self.guards.add("keys", src, (type(obj), tuple(obj)), self.where)
            return {key: self.wrap(x, Item(src, key)) for key, x in obj.items()}
        return obj

    def guard_identity(self, a: Symbol, b: Symbol, same: bool) -> None:
        """``a is b`` was decided for two graph inputs: guard the answer."""
        srcs = {node: src for src, node in self.inputs}
        sa, sb = srcs.get(a._node), srcs.get(b._node)
        if sa is not None and sb is not None and not same:
            self.guards.add("distinct", sa, sb, self.where)

    def realize_identity(self, v: Any) -> Any:
        """The object itself, for ``is`` tests (an ``Extras``'s identity or type is guarded)."""
        return v.obj if isinstance(v, Extras) else v

    def read_attr(self, v: Extras, name: str) -> Any:
        return self.wrap(getattr(v.obj, name), self._attr_source(v, name))

    def _attr_source(self, v: Extras, name: str) -> Source:
        """Where ``v.obj.name`` is read from: a module's parameter, buffer or submodule
        (what ``Module.__getattr__`` finds, no class or instance attribute of that name)
        straight from its store dict (``Stored``), guarded against an instance attribute
        that would shadow it; anything else as the attribute."""
        o = v.obj
        cls = type(o)
        if isinstance(o, Module) and cls.__getattr__ is Module.__getattr__ and \
                cls.__getattribute__ is object.__getattribute__ and \
                name not in o.__dict__ and not any(name in c.__dict__ for c in cls.__mro__):
            for store in ("_parameters", "_buffers", "_modules"):   # __getattr__'s order
                d = o.__dict__.get(store)
                if d is not None and name in d:
                    if not self.concrete:
                        self.guards.add("absent", Attr(v.source, name), (v.source, name),
                                        self.where)
                    return Stored(v.source, store, name)
        return Attr(v.source, name)

    def read_item(self, v: Extras, key: Any) -> Any:
        obj = v.obj
        if type(obj) is list and type(key) is int:
            self.guards.add("len", v.source, (list, len(obj)), self.where)
            key = key if key >= 0 else key + len(obj)
            return self.wrap(obj[key], Item(v.source, key))
        if type(obj) in (dict, OrderedDict) and type(key) in (str, int, bool, float,
                                                              type(None)):
            self.guards.add("keys", v.source, (type(obj), tuple(obj)), self.where)
            return self.wrap(obj[key], Item(v.source, key))
        raise Unsupported(f"subscript of {type(obj).__name__} with {type(key).__name__}")

    def global_value(self, g: dict, name: str) -> Any:
        if name in g:
            return self.wrap(g[name], Glob(g, name))
        b = g.get("__builtins__", __builtins__)
        b = b.__dict__ if isinstance(b, types.ModuleType) else b
        if name in b:
            if not self.concrete:   # a global of that name defined later shadows it
                self.guards.add("no_global", Glob(g, name), (g, name), self.where)
            return b[name]
        raise NameError(f"name {name!r} is not defined")

    def eager_type(self, sym: Symbol) -> type:
        return self.eager_types.get(sym._node, Tensor)

    # ---- templates ------------------------------------------------------------------------

    def instantiate(self, t: Any, memo: dict | None = None) -> Any:
        memo = {} if memo is None else memo
        return _Instantiate(self, memo).go(t)


def _ph_name(source: Source) -> str:
    text = str(source)
    out = "".join(c if c.isalnum() else "_" for c in text).strip("_") or "x"
    while "__" in out:
        out = out.replace("__", "_")
    out = out[:32].rstrip("_")
    return ("l_" + out) if out[0].isdigit() else out


class _Instantiate:
    def __init__(self, cap: Capture, memo: dict):
        self.cap, self.memo = cap, memo

    def go(self, t: Any) -> Any:
        return rebuild(t, self.leaf, self.memo)

    def leaf(self, t: Any) -> Any:
        tp = type(t)
        c = self.cap
        if tp is SlotRef:
            got = self.memo.get(("slot", t.index))
            if got is None:
                got = c.wrap(c.s[t.index], Slot(t.index, c.slot_names.get(t.index)))
                self.memo[("slot", t.index)] = got
            return got
        if tp is IntOf:
            return c.wrap_symint(c.s[t.ref.index], Slot(t.ref.index))
        if tp is SrcRef:
            return c.wrap(eval_source(t.source, c.a, c.k, c.s), t.source)
        return t


class Templatizer:
    """Turns trace values into a template; collects the graph outputs it needs and the
    runtime objects (``Extras`` read from a slot) to hand on to the next segment."""

    def __init__(self, cap: Capture):
        self.cap = cap
        self.outputs: list = []            # graph nodes, in slot order
        self._out_index: dict = {}
        self.carried: list[Source] = []    # slot-rooted sources of this segment's input
        self._carry_map: dict[int, int] = {}
        self.memo: dict[int, Any] = {}

    def slot_for(self, sym: Symbol) -> SlotRef:
        node = self.cap.builder.node_of(sym)
        k = self._out_index.get(node)
        if k is None:
            k = self._out_index[node] = len(self.outputs)
            self.outputs.append(node)
        return SlotRef(k)

    def finalize_carried(self) -> None:
        """Slot numbers of carried values come after the graph outputs."""
        base = len(self.outputs)
        for old, new in self._carry_map.items():
            self._carry_map[old] = base + new

    def go(self, v: Any) -> Any:
        return rebuild(v, self.leaf, self.memo)

    def leaf(self, v: Any) -> Any:
        if isinstance(v, Symbol):
            if v._node.graph is not self.cap.graph:
                raise Unsupported("a symbolic value of another graph")
            ref = self.slot_for(v)
            return IntOf(ref) if type(v) is SymInt else ref
        if type(v) is Extras:
            src = v.source
            root = src.root()
            if isinstance(root, Slot):
                if root.key not in self._carry_map:
                    self._carry_map[root.key] = len(self.carried)
                    self.carried.append(root)
                return _PendingSrc(src)
            return SrcRef(src)
        return v

    def resolve(self, t: Any) -> Any:
        """Replace pending slot-rooted sources by their final slot numbers."""
        def leaf(v):
            return SrcRef(rebase(v.source, self._carry_map)) if type(v) is _PendingSrc else v
        return rebuild(t, leaf, {})


class _PendingSrc:
    __slots__ = ("source",)

    def __init__(self, source: Source):
        self.source = source
