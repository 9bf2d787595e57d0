"""Layer ``dynamo``: ``rebuild``, the one walk over interpreter state.

Frames, the interpreter's own containers, cells, functions and iterators are copied
with their sharing kept (two locals naming one list still name one list in the copy);
every other value is replaced by ``leaf(value)``. Snapshotting frames into a template,
instantiating a template for a new capture and renumbering slots are all this walk with
a different ``leaf``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphgrad.tensor import Size

from .frame import Frame
from .values import Cell, FuncV, ListIter

__all__ = ["rebuild"]


def rebuild(t: Any, leaf: Callable[[Any], Any], memo: dict) -> Any:
    """A copy of ``t``'s structure with ``leaf`` applied to the values in it. ``memo``
    maps ``id(container)`` to its copy (pre-seed it to replace given containers)."""
    tp = type(t)
    if tp is tuple:
        return tuple(rebuild(x, leaf, memo) for x in t)
    if isinstance(t, tuple) and hasattr(tp, "_fields"):  # a NamedTuple result
        return tp(*(rebuild(x, leaf, memo) for x in t))
    if tp is Size:   # a shape holding dynamic sizes
        return Size(rebuild(x, leaf, memo) for x in t)
    if tp not in _STRUCTURES:
        return leaf(t)
    got = memo.get(id(t))
    if got is not None:
        return got
    if tp is list:
        out = memo[id(t)] = []
        out.extend(rebuild(x, leaf, memo) for x in t)
    elif tp is dict:
        out = memo[id(t)] = {}
        for key, v in t.items():
            out[key] = rebuild(v, leaf, memo)
    elif tp is set:
        out = memo[id(t)] = {rebuild(x, leaf, memo) for x in t}
    elif tp is Cell:
        out = memo[id(t)] = Cell()
        out.value = rebuild(t.value, leaf, memo)
    elif tp is FuncV:
        out = memo[id(t)] = FuncV(t.code, t.globals, None, None, (), t.name)
        out.defaults = rebuild(t.defaults, leaf, memo)
        out.kwdefaults = rebuild(t.kwdefaults, leaf, memo)
        out.closure = rebuild(t.closure, leaf, memo)
    elif tp is ListIter:
        out = memo[id(t)] = ListIter([], t.pos)
        out.items = rebuild(t.items, leaf, memo)
    else:
        out = memo[id(t)] = t.empty_copy()
        out.stack = [rebuild(x, leaf, memo) for x in t.stack]
        out.locals = {n: rebuild(x, leaf, memo) for n, x in t.locals.items()}
        out.cells = {n: rebuild(x, leaf, memo) for n, x in t.cells.items()}
        out.forced = rebuild(t.forced, leaf, memo)
    return out


_STRUCTURES = frozenset({list, dict, set, Cell, FuncV, ListIter, Frame})


def template_key(t: Any) -> tuple | None:
    """A hashable key equal for two templates that capture the same way: the code
    positions, the structure (with sharing), the constants and the slot references.
    None when some value has no such key."""
    ids: dict[int, int] = {}
    try:
        key = _key(t, ids)
        hash(key)
    except TypeError:
        return None
    return key


def _key(t: Any, ids: dict) -> Any:
    tp = type(t)
    if tp is tuple or tp is Size:
        return (tp.__name__, *(_key(x, ids) for x in t))
    if tp in _STRUCTURES:
        seen = ids.get(id(t))
        if seen is not None:
            return ("ref", seen)
        ids[id(t)] = len(ids)
        if tp is list or tp is set:
            items = t if tp is list else sorted(t, key=repr)
            return (tp.__name__, *(_key(x, ids) for x in items))
        if tp is dict:
            return ("dict", *((_key(k, ids), _key(v, ids)) for k, v in t.items()))
        if tp is Cell:
            return ("cell", _key(t.value, ids))
        if tp is FuncV:
            return ("fn", id(t.code), _key(t.defaults, ids), _key(t.kwdefaults, ids),
                    _key(t.closure, ids))
        if tp is ListIter:
            return ("iter", t.pos, _key(t.items, ids))
        return ("frame", id(t.code), t.pc, _key(tuple(t.stack), ids),
                _key(tuple(sorted(t.locals.items())), ids),
                _key(tuple(sorted(t.cells.items())), ids), _key(t.forced, ids))
    if tp in (int, float, str, bool, bytes, complex, type(None)):
        return (tp.__name__, t)
    if tp.__name__ in ("SlotRef", "IntOf", "SrcRef"):
        inner = t.index if tp.__name__ == "SlotRef" else \
            t.ref.index if tp.__name__ == "IntOf" else t.source
        return (tp.__name__, inner)
    if isinstance(t, tuple):   # a NamedTuple such as a Spec: by value
        return (tp.__name__, t) if hash(t) is not None else None
    return ("obj", id(t))   # functions, modules, markers: by identity (kept alive by t)
