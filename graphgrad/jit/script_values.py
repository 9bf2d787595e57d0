"""Layer ``jit``: the values ``graphgrad.jit.script`` computes with while it compiles.

A scripted function's variables hold Symbols (graph values), Python constants known
at compile time, or ``ShapeValue`` (a tensor's shape, whose length the compiler does
not know). ``ScriptBuilder`` is the IR's ``GraphBuilder`` plus *lifting*: a tensor the
function reaches through a global, a closure or a module attribute (a parameter, a
buffer) becomes a graph input bound at call time, never a baked constant, so that
gradients reach it and later updates are seen. ``classify`` sorts a callee into
graphgrad code (called on Symbols: the ops record themselves), user code (inlined from
its source) and external code (a compile-time error).
"""

from __future__ import annotations

import math
import sys
import sysconfig
import types
from collections.abc import Callable

from graphgrad.backend import xp
from graphgrad.graph import Graph, GraphBuilder, Spec, Symbol, symbol
from graphgrad.graph.node import Node
from graphgrad.graph.random_calls import describe_draw, draw_frame
from graphgrad.graph.random_node import add_random
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Value

_I64 = xp.dtype(xp.int64)

__all__ = ["ScriptBuilder", "Lifts", "ShapeValue", "TupleResult", "classify", "describe",
           "MATH", "is_library_module", "is_module"]


class Lifts:
    """The tensors a scripted graph reads from outside (parameters, globals): each is a
    placeholder of the root graph after the user's arguments, with a getter that reads
    the current tensor at call time."""

    def __init__(self, root: Graph):
        self.root = root
        self.by_id: dict[int, Node] = {}
        self.getters: list[Callable[[], Value]] = []
        self.keep: list[Value] = []  # the lifted tensors, alive so that no id is reused

    def node(self, value: Value, name: str = "lifted",
             getter: Callable[[], Value] | None = None, attribute: str | None = None) -> Node:
        """``attribute``: the scripted module's qualified name for ``value`` (its
        placeholder is then a ``get_attr`` of the ScriptFunction, ``self.<attribute>``)."""
        ph = self.by_id.get(id(value))
        if ph is None:
            arr = value._array
            ph = self.root.placeholder(Spec(arr.shape, arr.dtype), name)
            if attribute is not None:
                ph.params = {"target": attribute}
            self.by_id[id(value)] = ph
            self.getters.append(getter or (lambda v=value: v))
            self.keep.append(value)
        return ph

    def wants(self, value) -> bool:
        """Tensors read from outside that must not be frozen: known ones, parameters and
        anything requiring grad (graphgrad library code reads ``self.weight`` itself)."""
        return isinstance(value, Value) and not isinstance(value, Symbol) and (
            id(value) in self.by_id or value._requires_grad)


class ScriptBuilder(GraphBuilder):
    """A GraphBuilder whose lifted tensors are graph inputs (captured into sub-graphs)."""

    def __init__(self, graph: Graph, parent: ScriptBuilder | None = None,
                 lifts: Lifts | None = None):
        super().__init__(graph, parent)
        self.lifts = lifts if lifts is not None else parent.lifts

    def node_of(self, value, *, literal_ok: bool = True):
        if self.lifts.wants(value):
            ph = self.lifts.node(value, "param")
            return ph if ph.graph is self.graph else self.capture(ph)
        return super().node_of(value, literal_ok=literal_ok)

    def process(self, op, args: tuple, params: dict):
        for a in args:
            if self.lifts.wants(a):  # an op on a parameter alone is a graph op too
                return symbol(self.call(op, args, params))
        return super().process(op, args, params)

    # random_tensor (graphgrad's one source of random tensors) hands each draw made while
    # a level with randomness="different" is on the dispatch stack to its batched_random
    randomness = "different"

    def batched_random(self, sample: Callable, shape: tuple):
        """A draw of ``rand``/``randn``/``randint``, their ``*_like`` forms or dropout in
        training mode: a ``random`` node drawing afresh at every call (TorchScript's
        ``aten::rand``), sized by the input's run-time shape where it follows one. A draw
        no node reproduces (a user's Generator) would be frozen: refused."""
        draw = describe_draw(draw_frame(sys._getframe(1)))
        if draw is None:
            raise RuntimeError("it draws random numbers from a generator that no random node "
                               "reproduces (a user's Generator, or requires_grad=True), so a "
                               "scripted graph would freeze one draw")
        if isinstance(draw.like, Symbol):
            known = draw.like._node.spec.shape
            if known is None:
                raise ValueError(f"{draw.caller}: the rank of its input is unknown")
            dims = list(known)
            if None in dims:
                vec = symbol(self.graph.add("shape", "shape", inputs=(self.node_of(draw.like),),
                                            spec=Spec((len(dims),), _I64), deps=self.deps()))
                dims = [REGISTRY["Getitem"].apply(vec, spec=(k,)) if d is None else d
                        for k, d in enumerate(dims)]
        elif None in draw.shape:
            raise ValueError(f"{draw.caller}: the size of the sample is unknown")
        else:
            dims = list(draw.shape)
        return symbol(add_random(self, draw.dist, dims, draw.dtype, draw.params))

    def lifted(self, value: Value, name: str, getter: Callable[[], Value]) -> Symbol:
        """The Symbol of this graph standing for an outside tensor."""
        ph = self.lifts.node(value, name, getter)
        return symbol(ph if ph.graph is self.graph else self.capture(ph))


class TupleResult:
    """The result of a call that returns several tensors (``x.max(dim=-1)``, ``split``,
    ``topk``) made when the graph runs, because its ops need a rank unknown at compile
    time: one call node whose value is the tuple. The compiler makes each item where the
    code unpacks it, indexes it with an int or reads a field (``.values``): an
    ``operator.getitem`` node on the call, as torch.fx records it. The number of items
    is the unpacking's (checked when the graph runs, by Python's indexing)."""

    def __init__(self, owner: str, symbol_: Symbol, fields: tuple[str, ...] = (),
                 dtypes: tuple = ()):
        self.owner = owner      # the source text of the call, for messages
        self.sym = symbol_      # the call node's value: the tuple
        self.fields = fields    # a named tuple's field names (values, indices), if known
        self.dtypes = dtypes    # the items' dtypes where they differ from the input's

    def error(self) -> str:
        return (f"{self.owner} returns several tensors, how many is known only when the "
                f"graph runs: unpack it (a, b = ...), index it with an int or read a "
                f"field of it")


class ShapeValue:
    """``x.shape`` of a tensor whose rank is unknown at compile time: it can be indexed
    with a Python int (a run-time size: an int64 Symbol), not unpacked or measured."""

    def __init__(self, owner: str, symbol_: Symbol):
        self.owner = owner        # the source text of the tensor, for messages
        self.sym = symbol_        # the int64 vector of the shape

    def __getitem__(self, index):
        if isinstance(index, int):
            return self.sym[index]
        raise TypeError(f"{self.owner}.shape can only be indexed with a Python int at "
                        f"compile time (the rank of {self.owner} is unknown)")

    def rank_error(self) -> str:
        return (f"cannot unpack or measure {self.owner}.shape: the rank of {self.owner!r} is "
                f"not known at compile time (graphgrad.jit.script compiles from the source, "
                f"without inputs; a Tensor's rank is not part of its type). Index it instead "
                f"({self.owner}.shape[0], {self.owner}.size(0))")


# math functions on a Symbol: the graphgrad op of the same name
MATH = {math.sqrt: "sqrt", math.exp: "exp", math.log: "log", math.sin: "sin",
        math.cos: "cos", math.tan: "tan", math.tanh: "tanh", math.fabs: "abs",
        math.floor: "floor", math.ceil: "ceil", math.log10: "log10", math.log2: "log2",
        math.log1p: "log1p", math.expm1: "expm1", math.erf: "erf"}

_STDLIB = set(sys.stdlib_module_names)
_SITE = tuple(p for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def _top(module: str | None) -> str:
    return (module or "").split(".")[0]


def is_module(obj) -> bool:
    from graphgrad.nn import Module
    return isinstance(obj, Module)


def is_library_module(obj) -> bool:
    """An ``nn.Module`` whose class is graphgrad's own (called like an op, not compiled)."""
    return is_module(obj) and _top(type(obj).__module__) == "graphgrad"


def _external_file(fn) -> bool:
    code = getattr(fn, "__code__", None)
    path = code.co_filename if code is not None else ""
    return any(path.startswith(p) for p in _SITE) or "site-packages" in path or \
        "dist-packages" in path


def classify(fn) -> str:
    """``"graphgrad"`` (call it on Symbols), ``"user"`` (inline its source),
    ``"external"`` (a Python function of the standard library or an installed package)
    or ``"builtin"`` (anything else with no Python source: C and Cython functions, NumPy
    ufuncs and random methods, classes of other libraries)."""
    if isinstance(fn, types.MethodType) and isinstance(fn.__self__, Value):
        return "graphgrad"  # a tensor method
    if _top(getattr(fn, "__module__", None)) == "graphgrad":
        return "graphgrad"
    func = fn.__func__ if isinstance(fn, types.MethodType) else fn
    if isinstance(func, types.FunctionType):
        if _top(func.__module__) in _STDLIB or _external_file(func):
            return "external"
        return "user"
    return "builtin"


def describe(fn) -> str:
    """How TorchScript names a callee in its messages."""
    if isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return repr(fn)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    module = getattr(fn, "__module__", None) or type(fn).__module__
    return f"{module}.{name}" if name else f"value of type '{type(fn).__name__}'"

