"""Layer ``jit``: the compiler of ``graphgrad.jit.script``: a walk over a function's
``ast`` that emits IR nodes.

Statements run at compile time, in order, on *script values*: Symbols (graph values,
built by calling graphgrad ops and tensor methods under a ``ScriptBuilder``, so every
op is the one of ``graphgrad.ops``), Python constants (folded now: an ``if`` on one
picks its branch at compile time, a ``for`` over a tuple or a ModuleList unrolls) and
shapes of unknown length. Control flow that depends on a tensor becomes ``cond`` and
``while_loop`` nodes (``script_control``). Calls of other user functions and of user
``nn.Module``s are compiled from their source and inlined; graphgrad functions and
graphgrad's own modules are called on the Symbols. Anything else is a ``ScriptError``
pointing at the user's source line.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
from dataclasses import dataclass

from graphgrad.backend import xp
from graphgrad.graph import Spec, Symbol, symbol
from graphgrad import ops
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Value
from graphgrad.tensor.creation import default_generator

from .script_control import (Undefined, assigned_names, build_cond, build_while,
                             has_return)
from .script_errors import ScriptError, Source, source_of
from .script_values import MATH, ShapeValue, classify, describe, is_library_module, is_module

__all__ = ["Compiler", "Frame", "Ret"]

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow, ast.MatMult: operator.matmul, ast.BitAnd: operator.and_,
           ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift}
_OPTEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|",
           ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
           ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne,
           ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
# statements TorchScript names the same way when it refuses them
_UNSUPPORTED = {ast.Try: "try blocks aren't supported", ast.With: "with statements aren't "
                "supported", ast.Global: "global variables aren't supported",
                ast.Nonlocal: "nonlocal variables aren't supported", ast.Delete: "del "
                "statements aren't supported", ast.Import: "import statements aren't "
                "supported", ast.ImportFrom: "import statements aren't supported",
                ast.FunctionDef: "function definitions aren't supported",
                ast.ClassDef: "class definitions aren't supported",
                ast.Raise: "raise statements aren't supported",
                ast.Break: "break statements aren't supported",
                ast.Continue: "continue statements aren't supported",
                ast.AsyncFunctionDef: "async function definitions aren't supported",
                ast.AsyncFor: "async for loops aren't supported",
                ast.AsyncWith: "async with statements aren't supported",
                ast.Match: "match statements aren't supported"}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED[ast.TryStar] = "try blocks aren't supported"
_UNSUPPORTED_EXPR = {ast.Lambda: "Lambda aren't supported",
                     ast.NamedExpr: "assignment expressions aren't supported",
                     ast.Await: "await expressions aren't supported",
                     ast.Yield: "yield expressions aren't supported",
                     ast.YieldFrom: "yield expressions aren't supported",
                     ast.JoinedStr: "f-strings aren't supported",
                     ast.Set: "set literals aren't supported",
                     ast.SetComp: "set comprehensions aren't supported",
                     ast.DictComp: "dict comprehensions aren't supported"}
# random creation functions would be frozen at compile time: the IR has no random op
_RANDOM = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
           "normal", "bernoulli", "multinomial", "poisson"}
# builtins that are pure functions of their arguments: run at compile time (on Symbols
# they call Tensor methods, which build nodes)
_PURE = {abs, min, max, sum, len, range, enumerate, zip, reversed, sorted, tuple, list,
         isinstance, issubclass, int, float, bool, str, round, pow, divmod, hasattr, getattr,
         any, all, repr, type, slice}
_MUTABLE = (list, dict, set, bytearray)
# reductions over all elements (no dim): compiled on x.reshape(-1) when x's rank is unknown
_FULL_REDUCE = {"sum", "mean", "prod", "amax", "amin", "max", "min", "norm", "std", "var",
                "any", "all", "logsumexp_all", "count_nonzero"}
# graphgrad functions, tensor methods and modules that never look at their input's rank
# (elementwise ops and matmul): a graph built with them for inputs of unknown rank is
# right for every rank
_RANK_FREE = {"add", "sub", "mul", "div", "true_divide", "neg", "abs", "exp", "log", "log1p",
              "expm1", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "sin", "cos", "tan",
              "sinh", "cosh", "asin", "acos", "atan", "erf", "floor", "ceil", "round",
              "trunc", "sign", "reciprocal", "pow", "where", "maximum", "minimum", "clamp",
              "clip", "matmul", "mm", "lt", "le", "gt", "ge", "eq", "ne", "logical_and",
              "logical_or", "logical_not", "logical_xor", "atan2", "fmod", "remainder",
              "isnan", "isinf", "isfinite", "square", "softplus", "gelu", "silu",
              "leaky_relu", "elu", "to", "float", "double", "clone", "detach",
              "Linear", "ReLU", "Tanh", "Sigmoid", "GELU", "SiLU", "Softplus", "Identity",
              "LeakyReLU", "ELU"}


class Ret:
    """The value a ``return`` produced (propagates out of the blocks)."""

    def __init__(self, value):
        self.value = value


@dataclass
class Frame:
    """One function being compiled: its source, variables and where it was called."""

    src: Source
    env: dict
    globals: dict
    closure: dict
    calls: tuple = ()                 # (caller Source, call node), innermost first
    loops: int = 0                    # depth of loops around the current statement
    graph_loops: int = 0              # of which while_loop nodes (not unrolled)

    def child(self, env: dict, loops: int = 0, graph_loops: int = 0) -> Frame:
        """The frame of a branch or loop body: the same function, its own variables."""
        return Frame(self.src, env, self.globals, self.closure, self.calls,
                     self.loops + loops, self.graph_loops + graph_loops)

    def error(self, construct: str, node: ast.AST, detail: str | None = None) -> ScriptError:
        return self.src.error(construct, node, detail, self.calls)


class Compiler:
    """Compiles functions into the graph of ``builder`` (``generic``: the inputs' ranks
    are unknown; otherwise they are the call's shapes)."""

    def __init__(self, builder, generic: bool, module_names: dict | None = None):
        self.b = builder
        self.generic = generic
        self.incomplete: list[str] = []   # library calls that failed without shapes
        self.rank_bound: list[str] = []   # library calls that may depend on the rank
        self.inputs: set = set(builder.graph.inputs)  # the user's arguments (placeholders)
        self.active: list = []            # functions being compiled (no recursion)
        self.module_names = module_names or {}
        self._sources: dict = {}

    # ---- functions ---------------------------------------------------------------------

    def source(self, fn) -> Source:
        src = self._sources.get(fn)
        if src is None:
            src = self._sources[fn] = source_of(fn)
        return src

    def frame(self, fn, src: Source, env: dict, calls: tuple = ()) -> Frame:
        closure = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
        return Frame(src, env, fn.__globals__, closure, calls)

    def run_function(self, fr: Frame):
        """Compile the body of ``fr``'s function; its return value (None if it falls off
        the end)."""
        body = fr.src.tree.body
        r = self.block(body, fr, [])
        return r.value if isinstance(r, Ret) else None

    def inline(self, fn, args: list, kwargs: dict, node: ast.AST, fr: Frame, self_obj=None):
        """Compile a call of a user function into the current graph."""
        target = getattr(fn, "__func__", fn)
        if self_obj is None and inspect.ismethod(fn):
            self_obj = fn.__self__
        key = (target, id(self_obj))
        if key in self.active:
            raise fr.error("recursive calls aren't supported", node,
                           f"recursive call of {target.__qualname__!r}: graphgrad.jit.script "
                           f"inlines calls, so recursion aren't supported")
        src = self.source(target)
        try:
            bound = inspect.signature(target).bind(
                *([self_obj] if self_obj is not None else []), *args, **kwargs)
        except TypeError as e:
            raise fr.error("wrong arguments", node, f"{target.__qualname__}() {e}") from None
        bound.apply_defaults()
        env = dict(bound.arguments)
        for p in inspect.signature(target).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise src.error("variadic arguments aren't supported", src.tree,
                                calls=((fr.src, node), *fr.calls))
        callee = self.frame(target, src, env, ((fr.src, node), *fr.calls))
        self.active.append(key)
        try:
            return self.run_function(callee)
        finally:
            self.active.pop()

    # ---- statements --------------------------------------------------------------------

    def block(self, stmts: list, fr: Frame, rest: list):
        """Run ``stmts``; ``rest`` are the statement lists that follow (the enclosing
        blocks' remainders: an ``if`` on a tensor with a ``return`` inside compiles them
        into both branches). A ``Ret`` when the block returned."""
        for k, s in enumerate(stmts):
            r = self.stmt(s, fr, [stmts[k + 1:], *rest])
            if r is not None:
                return r
        return None

    def stmt(self, s: ast.stmt, fr: Frame, rest: list):
        kind = type(s)
        if kind in _UNSUPPORTED:
            raise fr.error(_UNSUPPORTED[kind], s)
        method = getattr(self, "s_" + kind.__name__, None)
        if method is None:
            raise fr.error(f"{kind.__name__} statements aren't supported", s)
        return method(s, fr, rest)

    def s_Pass(self, s, fr, rest):
        return None

    def s_Expr(self, s, fr, rest):
        if isinstance(s.value, ast.Constant):  # a docstring
            return None
        self.expr(s.value, fr)
        return None

    def s_Return(self, s, fr, rest):
        if fr.graph_loops:
            raise fr.error("return statements inside loops aren't supported", s,
                           "return statements inside a loop on a tensor aren't supported")
        return Ret(None if s.value is None else self.expr(s.value, fr))

    def s_Assign(self, s, fr, rest):
        value = self.expr(s.value, fr)
        for t in s.targets:
            self.assign(t, value, fr, s)
        return None

    def s_AnnAssign(self, s, fr, rest):
        if s.value is not None:
            self.assign(s.target, self.expr(s.value, fr), fr, s)
        return None

    def s_AugAssign(self, s, fr, rest):
        if not isinstance(s.target, ast.Name):
            raise fr.error("augmented assignment to this target isn't supported", s.target,
                           "augmented assignment is supported on variables only (it is "
                           "compiled out of place: x = x + y)")
        old = self.name(s.target, fr)
        if isinstance(old, Symbol):
            self.check_in_place(s.target.id, old, s, fr)
        value = self.apply(_BINOPS[type(s.op)], (old, self.expr(s.value, fr)), s, fr)
        fr.env[s.target.id] = value
        return None

    def check_in_place(self, name: str, old: Symbol, s: ast.AST, fr: Frame) -> None:
        """``x += y`` updates a tensor in place in eager PyTorch; compiled out of place it
        is the same only when nothing else sees the tensor."""
        others = [n for n, v in fr.env.items() if n != name and isinstance(v, Symbol)
                  and v._node is old._node]
        if others or old._node in self.inputs:
            who = (f"variable {others[0]!r} refers to the same tensor" if others else
                   f"{name!r} is an argument of the function (the caller's tensor)")
            raise fr.error("in-place update of a shared tensor isn't supported", s,
                           f"{ast.unparse(s)} updates a tensor in place, and {who}: "
                           f"graphgrad.jit.script compiles it out of place (write "
                           f"{name} = {name} {_OPTEXT[type(s.op)]} ...)")

    def assign(self, target: ast.expr, value, fr: Frame, stmt: ast.AST) -> None:
        if isinstance(target, ast.Name):
            fr.env[target.id] = value
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            items = self.unpack(value, len(target.elts), target, fr)
            for t, v in zip(target.elts, items, strict=True):
                self.assign(t, v, fr, stmt)
            return
        if isinstance(target, ast.Subscript):
            raise fr.error("subscript assignment isn't supported", target,
                           "subscript assignment (x[i] = v) isn't supported: it writes a "
                           "tensor in place; build the new tensor instead (e.g. with "
                           "graphgrad.where or cat)")
        if isinstance(target, ast.Attribute):
            raise fr.error("attribute assignment isn't supported", target,
                           "attribute assignment isn't supported: a scripted function "
                           "cannot change Python objects (mutable state)")
        raise fr.error(f"assignment to {type(target).__name__} isn't supported", target)

    def unpack(self, value, n: int, node: ast.AST, fr: Frame) -> list:
        if isinstance(value, ShapeValue):
            raise fr.error("shape of unknown rank", node, value.rank_error())
        if isinstance(value, Symbol):
            raise fr.error("unpacking a tensor isn't supported", node,
                           "cannot unpack a tensor: its length (the size of dim 0) is not "
                           "known at compile time")
        try:
            items = list(value)
        except TypeError:
            raise fr.error("cannot unpack", node, f"cannot unpack a value of type "
                           f"{type(value).__name__}") from None
        if len(items) != n:
            raise fr.error("wrong number of values to unpack", node,
                           f"expected {n} values to unpack, got {len(items)}")
        return items

    def s_If(self, s, fr, rest):
        test = self.expr(s.test, fr)
        if not isinstance(test, Symbol):
            branch = s.body if self.truth(test, s.test, fr) else s.orelse
            return self.block(branch, fr, rest)
        pred = self.predicate(test)
        returns = has_return(s.body) or has_return(s.orelse)
        if returns and fr.loops:
            raise fr.error("return inside a loop isn't supported", s,
                           "an if on a tensor with a return inside, in a loop body, "
                           "isn't supported")

        def fail(msg):
            return fr.error("type mismatch between branches", s, msg)

        if returns:  # single exit: the rest of the function goes into both branches
            def run(which: bool) -> list:
                sub = fr.child(dict(fr.env))
                r = self.block(s.body if which else s.orelse, sub, rest)
                for blk_index, blk in enumerate(rest):
                    if r is not None:
                        break
                    r = self.block(blk, sub, rest[blk_index + 1:])
                return [r.value if r is not None else None]
            (value,) = build_cond(self, pred, run, ["<return value>"], fail)
            return Ret(value)
        names = list(dict.fromkeys(assigned_names(s.body) + assigned_names(s.orelse)))

        def run_branch(which: bool) -> list:
            sub = fr.child(dict(fr.env))
            self.block(s.body if which else s.orelse, sub, [])
            side = "true" if which else "false"
            return [sub.env.get(n, Undefined(f"{n!r} is not defined in the {side} branch"))
                    for n in names]

        values = build_cond(self, pred, run_branch, names, fail)
        for n, v in zip(names, values, strict=True):
            fr.env[n] = v
        return None

    def s_While(self, s, fr, rest):
        if s.orelse:
            raise fr.error("while ... else isn't supported", s)
        names = [n for n in assigned_names(s.body) if n in fr.env
                 and not isinstance(fr.env[n], Undefined)]
        return self._loop(s, fr, names, [fr.env[n] for n in names],
                          lambda env, sub: self.expr(s.test, sub))

    def _loop(self, s, fr: Frame, names: list, init: list, test, step=None, extra: int = 0,
              prologue=None):
        """A while_loop node over ``names``; ``test(env, frame)`` gives the condition,
        ``prologue``/``step`` run before/after the body (for-range's counter)."""
        def fail(msg):
            return fr.error("loop-carried value", s, msg)

        def sub_frame(values):
            env = dict(fr.env)
            env.update(zip(names, values, strict=True))
            return env, fr.child(env, loops=1, graph_loops=1)

        def run_cond(values):
            env, sub = sub_frame(values)
            t = test(env, sub)
            if not isinstance(t, Symbol):
                raise fr.error("while loop on a Python value", s,
                               "the condition of a while loop must be a tensor (a loop on "
                               "Python values only would run at compile time forever or not "
                               "at all)")
            return self.predicate(t)

        def run_body(values):
            env, sub = sub_frame(values)
            if prologue is not None:
                prologue(env)
            self.block(s.body, sub, [])
            if step is not None:
                step(env, sub)
            return [env[n] for n in names]

        after = build_while(self, names, init, run_cond, run_body, fail)
        for n, v in zip(names[extra:], after[extra:], strict=True):
            fr.env[n] = v
        for n in assigned_names(s.body):
            if n not in names:
                fr.env[n] = Undefined(f"{n!r} is defined inside the loop body only")
        return None

    def s_For(self, s, fr, rest):
        if s.orelse:
            raise fr.error("for ... else isn't supported", s)
        it = s.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and \
                self.name(it.func, fr) is range:
            return self._for_range(s, fr)
        iterable = self.expr(it, fr)
        if isinstance(iterable, ShapeValue):
            raise fr.error("shape of unknown rank", it, iterable.rank_error())
        if isinstance(iterable, Symbol):
            raise fr.error("iterating over a tensor isn't supported", it,
                           "iterating over a tensor isn't supported: its length is not known "
                           "at compile time (use for i in range(x.shape[0]))")
        try:
            items = list(iterable)
        except TypeError:
            raise fr.error("not iterable", it, f"a value of type {type(iterable).__name__} "
                                               f"is not iterable") from None
        fr.loops += 1
        try:
            for item in items:  # a compile-time sequence: the loop unrolls
                self.assign(s.target, item, fr, s)
                r = self.block(s.body, fr, [])
                if r is not None:
                    return r
        finally:
            fr.loops -= 1
        return None

    def _for_range(self, s, fr: Frame):
        call = s.iter
        if call.keywords or not 1 <= len(call.args) <= 3:
            raise fr.error("range takes 1 to 3 positional arguments", call)
        args = [self.expr(a, fr) for a in call.args]
        start, stop, stp = (0, args[0], 1) if len(args) == 1 else (
            args[0], args[1], args[2] if len(args) == 3 else 1)
        if not isinstance(stp, int) or stp == 0:
            raise fr.error("range step", call, "the step of range must be a nonzero Python int")
        if not isinstance(s.target, ast.Name):
            raise fr.error("for-range target", s.target, "the target of for ... in range() "
                                                         "must be a variable")
        counter = "$" + s.target.id
        names = [counter] + [n for n in assigned_names(s.body) if n in fr.env and n != s.target.id
                             and not isinstance(fr.env[n], Undefined)]
        compare = operator.lt if stp > 0 else operator.gt

        def test(env, sub):
            return self.apply(compare, (env[counter], stop), call, sub)

        def advance(env, sub):
            env[counter] = self.apply(operator.add, (env[counter], stp), call, sub)

        def bind(env):
            env[s.target.id] = env[counter]

        init = [self._as_int_tensor(start)] + [fr.env[n] for n in names[1:]]
        self._loop(s, fr, names, init, test, advance, extra=1, prologue=bind)
        fr.env[s.target.id] = Undefined(f"{s.target.id!r} (a loop variable) is not defined "
                                        f"after the loop")
        return None

    def _as_int_tensor(self, v):
        if isinstance(v, Symbol):
            return v
        return symbol(self.b.node_of(_tensor(xp.asarray(v, xp.int64)), literal_ok=False))

    # ---- expressions -------------------------------------------------------------------

    def expr(self, e: ast.expr, fr: Frame):
        kind = type(e)
        if kind in _UNSUPPORTED_EXPR:
            raise fr.error(_UNSUPPORTED_EXPR[kind], e)
        method = getattr(self, "e_" + kind.__name__, None)
        if method is None:
            raise fr.error(f"{kind.__name__} expressions aren't supported", e)
        return method(e, fr)

    def e_Constant(self, e, fr):
        return e.value

    def e_Name(self, e, fr):
        return self.name(e, fr)

    def name(self, e: ast.Name, fr: Frame):
        n = e.id
        if n in fr.env:
            v = fr.env[n]
            if isinstance(v, Undefined):
                raise fr.error(f"{n} is not defined on every path", e, v.why)
            return v
        if n in fr.closure:
            cell = fr.closure[n]
            try:
                value = cell.cell_contents
            except ValueError:
                raise fr.error(f"undefined value {n}", e) from None
            return self.outside(value, n, e, fr, lambda c=cell: c.cell_contents, "closure")
        if n in fr.globals:
            g = fr.globals
            return self.outside(g[n], n, e, fr, lambda g=g, n=n: g[n], "global")
        if hasattr(builtins, n):
            return getattr(builtins, n)
        raise fr.error(f"undefined value {n}", e)

    def outside(self, value, name: str, e: ast.AST, fr: Frame, getter, where: str):
        """A value read from outside the function (a global, a closure, an attribute)."""
        if isinstance(value, Symbol):
            return value
        if isinstance(value, Value):
            return self.b.lifted(value, name, getter)
        if isinstance(value, _MUTABLE):
            raise fr.error("closures over mutable state aren't supported", e,
                           f"{name!r} is a {type(value).__name__} read from the enclosing "
                           f"scope ({where}): closures over mutable state aren't supported "
                           f"(a scripted graph cannot see later changes); pass it as an "
                           f"argument or make it a tuple")
        if isinstance(value, xp.ndarray):
            raise fr.error("NumPy arrays aren't supported", e,
                           f"{name!r} is a NumPy array: graphgrad.jit.script takes graphgrad "
                           f"tensors and Python numbers (wrap it with graphgrad.tensor)")
        if isinstance(value, tuple):
            return tuple(self.outside(v, f"{name}_{k}", e, fr,
                                      lambda k=k: getter()[k], where)
                         for k, v in enumerate(value))
        return value

    def e_Attribute(self, e, fr):
        base = self.expr(e.value, fr)
        attr = e.attr
        if isinstance(base, Symbol):
            return self.tensor_attr(base, attr, e, fr)
        if isinstance(base, ShapeValue):
            raise fr.error("shape of unknown rank", e, base.rank_error())
        if is_module(base):
            store = base.__dict__
            for key in ("_parameters", "_buffers"):
                if attr in store.get(key, {}):
                    value = store[key][attr]
                    if value is None:
                        return None
                    owner = self.module_names.get(id(base), "")
                    label = f"{owner}.{attr}" if owner else attr
                    return self.b.lifted(value, label, lambda m=base, a=attr: getattr(m, a))
        try:
            value = getattr(base, attr)
        except AttributeError as err:
            raise fr.error(f"object has no attribute {attr}", e, str(err)) from None
        return self.outside(value, attr, e, fr, lambda b=base, a=attr: getattr(b, a),
                            "attribute")

    def tensor_attr(self, x: Symbol, attr: str, e: ast.AST, fr: Frame):
        if attr == "shape":
            return self.shape_of(x, ast.unparse(e.value))
        if attr in ("ndim", "dtype"):
            what = "rank" if attr == "ndim" else "dtype"
            raise fr.error(f"tensor {what} unknown", e,
                           f"{ast.unparse(e)}: a Tensor's {what} is not known at compile time "
                           f"(graphgrad.jit.script compiles from the source, without inputs)")
        if not callable(getattr(type(x), attr, None)):  # a property (x.T): it runs now
            self.needs_rank([x], f"{ast.unparse(e)}")
        try:
            return getattr(x, attr)
        except Exception as err:  # noqa: BLE001 - reported with the source line
            raise fr.error(f"tensor attribute {attr}", e, f"{type(err).__name__}: {err}") \
                from None

    def shape_of(self, x: Symbol, text: str) -> ShapeValue:
        """``x.shape`` as a run-time int64 vector (its length is the rank, not known)."""
        spec = x._node.spec
        rank = spec.shape
        vec = Spec(None if rank is None else (len(rank),), xp.dtype(xp.int64))
        node = self.b.graph.add("shape", "shape", inputs=(self.b.node_of(x),), spec=vec,
                                deps=self.b.deps())
        return ShapeValue(text, symbol(node))

    def e_Subscript(self, e, fr):
        base = self.expr(e.value, fr)
        index = self.expr(e.slice, fr)
        if isinstance(base, ShapeValue):
            if isinstance(index, int):
                return base[index]
            raise fr.error("shape of unknown rank", e, base.rank_error())
        if isinstance(base, Symbol):
            self.needs_rank([base], f"{ast.unparse(e)} (indexing)")
        return self.apply(operator.getitem, (base, index), e, fr)

    def e_Slice(self, e, fr):
        parts = [None if p is None else self.expr(p, fr) for p in (e.lower, e.upper, e.step)]
        return slice(*parts)

    def e_Tuple(self, e, fr):
        return tuple(self.elements(e.elts, fr))

    def e_List(self, e, fr):
        return list(self.elements(e.elts, fr))

    def elements(self, elts, fr: Frame) -> list:
        out = []
        for el in elts:
            if isinstance(el, ast.Starred):
                v = self.expr(el.value, fr)
                out += self.unpack(v, len(list(v)) if isinstance(v, (tuple, list)) else -1,
                                   el, fr)
            else:
                out.append(self.expr(el, fr))
        return out

    def e_Dict(self, e, fr):
        raise fr.error("dict literals aren't supported", e)

    def e_BinOp(self, e, fr):
        a, b = self.expr(e.left, fr), self.expr(e.right, fr)
        return self.apply(_BINOPS[type(e.op)], (a, b), e, fr)

    def e_UnaryOp(self, e, fr):
        v = self.expr(e.operand, fr)
        if isinstance(e.op, ast.Not):
            if isinstance(v, Symbol):
                return self.apply(REGISTRY["LogicalNot"].apply, (self.predicate(v),), e, fr)
            return not self.truth(v, e.operand, fr)
        op = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
        return self.apply(op[type(e.op)], (v,), e, fr)

    def e_BoolOp(self, e, fr):
        is_and = isinstance(e.op, ast.And)
        result = self.expr(e.values[0], fr)
        for operand in e.values[1:]:
            if not isinstance(result, Symbol):
                if self.truth(result, e, fr) != is_and:
                    return result  # Python's short circuit
                result = self.expr(operand, fr)
                continue
            other = self.expr(operand, fr)
            op = REGISTRY["LogicalAnd" if is_and else "LogicalOr"].apply
            result = self.apply(op, (self.predicate(result), self.predicate(
                other if isinstance(other, Symbol) else _tensor(xp.asarray(bool(other))))),
                e, fr)
        return result

    def e_Compare(self, e, fr):
        left = self.expr(e.left, fr)
        result = None
        for op, right_e in zip(e.ops, e.comparators, strict=True):
            right = self.expr(right_e, fr)
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (Symbol, ShapeValue)):
                raise fr.error("'in' on a tensor isn't supported", e)
            part = self.apply(_CMPOPS[type(op)], (left, right), e, fr)
            if result is None:
                result = part
            elif isinstance(result, Symbol) or isinstance(part, Symbol):
                result = self.apply(REGISTRY["LogicalAnd"].apply, (
                    self.predicate(_as_symbol_bool(result)),
                    self.predicate(_as_symbol_bool(part))), e, fr)
            else:
                result = result and part
            if result is False:
                return False
            left = right
        return result

    def e_IfExp(self, e, fr):
        test = self.expr(e.test, fr)
        if not isinstance(test, Symbol):
            return self.expr(e.body if self.truth(test, e.test, fr) else e.orelse, fr)

        def run(which: bool) -> list:
            return [self.expr(e.body if which else e.orelse, fr)]

        def fail(msg):
            return fr.error("type mismatch between branches", e, msg)
        return build_cond(self, self.predicate(test), run, ["<if expression>"], fail)[0]

    def e_ListComp(self, e, fr):
        return list(self.comprehension(e, fr))

    def e_GeneratorExp(self, e, fr):
        return tuple(self.comprehension(e, fr))

    def comprehension(self, e, fr: Frame) -> list:
        """Over a sequence known at compile time: unrolled."""
        if len(e.generators) != 1 or e.generators[0].is_async:
            raise fr.error("comprehensions with several for clauses aren't supported", e)
        gen = e.generators[0]
        seq = self.expr(gen.iter, fr)
        if isinstance(seq, (Symbol, ShapeValue)):
            raise fr.error("comprehensions over tensors aren't supported", gen.iter,
                           "comprehensions over tensors aren't supported: the number of "
                           "elements is not known at compile time")
        sub = fr.child(dict(fr.env))
        out = []
        for item in seq:
            self.assign(gen.target, item, sub, e)
            if all(self.truth(self.expr(c, sub), c, sub) for c in gen.ifs):
                out.append(self.expr(e.elt, sub))
        return out

    def e_Starred(self, e, fr):
        raise fr.error("starred expressions aren't supported here", e)

    def e_Call(self, e, fr):
        fn = self.expr(e.func, fr)
        args = self.elements(e.args, fr)
        kwargs = {}
        for kw in e.keywords:
            if kw.arg is None:
                raise fr.error("**kwargs in calls aren't supported", kw.value)
            kwargs[kw.arg] = self.expr(kw.value, fr)
        return self.call(fn, args, kwargs, e, fr)

    # ---- calls -------------------------------------------------------------------------

    def call(self, fn, args: list, kwargs: dict, e: ast.Call, fr: Frame):
        func_node = e.func
        if isinstance(fn, ShapeValue):
            raise fr.error("shape of unknown rank", e, fn.rank_error())
        method_of = getattr(fn, "__self__", None)
        if isinstance(method_of, Symbol):
            return self.tensor_method(method_of, fn.__name__, args, kwargs, e, fr)
        if _hashable(fn) and fn in MATH:
            if any(isinstance(a, Symbol) for a in args):
                return self.apply(getattr(ops, MATH[fn]), tuple(args), e, fr)
            return self.apply(fn, tuple(args), e, fr, kwargs)
        if _hashable(fn) and fn in _PURE:
            return self.builtin(fn, args, kwargs, e, fr)
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
                               f"{describe(fn)} draws random numbers: graphgrad's IR has no "
                               f"random op, so a scripted graph would freeze one draw")
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
        prefix = self.module_names.get(id(mod), type(mod).__name__.lower())
        for key in ("_parameters", "_buffers"):
            for name, value in mod.__dict__.get(key, {}).items():
                if value is not None:
                    self.b.lifts.node(value, f"{prefix}.{name}",
                                      lambda m=mod, n=name: getattr(m, n))
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
            return shape[dim]
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
        flat = symbol(node)  # its stand-in has rank 1: the reduction's dims are right
        node.spec = Spec(None, spec.dtype)  # what the shape rule says (the verifier checks)
        return flat

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
            if fn is int:
                return self.apply(lambda t: t.to(xp.dtype(xp.int64)), (x,), e, fr)
            if fn is float:
                return self.apply(lambda t: t.to(xp.dtype(xp.float64)), (x,), e, fr)
            if fn is bool:
                return self.predicate(x)
            if fn is abs:
                return self.apply(lambda t: t.abs(), (x,), e, fr)
        if fn in (min, max) and len(args) == 2 and tensors:
            op = ops.minimum if fn is min else ops.maximum
            a, b = (_tensor(xp.asarray(v)) if not isinstance(v, Symbol) else v for v in args)
            return self.apply(op, (a, b), e, fr)
        return self.apply(fn, tuple(args), e, fr, kwargs)

    def library(self, fn, args: list, kwargs: dict, e, fr: Frame, name: str | None = None):
        """Call graphgrad code on Symbols: its ops record themselves into the graph."""
        owner = getattr(fn, "__self__", None)
        operands = [owner, *args] if isinstance(owner, Symbol) else list(args)
        unknown = self.generic and _unknown_rank(operands, kwargs)
        if (name or getattr(fn, "__name__", type(fn).__name__)) not in _RANK_FREE:
            self.needs_rank(operands + list(kwargs.values()), _text(e))
        rng = default_generator.rng
        state = rng.bit_generator.state
        try:
            value = fn(*args, **kwargs)
        except ScriptError:
            raise
        except Exception as err:  # noqa: BLE001 - reported with the source line
            if unknown:
                # graphgrad's library code reads static shapes: this call is compiled
                # again, with the shapes, when the function is called
                self.incomplete.append(f"{_text(e)}: {type(err).__name__}: {err}")
                dtype = next((a._node.spec.dtype for a in args if isinstance(a, Symbol)),
                             xp.dtype(xp.float32))
                return symbol(self.b.graph.add("placeholder", "needs_shapes",
                                               spec=Spec(None, dtype)))
            raise fr.error(f"call of {describe(fn)} failed", e,
                           f"{type(err).__name__} in {_text(e)}: {err}") from err
        if default_generator.rng is not rng or rng.bit_generator.state != state:
            rng.bit_generator.state = state  # the draw is not the program's: undo it
            raise fr.error("random functions aren't supported", e,
                           f"{_text(e)} draws random numbers (e.g. dropout in training "
                           f"mode): graphgrad's IR has no random op, so a scripted graph "
                           f"would freeze one draw")
        return value

    def needs_rank(self, operands: list, what: str) -> None:
        """Note that graphgrad code reads the rank of an operand of unknown rank: Python
        code in it may decide on ``x.ndim``, which a Symbol of unknown rank reports as 0,
        so the generic graph would be wrong for other ranks (it is not run)."""
        if self.generic and not self.rank_bound and _unknown_rank(operands, {}):
            self.rank_bound.append(f"{what} needs the rank of its input")

    def apply(self, fn, args: tuple, e, fr: Frame, kwargs: dict | None = None):
        """Apply a Python operator or builtin at compile time (building nodes when an
        operand is a Symbol); failures become ScriptErrors at ``e``."""
        for a in args:
            if isinstance(a, ShapeValue):
                raise fr.error("shape of unknown rank", e, a.rank_error())
        try:
            return fn(*args, **(kwargs or {}))
        except ScriptError:
            raise
        except Exception as err:  # noqa: BLE001 - reported with the source line
            if "as a Python `bool`" in str(err):
                raise fr.error("a tensor used as a Python bool", e,
                               f"{ast.unparse(e)} uses a tensor as a Python bool outside an "
                               f"if or while condition") from None
            raise fr.error(type(err).__name__, e, f"{type(err).__name__}: {err}") from err

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


def _tensor(arr):
    from graphgrad.graph.interpreter import as_tensor
    return as_tensor(arr)


def _as_symbol_bool(v):
    return v if isinstance(v, Symbol) else _tensor(xp.asarray(bool(v)))


def _symbolic_sizes(sizes) -> bool:
    flat = list(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    return any(isinstance(s, Symbol) for s in flat)


def _unknown_rank(args, kwargs) -> bool:
    from graphgrad.func.pytree import tree_flatten
    leaves, _ = tree_flatten([list(args), dict(kwargs)])
    return any(isinstance(a, Symbol) and a._node.spec is not None and
               a._node.spec.shape is None for a in leaves)
