"""Layer ``dynamo``: ``BytecodeInterpreter``, the symbolic interpreter of CPython 3.11
and 3.12 bytecode (not ``graphgrad.graph.Interpreter``, which runs a Graph).

It runs ``dis`` instructions over a stack of ``Frame``s. Tensors are graph ``Symbol``s
(their ops become nodes of the capture's graph), Python values are computed for real,
calls to Python functions are inlined as new frames. Each opcode is a method named as
the opcode, inherited from the mixins ``StackOpcodes`` (opcodes_stack.py),
``ValueOpcodes`` (opcodes_values.py) and ``FlowOpcodes`` (opcodes_flow.py); this module
holds the loop and the rules they share: values (``value_op``, ``binary``,
``load_attr``) and calls (``call``: inline, run on graph values, fold, or break). The
mixins import nothing from here. It stops at the end of a segment:

* ``Return``: the outermost frame returned;
* ``EagerStep``: something must run for real: a tensor-dependent branch (``bool`` of a
  graph value), a call it must not trace (NumPy, ``random``, ``print``...), an operation
  it cannot represent. The frames stay as they are, so the caller can snapshot them and
  restart interpretation after the step with its real result.
"""

from __future__ import annotations

import dis
import inspect
import operator
import types
from typing import Any

from graphgrad.graph import Symbol
from graphgrad.nn import Module
from graphgrad.nn.modules.hooks import ModuleHooks
from graphgrad.tensor import Size

from . import config
from .capture import Capture, SymFloat, SymInt, Unsupported, opaque
from .frame import SUPPORTED, Frame, bind_arguments, code_info
from .opcodes_flow import FlowOpcodes
from .opcodes_stack import StackOpcodes
from .opcodes_values import ValueOpcodes
from .policy import TENSOR_EAGER_ATTRS, classify, is_graphgrad, is_inplace_name
from .callables import (FUNCTIONAL, INPLACE_NAME, BoundExt, EagerMethod, InplaceMethod,
                        MethodCall, SizeMethod, SuperOf, has_real_tensor, has_symint,
                        leaks_stand_in, mutating)
from .taylor_calls import OperatorV, is_taylor_transform, taylor_call
from .values import INLINED, Attr, Extras, ExtCell, FuncV, ListIter

__all__ = ["BytecodeInterpreter", "Return", "EagerStep"]

_INT_OK = (operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod)


class Return(Exception):  # noqa: N818 - a signal, not an error
    def __init__(self, value: Any):
        self.value = value


class EagerStep(Exception):  # noqa: N818 - a signal, not an error
    """Run ``fn(*args, **kwargs)`` for real. ``mode``: "push" (the result goes on the
    stack of the top frame, which continues after the instruction) or "force" (the
    result, a bool, decides the pending jump, which is run again)."""

    def __init__(self, kind: str, reason: str, fn: Any, args: tuple, kwargs: dict,
                 mode: str = "push"):
        self.kind, self.reason, self.fn = kind, reason, fn
        self.args, self.kwargs, self.mode = args, kwargs, mode


def _has_symbol(vals) -> bool:
    for v in vals:
        if isinstance(v, Symbol):
            return True
        if type(v) in (tuple, list) and _has_symbol(v):
            return True
        if type(v) is dict and _has_symbol(v.values()):
            return True
    return False


class BytecodeInterpreter(StackOpcodes, ValueOpcodes, FlowOpcodes):
    """Interprets a stack of frames for one capture."""

    def __init__(self, cap: Capture, frames: list[Frame]):
        self.cap = cap
        self.frames = frames
        self.steps = 0

    # ---- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Interpret until the segment ends (raises ``Return`` or ``EagerStep``)."""
        frames = self.frames
        cap = self.cap
        while True:
            f = frames[-1]
            inst = f.insts[f.pc]
            f.pc += 1
            self.steps += 1
            if self.steps > config.max_instructions:
                raise Unsupported(f"more than {config.max_instructions} instructions "
                                  f"interpreted in one segment")
            handler = HANDLERS.get(inst.opname)
            if handler is None:  # the prescan makes this unreachable; keep it honest
                raise Unsupported(f"opcode {inst.opname}")
            pos = inst.positions
            if pos is not None and pos.lineno is not None:
                cap.where = f"{f.code.co_filename}:{pos.lineno} in {f.code.co_name}"
            depth, height = len(frames), len(f.stack)
            try:
                handler(self, f, inst)
            except _Break as b:
                raise EagerStep(b.kind, b.reason, b.fn, b.args, b.kwargs, b.mode) from None
            if config.check_stack_effect and len(frames) == depth and frames[-1] is f:
                _check_stack_effect(f, inst, height)

    # ---- helpers -----------------------------------------------------------------------------

    def return_value(self, value: Any) -> None:
        """The top frame returns ``value`` to its caller (the outermost one: ``Return``)."""
        frames = self.frames
        frames.pop()
        if not frames:
            raise Return(value)
        frames[-1].stack.append(value)

    def brk(self, kind: str, reason: str, fn: Any, args: tuple = (), kwargs: dict | None = None,
            mode: str = "push"):
        """End the segment: ``fn(*args, **kwargs)`` runs for real (at once, concretely,
        when the interpreter runs on real values)."""
        if self.cap.concrete:
            return fn(*args, **(kwargs or {}))
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, (Symbol, Extras, list, dict, set)):
            # the object must come from the run-time values, not be frozen in the method
            if isinstance(fn, types.MethodType):   # (a Symbol's methods wrap Tensor's)
                fn, args = getattr(fn.__func__, "__wrapped__", fn.__func__), (owner, *args)
            elif isinstance(fn, types.BuiltinMethodType):
                fn, args = MethodCall(fn.__name__), (owner, *args)
        raise _Break(kind, reason, fn, args, kwargs or {}, mode)

    def value_op(self, fn, *args, reason: str | None = None):
        """``fn(*args)`` on trace values; what cannot be done symbolically runs eagerly."""
        cap = self.cap
        if any(opaque(a) for a in args):
            return self.brk("unsupported-value-op", f"{getattr(fn, '__name__', fn)} of an "
                            f"object the function did not create", fn, args)
        args = tuple(cap.realize(a) for a in args)
        try:
            out = fn(*args)
            if leaks_stand_in(out):
                raise TypeError("the result is not a graph value")
            return out
        except Unsupported:
            raise
        except TypeError as e:
            if _has_symbol(args):
                return self.brk("unsupported-value-op", reason or f"{getattr(fn, '__name__', fn)} "
                         f"on a graph value: {e}", fn, args)
            raise

    def binary(self, fn, a, b):
        cap = self.cap
        if opaque(a) or opaque(b):
            return self.value_op(fn, a, b)
        a, b = cap.realize(a), cap.realize(b)
        scal = [x for x in (a, b) if isinstance(x, (SymInt, SymFloat))]
        if scal:
            others = [x for x in (a, b) if not any(x is y for y in scal)]
            if any(isinstance(x, Symbol) for x in others):
                pass  # a tensor operand: Python-scalar semantics hold in the graph
            elif all(type(x) is SymInt or type(x) is int for x in (a, b)) and fn in _INT_OK:
                out = self.value_op(fn, a, b)
                out.__class__ = SymInt
                return out
            else:
                return self.brk("unsupported-value-op", "arithmetic on a run-time Python "
                                "number", fn, (a, b))
        if isinstance(a, Symbol) and fn in INPLACE_NAME:
            return self.inplace(a, INPLACE_NAME[fn], (b,), fn)
        return self.value_op(fn, a, b)

    def inplace(self, t: Symbol, name: str, args: tuple, fn) -> Any:
        """An in-place op on a graph value: functionalized (``Capture.mutate``: the new
        value replaces the Symbol's node, a buffer's is written back) when no view can
        see the tensor; else it runs eagerly."""
        out_fn = FUNCTIONAL.get(name)
        if out_fn is not None and t._node.kind in ("call", "placeholder"):
            new = self.value_op(out_fn, t, *args)
            if self.cap.mutate(t, new):
                return t
        return self.brk("unsupported-value-op", f"in-place {name} on a tensor the caller "
                        f"can see", fn, (t, *args))

    # ---- attributes ----------------------------------------------------------------------------

    def load_attr(self, obj: Any, name: str) -> Any:
        cap = self.cap
        if isinstance(obj, Extras):
            o = obj.obj
            if isinstance(o, (list, dict)):
                return getattr(cap.realize(obj), name) if not mutating(o, name) else \
                    BoundExt(obj, name)
            method = getattr(type(o), name, None)
            if isinstance(method, types.FunctionType) and not is_graphgrad(method) \
                    and name not in getattr(o, "__dict__", ()) \
                    and not isinstance(inspect.getattr_static(type(o), name), staticmethod):
                # (self stays an Extras: its reads are guarded)
                return types.MethodType(self.class_method(obj, name), obj)
            return cap.read_attr(obj, name)
        if isinstance(obj, Symbol):
            if name in TENSOR_EAGER_ATTRS:
                if name in ("requires_grad", "grad", "grad_fn", "is_leaf", "data", "_version",
                            "_base"):
                    return self.brk("unsupported-value-op", f"tensor attribute .{name} is only "
                             f"known at run time", getattr, (obj, name))
                return EagerMethod(obj, name)
            if obj.shape is not None and None in tuple(obj.shape):
                if name == "shape":
                    return self.sym_shape(obj)
                if name in ("size", "numel"):   # dynamic dims: sizes as graph values
                    return SizeMethod(self, obj, name)
            if is_inplace_name(name):
                return InplaceMethod(obj, name)
            try:
                out = getattr(obj, name)
                if leaks_stand_in(out):
                    raise TypeError("the attribute is not a graph value")
                return out
            except TypeError as e:
                return self.brk("unsupported-value-op", f"tensor attribute .{name}: {e}", getattr,
                         (obj, name))
        if isinstance(obj, SuperOf):
            return obj.attr(cap, name)
        if isinstance(obj, FuncV):
            raise Unsupported(f"attribute {name} of a function made inside the traced code")
        if isinstance(obj, (types.FunctionType, type)) and name in ("__code__", "__globals__",
                                                                      "__closure__"):
            raise Unsupported(f"function attribute {name}")
        if isinstance(obj, type):
            return cap.class_attr(obj, name)
        return getattr(obj, name)

    def class_method(self, obj: Extras, name: str) -> types.FunctionType:
        """The function ``type(obj).name`` that ``obj.name`` finds on the class, with the
        whole lookup guarded: no instance attribute shadows it, and the class's is the
        same function (monkeypatching either recompiles)."""
        cap = self.cap
        if not cap.concrete:
            cap.guards.add("absent", Attr(obj.source, name), (obj.source, name), cap.where)
            return cap.wrap(getattr(type(obj.obj), name), Attr(Attr(obj.source, "__class__"),
                                                                name))
        return getattr(type(obj.obj), name)

    def sym_shape(self, sym: Symbol) -> tuple:
        from graphgrad.ops import REGISTRY  # noqa: F401 - registry filled before use
        shape = tuple(sym.shape)
        vec = None
        out = []
        for i, d in enumerate(shape):
            if d is not None:
                out.append(d)
                continue
            if vec is None:
                vec = self.cap.builder.shape_of(sym)
            with self.cap.builder.active():
                item = vec[i]
            item.__class__ = SymInt
            out.append(item)
        return Size(out)

    # ---- calls --------------------------------------------------------------------------------

    def call(self, fn: Any, args: list, kwargs: dict) -> Any:
        """Call ``fn``: inline it, call it for real on graph values, fold it, or break."""
        if isinstance(fn, Extras):
            obj = fn.obj
            if isinstance(obj, Module) and type(obj).__call__ is Module.__call__ \
                    and self.no_hooks(fn):
                if "forward" in getattr(obj, "__dict__", ()):   # replaced on the instance
                    return self.call(self.cap.read_attr(fn, "forward"), args, kwargs)
                forward = type(obj).forward
                if isinstance(forward, types.FunctionType):
                    return self.call_function(self.class_method(fn, "forward"),
                                              [fn, *args], kwargs)
            # the Extras itself: the object is fetched from its source at run time
            return self.eager_call(fn, args, kwargs, f"a call of a {type(obj).__name__} "
                                   f"object")
        if isinstance(fn, FuncV):
            return self.inline(fn.code, fn.globals, fn.name, fn.defaults, fn.kwdefaults,
                               fn.closure, args, kwargs, None)
        if isinstance(fn, OperatorV):   # func.laplacian(f) made in the traced code
            return fn.call(self, args, kwargs)
        if fn is super and not args and not kwargs:
            return self.zero_arg_super()
        if isinstance(fn, BoundExt):   # the object is fetched at run time, from its source
            return self.eager_call(MethodCall(fn.name), [fn.ext, *args], kwargs,
                                   f"{type(fn.ext.obj).__name__}.{fn.name} changes an object "
                                   f"the caller can see")
        if isinstance(fn, SizeMethod):
            return fn(*args, **kwargs)
        if isinstance(fn, InplaceMethod):
            return self.inplace(fn.obj, fn.name, tuple(args), MethodCall(fn.name)) \
                if not kwargs else self.brk("unsupported-value-op", f"in-place {fn.name}",
                                            MethodCall(fn.name), (fn.obj, *args), kwargs)
        if isinstance(fn, EagerMethod):
            return self.eager_call(MethodCall(fn.name), [fn.obj, *args], kwargs,
                                   f"Tensor.{fn.name} needs the tensor's value or changes its "
                                   f"state")
        if isinstance(fn, types.MethodType):
            self_v = fn.__self__
            if isinstance(self_v, Symbol):
                return self.native(fn, args, kwargs)
            if isinstance(fn.__func__, types.FunctionType) and classify(fn) == "inline":
                return self.call_function(fn.__func__, [self_v, *args], kwargs)
            return self.by_policy(fn, args, kwargs)
        if isinstance(fn, (types.BuiltinMethodType, types.MethodWrapperType,
                           types.WrapperDescriptorType, types.MethodDescriptorType)):
            owner = getattr(fn, "__self__", None)
            if type(owner) in (list, dict, set, tuple, str, int, float, slice, range):
                return self.fold(fn, args, kwargs)
        return self.by_policy(fn, args, kwargs)

    def zero_arg_super(self) -> Any:
        """``super()`` in an inlined method: the class from its ``__class__`` cell and the
        first argument, as CPython finds them in the frame."""
        f = self.frames[-1]
        cell = f.cells.get("__class__")
        cls = None if cell is None else \
            (cell.cell.cell_contents if isinstance(cell, ExtCell) else cell.value)
        first = f.locals.get(f.code.co_varnames[0]) if f.code.co_argcount else None
        if not isinstance(cls, type) or first is None:
            raise Unsupported("super() outside a method")
        if self.cap.concrete:
            return super(cls, first)
        return SuperOf(cls, first)

    def no_hooks(self, mod: Extras) -> bool:
        """The module has no hooks to run around its forward (guarded: a hook added
        later recompiles). PyTorch skips these guards (``skip_nnmodule_hook_guards``) and
        ignores hooks added after compiling; graphgrad keeps them, since a silently
        skipped hook is a wrong result and a recompile only costs time."""
        cap = self.cap
        hooks = getattr(mod.obj, "_hooks", None)
        src = Attr(mod.source, "_hooks")
        if hooks is None:
            cap.wrap(None, src)
            return True
        lists = [(kind, getattr(hooks, kind)) for kind in ModuleHooks.__slots__]
        if any(lst for _, lst in lists):
            return False   # the module is called for real, hooks and all
        for kind, lst in lists:
            cap.guards.add("len", Attr(src, kind), (type(lst), 0), cap.where)
        return True

    def by_policy(self, fn: Any, args: list, kwargs: dict) -> Any:
        if is_taylor_transform(fn):   # func.jet and friends: expanded into the graph
            return taylor_call(self, fn, args, kwargs)
        kind = classify(fn)
        if kind == "fold":
            return self.fold(fn, args, kwargs)
        if kind == "native":
            return self.native(fn, args, kwargs)
        if kind == "inline":
            return self.call_function(fn, args, kwargs)
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
        mod = getattr(fn, "__module__", None)
        full = f"{mod}.{name}" if mod else name
        return self.eager_call(fn, args, kwargs, f"{full} is not a graphgrad op")

    def eager_call(self, fn, args, kwargs, reason: str):
        return self.brk("unsupported-call", reason, fn, tuple(args), kwargs)

    def fold(self, fn: Any, args: list, kwargs: dict) -> Any:
        cap = self.cap
        if fn is getattr and len(args) >= 2 and isinstance(args[1], str):
            try:
                return self.load_attr(args[0], args[1])
            except AttributeError:
                if len(args) == 3:
                    return args[2]
                raise
        if fn is hasattr and len(args) == 2 and isinstance(args[0], Extras):
            try:
                self.load_attr(args[0], args[1])
                return True
            except AttributeError:
                cap.guards.add("id", args[0].source, args[0].obj, cap.where)
                return False
        if fn is isinstance and args and isinstance(args[0], Symbol):
            tp = cap.eager_type(args[0]) if type(args[0]) is Symbol else \
                (int if type(args[0]) is SymInt else float)
            return issubclass(tp, args[1]) if not isinstance(args[1], tuple) else \
                any(issubclass(tp, c) for c in args[1])
        if fn is type and len(args) == 1 and isinstance(args[0], Extras):
            return cap.wrap(type(args[0].obj), Attr(args[0].source, "__class__"))
        if fn is type and len(args) == 1 and isinstance(args[0], Symbol):
            return cap.eager_type(args[0]) if type(args[0]) is Symbol else \
                (int if type(args[0]) is SymInt else float)
        if fn is len and len(args) == 1 and isinstance(args[0], Symbol) and args[0].shape \
                and args[0].shape[0] is None:
            return self.sym_shape(args[0])[0]
        if any(isinstance(a, (EagerMethod, BoundExt)) for a in (*args, *kwargs.values())):
            raise Unsupported(f"{getattr(fn, '__name__', fn)} of a bound method")
        if any(isinstance(a, (FuncV, ListIter)) for a in (*args, *kwargs.values())):
            return self.eager_call(fn, args, kwargs, f"{getattr(fn, '__name__', fn)} of a "
                                   f"function or iterator made by the traced code")
        if fn not in (isinstance, issubclass, type, callable) and any(
                opaque(a) for a in (*args, *kwargs.values())):
            return self.eager_call(fn, args, kwargs, f"{getattr(fn, '__name__', fn)} of an "
                                   f"object the function did not create")
        real = [cap.realize(a) for a in args]
        kw = {key: cap.realize(v) for key, v in kwargs.items()}
        try:
            out = fn(*real, **kw)
        except TypeError as e:
            if _has_symbol(real) or _has_symbol(kw.values()):
                return self.brk("unsupported-value-op", f"{getattr(fn, '__name__', fn)} on a "
                                f"graph value: {e}", fn, tuple(real), kw)
            raise
        if isinstance(out, (zip, enumerate, map, filter, reversed)) or type(out).__name__ in (
                "list_iterator", "tuple_iterator", "dict_keyiterator", "range_iterator"):
            return ListIter(list(out))
        if type(out) in (type({}.keys()), type({}.values()), type({}.items())):
            return list(out)
        return out

    def native(self, fn: Any, args: list, kwargs: dict) -> Any:
        """A graphgrad function called for real on graph values (ops become nodes)."""
        cap = self.cap
        if any(isinstance(a, (EagerMethod, BoundExt)) for a in (*args, *kwargs.values())):
            raise Unsupported(f"{getattr(fn, '__name__', fn)} of a bound method")
        if any(isinstance(a, (FuncV, ListIter)) or opaque(a)
               for a in (*args, *kwargs.values())):
            return self.eager_call(fn, args, kwargs, f"{getattr(fn, '__qualname__', fn)} of a "
                                   f"function made by the traced code or an outside object")
        real = [cap.realize(a) for a in args]
        kw = {key: cap.realize(v) for key, v in kwargs.items()}
        name = getattr(fn, "__name__", "")
        if name in ("reshape", "view") and has_symint((*real, *kw.values())):
            from graphgrad.ops import REGISTRY
            shape = tuple(real[0]) if len(real) == 1 and isinstance(real[0], tuple) else \
                tuple(real)
            with cap.builder.active():
                return REGISTRY["Reshape"].apply(fn.__self__, shape=shape)
        if has_symint((*real, *kw.values())):
            return self.eager_call(fn, args, kwargs, f"{name} of a dynamic size")
        dynamic_in = any(isinstance(a, Symbol) and a.shape is not None and None in a.shape
                         for a in (*real, *kw.values()))
        before = len(cap.graph.nodes)
        try:
            with cap.builder.active():
                out = fn(*real, **kw)
        except Exception as e:  # noqa: BLE001 - anything it cannot do on graph values
            del cap.graph.nodes[before:]  # unfinished work is dropped (pure nodes only)
            return self.eager_call(fn, real, kw, f"{getattr(fn, '__qualname__', name)} "
                                   f"cannot run on graph values ({type(e).__name__}: {e})")
        if dynamic_in and has_real_tensor(out) or leaks_stand_in(out):
            del cap.graph.nodes[before:]
            return self.eager_call(fn, real, kw, f"{name} of a graph value makes a tensor "
                                   f"outside the graph")
        return out

    def call_function(self, fn: types.FunctionType, args: list, kwargs: dict) -> Any:
        closure = ()
        if fn.__closure__:
            closure = tuple(ExtCell(c, fn) for c in fn.__closure__)
        defaults, kwdefaults = self.cap.function_parts(fn)
        return self.inline(fn.__code__, fn.__globals__, fn.__name__, defaults, kwdefaults,
                           closure, args, kwargs, fn)

    def inline(self, code, globals_, name, defaults, kwdefaults, closure, args, kwargs, fn):
        info = code_info(code)
        if info.unsupported is not None:
            if fn is not None and is_graphgrad(fn):
                return self.native(fn, args, kwargs)
            real_fn = fn if fn is not None else None
            if real_fn is None:
                raise Unsupported(f"{name}: {info.unsupported}")
            return self.eager_call(real_fn, args, kwargs, f"{name} uses unsupported "
                                   f"bytecode ({info.unsupported})")
        if len(self.frames) >= config.max_inline_depth:
            raise Unsupported(f"inlining deeper than {config.max_inline_depth} frames")
        try:
            bound = bind_arguments(code, defaults, kwdefaults, args, kwargs)
        except TypeError:
            if fn is not None:
                return self.eager_call(fn, args, kwargs, f"bad arguments for {name}")
            raise
        f = Frame(code, globals_, fn)
        for k, v in bound.items():
            f.locals[k] = tuple(v) if isinstance(v, tuple) else v
        for i, cname in enumerate(code.co_freevars):
            f.cells[cname] = closure[i]
        self.frames.append(f)
        return INLINED


# opcode name -> handler: every supported opcode has its method (else this fails on import)
HANDLERS = {name: getattr(BytecodeInterpreter, name) for name in SUPPORTED}


_UNCHECKED = {"FOR_ITER", "PRECALL", "CALL", "END_FOR", "KW_NAMES"}


def _check_stack_effect(f: Frame, inst, height: int) -> None:
    """The handler changed the stack as CPython's ``dis.stack_effect`` says (a bug
    detector, on in the tests: Thunder's technique)."""
    if inst.opname in _UNCHECKED:
        return
    jumped = f.pc != f.index[inst.offset] + 1
    try:
        want = dis.stack_effect(inst.opcode, inst.arg, jump=jumped) \
            if inst.opcode in dis.hasjrel or inst.opcode in dis.hasjabs else \
            dis.stack_effect(inst.opcode, inst.arg)
    except ValueError:
        return
    got = len(f.stack) - height
    if got != want:
        raise AssertionError(f"dynamo interpreter: {inst.opname} {inst.argrepr} at "
                             f"{f.where()} changed the stack by {got}, CPython by {want}")


class _Break(Exception):  # noqa: N818 - a signal, not an error
    def __init__(self, kind, reason, fn, args, kwargs, mode):
        self.kind, self.reason, self.fn = kind, reason, fn
        self.args, self.kwargs, self.mode = args, kwargs, mode
