"""Layer ``dynamo``: the opcode handlers of ``BytecodeInterpreter`` for the value stack,
locals, constants, closures, globals and attributes (CPython 3.11 and 3.12).

``StackOpcodes`` is a mixin of ``interpreter.BytecodeInterpreter``: one method per
opcode, named as the opcode, taking ``(frame, inst)``. It uses the interpreter's
``cap`` (the capture), ``brk`` (end the segment, run a call for real) and
``load_attr``; it imports nothing from the interpreter.
"""

from __future__ import annotations

from typing import Any

from .callables import SuperOf
from .capture import Unsupported
from .frame import PY312
from .values import NULL, UNBOUND, Attr, Cell, ExtCell, FuncV, Obj

__all__ = ["StackOpcodes"]


class StackOpcodes:
    """Stack, locals, constants, closures, names and attributes."""

    def NOP(self, f, inst) -> None:
        pass

    RESUME = CACHE = EXTENDED_ARG = PRECALL = COPY_FREE_VARS = NOP

    def MAKE_CELL(self, f, inst):
        name = inst.argval
        if name not in f.cells:
            f.cells[name] = Cell(f.locals.pop(name, UNBOUND))

    # ---- locals, constants, closures ---------------------------------------------------------

    def LOAD_FAST(self, f, inst):
        v = f.locals.get(inst.argval, UNBOUND)
        if v is UNBOUND:
            raise UnboundLocalError(f"cannot access local variable '{inst.argval}' where it "
                                    f"is not associated with a value")
        f.stack.append(v)

    LOAD_FAST_CHECK = LOAD_FAST

    def LOAD_FAST_AND_CLEAR(self, f, inst):
        f.stack.append(f.locals.pop(inst.argval, UNBOUND))

    def STORE_FAST(self, f, inst):
        v = f.stack.pop()
        if v is UNBOUND:
            f.locals.pop(inst.argval, None)
        else:
            f.locals[inst.argval] = v

    def DELETE_FAST(self, f, inst):
        del f.locals[inst.argval]

    def LOAD_CONST(self, f, inst):
        f.stack.append(inst.argval)

    def LOAD_CLOSURE(self, f, inst):
        f.stack.append(f.cells[inst.argval])

    def _cell_get(self, cell):
        """The contents of a closure cell (a real function's: read through its source)."""
        if isinstance(cell, ExtCell):
            c = cell.cell
            try:
                value = c.cell_contents
            except ValueError:
                raise NameError("free variable referenced before assignment") from None
            if self.cap.concrete:
                return value
            return self.cap.wrap(value, Attr(Obj(c, cell.label), "cell_contents"))
        if cell.value is UNBOUND:
            raise NameError("free variable referenced before assignment")
        return cell.value

    def LOAD_DEREF(self, f, inst):
        f.stack.append(self._cell_get(f.cells[inst.argval]))

    def STORE_DEREF(self, f, inst):
        cell = f.cells[inst.argval]
        v = f.stack.pop()
        if isinstance(cell, ExtCell):
            if self.cap.concrete:
                cell.cell.cell_contents = v
                return
            raise Unsupported("assignment to a nonlocal variable of a function defined outside")
        cell.value = v

    def MAKE_FUNCTION(self, f, inst):
        flags = inst.arg
        code = f.stack.pop()
        closure = f.stack.pop() if flags & 0x08 else ()
        if flags & 0x04:
            f.stack.pop()  # annotations
        kwdefaults = f.stack.pop() if flags & 0x02 else None
        defaults = f.stack.pop() if flags & 0x01 else None
        f.stack.append(FuncV(code, f.globals, defaults, kwdefaults, tuple(closure),
                             code.co_name))

    # ---- names, attributes -------------------------------------------------------------------

    def LOAD_GLOBAL(self, f, inst):
        if inst.arg & 1:
            f.stack.append(NULL)
        name = inst.argval
        if self.cap.concrete:
            g = f.globals
            if name in g:
                f.stack.append(g[name])
                return
            b = g.get("__builtins__", __builtins__)
            b = b.__dict__ if hasattr(b, "__dict__") else b
            f.stack.append(b[name])
            return
        f.stack.append(self.cap.global_value(f.globals, name))

    def STORE_GLOBAL(self, f, inst):
        value = f.stack.pop()
        setter = _GlobalSetter(f.globals, inst.argval)
        if self.cap.concrete:
            setter(value)
            return
        self.brk("unsupported-value-op", f"assignment to the global {inst.argval!r}", setter,
                 (value,), mode="discard")

    def LOAD_ATTR(self, f, inst):
        obj = f.stack.pop()
        if PY312 and inst.arg & 1:
            f.stack.append(NULL)
        f.stack.append(self.load_attr(obj, inst.argval))

    def LOAD_SUPER_ATTR(self, f, inst):   # 3.12: ``super().name`` (either form)
        obj = f.stack.pop()
        cls = f.stack.pop()
        sup = f.stack.pop()
        if sup is not super or not isinstance(cls, type):
            raise Unsupported("LOAD_SUPER_ATTR of something other than super")
        if inst.arg & 1:
            f.stack.append(NULL)
        if self.cap.concrete:
            f.stack.append(getattr(super(cls, obj), inst.argval))
            return
        f.stack.append(SuperOf(cls, obj).attr(self.cap, inst.argval))

    def LOAD_METHOD(self, f, inst):
        obj = f.stack.pop()
        f.stack.append(NULL)
        f.stack.append(self.load_attr(obj, inst.argval))

    def STORE_ATTR(self, f, inst):
        obj = f.stack.pop()
        value = f.stack.pop()
        if self.cap.concrete:
            setattr(obj, inst.argval, value)
            return
        self.brk("unsupported-value-op", f"setting attribute .{inst.argval} changes an object "
                 f"the caller can see", setattr, (obj, inst.argval, value), mode="discard")

    # ---- stack -------------------------------------------------------------------------------

    def POP_TOP(self, f, inst):
        f.stack.pop()

    def PUSH_NULL(self, f, inst):
        f.stack.append(NULL)

    def COPY(self, f, inst):
        f.stack.append(f.stack[-inst.arg])

    def SWAP(self, f, inst):
        s = f.stack
        s[-1], s[-inst.arg] = s[-inst.arg], s[-1]


class _GlobalSetter:
    """``globals[name] = value`` at run time (the dict itself, never a copy of it)."""

    __slots__ = ("g", "name")

    def __init__(self, g: dict, name: str):
        self.g, self.name = g, name

    def __call__(self, value: Any) -> None:
        self.g[self.name] = value

    def __repr__(self) -> str:
        return f"<store global {self.name}>"
