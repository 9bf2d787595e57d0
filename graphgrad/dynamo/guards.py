"""Layer ``dynamo``: guards, the checks that say whether a cached segment still fits.

A guard is one Python condition on a source (``type(a[0]) is Tensor and ...``). A
segment's guards are joined with ``and`` into one lambda ``(a, k, s) -> bool``, made by
``exec`` once (Dynamo's ``CheckFunctionManager`` scheme); the parts are kept so that a
failing call can name the guard that changed (the recompile message, ``explain``).
"""

from __future__ import annotations

from typing import Any

from .values import Source

__all__ = ["Pool", "GuardSet", "Guard"]


class Pool:
    """Names for the objects generated code refers to (bound as globals of the code)."""

    def __init__(self):
        self.ns: dict[str, Any] = {}
        self._ids: dict[int, str] = {}

    def __call__(self, obj: Any) -> str:
        name = self._ids.get(id(obj))
        if name is None:
            name = f"_o{len(self._ids)}"
            self._ids[id(obj)] = name
            self.ns[name] = obj
        return name


class Guard:
    __slots__ = ("kind", "source", "expected", "text", "where")

    def __init__(self, kind: str, source: Source, expected: Any, text: str, where: str):
        self.kind, self.source, self.expected = kind, source, expected
        self.text, self.where = text, where

    def __repr__(self) -> str:
        return self.text


def _describe(kind: str, src: str, expected: Any) -> str:
    if kind == "tensor":
        tp, shape, dtype, rg = expected
        dims = ", ".join("*" if d is None else str(d) for d in shape)
        return f"{src}: {tp.__name__} shape=({dims}) dtype={dtype} requires_grad={rg}"
    if kind == "equals":
        return f"{src} == {expected!r}"
    if kind == "id":
        return f"{src} is {_short(expected)}"
    if kind == "len":
        return f"len({src}) == {expected[1]} ({expected[0].__name__})"
    if kind == "keys":
        return f"{src}.keys() == {list(expected[1])!r}"
    if kind == "type":
        return f"type({src}) is {expected.__name__}"
    if kind == "alias":
        return f"{src} is {expected}"
    if kind == "distinct":
        return f"{src} is not {expected}"
    return f"{kind}({src})"


def _short(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if name is not None and not isinstance(obj, type(None)):
        return f"<{type(obj).__name__} {name}>"
    return f"<{type(obj).__name__} at {id(obj):#x}>"


class GuardSet:
    """The guards of one segment, in the order they were installed (deduplicated)."""

    def __init__(self):
        self.guards: list[Guard] = []
        self._seen: set = set()
        self.pool = Pool()

    def add(self, kind: str, source: Source, expected: Any, where: str = "") -> None:
        key = (kind, source)
        if key in self._seen:
            return
        self._seen.add(key)
        self.guards.append(Guard(kind, source, expected, _describe(kind, str(source), expected),
                                 where))

    def __len__(self) -> int:
        return len(self.guards)

    def code_part(self, g: Guard) -> str:
        e = g.source.expr(self.pool)
        p = self.pool
        if g.kind == "tensor":
            tp, shape, dtype, rg = g.expected
            parts = [f"type({e}) is {p(tp)}", f"len({e}._array.shape) == {len(shape)}"]
            if all(d is not None for d in shape):
                parts = [parts[0], f"{e}._array.shape == {tuple(shape)!r}"]
            else:
                parts += [f"{e}._array.shape[{i}] == {d}" for i, d in enumerate(shape)
                          if d is not None]
            parts += [f"{e}._array.dtype == {p(dtype)}", f"{e}.requires_grad == {rg!r}"]
            return " and ".join(parts)
        if g.kind == "equals":
            return f"type({e}) is {p(type(g.expected))} and {e} == {p(g.expected)}"
        if g.kind == "id":
            return f"{e} is {p(g.expected)}"
        if g.kind == "len":
            return f"type({e}) is {p(g.expected[0])} and len({e}) == {g.expected[1]}"
        if g.kind == "keys":
            return f"type({e}) is {p(g.expected[0])} and tuple({e}) == {p(g.expected[1])}"
        if g.kind == "type":
            return f"type({e}) is {p(g.expected)}"
        if g.kind == "alias":
            return f"{e} is {g.expected.expr(p)}"
        if g.kind == "distinct":
            return f"{e} is not {g.expected.expr(p)}"
        raise ValueError(f"unknown guard kind {g.kind!r}")

    def compile(self):
        """The guard function ``(a, k, s) -> bool`` (any error while checking: False)."""
        parts = [f"({self.code_part(g)})" for g in self.guards] or ["True"]
        src = ("def _guard(a, k, s):\n    try:\n        return " + " and ".join(parts)
               + "\n    except Exception:\n        return False\n")
        ns = dict(self.pool.ns)
        exec(compile(src, "<dynamo guard>", "exec"), ns)  # noqa: S102 - our own code
        fn = ns["_guard"]
        fn.source = src
        return fn

    def first_failure(self, a: tuple, k: dict, s: tuple) -> Guard | None:
        """The first guard that does not hold for these runtime values."""
        for g in self.guards:
            src = f"lambda a, k, s: {self.code_part(g)}"
            check = eval(src, dict(self.pool.ns))  # noqa: S307 - our own code
            try:
                ok = check(a, k, s)
            except Exception:  # noqa: BLE001 - a missing attribute also fails the guard
                ok = False
            if not ok:
                return g
        return None
