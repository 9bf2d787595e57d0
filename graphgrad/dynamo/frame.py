"""Layer ``dynamo``: interpreter frames and the static prescan of code objects.

A ``Frame`` is one Python call being interpreted: its code's ``dis`` instructions, the
index of the next one, the value stack, locals and cells (by name, which keeps the
3.11/3.12 fast-locals layouts out of the handlers), and the pending ``KW_NAMES``.
``code_info`` disassembles a code object once and checks every opcode against the
supported set, so that unsupported bytecode is found *before* anything runs
(a top-level function then runs eagerly; an inlined callee becomes an eager call).
``bind_arguments`` binds a call's arguments to a code object's parameters, as CPython
does when it makes a frame.
"""

from __future__ import annotations

import dis
import inspect
import sys
import types
from typing import Any

__all__ = ["Frame", "code_info", "SUPPORTED", "VERSION_OK", "PY312", "CodeInfo",
           "bind_arguments", "live_locals"]

VERSION_OK = (3, 11) <= sys.version_info[:2] <= (3, 12)
PY312 = sys.version_info >= (3, 12)

_COMMON = {
    "RESUME", "NOP", "CACHE", "EXTENDED_ARG", "PRECALL", "COPY_FREE_VARS", "MAKE_CELL",
    "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "STORE_FAST", "DELETE_FAST",
    "LOAD_CONST", "LOAD_CLOSURE", "LOAD_DEREF", "STORE_DEREF", "MAKE_FUNCTION",
    "LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "STORE_GLOBAL", "POP_TOP",
    "COPY", "SWAP",
    "PUSH_NULL", "BINARY_OP", "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT",
    "UNARY_POSITIVE", "CALL_INTRINSIC_1", "COMPARE_OP", "IS_OP", "CONTAINS_OP",
    "BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP", "BUILD_CONST_KEY_MAP", "BUILD_SLICE",
    "BUILD_STRING", "FORMAT_VALUE", "BUILD_SET", "SET_ADD", "SET_UPDATE", "MAP_ADD",
    "BINARY_SUBSCR", "BINARY_SLICE", "STORE_SUBSCR", "STORE_SLICE", "DELETE_SUBSCR",
    "UNPACK_SEQUENCE", "UNPACK_EX", "LIST_APPEND", "LIST_EXTEND", "LIST_TO_TUPLE",
    "DICT_MERGE", "DICT_UPDATE", "CALL", "KW_NAMES", "CALL_FUNCTION_EX", "JUMP_FORWARD",
    "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE",
    "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP",
    "GET_ITER", "FOR_ITER", "END_FOR", "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS",
    "LOAD_ASSERTION_ERROR", "LOAD_SUPER_ATTR",
    # reached only when an exception propagates (3.12 comprehension cleanup, the cleanup
    # of a with block), never run
    "RERAISE", "BEFORE_WITH", "PUSH_EXC_INFO", "WITH_EXCEPT_START", "POP_EXCEPT",
}
SUPPORTED = frozenset(_COMMON)

_CO_GENERATOR_LIKE = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coro, async gen


class CodeInfo:
    __slots__ = ("insts", "index", "unsupported")

    def __init__(self, insts: tuple, index: dict, unsupported: str | None):
        self.insts, self.index, self.unsupported = insts, index, unsupported


_INFO: dict[types.CodeType, CodeInfo] = {}


def code_info(code: types.CodeType) -> CodeInfo:
    info = _INFO.get(code)
    if info is None:
        insts = tuple(dis.get_instructions(code))
        index = {inst.offset: i for i, inst in enumerate(insts)}
        bad = None
        if not VERSION_OK:
            bad = f"Python {sys.version_info[0]}.{sys.version_info[1]} bytecode"
        elif code.co_flags & _CO_GENERATOR_LIKE:
            bad = "generator or coroutine"
        else:
            for i, inst in enumerate(insts):
                if inst.opname not in SUPPORTED or (
                        # a handler that is not a with block's cleanup: try/finally
                        inst.opname == "PUSH_EXC_INFO" and (
                            i + 1 == len(insts) or insts[i + 1].opname != "WITH_EXCEPT_START")):
                    bad = f"opcode {inst.opname} at offset {inst.offset}"
                    break
        info = _INFO[code] = CodeInfo(insts, index, bad)
    return info


class Frame:
    """One Python call being interpreted."""

    __slots__ = ("code", "insts", "index", "pc", "stack", "locals", "cells", "globals",
                 "kw_names", "forced", "fn")

    def __init__(self, code: types.CodeType, globals_: dict, fn: Any = None):
        info = code_info(code)
        self.code = code
        self.insts = info.insts
        self.index = info.index
        self.pc = 0
        self.stack: list = []
        self.locals: dict[str, Any] = {}
        self.cells: dict[str, Any] = {}
        self.globals = globals_
        self.kw_names: tuple = ()
        self.forced: Any = None   # a branch condition decided at run time (graph break)
        self.fn = fn              # the function object (for its closure), if any

    def line(self) -> int:
        """The source line of the instruction being run."""
        i = max(self.pc - 1, 0)
        while i >= 0:
            pos = self.insts[i].positions
            if pos is not None and pos.lineno is not None:
                return pos.lineno
            i -= 1
        return self.code.co_firstlineno

    def where(self) -> str:
        return f"{self.code.co_filename}:{self.line()} in {self.code.co_name}"

    def empty_copy(self) -> Frame:
        f = Frame.__new__(Frame)
        f.code, f.insts, f.index, f.pc = self.code, self.insts, self.index, self.pc
        f.globals, f.kw_names, f.fn = self.globals, self.kw_names, self.fn
        f.forced = None
        return f

    def pop_n(self, n: int) -> list:
        """The top ``n`` values of the stack, popped, bottom first."""
        if n == 0:
            return []
        vals = self.stack[-n:]
        del self.stack[-n:]
        return vals

    def jump(self, offset: int) -> None:
        """Continue at the instruction at byte ``offset`` (``inst.argval`` of a jump)."""
        self.pc = self.index[offset]


def bind_arguments(code: types.CodeType, defaults: tuple | None, kwdefaults: dict | None,
                   args: list, kwargs: dict) -> dict:
    """Bind call arguments to the parameter names of ``code``, as CPython does."""
    n = code.co_argcount
    if not kwargs and len(args) == n and not code.co_kwonlyargcount \
            and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return dict(zip(code.co_varnames[:n], args, strict=True))   # also names like ".0"
    bound = _signature(code, defaults, kwdefaults).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _signature(code: types.CodeType, defaults: tuple | None, kwdefaults: dict | None):
    """The signature of a code object with the given defaults (no function needed)."""
    P = inspect.Parameter
    n = code.co_argcount
    names = code.co_varnames
    params = []
    defaults = defaults or ()
    first_default = n - len(defaults)
    posonly = code.co_posonlyargcount
    for i in range(n):
        kind = P.POSITIONAL_ONLY if i < posonly else P.POSITIONAL_OR_KEYWORD
        default = defaults[i - first_default] if i >= first_default else P.empty
        params.append(P(names[i], kind, default=default))
    i = n
    kwonly = code.co_kwonlyargcount
    var_pos = code.co_flags & inspect.CO_VARARGS
    if var_pos:
        params.append(P(names[n + kwonly], P.VAR_POSITIONAL))
    for j in range(kwonly):
        name = names[i + j]
        d = (kwdefaults or {}).get(name, P.empty)
        params.append(P(name, P.KEYWORD_ONLY, default=d))
    if code.co_flags & inspect.CO_VARKEYWORDS:
        params.append(P(names[n + kwonly + (1 if var_pos else 0)], P.VAR_KEYWORD))
    return inspect.Signature(params)


_NO_FALLTHROUGH = {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
                   "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}
_LIVE: dict[types.CodeType, list] = {}


def live_locals(code: types.CodeType, pc: int) -> frozenset:
    """The local variables that may be read from instruction ``pc`` on (a backward
    dataflow over the bytecode), so that a graph break hands on only live values."""
    table = _LIVE.get(code)
    if table is None:
        table = _LIVE[code] = _liveness(code_info(code))
    return table[pc] if pc < len(table) else frozenset()


def _liveness(info: CodeInfo) -> list:
    insts = info.insts
    n = len(insts)
    succ: list[list[int]] = []
    for i, inst in enumerate(insts):
        s = []
        if inst.opname not in _NO_FALLTHROUGH and i + 1 < n:
            s.append(i + 1)
        if inst.opcode in dis.hasjrel or inst.opcode in dis.hasjabs:
            target = info.index.get(inst.argval)
            if target is not None:
                s.append(target)
        succ.append(s)
    live = [frozenset()] * n
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            out = frozenset().union(*(live[j] for j in succ[i])) if succ[i] else frozenset()
            inst = insts[i]
            name = inst.opname
            if name in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"):
                new = out | {inst.argval}
            elif name in ("STORE_FAST", "DELETE_FAST"):
                new = out - {inst.argval}
            else:
                new = out
            if new != live[i]:
                live[i] = new
                changed = True
    return live
