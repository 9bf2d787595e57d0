"""Layer ``jit``: the loops of ``jit.script``'s compiler (``LoopStatements``, a mixin of
``Compiler``): ``while`` and ``for`` unrolled at compile time or built as ``while_loop``
nodes, and the exits out of them (``break``, ``continue``, ``return`` as flags, the
TorchScript exit transform; see ``script_compiler``)."""

from __future__ import annotations

import ast
import operator

from graphgrad.backend import xp
from graphgrad.func.pytree import tree_flatten, tree_unflatten
from graphgrad.graph import Symbol, symbol
from graphgrad.ops import REGISTRY

from .script_calls import as_eager
from .script_control import (DID_RETURN, RETURN_VALUE, Iteration, Undefined, assigned_names,
                             build_cond, build_while, exit_transform, loop_exits, unless)
from .script_frames import Frame, Ret, ReturnTypeUnknownError
from .script_values import ShapeValue

__all__ = ["LoopStatements"]


class LoopStatements:
    """The loop statements of the compiler (``s_While``, ``s_For``...) and their exits."""

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
            raise ReturnTypeUnknownError(value)
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
            except ReturnTypeUnknownError as first:  # compile again, carrying $return_value
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
