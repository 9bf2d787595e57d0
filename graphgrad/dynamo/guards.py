"""Layer ``dynamo``: guards, the checks that say whether a cached segment still fits.

A guard is one Python condition on a source (``type(a[0]) is Tensor and ...``). A
segment's guards become one function ``(a, k, s) -> bool``, made by ``exec`` once
(Dynamo's ``CheckFunctionManager`` scheme), that reads each source read by more than one
guard once into a local (a module's submodule or parameter is a ``Module.__getattr__``
call each time: a 6-parameter MLP's guard took 37 us evaluating them again and again);
the parts are kept so that a failing call can name the guard that changed (the
recompile message, ``explain``).

Identity guards hold their object through a weak reference (as Dynamo's do): a cached
segment never keeps a model alive, and when the object dies the segment is dropped
from every list that holds it (``GuardSet.own``).
"""

from __future__ import annotations

import re
import weakref
from typing import Any

from .values import Attr, Item, Source

__all__ = ["Pool", "GuardSet", "Guard"]


class Pool:
    """Names for the objects generated code refers to (bound as globals of the code)."""

    def __init__(self, on_dead=None):
        self.ns: dict[str, Any] = {}
        self._ids: dict[int, str] = {}
        self._weak: dict[int, str] = {}
        self._on_dead = on_dead

    def __call__(self, obj: Any) -> str:
        name = self._ids.get(id(obj))
        if name is None:
            name = f"_o{len(self._ids)}"
            self._ids[id(obj)] = name
            self.ns[name] = obj
        return name

    def weak(self, obj: Any) -> str:
        """An expression for ``obj`` through a weak reference (``None`` once it is gone);
        a strong name for objects that cannot be referenced weakly (ints, tuples)."""
        name = self._weak.get(id(obj))
        if name is not None:
            return name
        try:
            ref = weakref.ref(obj, self._on_dead)
        except TypeError:
            return self(obj)
        name = self._weak[id(obj)] = f"_w{len(self._weak)}()"
        self.ns[name[:-2]] = ref
        return name


class Guard:
    """One condition: ``code`` over ``a``/``k``/``s`` and the pool's names, ``text`` for
    messages. ``expected`` is None for an identity guard (it must not keep its object)."""

    __slots__ = ("kind", "source", "expected", "text", "where", "code")

    def __init__(self, kind: str, source: Source, expected: Any, text: str, where: str,
                 code: str):
        self.kind, self.source, self.expected = kind, source, expected
        self.text, self.where, self.code = text, where, code

    def __repr__(self) -> str:
        return self.text


def _tensor_text(src: str, x: tuple) -> str:
    tp, shape, dtype, rg = x
    dims = ", ".join("*" if d is None else str(d) for d in shape)
    return f"{src}: {tp.__name__} shape=({dims}) dtype={dtype} requires_grad={rg}"


def _tensor_code(e: str, x: tuple, p: Pool) -> str:
    tp, shape, dtype, rg = x
    parts = [f"type({e}) is {p(tp)}"]
    if all(d is not None for d in shape):
        parts.append(f"{e}._array.shape == {tuple(shape)!r}")
    else:   # dynamic dims: the rank and the static dims only
        parts.append(f"len({e}._array.shape) == {len(shape)}")
        parts += [f"{e}._array.shape[{i}] == {d}" for i, d in enumerate(shape) if d is not None]
    # (the flag itself: the ``requires_grad`` property first refreshes a stale view's
    # history, which never changes the flag, at the cost of a Python call per tensor)
    # (a dtype is nearly always NumPy's one object for its kind: identity first, which
    # costs a tenth of ``==``)
    d = p(dtype)
    parts += [f"({e}._array.dtype is {d} or {e}._array.dtype == {d})",
              f"{e}._requires_grad == {rg!r}"]
    return " and ".join(parts)


def _equals_code(e: str, x: Any, p: Pool) -> str:
    if x is None or x is True or x is False:   # singletons: identity is equality here
        return f"{e} is {x!r}"
    return f"type({e}) is {p(type(x))} and {e} == {p(x)}"


# kind -> (what it says, for messages; its code, over the source's expression ``e``)
_KINDS = {
    "tensor": (_tensor_text, _tensor_code),
    "equals": (lambda src, x: f"{src} == {x!r}",
               _equals_code),
    # (``is ... is not None``: a dead weak reference never matches)
    "id": (lambda src, x: f"{src} is {_short(x)}",
           lambda e, x, p: f"{e} is {p.weak(x)} is not None"),
    # a builtin was read: no global of its name shadows it; ``x`` is (globals, name)
    "no_global": (lambda src, x: f"{src} is not defined (a builtin)",
                  lambda e, x, p: f"{x[1]!r} not in {p(x[0])}"),
    # the lookup of ``name`` on an object found it on the class: no instance shadow;
    # ``x`` is (the object's source, the name)
    "absent": (lambda src, x: f"{x[1]!r} not in {x[0]}.__dict__",
               lambda e, x, p: f"{x[1]!r} not in getattr({x[0].expr(p)}, '__dict__', ())"),
    "len": (lambda src, x: f"len({src}) == {x[1]} ({x[0].__name__})",
            lambda e, x, p: f"type({e}) is {p(x[0])} and len({e}) == {x[1]}"),
    "keys": (lambda src, x: f"{src}.keys() == {list(x[1])!r}",
             lambda e, x, p: f"type({e}) is {p(x[0])} and tuple({e}) == {p(x[1])}"),
    "type": (lambda src, x: f"type({src}) is {x.__name__}",
             lambda e, x, p: f"type({e}) is {p(x)}"),
    # two sources that must (not) be one object; ``x`` is the other Source
    "alias": (lambda src, x: f"{src} is {x}", lambda e, x, p: f"{e} is {x.expr(p)}"),
    "distinct": (lambda src, x: f"{src} is not {x}",
                 lambda e, x, p: f"{e} is not {x.expr(p)}"),
}


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
        self.pool = Pool(self._died)
        self.dead = False
        self._owners: list = []   # (list, item): where the segment of these guards is kept

    def own(self, holder: list, item: Any) -> None:
        """``item`` (the segment guarded by this set) is kept in ``holder``: drop it from
        there when an object a guard names weakly dies."""
        self._owners.append((holder, item))

    def _died(self, _ref) -> None:
        self.dead = True
        for holder, item in self._owners:
            holder[:] = [x for x in holder if x is not item]
        self._owners.clear()

    def add(self, kind: str, source: Source, expected: Any, where: str = "") -> None:
        key = (kind, source)
        if key in self._seen:
            return
        self._seen.add(key)
        text = _KINDS[kind][0](str(source), expected)
        code = _KINDS[kind][1](source.expr(self.pool), expected, self.pool)
        self.guards.append(Guard(kind, source, None if kind == "id" else expected, text,
                                 where, code))

    def __len__(self) -> int:
        return len(self.guards)

    def compile(self):
        """The guard function ``(a, k, s) -> bool`` (any error while checking: False)."""
        lines = _shared_reads(self.guards, self.pool)
        if not lines:
            lines = ["return True"]
        src = ("def _guard(a, k, s):\n    try:\n"
               + "".join(f"        {ln}\n" for ln in lines)
               + "    except Exception:\n        return False\n")
        ns = dict(self.pool.ns)
        exec(compile(src, "<dynamo guard>", "exec"), ns)  # noqa: S102 - our own code
        fn = ns["_guard"]
        fn.source = src
        return fn

    def first_failure(self, a: tuple, k: dict, s: tuple) -> Guard | None:
        """The first guard that does not hold for these runtime values."""
        for g in self.guards:
            src = f"lambda a, k, s: {g.code}"
            check = eval(src, dict(self.pool.ns))  # noqa: S307 - our own code
            try:
                ok = check(a, k, s)
            except Exception:  # noqa: BLE001 - a missing attribute also fails the guard
                ok = False
            if not ok:
                return g
        return None


def _chain(src: Source) -> list[Source]:
    """``src`` and the attribute/item sources it is read through, innermost first."""
    out = []
    while isinstance(src, (Attr, Item)):
        out.append(src)
        src = src.base
    return out[::-1]


def _shared_reads(guards: list[Guard], pool: Pool) -> list[str]:
    """The guard function's body: one ``if not (...): return False`` per guard, the last
    one returned, with every attribute/item read that occurs more than once bound to a
    local just before the first guard that reads it (a guard evaluates its source first
    whatever it checks, so a read hoisted there raises, i.e. fails, exactly where the
    guard would have)."""
    exprs: dict[str, None] = {}
    for g in guards:
        srcs = [g.source]
        x = g.expected
        if g.kind == "absent":
            srcs.append(x[0])
        elif g.kind in ("alias", "distinct"):
            srcs.append(x)
        for src in srcs:
            for sub in _chain(src):
                exprs.setdefault(sub.expr(pool))
    codes = [g.code for g in guards]
    # (not inside a name, an attribute chain or a string literal such as a dict key)
    pattern = {e: re.compile(r"(?<![\w.'\"])" + re.escape(e) + r"(?![\w'\"])") for e in exprs}
    shared = [e for e in exprs if sum(len(pattern[e].findall(c)) for c in codes) > 1]
    # longest first, so a read's local is substituted before the reads it is made of
    shared.sort(key=len, reverse=True)
    local = {e: f"v{i}" for i, e in enumerate(shared)}
    bound: set[str] = set()
    lines = []
    for j, code in enumerate(codes):
        for e in sorted((e for e in shared if e not in bound and pattern[e].search(code)),
                        key=len):
            rhs = e
            for other in shared:   # (bound ones only: they are shorter, its bases)
                if other in bound and other != e:
                    rhs = pattern[other].sub(local[other], rhs)
            lines.append(f"{local[e]} = {rhs}")
            bound.add(e)
        for e in shared:
            if e in bound:
                code = pattern[e].sub(local[e], code)
        lines.append(f"return {code}" if j == len(codes) - 1 else
                     f"if not ({code}):\n            return False")
    return lines
