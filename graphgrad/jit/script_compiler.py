"""Layer ``jit``: the compiler of ``graphgrad.jit.script``: a walk over a function's
``ast`` that emits IR nodes.

Statements run at compile time, in order, on *script values*: Symbols (graph values,
built by calling graphgrad ops and tensor methods under a ``ScriptBuilder``, so every
op is the one of ``graphgrad.ops``), Python constants (folded now: an ``if`` on one
picks its branch at compile time, a ``for`` over a tuple or a ModuleList unrolls) and
shapes of unknown length. Control flow that depends on a tensor becomes ``cond`` and
``while_loop`` nodes (``script_control``); ``break``, ``continue`` and a ``return`` in a
loop on a tensor become flags first (TorchScript's exit transform: a ``return`` sets
``$did_return``/``$return_value``, carried out of every loop around it, and the function
returns after the outermost one; an unrolled loop is the list of its iterations, so an
``if`` on a tensor with a ``return`` compiles the iterations left into both branches).
Calls of other user functions and of user
``nn.Module``s are compiled from their source and inlined; graphgrad functions and
graphgrad's own modules are called on the Symbols. Anything else is a ``ScriptError``
pointing at the user's source line.
"""

from __future__ import annotations

import ast
import inspect

from graphgrad import ops
from graphgrad.backend import xp
from graphgrad.graph import Symbol
from graphgrad.tensor import Value

from .script_calls import as_eager, unknown_rank
from .script_control import (Undefined, assigned_names,
                             build_cond, has_return)
from .script_errors import Source, source_of
from .script_frames import Frame, Ret
from .script_loops import LoopStatements
from .script_expressions import BINOPS, Expressions
from .script_values import ShapeValue, TupleResult

__all__ = ["Compiler", "Frame", "Ret"]

_OPTEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|",
           ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}
# statements TorchScript names the same way when it refuses them
_UNSUPPORTED = {ast.Try: "try blocks aren't supported", ast.With: "with statements aren't "
                "supported", ast.Global: "global variables aren't supported",
                ast.Nonlocal: "nonlocal variables aren't supported", ast.Delete: "del "
                "statements aren't supported", ast.Import: "import statements aren't "
                "supported", ast.ImportFrom: "import statements aren't supported",
                ast.FunctionDef: "function definitions aren't supported",
                ast.ClassDef: "class definitions aren't supported",
                ast.Raise: "raise statements aren't supported",
                ast.AsyncFunctionDef: "async function definitions aren't supported",
                ast.AsyncFor: "async for loops aren't supported",
                ast.AsyncWith: "async with statements aren't supported",
                ast.Match: "match statements aren't supported"}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED[ast.TryStar] = "try blocks aren't supported"


class Compiler(Expressions, LoopStatements):
    """Compiles functions into the graph of ``builder`` (``generic``: the inputs' ranks
    are unknown; otherwise they are the call's shapes)."""

    def __init__(self, builder, generic: bool, module_names: dict | None = None):
        self.b = builder
        self.generic = generic
        self.incomplete: list[str] = []   # library calls that failed without shapes
        self.rank_bound: list[str] = []   # library calls that may depend on the rank
        self.inputs: set = set(builder.graph.inputs)  # the user's arguments (placeholders)
        self.active: list = []            # functions being compiled (no recursion)
        self.scalars: set = set()         # nodes holding Python ints/floats (Calls)
        self.flats: set = set()           # x.reshape(-1) nodes: rank 1 (Calls.flat)
        self.shape_nodes: dict = {}       # node -> its shape node (Expressions.shape_of)
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
        return self.visit(s, fr, _UNSUPPORTED, "statements", rest)

    def s_Pass(self, s, fr, rest):
        return None

    def s_Expr(self, s, fr, rest):
        if isinstance(s.value, ast.Constant):  # a docstring
            return None
        self.expr(s.value, fr)
        return None

    def s_Assert(self, s, fr, rest):
        """On Python values it is checked now; the IR has no assert op for tensors."""
        test = self.expr(s.test, fr)
        if isinstance(test, Symbol):
            raise fr.error("assert on a tensor isn't supported", s,
                           "assert on a tensor isn't supported: graphgrad's IR has no assert "
                           "op (its value exists only when the graph runs)")
        if not self.truth(test, s.test, fr):
            msg = "" if s.msg is None else f": {self.expr(s.msg, fr)}"
            raise fr.error("AssertionError", s, f"AssertionError at compile time{msg}")
        return None

    def s_Break(self, s, fr, rest):
        """Reached only outside a loop: a loop's own exits are rewritten into flags
        (``script_control.exit_transform``) before its body is compiled."""
        raise fr.error("SyntaxError: 'break' outside loop", s)

    def s_Continue(self, s, fr, rest):
        raise fr.error("SyntaxError: 'continue' outside loop", s)

    def s_Return(self, s, fr, rest):
        if fr.graph_loops:  # one in a loop on a tensor is rewritten (exit_transform)
            raise fr.error("return inside a loop isn't supported", s,
                           "a return inside a loop over a Python sequence, itself inside a "
                           "loop on a tensor, isn't supported")
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
            self.check_in_place(s.target.id, old, s, fr, f"write {s.target.id} = "
                                                         f"{s.target.id} {_OPTEXT[type(s.op)]}"
                                                         f" ...")
        value = self.apply(BINOPS[type(s.op)], (old, self.expr(s.value, fr)), s, fr)
        fr.env[s.target.id] = value
        return None

    def check_in_place(self, name: str, old: Symbol, s: ast.AST, fr: Frame,
                       instead: str) -> None:
        """``x += y`` and ``x[i] = v`` update a tensor in place in eager PyTorch; compiled
        out of place they are the same only when nothing else sees the tensor."""
        others = [n for n, v in fr.env.items() if n != name and isinstance(v, Symbol)
                  and v._node is old._node]
        if others or old._node in self.inputs:
            who = (f"variable {others[0]!r} refers to the same tensor" if others else
                   f"{name!r} is an argument of the function (the caller's tensor)")
            raise fr.error("in-place update of a shared tensor isn't supported", s,
                           f"{ast.unparse(s)} updates a tensor in place, and {who}: "
                           f"graphgrad.jit.script compiles it out of place ({instead})")

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
            self.assign_item(target, value, fr, stmt)
            return
        if isinstance(target, ast.Attribute):
            raise fr.error("attribute assignment isn't supported", target,
                           "attribute assignment isn't supported: a scripted function "
                           "cannot change Python objects (mutable state)")
        raise fr.error(f"assignment to {type(target).__name__} isn't supported", target)

    def assign_item(self, target: ast.Subscript, value, fr: Frame, stmt: ast.AST) -> None:
        """``x[i] = v`` on a tensor variable: ``x = index_put(x, i, v)`` (out of place)."""
        if not isinstance(target.value, ast.Name):
            raise fr.error("subscript assignment isn't supported", target,
                           "subscript assignment is supported on a tensor variable (x[i] = v)")
        name = target.value.id
        old = self.name(target.value, fr)
        if not isinstance(old, Symbol):
            raise fr.error("subscript assignment isn't supported", target,
                           f"{name!r} is a {type(old).__name__}, not a tensor: a scripted "
                           f"function cannot change Python objects (mutable state)")
        self.check_in_place(name, old, stmt, fr,
                            f"assign into a copy: y = {name}.clone(); y[...] = ...")
        index = self.expr(target.slice, fr)
        indices = index if isinstance(index, tuple) else (index,)
        if self.generic and unknown_rank([old], {}, self.flats) and \
                isinstance(value, (Value, int, float, bool)):
            # placing the index needs the rank: the write is made when the graph runs
            fr.env[name] = self.deferred(ops.index_put, (old, indices, value), {},
                                         len(self.b.graph.nodes))
            return
        self.needs_rank([old], f"{ast.unparse(target)} (indexing)")
        if not isinstance(value, Value):
            value = as_eager(xp.asarray(value, old._node.spec.dtype))
        fr.env[name] = self.apply(lambda: ops.index_put(old, indices, value), (), stmt, fr)

    def unpack(self, value, n: int, node: ast.AST, fr: Frame) -> list:
        if isinstance(value, ShapeValue):
            raise fr.error("shape of unknown rank", node, value.rank_error())
        if isinstance(value, TupleResult):   # v, i = x.max(dim=-1) on a rank unknown yet
            return [self.tuple_item(value, k) for k in range(n)]
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

        def fail(msg):
            return fr.error("type mismatch between branches", s, msg)

        if has_return(s.body) or has_return(s.orelse):
            if fr.graph_loops:  # one in a loop on a tensor is rewritten (exit_transform)
                raise fr.error("return inside a loop isn't supported", s,
                               "an if on a tensor with a return inside, in a loop over a "
                               "Python sequence inside a loop on a tensor, isn't supported")
            return self._single_exit(s, fr, pred, rest, fail)
        return self._branches(s, fr, pred, fail)

    def _single_exit(self, s, fr: Frame, pred: Symbol, rest: list, fail, branch=None,
                     known: tuple = ({}, {})):
        """An ``if`` on a tensor with a ``return`` inside: the rest of the function (the
        blocks of ``rest``: in an unrolled loop, its iterations left too) compiles into
        both branches, and the function's result is the cond's. ``branch(which, frame)``
        compiles a branch (default: ``s``'s); ``known``: variables set in the true and
        the false branch first (a ``Guard``'s flags)."""
        def run(which: bool) -> list:
            sub = fr.child(dict(fr.env))
            sub.env.update(known[0 if which else 1])
            r = branch(which, sub) if branch is not None else \
                self.block(s.body if which else s.orelse, sub, rest)
            for k, blk in enumerate(rest):
                if r is not None:
                    break
                r = self.block(blk, sub, rest[k + 1:])
            return [r.value if r is not None else None]
        (value,) = build_cond(self, pred, run, ["<return value>"], fail)
        return Ret(value)

    def _branches(self, s, fr: Frame, pred: Symbol, fail, cleared: tuple = ()) -> None:
        """An ``if`` on a tensor as a cond node; the flags in ``cleared`` are False in the
        true branch (see ``Guard``)."""
        dead = getattr(s, "dead", ())
        names = [n for n in dict.fromkeys(assigned_names(s.body) + assigned_names(s.orelse))
                 if n not in dead]

        def run_branch(which: bool) -> list:
            sub = fr.child(dict(fr.env))
            if which:
                sub.env.update(dict.fromkeys(cleared, False))
            self.block(s.body if which else s.orelse, sub, [])
            if which:
                for f in cleared:
                    if sub.env[f] is False:  # no exit on this path: the flag is unchanged
                        sub.env[f] = fr.env[f]
            side = "true" if which else "false"
            return [sub.env.get(n, Undefined(f"{n!r} is not defined in the {side} branch"))
                    for n in names]

        values = build_cond(self, pred, run_branch, names, fail)
        for n, v in zip(names, values, strict=True):
            fr.env[n] = v
        for n in dead:
            fr.env[n] = Undefined(f"{n!r} is not read after the loop body")
        return None

    def s_Guard(self, s, fr, rest):
        """``if not flag: ...`` of the exit transform (``script_control.Guard``)."""
        test = self.expr(s.test, fr)
        if not isinstance(test, Symbol):
            return self.s_If(s, fr, rest)

        def fail(msg):
            return fr.error("type mismatch between branches", s, msg)
        if has_return(s.body):  # in a loop over a Python sequence
            # past the guard, a single flag is known to be set: the iterations left skip
            broke = {s.flags[0]: True} if len(s.flags) == 1 else {}
            return self._single_exit(s, fr, self.predicate(test), rest, fail,
                                     known=(dict.fromkeys(s.flags, False), broke))
        return self._branches(s, fr, self.predicate(test), fail, cleared=s.flags)
