"""Layer ``dynamo``: the opcode handlers of ``BytecodeInterpreter`` for calls, jumps,
loops, returns, ``raise`` and ``with`` blocks (CPython 3.11 and 3.12).

``FlowOpcodes`` is a mixin of ``interpreter.BytecodeInterpreter``: one method per
opcode, named as the opcode, taking ``(frame, inst)``. It uses the interpreter's
``cap``, ``frames``, ``brk``, ``call`` and ``return_value`` and ``ValueOpcodes``'s
``items_of``; it imports nothing from the interpreter. Jumps use ``inst.argval``, the
absolute target offset on both versions, so no handler does version-specific jump
arithmetic. A condition that is a graph value ends the segment: ``bool`` of it runs for
real ("force" mode) and the jump is run again with the real answer.

The run-time side of ``with`` blocks lives here too: ``enter_with`` enters one for
real, ``ACTIVE_EXITS``/``unwind_withs`` leave those an exception skips.
"""

from __future__ import annotations

from graphgrad.graph import Symbol

from .capture import Unsupported, opaque
from .frame import PY312
from .values import INLINED, NULL, Extras, ListIter

__all__ = ["FlowOpcodes", "ACTIVE_EXITS", "enter_with", "unwind_withs"]


def _pop_jump(want: bool, none_test: bool = False):
    def run(self, f, inst):
        v = f.stack[-1]
        if none_test:
            f.stack.pop()
            is_none = self.cap.realize_identity(v) is None
            if is_none == want:
                f.jump(inst.argval)
            return
        c = self._truth(f, v)
        f.stack.pop()
        if c == want:
            f.jump(inst.argval)
    return run


def _jump_or_pop(want: bool):
    def run(self, f, inst):
        c = self._truth(f, f.stack[-1])
        if c == want:
            f.jump(inst.argval)
        else:
            f.stack.pop()
    return run


def _raise_now(exc, cause=None):
    if isinstance(exc, type):
        exc = exc()
    if cause is not None:
        raise exc from cause
    raise exc


class FlowOpcodes:
    """Calls, jumps, loops, returns, ``raise`` and ``with`` blocks."""

    # ---- calls -------------------------------------------------------------------------------

    def KW_NAMES(self, f, inst):
        f.kw_names = f.code.co_consts[inst.arg]

    def CALL(self, f, inst):
        args = f.pop_n(inst.arg)
        b = f.stack.pop()
        a = f.stack.pop()
        if a is NULL:
            fn = b
        else:
            fn, args = a, [b, *args]
        kw = f.kw_names
        f.kw_names = ()
        kwargs = {}
        if kw:
            vals = args[len(args) - len(kw):]
            args = args[:len(args) - len(kw)]
            kwargs = dict(zip(kw, vals, strict=True))
        self._push_call(f, fn, args, kwargs)

    def _push_call(self, f, fn, args, kwargs):
        out = self.call(fn, args, kwargs)
        if out is not INLINED:
            f.stack.append(out)

    def CALL_FUNCTION_EX(self, f, inst):
        kwargs = self.cap.realize(f.stack.pop()) if inst.arg & 1 else {}
        args = self.items_of(f.stack.pop())
        fn = f.stack.pop()
        if f.stack and f.stack[-1] is NULL:
            f.stack.pop()
        self._push_call(f, fn, list(args), dict(kwargs))

    # ---- control flow ------------------------------------------------------------------------

    def JUMP_FORWARD(self, f, inst):
        f.jump(inst.argval)

    JUMP_BACKWARD = JUMP_BACKWARD_NO_INTERRUPT = JUMP_FORWARD

    def _truth(self, f, v) -> bool:
        """The truth of a condition; a graph value ends the segment (decided at run time)."""
        if f.forced is not None:
            c, f.forced = f.forced, None
            return c
        cap = self.cap
        if isinstance(v, Symbol) and not cap.concrete:
            f.pc -= 1
            return self.brk("data-dependent-branch", "the condition is a tensor computed by "
                            "the graph", bool, (v,), mode="force")
        if opaque(v) and not cap.concrete:
            f.pc -= 1
            return self.brk("unsupported-value-op", f"the truth of a {type(v.obj).__name__} "
                            f"the function did not create", bool, (v,), mode="force")
        if isinstance(v, Extras):
            return bool(len(cap.realize(v)))
        return bool(v)

    POP_JUMP_IF_TRUE = POP_JUMP_FORWARD_IF_TRUE = POP_JUMP_BACKWARD_IF_TRUE = _pop_jump(True)
    POP_JUMP_IF_FALSE = POP_JUMP_FORWARD_IF_FALSE = POP_JUMP_BACKWARD_IF_FALSE = \
        _pop_jump(False)
    POP_JUMP_IF_NONE = POP_JUMP_FORWARD_IF_NONE = POP_JUMP_BACKWARD_IF_NONE = \
        _pop_jump(True, none_test=True)
    POP_JUMP_IF_NOT_NONE = POP_JUMP_FORWARD_IF_NOT_NONE = POP_JUMP_BACKWARD_IF_NOT_NONE = \
        _pop_jump(False, none_test=True)
    JUMP_IF_TRUE_OR_POP = _jump_or_pop(True)
    JUMP_IF_FALSE_OR_POP = _jump_or_pop(False)

    def GET_ITER(self, f, inst):
        v = f.stack.pop()
        if isinstance(v, ListIter):
            f.stack.append(v)
            return
        f.stack.append(ListIter(self.items_of(v, f)))

    def FOR_ITER(self, f, inst):
        itr = f.stack[-1]
        if not isinstance(itr, ListIter):
            raise Unsupported("FOR_ITER over an unknown iterator")
        if itr.pos < len(itr.items):
            f.stack.append(itr.items[itr.pos])
            itr.pos += 1
            return
        f.stack.pop()
        f.jump(inst.argval)
        if PY312 and f.insts[f.pc].opname == "END_FOR":
            f.pc += 1  # CPython skips END_FOR on exhaustion

    def END_FOR(self, f, inst):
        f.stack.pop()
        f.stack.pop()

    def RETURN_VALUE(self, f, inst):
        self.return_value(f.stack.pop())

    def RETURN_CONST(self, f, inst):
        self.return_value(inst.argval)

    def LOAD_ASSERTION_ERROR(self, f, inst):
        f.stack.append(AssertionError)

    def RAISE_VARARGS(self, f, inst):
        vals = f.pop_n(inst.arg)
        if inst.arg == 0:
            raise Unsupported("bare raise")
        exc = vals[0]
        cause = vals[1] if inst.arg == 2 else None
        if self.cap.concrete:
            _raise_now(exc, cause)
        self.brk("raise", "raise statement", _raise_now, (exc, cause))

    def RERAISE(self, f, inst):
        raise Unsupported(f"exception handler reached ({inst.opname})")

    PUSH_EXC_INFO = WITH_EXCEPT_START = POP_EXCEPT = RERAISE

    # ---- with blocks (graphgrad's grad-mode context managers) --------------------------------

    def BEFORE_WITH(self, f, inst):
        cm = f.stack.pop()
        if self.cap.concrete:
            f.stack.extend(enter_with(cm))
            return
        from graphgrad.autograd.grad_mode import GradModeBase
        obj = cm.obj if isinstance(cm, Extras) else cm
        if not isinstance(obj, GradModeBase):
            raise Unsupported(f"a with block on {type(obj).__name__} (only graphgrad's "
                              f"grad-mode context managers)")
        # entering runs for real: the segments of the block then run in that grad mode
        self.brk("unsupported-call", f"entering {type(obj).__name__}", enter_with, (cm,),
                 mode="with")


ACTIVE_EXITS: list = []   # with blocks entered and not yet left, innermost last


def enter_with(cm) -> tuple:
    """``cm.__enter__()`` at run time; returns (the exit to call, the entered value). The
    exit is remembered so that an exception leaving a compiled call can run it."""
    value = type(cm).__enter__(cm)
    ex = _WithExit(cm)
    ACTIVE_EXITS.append(ex)
    return ex, value


class _WithExit:
    __slots__ = ("cm",)

    def __init__(self, cm):
        self.cm = cm

    def __call__(self, *exc):
        if self in ACTIVE_EXITS:
            ACTIVE_EXITS.remove(self)
        return type(self.cm).__exit__(self.cm, *exc)


def unwind_withs(mark: int, e: BaseException) -> None:
    """An exception leaves a compiled call: leave its open with blocks, innermost first."""
    while len(ACTIVE_EXITS) > mark:
        ex = ACTIVE_EXITS.pop()
        type(ex.cm).__exit__(ex.cm, type(e), e, e.__traceback__)
