"""Layer ``dynamo``: one handler per opcode of CPython 3.11 and 3.12.

Each handler takes ``(interp, frame, inst)``. Jumps use ``inst.argval``, the absolute
target offset on both versions, so no handler does version-specific jump arithmetic.
A condition that is a graph value ends the segment: ``bool`` of it runs for real
("force" mode) and the jump is run again with the real answer.
"""

from __future__ import annotations

import operator
from typing import Any

from graphgrad.graph import Symbol

from .capture import Unsupported, opaque
from .interpreter import (_BINARY, _CMP, _INLINED, _OPS, PY312, Interpreter, Return,
                          _ExtCell)
from .values import NULL, UNBOUND, Attr, Cell, Extras, FuncV, ListIter, Obj

__all__ = ["HANDLERS"]

HANDLERS: dict = {}


def handler(*names):
    def register(fn):
        for n in names:
            HANDLERS[n] = fn
        return fn
    return register


@handler("RESUME", "NOP", "CACHE", "EXTENDED_ARG", "PRECALL", "COPY_FREE_VARS")
def _nop(it: Interpreter, f, inst) -> None:
    pass


@handler("MAKE_CELL")
def _make_cell(it, f, inst):
    name = inst.argval
    if name not in f.cells:
        f.cells[name] = Cell(f.locals.pop(name, UNBOUND))


# ---- locals, constants, closures -------------------------------------------------------------

@handler("LOAD_FAST", "LOAD_FAST_CHECK")
def _load_fast(it, f, inst):
    v = f.locals.get(inst.argval, UNBOUND)
    if v is UNBOUND:
        raise UnboundLocalError(f"cannot access local variable '{inst.argval}' where it is "
                                f"not associated with a value")
    f.stack.append(v)


@handler("LOAD_FAST_AND_CLEAR")
def _load_fast_clear(it, f, inst):
    f.stack.append(f.locals.pop(inst.argval, UNBOUND))


@handler("STORE_FAST")
def _store_fast(it, f, inst):
    v = f.stack.pop()
    if v is UNBOUND:
        f.locals.pop(inst.argval, None)
    else:
        f.locals[inst.argval] = v


@handler("DELETE_FAST")
def _delete_fast(it, f, inst):
    del f.locals[inst.argval]


@handler("LOAD_CONST")
def _load_const(it, f, inst):
    f.stack.append(inst.argval)


@handler("RETURN_CONST")
def _return_const(it, f, inst):
    _return(it, inst.argval)


@handler("LOAD_CLOSURE")
def _load_closure(it, f, inst):
    f.stack.append(f.cells[inst.argval])


def _cell_get(it, cell):
    if isinstance(cell, _ExtCell):
        c = cell.cell
        try:
            value = c.cell_contents
        except ValueError:
            raise NameError("free variable referenced before assignment") from None
        if it.cap.concrete:
            return value
        return it.cap.wrap(value, Attr(Obj(c, cell.label), "cell_contents"))
    if cell.value is UNBOUND:
        raise NameError("free variable referenced before assignment")
    return cell.value


@handler("LOAD_DEREF")
def _load_deref(it, f, inst):
    f.stack.append(_cell_get(it, f.cells[inst.argval]))


@handler("STORE_DEREF")
def _store_deref(it, f, inst):
    cell = f.cells[inst.argval]
    v = f.stack.pop()
    if isinstance(cell, _ExtCell):
        if it.cap.concrete:
            cell.cell.cell_contents = v
            return
        raise Unsupported("assignment to a nonlocal variable of a function defined outside")
    cell.value = v


@handler("MAKE_FUNCTION")
def _make_function(it, f, inst):
    flags = inst.arg
    code = f.stack.pop()
    closure = f.stack.pop() if flags & 0x08 else ()
    if flags & 0x04:
        f.stack.pop()  # annotations
    kwdefaults = f.stack.pop() if flags & 0x02 else None
    defaults = f.stack.pop() if flags & 0x01 else None
    f.stack.append(FuncV(code, f.globals, defaults, kwdefaults, tuple(closure),
                         code.co_name))


# ---- names, attributes -----------------------------------------------------------------------

@handler("LOAD_GLOBAL")
def _load_global(it, f, inst):
    if inst.arg & 1:
        f.stack.append(NULL)
    name = inst.argval
    if it.cap.concrete:
        g = f.globals
        if name in g:
            f.stack.append(g[name])
            return
        b = g.get("__builtins__", __builtins__)
        b = b.__dict__ if hasattr(b, "__dict__") else b
        f.stack.append(b[name])
        return
    f.stack.append(it.cap.global_value(f.globals, name))


@handler("STORE_GLOBAL")
def _store_global(it, f, inst):
    value = f.stack.pop()
    setter = _GlobalSetter(f.globals, inst.argval)
    if it.cap.concrete:
        setter(value)
        return
    it.brk("unsupported-value-op", f"assignment to the global {inst.argval!r}", setter,
           (value,), mode="discard")


class _GlobalSetter:
    """``globals[name] = value`` at run time (the dict itself, never a copy of it)."""

    __slots__ = ("g", "name")

    def __init__(self, g: dict, name: str):
        self.g, self.name = g, name

    def __call__(self, value: Any) -> None:
        self.g[self.name] = value

    def __repr__(self) -> str:
        return f"<store global {self.name}>"


@handler("LOAD_ATTR")
def _load_attr(it, f, inst):
    obj = f.stack.pop()
    if PY312 and inst.arg & 1:
        f.stack.append(NULL)
    f.stack.append(it.load_attr(obj, inst.argval))


@handler("LOAD_METHOD")
def _load_method(it, f, inst):
    obj = f.stack.pop()
    f.stack.append(NULL)
    f.stack.append(it.load_attr(obj, inst.argval))


@handler("STORE_ATTR")
def _store_attr(it, f, inst):
    obj = f.stack.pop()
    value = f.stack.pop()
    if it.cap.concrete:
        setattr(obj, inst.argval, value)
        return
    it.brk("unsupported-value-op", f"setting attribute .{inst.argval} changes an object the "
           f"caller can see", setattr, (obj, inst.argval, value), mode="discard")


# ---- stack -----------------------------------------------------------------------------------

@handler("POP_TOP")
def _pop_top(it, f, inst):
    f.stack.pop()


@handler("PUSH_NULL")
def _push_null(it, f, inst):
    f.stack.append(NULL)


@handler("COPY")
def _copy(it, f, inst):
    f.stack.append(f.stack[-inst.arg])


@handler("SWAP")
def _swap(it, f, inst):
    s = f.stack
    s[-1], s[-inst.arg] = s[-inst.arg], s[-1]


# ---- operators -------------------------------------------------------------------------------

@handler("BINARY_OP")
def _binary_op(it, f, inst):
    b = f.stack.pop()
    a = f.stack.pop()
    name = _BINARY[inst.arg]
    inplace = name.startswith("NB_INPLACE_")
    base = _OPS[name.replace("NB_INPLACE_", "NB_")]
    if inplace:
        fn = getattr(operator, "i" + base.__name__.strip("_"), None) or base
        if isinstance(a, Extras) and not it.cap.concrete:
            f.stack.append(it.brk("unsupported-value-op", "in-place operator on an object "
                                  "the caller can see", fn, (a, b)))
            return
        if isinstance(a, Symbol):
            f.stack.append(it.binary(fn, a, b))
            return
        if type(a) in (list, dict, set) and fn is not base:
            f.stack.append(it.value_op(fn, a, b))
            return
        f.stack.append(it.binary(base, a, b))
        return
    f.stack.append(it.binary(base, a, b))


def _unary(fn):
    def run(it, f, inst):
        v = f.stack.pop()
        if it.cap.concrete or not isinstance(v, Symbol) or fn is not operator.not_:
            f.stack.append(it.value_op(fn, v))
            return
        f.stack.append(v)
        f.pc -= 1
        if f.forced is not None:
            f.stack.pop()
            f.pc += 1
            c, f.forced = f.forced, None
            f.stack.append(not c)
            return
        it.brk("data-dependent-branch", "`not` of a tensor", bool, (v,), mode="force")
    return run


HANDLERS["UNARY_NEGATIVE"] = _unary(operator.neg)
HANDLERS["UNARY_INVERT"] = _unary(operator.invert)
HANDLERS["UNARY_POSITIVE"] = _unary(operator.pos)
HANDLERS["UNARY_NOT"] = _unary(operator.not_)


@handler("CALL_INTRINSIC_1")
def _intrinsic(it, f, inst):
    v = f.stack.pop()
    if inst.arg == 5:
        f.stack.append(it.value_op(operator.pos, v))
    elif inst.arg == 6:
        f.stack.append(tuple(it.cap.realize(v)))
    else:
        raise Unsupported(f"CALL_INTRINSIC_1 {inst.argrepr}")


@handler("COMPARE_OP")
def _compare(it, f, inst):
    b = f.stack.pop()
    a = f.stack.pop()
    f.stack.append(it.binary(_CMP[inst.argval], a, b))


@handler("IS_OP")
def _is_op(it, f, inst):
    b = it.cap.realize_identity(f.stack.pop())
    a = it.cap.realize_identity(f.stack.pop())
    same = a is b
    if isinstance(a, Symbol) and isinstance(b, Symbol) and not it.cap.concrete:
        it.cap.guard_identity(a, b, same)   # two inputs: whether they are one tensor
    f.stack.append((not same) if inst.arg else same)


@handler("CONTAINS_OP")
def _contains(it, f, inst):
    b = f.stack.pop()
    a = f.stack.pop()
    r = it.value_op(operator.contains, b, a)
    f.stack.append((not r) if inst.arg else r)


# ---- containers ------------------------------------------------------------------------------

def _pop_n(f, n: int) -> list:
    if n == 0:
        return []
    vals = f.stack[-n:]
    del f.stack[-n:]
    return vals


@handler("BUILD_TUPLE")
def _build_tuple(it, f, inst):
    f.stack.append(tuple(_pop_n(f, inst.arg)))


@handler("BUILD_LIST")
def _build_list(it, f, inst):
    f.stack.append(_pop_n(f, inst.arg))


@handler("BUILD_SET")
def _build_set(it, f, inst):
    f.stack.append(set(_pop_n(f, inst.arg)))


@handler("BUILD_MAP")
def _build_map(it, f, inst):
    vals = _pop_n(f, 2 * inst.arg)
    f.stack.append({vals[i]: vals[i + 1] for i in range(0, len(vals), 2)})


@handler("BUILD_CONST_KEY_MAP")
def _build_const_key_map(it, f, inst):
    keys = f.stack.pop()
    vals = _pop_n(f, inst.arg)
    f.stack.append(dict(zip(keys, vals, strict=True)))


@handler("BUILD_SLICE")
def _build_slice(it, f, inst):
    f.stack.append(slice(*_pop_n(f, inst.arg)))


@handler("BUILD_STRING")
def _build_string(it, f, inst):
    f.stack.append("".join(_pop_n(f, inst.arg)))


@handler("FORMAT_VALUE")
def _format_value(it, f, inst):
    spec = f.stack.pop() if inst.arg & 0x04 else ""
    v = f.stack.pop()
    conv = inst.arg & 0x03
    if isinstance(v, (Symbol, Extras, FuncV)) and not it.cap.concrete:
        it.brk("unsupported-value-op", "formatting a tensor or object as text", _format,
               (v, conv, spec))
    f.stack.append(_format(v, conv, spec))


def _format(v, conv, spec):
    v = {0: v, 1: str(v), 2: repr(v), 3: ascii(v)}[conv] if conv else v
    return format(v, spec)


@handler("LIST_APPEND")
def _list_append(it, f, inst):
    v = f.stack.pop()
    f.stack[-inst.arg].append(v)


@handler("SET_ADD")
def _set_add(it, f, inst):
    v = f.stack.pop()
    f.stack[-inst.arg].add(v)


@handler("MAP_ADD")
def _map_add(it, f, inst):
    v = f.stack.pop()
    k = f.stack.pop()
    f.stack[-inst.arg][k] = v


@handler("LIST_EXTEND", "SET_UPDATE")
def _list_extend(it, f, inst):
    v = _seq(it, f.stack.pop(), f)
    target = f.stack[-inst.arg]
    (target.extend if isinstance(target, list) else target.update)(v)


@handler("DICT_MERGE", "DICT_UPDATE")
def _dict_update(it, f, inst):
    v = it.cap.realize(f.stack.pop())
    f.stack[-inst.arg].update(v)


@handler("LIST_TO_TUPLE")
def _list_to_tuple(it, f, inst):
    f.stack.append(tuple(f.stack.pop()))


def _seq(it, v, f=None) -> list:
    """The items of an iterable trace value, as a list (tensors: their rows). With the
    frame ``f`` given, ``v`` was the top of its stack: what cannot be listed here is
    listed for real (a graph break) and the instruction runs again on the list."""
    if not opaque(v):
        v = it.cap.realize(v)
    if isinstance(v, ListIter):
        items = v.items[v.pos:]
        v.pos = len(v.items)
        return list(items)
    if it.cap.concrete or isinstance(v, (list, tuple, range, str, dict, set, frozenset)):
        return list(v)
    if isinstance(v, Symbol) and v.shape is not None and v.shape and v.shape[0] is not None:
        with it.cap.builder.active():
            return [v[i] for i in range(v.shape[0])]
    if f is None:
        raise Unsupported(f"iterating over {type(v).__name__}")
    f.stack.append(v)
    f.pc -= 1
    return it.brk("unsupported-value-op", f"iterating over a {type(v).__name__} whose items "
                  f"are known only at run time", list, (v,), mode="replace")


@handler("UNPACK_SEQUENCE")
def _unpack_sequence(it, f, inst):
    items = _seq(it, f.stack.pop(), f)
    if len(items) != inst.arg:
        raise ValueError(f"expected {inst.arg} values to unpack (got {len(items)})")
    f.stack.extend(reversed(items))


@handler("UNPACK_EX")
def _unpack_ex(it, f, inst):
    items = _seq(it, f.stack.pop(), f)
    before, after = inst.arg & 0xFF, inst.arg >> 8
    if len(items) < before + after:
        raise ValueError(f"not enough values to unpack (expected at least {before + after}, "
                         f"got {len(items)})")
    rest = items[before:len(items) - after]
    out = items[:before] + [rest] + items[len(items) - after:]
    f.stack.extend(reversed(out))


@handler("BINARY_SUBSCR")
def _binary_subscr(it, f, inst):
    key = f.stack.pop()
    obj = f.stack.pop()
    f.stack.append(_subscr(it, obj, key))


def _subscr(it, obj, key):
    if isinstance(obj, Extras):
        try:
            return it.cap.read_item(obj, it.cap.realize(key))
        except Unsupported:
            return it.brk("unsupported-value-op", f"subscript of a {type(obj.obj).__name__} "
                          f"the function did not create", operator.getitem, (obj, key))
    if isinstance(obj, Symbol) and not it.cap.concrete:
        with it.cap.builder.active():
            return it.value_op(operator.getitem, obj, key)
    return it.value_op(operator.getitem, obj, key)


@handler("BINARY_SLICE")
def _binary_slice(it, f, inst):
    end = f.stack.pop()
    start = f.stack.pop()
    obj = f.stack.pop()
    f.stack.append(_subscr(it, obj, slice(start, end)))


def _store_item(it, obj, key, value):
    if type(obj) in (list, dict) or it.cap.concrete:
        obj[key] = value
        return
    it.brk("unsupported-value-op", "item assignment to an object the caller can see",
           operator.setitem, (obj, key, value), mode="discard")


@handler("STORE_SUBSCR")
def _store_subscr(it, f, inst):
    key = f.stack.pop()
    obj = f.stack.pop()
    value = f.stack.pop()
    _store_item(it, obj, key, value)


@handler("STORE_SLICE")
def _store_slice(it, f, inst):
    end = f.stack.pop()
    start = f.stack.pop()
    obj = f.stack.pop()
    value = f.stack.pop()
    _store_item(it, obj, slice(start, end), value)


@handler("DELETE_SUBSCR")
def _delete_subscr(it, f, inst):
    key = f.stack.pop()
    obj = f.stack.pop()
    if type(obj) in (list, dict) or it.cap.concrete:
        del obj[key]
        return
    it.brk("unsupported-value-op", "deleting an item of an object the caller can see",
           operator.delitem, (obj, key), mode="discard")


# ---- calls -----------------------------------------------------------------------------------

@handler("KW_NAMES")
def _kw_names(it, f, inst):
    f.kw_names = f.code.co_consts[inst.arg]


@handler("CALL")
def _call(it, f, inst):
    args = _pop_n(f, inst.arg)
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
    _do_call(it, f, fn, args, kwargs)


def _do_call(it, f, fn, args, kwargs):
    out = it.call(fn, args, kwargs)
    if out is not _INLINED:
        f.stack.append(out)


@handler("CALL_FUNCTION_EX")
def _call_ex(it, f, inst):
    kwargs = it.cap.realize(f.stack.pop()) if inst.arg & 1 else {}
    args = _seq(it, f.stack.pop())
    fn = f.stack.pop()
    if f.stack and f.stack[-1] is NULL:
        f.stack.pop()
    _do_call(it, f, fn, list(args), dict(kwargs))


# ---- control flow ----------------------------------------------------------------------------

def _jump(f, offset: int) -> None:
    f.pc = f.index[offset]


@handler("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")
def _jump_abs(it, f, inst):
    _jump(f, inst.argval)


def _truth(it, f, v) -> bool:
    """The truth of a condition; a graph value ends the segment (decided at run time)."""
    if f.forced is not None:
        c, f.forced = f.forced, None
        return c
    if isinstance(v, Symbol) and not it.cap.concrete:
        f.pc -= 1
        return it.brk("data-dependent-branch", "the condition is a tensor computed by the "
                      "graph", bool, (v,), mode="force")
    if opaque(v) and not it.cap.concrete:
        f.pc -= 1
        return it.brk("unsupported-value-op", f"the truth of a {type(v.obj).__name__} the "
                      f"function did not create", bool, (v,), mode="force")
    if isinstance(v, Extras):
        return bool(len(it.cap.realize(v)))
    return bool(v)


def _pop_jump(want: bool | None, none_test: bool = False):
    def run(it, f, inst):
        v = f.stack[-1]
        if none_test:
            f.stack.pop()
            is_none = it.cap.realize_identity(v) is None
            if is_none == want:
                _jump(f, inst.argval)
            return
        c = _truth(it, f, v)
        f.stack.pop()
        if c == want:
            _jump(f, inst.argval)
    return run


for _prefix in ("POP_JUMP_IF_", "POP_JUMP_FORWARD_IF_", "POP_JUMP_BACKWARD_IF_"):
    HANDLERS[_prefix + "TRUE"] = _pop_jump(True)
    HANDLERS[_prefix + "FALSE"] = _pop_jump(False)
    HANDLERS[_prefix + "NONE"] = _pop_jump(True, none_test=True)
    HANDLERS[_prefix + "NOT_NONE"] = _pop_jump(False, none_test=True)


def _jump_or_pop(want: bool):
    def run(it, f, inst):
        c = _truth(it, f, f.stack[-1])
        if c == want:
            _jump(f, inst.argval)
        else:
            f.stack.pop()
    return run


HANDLERS["JUMP_IF_TRUE_OR_POP"] = _jump_or_pop(True)
HANDLERS["JUMP_IF_FALSE_OR_POP"] = _jump_or_pop(False)


@handler("GET_ITER")
def _get_iter(it, f, inst):
    v = f.stack.pop()
    if isinstance(v, ListIter):
        f.stack.append(v)
        return
    f.stack.append(ListIter(_seq(it, v, f)))


@handler("FOR_ITER")
def _for_iter(it, f, inst):
    itr = f.stack[-1]
    if not isinstance(itr, ListIter):
        raise Unsupported("FOR_ITER over an unknown iterator")
    if itr.pos < len(itr.items):
        f.stack.append(itr.items[itr.pos])
        itr.pos += 1
        return
    f.stack.pop()
    _jump(f, inst.argval)
    if PY312 and f.insts[f.pc].opname == "END_FOR":
        f.pc += 1  # CPython skips END_FOR on exhaustion


@handler("END_FOR")
def _end_for(it, f, inst):
    f.stack.pop()
    f.stack.pop()


@handler("RETURN_VALUE")
def _return_value(it, f, inst):
    _return(it, f.stack.pop())


def _return(it, value: Any) -> None:
    it.frames.pop()
    if not it.frames:
        raise Return(value)
    it.frames[-1].stack.append(value)


@handler("LOAD_ASSERTION_ERROR")
def _load_assertion_error(it, f, inst):
    f.stack.append(AssertionError)


@handler("RAISE_VARARGS")
def _raise(it, f, inst):
    vals = _pop_n(f, inst.arg)
    if inst.arg == 0:
        raise Unsupported("bare raise")
    exc = vals[0]
    cause = vals[1] if inst.arg == 2 else None
    if it.cap.concrete:
        _raise_now(exc, cause)
    it.brk("raise", "raise statement", _raise_now, (exc, cause))


def _raise_now(exc, cause=None):
    if isinstance(exc, type):
        exc = exc()
    if cause is not None:
        raise exc from cause
    raise exc


@handler("RERAISE", "PUSH_EXC_INFO", "WITH_EXCEPT_START", "POP_EXCEPT")
def _reraise(it, f, inst):
    raise Unsupported(f"exception handler reached ({inst.opname})")


# ---- with blocks (graphgrad's grad-mode context managers) -----------------------------------

@handler("BEFORE_WITH")
def _before_with(it, f, inst):
    cm = f.stack.pop()
    if it.cap.concrete:
        f.stack.extend(enter_with(cm))
        return
    from graphgrad.autograd.grad_mode import _GradMode
    obj = cm.obj if isinstance(cm, Extras) else cm
    if not isinstance(obj, _GradMode):
        raise Unsupported(f"a with block on {type(obj).__name__} (only graphgrad's grad-mode "
                          f"context managers)")
    # entering runs for real: the segments of the block then run in that grad mode
    it.brk("unsupported-call", f"entering {type(obj).__name__}", enter_with, (cm,),
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
