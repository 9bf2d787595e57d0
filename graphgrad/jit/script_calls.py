"""Layer ``jit``: how ``graphgrad.jit.script`` compiles a call (the ``Calls`` part of its
compiler).

A callee is resolved at compile time and sorted: graphgrad functions, tensor methods
and graphgrad's own ``nn`` modules are called on the Symbols (their ops record
themselves, so every op is the one of ``graphgrad.ops``); user functions and user
modules are compiled from their source and inlined; pure Python builtins run at compile
time; anything else (NumPy, the standard library, C functions) is a ``ScriptError``
with TorchScript's wording. It also notes when graphgrad code reads the rank of an
input whose rank is unknown: such a generic graph is not run (``scripting``).
"""

from __future__ import annotations

import ast
import operator
from typing import TYPE_CHECKING

from graphgrad import ops
from graphgrad.backend import xp
from graphgrad.func.pytree import tree_flatten
from graphgrad.graph import Node, Spec, Symbol, symbol
from graphgrad.graph.interpreter import as_tensor
from graphgrad.graph.python_call import Arg, split_call
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Value
from graphgrad.tensor.creation import default_generator

from .script_errors import ScriptError
from .script_values import (MATH, ShapeValue, TupleResult, classify, describe,
                            is_library_module, is_module)

if TYPE_CHECKING:
    from .script_compiler import Frame

__all__ = ["Calls", "as_eager", "as_bool_tensor", "unknown_rank"]

_F64 = xp.dtype(xp.float64)
_F32 = xp.dtype(xp.float32)
# random functions that would be frozen at compile time: rand, randn, randint and their
# *_like forms become random nodes (ScriptBuilder.batched_random); these have none
_RANDOM = {"randperm", "normal", "bernoulli", "multinomial", "poisson"}
# builtins that are pure functions of their arguments: run at compile time (on Symbols
# they call Tensor methods, which build nodes)
_PURE = {abs, min, max, sum, len, range, enumerate, zip, reversed, sorted, tuple, list,
         isinstance, issubclass, int, float, bool, str, round, pow, divmod, hasattr, getattr,
         any, all, repr, type, slice}
# reductions over all elements (no dim): compiled on x.reshape(-1) when x's rank is unknown
_FULL_REDUCE = {"sum", "mean", "prod", "amax", "amin", "max", "min", "norm", "std", "var",
                "any", "all", "logsumexp_all", "count_nonzero"}
# graphgrad functions (and methods) that may return several tensors: a call of one that
# fails for want of a rank is a deferred call whose items are getitem nodes (TupleResult)
_MULTI_OUTPUT = {"max", "min", "sort", "topk", "split", "chunk", "unbind", "kthvalue",
                 "median", "mode", "var_mean", "std_mean", "aminmax", "unique", "frexp",
                 "tensor_split", "hsplit", "vsplit", "dsplit", "meshgrid", "broadcast_tensors",
                 "qr", "svd", "eig", "eigh", "slogdet", "lstsq", "cummax", "cummin",
                 "histogram", "nonzero", "where", "lu", "sort_by"}


# of those, the ones returning a (values, indices) named tuple; max, min, median and mode
# only when given a dim (else one tensor)
_VALUES_INDICES = {"max", "min", "median", "mode", "sort", "topk", "kthvalue", "cummax",
                   "cummin"}
_DIM_OPTIONAL = {"max", "min", "median", "mode"}



class Calls:
    """Mixin of ``Compiler``: calls, truth values."""

    # ---- calls -------------------------------------------------------------------------

    def call(self, fn, args: list, kwargs: dict, e: ast.Call, fr: Frame):
        func_node = e.func
        if isinstance(fn, ShapeValue):
            raise fr.error("shape of unknown rank", e, fn.rank_error())
        method_of = getattr(fn, "__self__", None)
        if isinstance(method_of, Symbol):
            # the method's name as written: the bound function of x.split is _split_method
            name = func_node.attr if isinstance(func_node, ast.Attribute) else fn.__name__
            return self.tensor_method(method_of, name, args, kwargs, e, fr)
        if _hashable(fn) and fn in MATH:
            if any(isinstance(a, Symbol) for a in args):
                return self.apply(getattr(ops, MATH[fn]), tuple(args), e, fr)
            return self.apply(fn, tuple(args), e, fr, kwargs)
        if _hashable(fn) and fn in _PURE:
            return self.builtin(fn, args, kwargs, e, fr)
        wrapped = getattr(fn, "__wrapped_script__", None)
        if wrapped is not None:  # another scripted function: inline its source
            return self.inline(wrapped[0], args, kwargs, e, fr, self_obj=wrapped[1])
        if is_module(fn):
            if is_library_module(fn):
                self.register_module(fn)
                return self.library(fn, args, kwargs, e, fr)
            forward = type(fn).forward
            return self.inline(forward, args, kwargs, e, fr, self_obj=fn)
        kind = classify(fn)
        if kind == "graphgrad":
            name = getattr(fn, "__name__", "")
            if name in _RANDOM:
                raise fr.error("random functions aren't supported", func_node,
                               f"{describe(fn)} draws random numbers, and graphgrad's IR has "
                               f"no random node for it (rand, randn, randint and their *_like "
                               f"forms have one), so a scripted graph would freeze one draw")
            if name in ("reshape", "view") and _symbolic_sizes(args[1:]):
                return self.dyn_reshape(args[0], args[1:], e, fr)
            if name in _FULL_REDUCE and len(args) == 1 and not kwargs and \
                    isinstance(args[0], Symbol):
                args = [self.flat(args[0])]
            return self.library(fn, args, kwargs, e, fr)
        if kind == "user":
            return self.inline(fn, args, kwargs, e, fr)
        if kind == "builtin":
            raise fr.error("Python builtin is not supported", func_node,
                           f"Python builtin {fn!r} is currently not supported in "
                           f"graphgrad.jit.script")
        raise fr.error("Python function is not supported", func_node,
                       f"Python value {describe(fn)} (a {type(fn).__name__} from outside "
                       f"graphgrad) is currently not supported in graphgrad.jit.script: only "
                       f"graphgrad functions, tensor methods and Python functions whose "
                       f"source it can compile can be called")

    def register_module(self, mod) -> None:
        """Lift a module's parameters and buffers under their names (read at call time)."""
        owned = id(mod) in self.module_names   # the scripted module's own: its attributes
        prefix = self.module_names.get(id(mod), type(mod).__name__.lower())
        for key in ("_parameters", "_buffers"):
            for name, value in mod.__dict__.get(key, {}).items():
                if value is not None:
                    path = f"{prefix}.{name}" if prefix else name
                    self.b.lifts.node(value, path, lambda m=mod, n=name: getattr(m, n),
                                      attribute=path if owned else None)
        for child in mod.__dict__.get("_modules", {}).values():
            if child is not None:
                self.register_module(child)

    def tensor_method(self, x: Symbol, name: str, args: list, kwargs: dict, e, fr: Frame):
        if name == "size":
            shape = self.shape_of(x, ast.unparse(e.func.value))
            if not args and not kwargs:
                return shape
            dim = args[0] if args else kwargs.get("dim")
            if not isinstance(dim, int):
                raise fr.error("size(dim)", e, "size(dim) takes a Python int")
            return self.mark_scalar(shape[dim])
        if name == "numel" and not args and not kwargs and self.generic and \
                unknown_rank([x], {}, self.flats):
            # the product of the run-time shape (a rank-1 vector once flattened): a Python
            # int when the graph runs, whatever the rank
            sizes = self.flat(self.shape_of(x, ast.unparse(e.func.value)).sym)
            return self.mark_scalar(self.apply(lambda v: v.prod(), (sizes,), e, fr))
        if name in ("dim", "ndimension"):
            raise fr.error("tensor rank unknown", e, f"{ast.unparse(e)}: a Tensor's rank is "
                                                     f"not known at compile time")
        if name in ("item", "tolist", "numpy", "__bool__", "__int__", "__float__"):
            raise fr.error(f"Tensor.{name} isn't supported", e,
                           f"{ast.unparse(e)} converts a tensor to a Python value, which "
                           f"exists only when the graph runs")
        if name in ("reshape", "view") and _symbolic_sizes(args):
            return self.dyn_reshape(x, args, e, fr)
        if name in _FULL_REDUCE and not args and not kwargs:
            x = self.flat(x)
        return self.library(getattr(x, name), args, kwargs, e, fr, name)

    def flat(self, x: Symbol) -> Symbol:
        """``x.reshape(-1)``, whose rank (1) is known even when ``x``'s is not: a reduction
        over all elements of it is right for every rank of ``x``."""
        spec = x._node.spec
        if not self.generic or spec.shape is not None:
            return x
        node = self.b.graph.call(REGISTRY["Reshape"], [self.b.node_of(x)], {"shape": (-1,)},
                                 Spec((None,), spec.dtype), deps=self.b.deps())
        self.flats.add(node)
        return symbol(node)  # rank 1: the reduction's dims are right

    def dyn_reshape(self, x, sizes: list, e, fr: Frame):
        """reshape/view with sizes known at run time only (Dyn params of the IR)."""
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = list(sizes[0])
        return self.apply(lambda t: REGISTRY["Reshape"].apply(t, shape=tuple(sizes)), (x,),
                          e, fr)

    def builtin(self, fn, args: list, kwargs: dict, e, fr: Frame):
        tensors = [a for a in args if isinstance(a, (Symbol, ShapeValue))]
        if any(isinstance(a, ShapeValue) for a in tensors) and fn in (len, tuple, list,
                                                                    enumerate, zip, reversed,
                                                                    sorted, sum):
            raise fr.error("shape of unknown rank", e, next(
                a for a in tensors if isinstance(a, ShapeValue)).rank_error())
        if tensors and fn in (len, tuple, list, enumerate, zip, reversed, sorted, range):
            raise fr.error(f"{fn.__name__}() of a tensor isn't supported", e,
                           f"{fn.__name__}() of a tensor isn't supported: its length is not "
                           f"known at compile time")
        if len(args) == 1 and isinstance(args[0], Symbol):
            x = args[0]
            if fn in (int, float):
                dtype = xp.dtype(xp.int64 if fn is int else xp.float64)
                return self.mark_scalar(self.apply(lambda t: REGISTRY["Cast"].apply(
                    t, dtype=dtype), (x,), e, fr))
            if fn is bool:
                return self.predicate(x)
            if fn is abs:
                return self.apply(lambda t: t.abs(), (x,), e, fr)
        if fn in (min, max) and len(args) == 2 and tensors:
            op = ops.minimum if fn is min else ops.maximum
            a, b = (as_eager(xp.asarray(v)) if not isinstance(v, Symbol) else v for v in args)
            return self.apply(op, (a, b), e, fr)
        return self.apply(fn, tuple(args), e, fr, kwargs)

    def library(self, fn, args: list, kwargs: dict, e, fr: Frame, name: str | None = None):
        """Call graphgrad code on Symbols: its ops record themselves into the graph."""
        owner = getattr(fn, "__self__", None)
        operands = [owner, *args] if isinstance(owner, Symbol) else list(args)
        unknown = self.generic and unknown_rank(operands, kwargs, self.flats)
        first = len(self.b.graph.nodes)
        rng = default_generator.rng
        state = rng.bit_generator.state
        try:
            value = fn(*args, **kwargs)
        except ScriptError:
            raise
        except Exception as err:  # noqa: BLE001 - reported with the source line
            if unknown:
                return self.deferred_any(fn, args, kwargs, first, e, name)
            raise fr.error(f"call of {describe(fn)} failed", e,
                           f"{type(err).__name__} in {_text(e)}: {err}") from err
        if default_generator.rng is not rng or rng.bit_generator.state != state:
            rng.bit_generator.state = state  # the draw is not the program's: undo it
            raise fr.error("random functions aren't supported", e,
                           f"{_text(e)} draws random numbers that no random node of "
                           f"graphgrad's IR reproduces (a user's Generator, an "
                           f"initializer), so a scripted graph would freeze one draw")
        if self.generic and not self.rank_free(first, value) and \
                unknown_rank(operands + list(kwargs.values()), {}, self.flats):
            if isinstance(value, Symbol):
                return self.deferred(fn, args, kwargs, first, name)
            self.needs_rank(operands + list(kwargs.values()), _text(e))
        return value

    def deferred(self, fn, args, kwargs: dict, first: int, method: str | None = None
                 ) -> Symbol:
        """A call whose ops need a rank unknown at compile time: the nodes it added are
        removed and it is one ``call_function``/``call_method`` node (graph.python_call),
        made when the graph runs, so the ops' shape rules are applied to each call's
        values and the one graph serves inputs of every rank (TorchScript compiles such
        code once, for every shape). ``method``: the tensor method's name as the code
        called it (``split``, where the bound function is named otherwise)."""
        g = self.b.graph
        kept = [n for n in g.nodes[first:] if n.kind == "placeholder"]  # lifted parameters
        removed = set(g.nodes[first:]) - set(kept)
        del g.nodes[first:]
        g.nodes.extend(kept)
        self.b.consts = {k: n for k, n in self.b.consts.items() if n not in removed}
        owner = getattr(fn, "__self__", None)
        qualname = self.module_names.get(id(fn)) if is_module(fn) else None
        if qualname is not None and not kwargs and all(isinstance(a, Symbol) for a in args):
            # a submodule: called as self.<qualname> when the graph runs (TorchScript's
            # prim::CallMethod), so it reads its own parameters and training flag then
            inputs = tuple(self.b.node_of(a) for a in args)
            node = g.add("call_module", qualname or "self", inputs=inputs,
                         params={"target": qualname},
                         spec=Spec(None, args[0]._node.spec.dtype), deps=self.b.deps())
            return symbol(node)
        if isinstance(owner, Symbol):
            kind, target, args = "call_method", method or fn.__name__, (owner, *args)
        else:
            kind, target = "call_function", fn
        values, args_s, kwargs_s = split_call(
            tuple(args), dict(kwargs),
            lambda v: isinstance(v, Symbol) or (isinstance(v, Value) and self.b.lifts.wants(v)))
        inputs = [self.b.node_of(v) for v in values]
        dtype = next((i.spec.dtype for i in inputs if isinstance(i.spec, Spec)), _F32)
        name = target if isinstance(target, str) else getattr(target, "__name__", "call")
        node = g.add(kind, name.strip("_") or "call", inputs=tuple(inputs),
                     params={"target": target, "args": args_s, "kwargs": kwargs_s},
                     spec=Spec(None, dtype), deps=self.b.deps())
        return symbol(node)

    def deferred_any(self, fn, args, kwargs: dict, first: int, e,
                     method: str | None = None) -> Symbol | TupleResult:
        """``deferred``, for a call that returns one tensor or several (a ``TupleResult``
        whose items are ``operator.getitem`` nodes on the call's node)."""
        name = method or getattr(fn, "__name__", "")
        owner = getattr(fn, "__self__", None)
        given = len(args) + isinstance(owner, Symbol) + len(kwargs)   # with the input
        if name not in _MULTI_OUTPUT or (name in _DIM_OPTIONAL and given < 2):
            return self.deferred(fn, args, kwargs, first, method)
        sym = self.deferred(fn, args, kwargs, first, method)
        if name in _VALUES_INDICES:
            return TupleResult(_text(e), sym, ("values", "indices"),
                               (sym._node.spec.dtype, xp.dtype(xp.int64)))
        return TupleResult(_text(e), sym, ("min", "max") if name == "aminmax" else ())

    def tuple_item(self, result: TupleResult, k: int) -> Symbol:
        """Item ``k`` of a deferred call's tuple: ``operator.getitem(call, k)`` when the
        graph runs."""
        src = self.b.node_of(result.sym)
        dtype = result.dtypes[k] if -len(result.dtypes) <= k < len(result.dtypes) \
            else src.spec.dtype
        node = self.b.graph.add("call_function", "getitem", inputs=(src,),
                                params={"target": operator.getitem, "args": (Arg(0), k),
                                        "kwargs": {}},
                                spec=Spec(None, dtype), deps=self.b.deps())
        return symbol(node)

    def rank_free(self, first: int, value) -> bool:
        """Whether the call that added the graph's nodes from ``first`` on and returned
        ``value`` is right for inputs of every rank: each op it applied to a value of
        unknown rank is ``rank_free`` (an attribute of the op class: elementwise ops,
        matmul), and it returned tensors, not Python values read from shapes."""
        leaves, _ = tree_flatten(value)
        if not all(isinstance(v, Symbol) for v in leaves):
            return False
        for node in self.b.graph.nodes[first:]:
            if node.kind == "call" and not node.op.rank_free and any(
                    isinstance(i, Node) and isinstance(i.spec, Spec) and i.spec.shape is None
                    and i not in self.flats for i in node.inputs):
                return False
        return True

    def needs_shapes(self, args, e, err: Exception) -> Symbol:
        """graphgrad code read static shapes of an operand of unknown rank: note it (this
        call is compiled again, with the shapes, when the function is called) and stand
        in for its result."""
        self.incomplete.append(f"{_text(e)}: {type(err).__name__}: {err}")
        dtype = next((a._node.spec.dtype for a in args if isinstance(a, Symbol)),
                     xp.dtype(xp.float32))
        return symbol(self.b.graph.add("placeholder", "needs_shapes", spec=Spec(None, dtype)))

    def needs_rank(self, operands: list, what: str) -> None:
        """Note that graphgrad code reads the rank of an operand of unknown rank: Python
        code in it may decide on ``x.ndim``, which a Symbol of unknown rank reports as 0,
        so the generic graph would be wrong for other ranks (it is not run)."""
        if self.generic and not self.rank_bound and unknown_rank(operands, {}, self.flats):
            self.rank_bound.append(f"{what} needs the rank of its input")

    def apply(self, fn, args: tuple, e, fr: Frame, kwargs: dict | None = None):
        """Apply a Python operator or builtin at compile time (building nodes when an
        operand is a Symbol); failures become ScriptErrors at ``e``."""
        for a in args:
            if isinstance(a, ShapeValue):
                raise fr.error("shape of unknown rank", e, a.rank_error())
        scalar = not kwargs and self.scalar_operands(args)
        if scalar:
            args = self.python_promotion(fn, args)
        first = len(self.b.graph.nodes)
        try:
            result = fn(*args, **(kwargs or {}))
        except ScriptError:
            raise
        except Exception as err:  # noqa: BLE001 - reported with the source line
            if "as a Python `bool`" in str(err):
                raise fr.error("a tensor used as a Python bool", e,
                               f"{ast.unparse(e)} uses a tensor as a Python bool outside an "
                               f"if or while condition") from None
            if self.generic and unknown_rank(list(args), kwargs or {}, self.flats):
                return self.deferred_any(fn, args, kwargs or {}, first, e)
            raise fr.error(type(err).__name__, e, f"{type(err).__name__}: {err}") from err
        return self.mark_scalar(result) if scalar else result

    # ---- Python numbers held in 0-d tensors ----------------------------------------------
    # An int or float argument, a loop counter, a size read from a shape: TorchScript types
    # them int/float, and Python arithmetic on them stays in double precision, where a 0-d
    # int64 tensor times 0.1 would give float32 (PyTorch's promotion). The compiler keeps
    # the set of their nodes and promotes such arithmetic as Python does.

    def is_scalar(self, v) -> bool:
        return isinstance(v, Symbol) and v._node in self.scalars

    def mark_scalar(self, v):
        if isinstance(v, Symbol):
            self.scalars.add(v._node)
        return v

    def scalar_operands(self, args) -> bool:
        """All operands are Python numbers or scalar Symbols, and one is a Symbol."""
        return any(self.is_scalar(a) for a in args) and all(
            self.is_scalar(a) or (isinstance(a, (int, float)) and not isinstance(a, Value))
            for a in args)

    def python_promotion(self, fn, args: tuple) -> tuple:
        """int scalars become float64 where Python would compute in float: next to a
        float, and in true division."""
        floats = fn is operator.truediv or any(
            isinstance(a, float) or (self.is_scalar(a) and a._node.spec.dtype.kind == "f")
            for a in args)
        if not floats:
            return args
        return tuple(REGISTRY["Cast"].apply(a, dtype=_F64) if self.is_scalar(a)
                     and a._node.spec.dtype.kind != "f" else a for a in args)

    # ---- truth values ------------------------------------------------------------------

    def truth(self, v, e: ast.AST, fr: Frame) -> bool:
        if isinstance(v, ShapeValue):
            raise fr.error("shape of unknown rank", e, v.rank_error())
        try:
            return bool(v)
        except Exception as err:  # noqa: BLE001 - reported with the source line
            raise fr.error("not a condition", e, f"{type(err).__name__}: {err}") from None

    def predicate(self, v):
        """A tensor as a condition: bool dtype (``x != 0`` otherwise, as ``bool(x)``)."""
        dtype = v._node.spec.dtype if isinstance(v, Symbol) else v._array.dtype
        if xp.dtype(dtype).kind == "b":
            return v
        return v != 0




def _text(e: ast.AST) -> str:
    """The source of a call's callee (``gg.tanh``), for messages."""
    return ast.unparse(e.func if isinstance(e, ast.Call) else e)


def _hashable(v) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def as_eager(arr):
    """An eager tensor of ``arr`` (a constant once a graph uses it)."""
    return as_tensor(arr)


def as_bool_tensor(v):
    return v if isinstance(v, Symbol) else as_eager(xp.asarray(bool(v)))


def _symbolic_sizes(sizes) -> bool:
    flat = list(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    return any(isinstance(s, Symbol) for s in flat)


def unknown_rank(args, kwargs, known: set = frozenset()) -> bool:
    """Whether a Symbol of unknown rank is among the arguments (nested too); ``known``:
    nodes whose rank the compiler knows although their Spec does not say it."""
    leaves, _ = tree_flatten([list(args), dict(kwargs)])
    return any(isinstance(a, Symbol) and a._node.spec is not None and
               a._node.spec.shape is None and a._node not in known for a in leaves)
