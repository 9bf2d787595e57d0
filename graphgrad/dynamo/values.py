"""Layer ``dynamo``: the values the bytecode interpreter works with besides plain Python
objects and graph ``Symbol``s, and the *sources* that say where a runtime value comes from.

* ``Source``: how to fetch a value at run time (an argument, a slot handed on by the
  previous segment, a global, an attribute or item of another source, a fixed object).
  Guards and graph inputs are Python expressions built from sources.
* ``Extras(obj, source)``: an object the function did not create (a list argument, a module,
  an ``nn.Module``): reading from it goes through its source so that every read is
  guarded; writing to it is a side effect and runs eagerly.
* ``Cell``, ``FuncV``, ``ListIter``: the interpreter's own closure cells, functions made
  by ``MAKE_FUNCTION`` and iterators, which can be copied into a frame template;
  ``ExtCell``: a closure cell of a real function, read (and guarded) on use.
* ``SlotRef``/``SrcRef``/``IntOf``: template placeholders for runtime values.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["Source", "Arg", "Kw", "Slot", "Obj", "Glob", "Attr", "Item", "Extras", "Cell",
           "ExtCell", "FuncV", "ListIter", "SlotRef", "SrcRef", "IntOf", "NULL", "UNBOUND",
           "INLINED"]


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


NULL = _Marker("NULL")        # the 3.11/3.12 call-protocol NULL
UNBOUND = _Marker("UNBOUND")  # a local that has no value (3.12 LOAD_FAST_AND_CLEAR)
INLINED = _Marker("INLINED")  # what a call returns when it pushed a frame (no value yet)


class Source:
    """Where a runtime value comes from; ``expr`` is its Python expression over the
    runtime names ``a`` (positional args), ``k`` (keyword args) and ``s`` (slots)."""

    __slots__ = ("key",)

    def root(self) -> Source:
        return self

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.key == self.key

    def __hash__(self) -> int:
        return hash((type(self), self.key))


class Arg(Source):
    def __init__(self, index: int, name: str):
        self.key = (index, name)

    def expr(self, pool) -> str:
        return f"a[{self.key[0]}]"

    def __str__(self) -> str:
        return self.key[1]


class Kw(Source):
    def __init__(self, name: str):
        self.key = name

    def expr(self, pool) -> str:
        return f"k[{self.key!r}]"

    def __str__(self) -> str:
        return self.key


class Slot(Source):
    """A value handed on by the previous segment (a graph output or an eager result)."""

    __slots__ = ("name",)

    def __init__(self, index: int, name: str | None = None):
        self.key = index
        self.name = name   # what the user's code calls it (for messages only)

    def expr(self, pool) -> str:
        return f"s[{self.key}]"

    def __str__(self) -> str:
        return self.name or f"<slot {self.key}>"


class Obj(Source):
    """A fixed object (a closure cell, a module, the compiled function), held through a
    weak reference where it can be, here and in generated code (a cache entry must not
    keep a function or model alive)."""

    __slots__ = ("_ref", "label")

    def __init__(self, obj: Any, label: str = ""):
        self.key = id(obj)
        try:
            self._ref = weakref.ref(obj)
        except TypeError:   # (cells, tuples): held strongly
            self._ref = lambda: obj
        self.label = label or type(obj).__name__

    @property
    def obj(self) -> Any:
        return self._ref()

    def expr(self, pool) -> str:
        return pool.weak(self.obj)

    def __str__(self) -> str:
        return self.label


class Glob(Source):
    """``globals[name]`` of a given function's module."""

    __slots__ = ("g", "name")

    def __init__(self, g: dict, name: str):
        self.key = (id(g), name)
        self.g = g
        self.name = name

    def expr(self, pool) -> str:
        return f"{pool(self.g)}[{self.name!r}]"

    def __str__(self) -> str:
        return f"G[{self.name!r}]"


class Attr(Source):
    __slots__ = ("base", "name")

    def __init__(self, base: Source, name: str):
        self.base, self.name = base, name
        self.key = (base, name)

    def root(self) -> Source:
        return self.base.root()

    def expr(self, pool) -> str:
        b = self.base.expr(pool)
        return f"{b}.{self.name}" if self.name.isidentifier() else \
            f"getattr({b}, {self.name!r})"

    def __str__(self) -> str:
        return f"{self.base}.{self.name}"


class Stored(Attr):
    """``base.name`` where ``Module.__getattr__`` finds it, in the module's store dict
    (``_parameters``, ``_buffers``, ``_modules``): read there directly, as
    ``base._parameters['weight']`` (the attribute lookup fails through the class first:
    ~1.5 us a read, a dozen reads in an MLP's guard and step). ``capture.read_attr``
    picks it, with a guard that no instance attribute shadows the name."""

    __slots__ = ("store",)

    def __init__(self, base: Source, store: str, name: str):
        super().__init__(base, name)
        self.store = store

    def expr(self, pool) -> str:
        return f"{self.base.expr(pool)}.{self.store}[{self.name!r}]"


class Item(Source):
    __slots__ = ("base", "index")

    def __init__(self, base: Source, index: Any):
        self.base, self.index = base, index
        self.key = (base, type(index), index)

    def root(self) -> Source:
        return self.base.root()

    def expr(self, pool) -> str:
        i = self.index
        text = repr(i) if isinstance(i, (int, str)) and type(i) in (int, str) else pool(i)
        return f"{self.base.expr(pool)}[{text}]"

    def __str__(self) -> str:
        return f"{self.base}[{self.index!r}]"


def rebase(src: Source, mapping: dict) -> Source:
    """``src`` with its Slot root renumbered by ``mapping`` (old index -> new index)."""
    if isinstance(src, Slot):
        return Slot(mapping[src.key])
    if isinstance(src, Stored):
        return Stored(rebase(src.base, mapping), src.store, src.name)
    if isinstance(src, Attr):
        return Attr(rebase(src.base, mapping), src.name)
    if isinstance(src, Item):
        return Item(rebase(src.base, mapping), src.index)
    return src


class Extras:
    """An object the traced function did not create, with the source it was read from."""

    __slots__ = ("obj", "source")

    def __init__(self, obj: Any, source: Source):
        self.obj, self.source = obj, source

    def __repr__(self) -> str:
        return f"Extras({type(self.obj).__name__} from {self.source})"


class Cell:
    """A closure cell of an interpreted frame (shared by identity between frames)."""

    __slots__ = ("value",)

    def __init__(self, value: Any = UNBOUND):
        self.value = value


class ExtCell(Cell):
    """A closure cell of a real function: its contents are read (and guarded) on use."""

    __slots__ = ("cell", "label")

    def __init__(self, cell, fn):
        self.cell = cell
        self.label = f"{fn.__name__}.<closure>"


class FuncV:
    """A function made by ``MAKE_FUNCTION`` inside the traced code; it is inlined when
    called and cannot escape to code that runs for real."""

    __slots__ = ("code", "globals", "defaults", "kwdefaults", "closure", "name")

    def __init__(self, code, globals_: dict, defaults: tuple, kwdefaults: dict | None,
                 closure: tuple, name: str):
        self.code, self.globals, self.defaults = code, globals_, defaults
        self.kwdefaults, self.closure, self.name = kwdefaults, closure, name

    def __repr__(self) -> str:
        return f"<traced function {self.name}>"


class ListIter:
    """An iterator over a known sequence: the items and the position reached."""

    __slots__ = ("items", "pos")

    def __init__(self, items: list, pos: int = 0):
        self.items, self.pos = items, pos


class SlotRef:
    """In a template: runtime slot ``index``."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __repr__(self) -> str:
        return f"s[{self.index}]"


class SrcRef:
    """In a template: the value of ``source``, fetched when the template is used."""

    __slots__ = ("source",)

    def __init__(self, source: Source):
        self.source = source

    def __repr__(self) -> str:
        return f"SrcRef({self.source})"


class IntOf:
    """In a template: ``int(slot)``: a symbolic size (0-d int64 tensor) back as an int."""

    __slots__ = ("ref",)

    def __init__(self, ref: SlotRef):
        self.ref = ref
