"""Layer ``dynamo``: templates compiled to Python functions of the runtime values
``(a, k, s)`` (positional args, keyword args, slots), exec'd once per segment, so the
cached path runs no interpreter: building a return value or the arguments of an eager
call is one generated function call.

Containers the traced code created are rebuilt fresh on every call; their variables are
listed in ``Codegen.containers`` so that an eager call that may mutate them hands the
very objects on to the next segment.
"""

from __future__ import annotations

import math
import types
from typing import Any

from graphgrad.tensor import Size, Tensor

from .guards import Pool
from .values import UNBOUND, Cell, FuncV, IntOf, ListIter, SlotRef, SrcRef

__all__ = ["Codegen", "materialize"]

_LITERAL = (int, str, bool, type(None), bytes)


class Codegen:
    def __init__(self, pool: Pool | None = None):
        self.pool = pool or Pool()
        self.lines: list[str] = []
        self.containers: list = []          # (template object, variable name)
        self._names: dict[int, str] = {}

    def expr(self, t: Any) -> str:
        tp = type(t)
        if tp is SlotRef:
            return f"s[{t.index}]"
        if tp is IntOf:
            return f"int(s[{t.ref.index}])"
        if tp is SrcRef:
            return t.source.expr(self.pool)
        if tp is tuple or tp is Size:
            inner = ", ".join(self.expr(x) for x in t)
            text = f"({inner},)" if t else "()"
            return text if tp is tuple else f"{self.pool(Size)}({text})"
        if isinstance(t, tuple) and hasattr(tp, "_fields"):  # a NamedTuple result
            return f"{self.pool(tp)}({', '.join(self.expr(x) for x in t)})"
        if tp in (list, dict, set):
            name = self._names.get(id(t))
            if name is None:
                if tp is list:
                    text = "[" + ", ".join(self.expr(x) for x in t) + "]"
                elif tp is set:
                    text = "{" + ", ".join(self.expr(x) for x in t) + "}" if t else "set()"
                else:
                    text = "{" + ", ".join(f"{self.expr(key)}: {self.expr(v)}"
                                           for key, v in t.items()) + "}"
                name = self._names[id(t)] = f"m{len(self.containers)}"
                self.containers.append((t, name))
                self.lines.append(f"{name} = {text}")
            return name
        if tp in (FuncV, Cell, ListIter):
            return f"_materialize({self.pool(t)}, a, k, s)"
        if tp in _LITERAL or (tp is float and math.isfinite(t)):
            return repr(t)
        if isinstance(t, Tensor):   # made while tracing (gg.zeros(3)): a new one per call
            return f"_fresh({self.pool(t)})"
        return self.pool(t)

    def function(self, name: str, body_expr: str) -> types.FunctionType:
        src = f"def {name}(a, k, s):\n" + "".join(f"    {line}\n" for line in self.lines) \
            + f"    return {body_expr}\n"
        ns = dict(self.pool.ns)
        ns["_materialize"] = materialize
        ns["_fresh"] = fresh
        exec(compile(src, f"<dynamo {name}>", "exec"), ns)  # noqa: S102 - our own code
        fn = ns[name]
        fn.source = src
        return fn


def fresh(t: Tensor) -> Tensor:
    """A copy of a tensor made at capture time, so that no two calls share one."""
    out = Tensor(t._array.copy())
    if t.requires_grad:
        out.requires_grad_()
    return out


def materialize(t: Any, a: tuple, k: dict, s: tuple, memo: dict | None = None) -> Any:
    """A template as runtime values (the slow, general path: functions made by the
    traced code become real functions with real closure cells)."""
    from .capture import eval_source
    memo = {} if memo is None else memo
    tp = type(t)
    if tp is SlotRef:
        return s[t.index]
    if tp is IntOf:
        return int(s[t.ref.index])
    if tp is SrcRef:
        return eval_source(t.source, a, k, s)
    if tp is tuple or tp is Size:
        return tp(materialize(x, a, k, s, memo) for x in t)
    if isinstance(t, tuple) and hasattr(tp, "_fields"):
        return tp(*(materialize(x, a, k, s, memo) for x in t))
    if id(t) in memo:
        return memo[id(t)]
    if tp is list:
        out = memo[id(t)] = []
        out.extend(materialize(x, a, k, s, memo) for x in t)
        return out
    if tp is dict:
        out = memo[id(t)] = {}
        for key, v in t.items():
            out[key] = materialize(v, a, k, s, memo)
        return out
    if tp is set:
        out = memo[id(t)] = {materialize(x, a, k, s, memo) for x in t}
        return out
    if tp is Cell or (isinstance(t, Cell) and hasattr(t, "cell")):
        if hasattr(t, "cell"):   # a real function's cell
            return t.cell
        out = memo[id(t)] = types.CellType()
        v = materialize(t.value, a, k, s, memo)
        if v is not UNBOUND:
            out.cell_contents = v
        return out
    if tp is FuncV:
        closure = tuple(materialize(c, a, k, s, memo) for c in t.closure) or None
        fn = types.FunctionType(t.code, t.globals, t.name,
                                materialize(t.defaults, a, k, s, memo), closure)
        if t.kwdefaults:
            fn.__kwdefaults__ = materialize(t.kwdefaults, a, k, s, memo)
        memo[id(t)] = fn
        return fn
    if tp is ListIter:
        return iter(materialize(t.items, a, k, s, memo)[t.pos:])
    if isinstance(t, Tensor):
        return fresh(t)
    return t
