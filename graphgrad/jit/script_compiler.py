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
import operator
from dataclasses import dataclass

from graphgrad import ops
from graphgrad.backend import xp
from graphgrad.func.pytree import tree_flatten, tree_unflatten
from graphgrad.graph import Symbol, symbol
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Value

from .script_calls import as_eager
from .script_control import (DID_RETURN, RETURN_VALUE, Iteration, Undefined, assigned_names,
                             build_cond, build_while, exit_transform, has_return, loop_exits,
                             unless)
from .script_errors import ScriptError, Source, source_of
from .script_expressions import BINOPS, Expressions
from .script_values import ShapeValue

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


class _ReturnTypeUnknownError(Exception):
    """A loop's first compile met a ``return``: the loop compiles again, carrying a
    ``$return_value`` of the returned value's type."""

    def __init__(self, value):
        super().__init__("return in a loop")
        self.value = value


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


class Compiler(Expressions):
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
        self.needs_rank([old], f"{ast.unparse(target)} (indexing)")
        if not isinstance(value, Value):
            value = as_eager(xp.asarray(value, old._node.spec.dtype))
        fr.env[name] = self.apply(lambda: ops.index_put(
            old, index if isinstance(index, tuple) else (index,), value), (), stmt, fr)

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

    def s_While(self, s, fr, rest):
        if s.orelse:
            raise fr.error("while ... else isn't supported", s)
        body, exits, owner = self._exit_body(s, fr, graph=True)

        def test(env, sub):
            if exits.brk is None:
                return self.expr(s.test, sub)
            # as in Python, the condition is not evaluated once the body broke out
            return self._unless_broken(env[exits.brk], lambda: self.expr(s.test, sub), s, fr)

        return self._loop(s, fr, rest, body, exits, owner, test)

    def _exit_body(self, s, fr: Frame, graph: bool) -> tuple:
        """The body of loop ``s`` after the exit transform, its flags, and whether it is
        the outermost loop holding a ``return`` (a ``break`` flag, ``$did_return`` start
        False before the loop: the loop carries them)."""
        exits = loop_exits(s.body, fr.loops + 1, graph)
        owner = exits.ret and DID_RETURN not in fr.env
        if owner:
            fr.env[DID_RETURN] = False
        if not exits.any():
            return s.body, exits, owner
        if exits.brk is not None:
            fr.env[exits.brk] = False
        return exit_transform(s.body, exits), exits, owner

    def s_ReturnValue(self, s, fr, rest):
        """``return value`` in a loop body (``script_control.exit_transform``)."""
        value = self.expr(s.value, fr)
        if RETURN_VALUE not in fr.env:  # the first compile: the loop learns the type
            raise _ReturnTypeUnknownError(value)
        fr.env[RETURN_VALUE] = value
        return None

    def _return_slot(self, value, s, fr: Frame):
        """A value of the type a loop returns (the returned one's Spec, filled with
        zeros), the initial ``$return_value`` the loop carries until it returns."""
        leaves, struct = tree_flatten(value, none_is_leaf=True)
        out = []
        for v in leaves:
            if isinstance(v, Symbol):
                spec = v._node.spec
                known = spec.shape is not None and None not in spec.shape
                zero = xp.zeros((), spec.dtype)  # a broadcast view: no memory per element
                out.append(as_eager(xp.broadcast_to(zero, spec.shape) if known else zero))
            elif isinstance(v, (bool, int, float)):
                out.append(type(v)(0))
            else:
                raise fr.error("return inside a loop", s,
                               f"a return inside a loop on a tensor returns a value of type "
                               f"{type(v).__name__}: only tensors and numbers (or tuples of "
                               f"them) can be returned from a loop")
        return tree_unflatten(out, struct)

    def _return_after(self, s, fr: Frame, rest: list):
        """After the outermost loop holding a return: ``if $did_return: return
        $return_value``, the statements after the loop in its other branch."""
        did, value = fr.env.pop(DID_RETURN), fr.env.pop(RETURN_VALUE, None)
        forever = isinstance(s, ast.While) and isinstance(s.test, ast.Constant) and \
            bool(s.test.value) and loop_exits(s.body, 1, graph=False).brk is None
        if forever:  # while True without a break ends by returning
            return Ret(value)
        if not isinstance(did, Symbol):
            return Ret(value) if did else None

        def fail(msg):
            return fr.error("type mismatch between branches", s, msg)
        return self._single_exit(s, fr, self.predicate(did), rest, fail,
                                 lambda returned, sub: Ret(value) if returned else None)

    def _unless_broken(self, flag, test, s, fr: Frame):
        """A while loop's condition with a ``break`` flag: ``False if flag else test()``
        (a cond node, so that the test, which may index past the end once the body broke,
        runs only on iterations Python would test)."""
        flag = self.predicate(flag)
        if isinstance(s.test, ast.Constant) and s.test.value:  # while True: ... break
            return self.apply(REGISTRY["LogicalNot"].apply, (flag,), s.test, fr)

        def run(broke: bool) -> list:
            if broke:
                return [False]
            t = test()
            if isinstance(t, Symbol):
                return [self.predicate(t)]
            return [self.truth(t, s.test, fr)]

        def fail(msg):
            return fr.error("loop condition", s.test, msg)
        (value,) = build_cond(self, flag, run, ["<loop condition>"], fail)
        return value

    def _loop(self, s, fr: Frame, rest: list, body: list, exits, owner: bool, test,
              counter: tuple = (), step=None, prologue=None, skip: str | None = None):
        """A while_loop node carrying the variables ``body`` assigns that exist before it
        (after ``counter``: (name, initial value) of for-range's counter; ``skip``: its
        target); ``test(env, frame)`` gives the condition, ``prologue``/``step`` run
        before/after ``body``. A Ret when the loop returns from the function."""
        # a return in a nested loop sets $did_return and $return_value there
        assigned = assigned_names(body) + ([DID_RETURN, RETURN_VALUE] if exits.ret else [])
        k = 1 if counter else 0  # the counter comes first
        while True:
            names = [*counter[:k], *(n for n in dict.fromkeys(assigned) if n in fr.env
                                     and n != skip and not isinstance(fr.env[n], Undefined))]
            init = [*counter[k:], *(fr.env[n] for n in names[k:])]
            try:
                after = self._while_node(s, fr, body, names, init, test, step, prologue)
                break
            except _ReturnTypeUnknownError as first:  # compile again, carrying $return_value
                if not owner:
                    raise
                fr.env[RETURN_VALUE] = self._return_slot(first.value, s, fr)
        for n, v in zip(names[k:], after[k:], strict=True):
            fr.env[n] = v
        for n in assigned:
            if n not in names:
                fr.env[n] = Undefined(f"{n!r} is defined inside the loop body only")
        self._drop_flags(fr, exits)
        if skip is not None:
            fr.env[skip] = Undefined(f"{skip!r} (a loop variable) is not defined after the "
                                     f"loop")
        return self._return_after(s, fr, rest) if owner else None

    def _while_node(self, s, fr: Frame, body: list, names: list, init: list, test, step,
                    prologue) -> list:
        """The while_loop node carrying ``names``: their values after the loop."""
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
            self.block(body, sub, [])
            if step is not None:
                step(env, sub)
            return [env[n] for n in names]

        return build_while(self, names, init, run_cond, run_body, fail)

    @staticmethod
    def _drop_flags(fr: Frame, exits) -> None:
        for flag in (exits.brk, exits.cont):
            fr.env.pop(flag, None)

    def s_For(self, s, fr, rest):
        if s.orelse:
            raise fr.error("for ... else isn't supported", s)
        it = s.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and \
                self.name(it.func, fr) is range:
            return self._for_range(s, fr, rest)
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
        body, exits, _ = self._exit_body(s, fr, graph=False)
        steps = [ast.copy_location(Iteration(s.target, item, body, exits.brk), s)
                 for item in items]  # a compile-time sequence: the loop unrolls
        r = self.block(steps, fr, rest)
        self._drop_flags(fr, exits)
        return r

    def s_Iteration(self, s, fr, rest):
        """One iteration of an unrolled loop; ``rest`` holds the iterations after it."""
        broke = fr.env[s.brk] if s.brk is not None else False
        if not isinstance(broke, Symbol) and broke:
            return None  # a break on Python values: the items left are not compiled
        self.assign(s.target, s.item, fr, s)
        # after a break on a tensor, each iteration left runs under "if not broke"
        body = s.body if broke is False else [unless([s.brk], s.body, s)]
        fr.loops += 1
        try:
            return self.block(body, fr, rest)
        finally:
            fr.loops -= 1

    def _for_range(self, s, fr: Frame, rest: list):
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
        body, exits, owner = self._exit_body(s, fr, graph=True)
        compare = operator.lt if stp > 0 else operator.gt

        def test(env, sub):
            more = self.apply(compare, (env[counter], stop), call, sub)
            if exits.brk is None:
                return more
            return self.apply(REGISTRY["LogicalAnd"].apply, (more, self.apply(
                REGISTRY["LogicalNot"].apply, (self.predicate(env[exits.brk]),), call, sub)),
                call, sub)

        def advance(env, sub):
            env[counter] = self.apply(operator.add, (env[counter], stp), call, sub)

        def bind(env):
            env[s.target.id] = env[counter]

        return self._loop(s, fr, rest, body, exits, owner, test,
                          (counter, self._as_int_tensor(start)), advance, bind, s.target.id)

    def _as_int_tensor(self, v):
        if isinstance(v, Symbol):
            return v
        return self.mark_scalar(symbol(self.b.node_of(as_eager(xp.asarray(v, xp.int64)),
                                                      literal_ok=False)))

