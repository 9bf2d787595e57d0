"""Layer ``dynamo``: the opcode handlers of ``BytecodeInterpreter`` for operators,
containers, unpacking and subscripts (CPython 3.11 and 3.12).

``ValueOpcodes`` is a mixin of ``interpreter.BytecodeInterpreter``: one method per
opcode, named as the opcode, taking ``(frame, inst)``. It uses the interpreter's
``cap`` (the capture) and its value rules ``brk``, ``value_op`` and ``binary``; it
imports nothing from the interpreter. A ``not`` of a graph value ends the segment:
``bool`` of it runs for real ("force" mode) and the instruction runs again with the
real answer.
"""

from __future__ import annotations

import dis
import operator

from graphgrad.graph import Symbol
from graphgrad.nn import ModuleList, Sequential

from .capture import Unsupported, opaque
from .values import Extras, FuncV, ListIter

__all__ = ["ValueOpcodes"]

# containers whose iteration is ``iter(self._modules.values())`` (exact types: a subclass
# may iterate otherwise)
_MODULE_SEQUENCES = (ModuleList, Sequential)
_BINARY = {i: name for i, (name, _) in enumerate(dis._nb_ops)}
_OPS = {"NB_ADD": operator.add, "NB_AND": operator.and_, "NB_FLOOR_DIVIDE": operator.floordiv,
        "NB_LSHIFT": operator.lshift, "NB_MATRIX_MULTIPLY": operator.matmul,
        "NB_MULTIPLY": operator.mul, "NB_REMAINDER": operator.mod, "NB_OR": operator.or_,
        "NB_POWER": operator.pow, "NB_RSHIFT": operator.rshift,
        "NB_SUBTRACT": operator.sub, "NB_TRUE_DIVIDE": operator.truediv,
        "NB_XOR": operator.xor}
_CMP = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
        ">": operator.gt, ">=": operator.ge}


def _unary(fn):
    def run(self, f, inst):
        v = f.stack.pop()
        if self.cap.concrete or not isinstance(v, Symbol) or fn is not operator.not_:
            f.stack.append(self.value_op(fn, v))
            return
        f.stack.append(v)
        f.pc -= 1
        if f.forced is not None:
            f.stack.pop()
            f.pc += 1
            c, f.forced = f.forced, None
            f.stack.append(not c)
            return
        self.brk("data-dependent-branch", "`not` of a tensor", bool, (v,), mode="force")
    return run


def _format(v, conv, spec):
    v = {0: v, 1: str(v), 2: repr(v), 3: ascii(v)}[conv] if conv else v
    return format(v, spec)


class ValueOpcodes:
    """Operators, containers, unpacking and subscripts."""

    # ---- operators ---------------------------------------------------------------------------

    def BINARY_OP(self, f, inst):
        b = f.stack.pop()
        a = f.stack.pop()
        name = _BINARY[inst.arg]
        inplace = name.startswith("NB_INPLACE_")
        base = _OPS[name.replace("NB_INPLACE_", "NB_")]
        if inplace:
            fn = getattr(operator, "i" + base.__name__.strip("_"), None) or base
            if isinstance(a, Extras) and not self.cap.concrete:
                f.stack.append(self.brk("unsupported-value-op", "in-place operator on an "
                                        "object the caller can see", fn, (a, b)))
                return
            if isinstance(a, Symbol):
                f.stack.append(self.binary(fn, a, b))
                return
            if type(a) in (list, dict, set) and fn is not base:
                f.stack.append(self.value_op(fn, a, b))
                return
            f.stack.append(self.binary(base, a, b))
            return
        f.stack.append(self.binary(base, a, b))

    UNARY_NEGATIVE = _unary(operator.neg)
    UNARY_INVERT = _unary(operator.invert)
    UNARY_POSITIVE = _unary(operator.pos)
    UNARY_NOT = _unary(operator.not_)

    def CALL_INTRINSIC_1(self, f, inst):
        v = f.stack.pop()
        if inst.arg == 5:
            f.stack.append(self.value_op(operator.pos, v))
        elif inst.arg == 6:
            f.stack.append(tuple(self.cap.realize(v)))
        else:
            raise Unsupported(f"CALL_INTRINSIC_1 {inst.argrepr}")

    def COMPARE_OP(self, f, inst):
        b = f.stack.pop()
        a = f.stack.pop()
        f.stack.append(self.binary(_CMP[inst.argval], a, b))

    def IS_OP(self, f, inst):
        cap = self.cap
        bv, av = f.stack.pop(), f.stack.pop()
        b, a = cap.realize_identity(bv), cap.realize_identity(av)
        same = a is b
        if type(av) is Extras and type(bv) is Extras and not cap.concrete:
            # (modules are guarded by type only: whether two are one must be guarded)
            cap.guards.add("alias" if same else "distinct", av.source, bv.source, cap.where)
        if isinstance(a, Symbol) and isinstance(b, Symbol) and not cap.concrete:
            cap.guard_identity(a, b, same)   # two inputs: whether they are one tensor
        f.stack.append((not same) if inst.arg else same)

    def CONTAINS_OP(self, f, inst):
        b = f.stack.pop()
        a = f.stack.pop()
        r = self.value_op(operator.contains, b, a)
        f.stack.append((not r) if inst.arg else r)

    # ---- containers --------------------------------------------------------------------------

    def BUILD_TUPLE(self, f, inst):
        f.stack.append(tuple(f.pop_n(inst.arg)))

    def BUILD_LIST(self, f, inst):
        f.stack.append(f.pop_n(inst.arg))

    def BUILD_SET(self, f, inst):
        f.stack.append(set(f.pop_n(inst.arg)))

    def BUILD_MAP(self, f, inst):
        vals = f.pop_n(2 * inst.arg)
        f.stack.append({vals[i]: vals[i + 1] for i in range(0, len(vals), 2)})

    def BUILD_CONST_KEY_MAP(self, f, inst):
        keys = f.stack.pop()
        vals = f.pop_n(inst.arg)
        f.stack.append(dict(zip(keys, vals, strict=True)))

    def BUILD_SLICE(self, f, inst):
        f.stack.append(slice(*f.pop_n(inst.arg)))

    def BUILD_STRING(self, f, inst):
        f.stack.append("".join(f.pop_n(inst.arg)))

    def FORMAT_VALUE(self, f, inst):
        spec = f.stack.pop() if inst.arg & 0x04 else ""
        v = f.stack.pop()
        conv = inst.arg & 0x03
        if isinstance(v, (Symbol, Extras, FuncV)) and not self.cap.concrete:
            self.brk("unsupported-value-op", "formatting a tensor or object as text", _format,
                     (v, conv, spec))
        f.stack.append(_format(v, conv, spec))

    def LIST_APPEND(self, f, inst):
        v = f.stack.pop()
        f.stack[-inst.arg].append(v)

    def SET_ADD(self, f, inst):
        v = f.stack.pop()
        f.stack[-inst.arg].add(v)

    def MAP_ADD(self, f, inst):
        v = f.stack.pop()
        k = f.stack.pop()
        f.stack[-inst.arg][k] = v

    def LIST_EXTEND(self, f, inst):
        v = self.items_of(f.stack.pop(), f)
        target = f.stack[-inst.arg]
        (target.extend if isinstance(target, list) else target.update)(v)

    SET_UPDATE = LIST_EXTEND

    def DICT_UPDATE(self, f, inst):
        v = self.cap.realize(f.stack.pop())
        f.stack[-inst.arg].update(v)

    DICT_MERGE = DICT_UPDATE

    def LIST_TO_TUPLE(self, f, inst):
        f.stack.append(tuple(f.stack.pop()))

    def items_of(self, v, f=None) -> list:
        """The items of an iterable trace value, as a list (tensors: their rows). With the
        frame ``f`` given, ``v`` was the top of its stack: what cannot be listed here is
        listed for real (a graph break) and the instruction runs again on the list."""
        cap = self.cap
        if opaque(v) and type(v.obj) in _MODULE_SEQUENCES:
            # ``for layer in self.layers``: the modules, each read (and guarded) from
            # ``_modules``, as iterating the container does
            v = list(cap.realize(cap.read_attr(v, "_modules")).values())
        elif not opaque(v):
            v = cap.realize(v)
        if isinstance(v, ListIter):
            items = v.items[v.pos:]
            v.pos = len(v.items)
            return list(items)
        if cap.concrete or isinstance(v, (list, tuple, range, str, dict, set, frozenset)):
            return list(v)
        if isinstance(v, Symbol) and v.shape is not None and v.shape and \
                v.shape[0] is not None:
            with cap.builder.active():
                return [v[i] for i in range(v.shape[0])]
        if f is None:
            raise Unsupported(f"iterating over {type(v).__name__}")
        f.stack.append(v)
        f.pc -= 1
        return self.brk("unsupported-value-op", f"iterating over a {type(v).__name__} whose "
                        f"items are known only at run time", list, (v,), mode="replace")

    def UNPACK_SEQUENCE(self, f, inst):
        items = self.items_of(f.stack.pop(), f)
        if len(items) != inst.arg:
            raise ValueError(f"expected {inst.arg} values to unpack (got {len(items)})")
        f.stack.extend(reversed(items))

    def UNPACK_EX(self, f, inst):
        items = self.items_of(f.stack.pop(), f)
        before, after = inst.arg & 0xFF, inst.arg >> 8
        if len(items) < before + after:
            raise ValueError(f"not enough values to unpack (expected at least "
                             f"{before + after}, got {len(items)})")
        rest = items[before:len(items) - after]
        out = items[:before] + [rest] + items[len(items) - after:]
        f.stack.extend(reversed(out))

    # ---- subscripts --------------------------------------------------------------------------

    def BINARY_SUBSCR(self, f, inst):
        key = f.stack.pop()
        obj = f.stack.pop()
        f.stack.append(self._subscr(obj, key))

    def _subscr(self, obj, key):
        cap = self.cap
        if isinstance(obj, Extras):
            try:
                return cap.read_item(obj, cap.realize(key))
            except Unsupported:
                return self.brk("unsupported-value-op", f"subscript of a "
                                f"{type(obj.obj).__name__} the function did not create",
                                operator.getitem, (obj, key))
        if isinstance(obj, Symbol) and not cap.concrete:
            with cap.builder.active():
                return self.value_op(operator.getitem, obj, key)
        return self.value_op(operator.getitem, obj, key)

    def BINARY_SLICE(self, f, inst):
        end = f.stack.pop()
        start = f.stack.pop()
        obj = f.stack.pop()
        f.stack.append(self._subscr(obj, slice(start, end)))

    def _store_item(self, obj, key, value):
        if type(obj) in (list, dict) or self.cap.concrete:
            obj[key] = value
            return
        self.brk("unsupported-value-op", "item assignment to an object the caller can see",
                 operator.setitem, (obj, key, value), mode="discard")

    def STORE_SUBSCR(self, f, inst):
        key = f.stack.pop()
        obj = f.stack.pop()
        value = f.stack.pop()
        self._store_item(obj, key, value)

    def STORE_SLICE(self, f, inst):
        end = f.stack.pop()
        start = f.stack.pop()
        obj = f.stack.pop()
        value = f.stack.pop()
        self._store_item(obj, slice(start, end), value)

    def DELETE_SUBSCR(self, f, inst):
        key = f.stack.pop()
        obj = f.stack.pop()
        if type(obj) in (list, dict) or self.cap.concrete:
            del obj[key]
            return
        self.brk("unsupported-value-op", "deleting an item of an object the caller can see",
                 operator.delitem, (obj, key), mode="discard")
