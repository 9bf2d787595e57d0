"""Layer ``graph``: ``GraphBuilder``, the mode that turns op calls into nodes.

Pushed on the dispatch stack, it receives every op call. A call that touches a Symbol
of its graph becomes a ``call`` node (metadata from the op's shape rule) and returns
a new Symbol; a call on eager tensors only runs eagerly below it. This one mechanism
serves the static API (placeholders are Symbols), graph differentiation (vjp rules
run on Symbols and extend the graph) and the capture frontends.

A builder for a sub-graph (a cond branch, a loop body) has a ``parent``: a Symbol of
an enclosing graph used inside it is *captured*, i.e. becomes a placeholder of the
sub-graph, and the control-flow node takes the outer value as an input.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from graphgrad.backend import xp
from graphgrad.ops import Spec
from graphgrad.tensor import Mode, Size, Value, dispatch, pop_mode, push_mode
from graphgrad.tensor.modes import active_modes, current_mode

from .graph import Graph
from .node import Dyn, Node
from .spec import short
from .symbol import Symbol, symbol

__all__ = ["GraphBuilder", "building", "builder_of"]



class GraphBuilder(Mode):
    """Appends a node to ``graph`` for each op call on its Symbols."""

    def __init__(self, graph: Graph, parent: GraphBuilder | None = None):
        self.graph = graph
        self.parent = parent
        self.captures: dict[Node, Node] = {}   # outer node -> placeholder of self.graph
        self.control: list[list[Node]] = []    # control_dependencies blocks, innermost last
        self.consts: dict[int, Node] = {}      # id(eager tensor) -> its constant node
        self._keep: list = []                  # the eager tensors those ids belong to
                                               # (kept alive so that no id is reused)
        # True while graph differentiation runs a rule: Symbols report an unknown dim as a
        # Symbol read at run time (sizes_of), not None; the sizes cached by node
        self.run_time_sizes = False
        self.sizes: dict[Node, Size] = {}

    @contextlib.contextmanager
    def active(self) -> Iterator[GraphBuilder]:
        """This builder receives the op calls: pushed on top, unless it is on the stack
        already under modes that handle graph values by running each op below them (a
        Taylor level traced into a graph: pushed over it, the builder would take the
        calls from it, and the series would be lost without a word)."""
        if _under_transparent(lambda b: b is self) is self:
            yield self
            return
        push_mode(self)
        try:
            yield self
        finally:
            pop_mode(self)

    # ---- values to nodes ---------------------------------------------------------------

    def owns_graph(self, graph: Graph) -> bool:
        """Whether ``graph`` is this builder's or an enclosing one's."""
        b = self
        while b is not None:
            if b.graph is graph:
                return True
            b = b.parent
        return False

    def owns(self, node: Node) -> bool:
        return self.owns_graph(node.graph)

    def node_of(self, value, *, literal_ok: bool = True):
        """The node of this graph for ``value``: Symbols of this graph as they are, of an
        enclosing graph captured, eager tensors as constants; scalars stay literals."""
        if isinstance(value, Symbol):
            node = value._node
            if node.graph is self.graph:
                if node.kind == "variable" and self.control:
                    # TF1 reads a variable when its consumer runs: inside
                    # control_dependencies the read must wait for them too
                    return self.graph.add("variable", node.name + "_read", spec=node.spec,
                                          target=node.target or node, deps=self.deps())
                return node
            if self.parent is not None and self.parent.owns(node):
                return self.capture(node)
            raise ValueError(f"Tensor {value!r} must be from the same graph as the other "
                             f"operands (it belongs to graph {node.graph.name!r}, this is "
                             f"{self.graph.name!r})")
        if isinstance(value, Node):
            return value if value.graph is self.graph else self.capture(value)
        if isinstance(value, Value):
            node = self.consts.get(id(value))
            if node is None:
                node = self.graph.constant(value)
                self.consts[id(value)] = node
                self._keep.append(value)
            return node
        if literal_ok:
            return value
        return self.graph.constant(value)

    def capture(self, outer: Node) -> Node:
        """The placeholder standing for ``outer`` (a node of an enclosing graph)."""
        ph = self.captures.get(outer)
        if ph is None:
            if outer.graph is not self.parent.graph:  # capture through every level
                outer = self.parent.capture(outer)
                ph = self.captures.get(outer)
                if ph is not None:
                    return ph
            ph = self.graph.placeholder(outer.spec, outer.name)
            self.captures[outer] = ph
        return ph

    def deps(self) -> tuple:
        out: list[Node] = []
        for block in self.control:
            for d in block:
                d = self.node_of(d) if not isinstance(d, Node) or d.graph is not self.graph \
                    else d
                if d not in out:
                    out.append(d)
        return tuple(out)

    @contextlib.contextmanager
    def sizes_at_run_time(self, on: bool = True) -> Iterator[GraphBuilder]:
        """Within (``on``): a Symbol of this graph reports an unknown dim as a 0-d int64
        Symbol (``sizes_of``), so that code reading sizes builds ops with them; with
        ``on=False`` as None again."""
        prev = self.run_time_sizes
        self.run_time_sizes = on
        try:
            yield self
        finally:
            self.run_time_sizes = prev

    def sizes_of(self, node: Node) -> Size:
        """``node``'s shape, its unknown dims read at run time (one ``shape`` node)."""
        sizes = self.sizes.get(node)
        if sizes is None:
            shape = self.shape_of(symbol(node))
            sizes = Size(shape[k] if d is None else d for k, d in enumerate(node.spec.shape))
            self.sizes[node] = sizes
        return sizes

    # ---- the interpreter ---------------------------------------------------------------

    def process(self, op, args: tuple, params: dict):
        mine = False
        for a in args:
            if isinstance(a, Symbol) and self.owns(a._node):
                mine = True
                break
        if not mine:
            for v in params.values():
                if isinstance(v, (tuple, list)) and any(isinstance(e, Symbol) for e in v):
                    mine = True
        if not mine:
            with self.lowered():
                return dispatch(op, args, params)
        return symbol(self.call(op, args, params))

    def call(self, op, args: tuple, params: dict, name: str | None = None) -> Node:
        inputs = [self.node_of(a) for a in args]
        nargs = len(inputs)
        dynamic = False
        bound = {}
        for k, v in params.items():  # Symbols inside params: bound at run time (Dyn)
            if isinstance(v, (tuple, list)) and any(isinstance(e, Symbol) for e in v):
                dynamic = True
                vals = []
                for e in v:
                    if isinstance(e, Symbol):
                        vals.append(Dyn(len(inputs)))
                        inputs.append(self.node_of(e))
                    else:
                        vals.append(e)
                bound[k] = tuple(vals)
            else:
                bound[k] = v
        spec = self.infer(op, inputs[:nargs], bound, dynamic)
        return self.graph.call(op, inputs, bound, spec, deps=self.deps(), nargs=nargs,
                               name=name)

    @staticmethod
    def infer(op, inputs: list, params: dict, dynamic: bool) -> Spec:
        specs = [i.spec if isinstance(i, Node) else i for i in inputs]
        if any(isinstance(s, Spec) and s.shape is None for s in specs) and \
                not getattr(op, "infers_unknown_rank", False):
            # an input of unknown rank: the output's rank is unknown too; its dtype is
            # what the rule says for 0-d stand-ins of the same dtypes
            scal = [Spec((), s.dtype) if isinstance(s, Spec) else s for s in specs]
            try:
                dtype = op.infer(*scal, **params).dtype
            except Exception:  # noqa: BLE001 - params may need a rank; keep input 0's
                dtype = scal[0].dtype
            return Spec(None, dtype)
        if dynamic:  # a run-time param is an unknown dim to the shape rule
            params = {k: tuple(None if isinstance(e, Dyn) else e for e in v)
                      if isinstance(v, tuple) else v for k, v in params.items()}
            try:
                return op.infer(*specs, **params)
            except Exception:  # noqa: BLE001 - rank known from the param, dims not
                shape = params.get("shape")
                if shape is None:
                    raise
                return Spec(tuple(None if d is None or d == -1 else d for d in shape),
                            specs[0].dtype)
        try:
            return op.infer(*specs, **params)
        except NotImplementedError as e:
            described = ", ".join(short(s) if isinstance(s, Spec) else repr(s) for s in specs)
            raise NotImplementedError(f"{e} (graph building: inputs {described})") from None

    # ---- nodes that are not op calls ---------------------------------------------------

    def shape_of(self, x) -> Symbol:
        """A ``shape`` node: the shape of ``x`` as an int64 vector, known at run time."""
        node = self.node_of(x, literal_ok=False)
        return symbol(self.graph.add("shape", "shape", inputs=(node,), deps=self.deps(),
                                     spec=Spec((len(node.spec.shape),), xp.dtype(xp.int64))))

    def multi(self, kind: str, inputs: list, subgraphs: dict, specs: tuple,
              params: dict | None = None, name: str | None = None) -> list[Symbol]:
        """A multi-output node (cond, while_loop, while_grad) and one item per output."""
        ins = [self.node_of(i, literal_ok=False) for i in inputs]
        node = self.graph.add(kind, name or kind, inputs=tuple(ins), subgraphs=subgraphs,
                              spec=tuple(specs), params=params or {}, deps=self.deps())
        return [symbol(self.graph.add("item", f"{node.name}_{k}", inputs=(node,),
                                      params={"index": k}, spec=s))
                for k, s in enumerate(specs)]


def _under_transparent(accept) -> GraphBuilder | None:
    """The builder nearest the top of the dispatch stack if it satisfies ``accept`` and
    only modes marked ``over_graph_builder`` (they process an op by dispatching it
    below, so graph values reach the builder through them) sit above it."""
    for mode in reversed(active_modes()):
        if isinstance(mode, GraphBuilder):
            return mode if accept(mode) else None
        if not getattr(mode, "over_graph_builder", False):
            return None
    return None


def _refuse_hiding(graph: Graph) -> None:
    """A Symbol's method under a transform (vmap...) that sits over its graph's builder:
    pushing a builder on top would hide the op from the transform, a wrong graph without
    a word. Refused instead."""
    stack = active_modes()
    for i, mode in enumerate(stack):
        if isinstance(mode, GraphBuilder) and mode.owns_graph(graph):
            over = [m for m in stack[i + 1:] if not isinstance(m, GraphBuilder)]
            if over:
                raise NotImplementedError(
                    f"a method of a graph value called under {type(over[-1]).__name__}, "
                    f"which is not traced into the graph {graph.name!r}: the op would "
                    f"bypass it")
            return


def builder_of(graph: Graph) -> GraphBuilder:
    """The top-level builder of ``graph`` (made on first use)."""
    # kept on the graph itself (not in a module-level table, which would keep every graph
    # ever built alive): the two are freed together
    b = graph.__dict__.get("_top_builder")
    if b is None:
        b = graph._top_builder = GraphBuilder(graph)
    return b


@contextlib.contextmanager
def building(graph: Graph) -> Iterator[GraphBuilder]:
    """Make sure a builder that owns ``graph`` is on top of the dispatch stack."""
    top = current_mode()
    if isinstance(top, GraphBuilder) and top.owns_graph(graph):
        yield top
        return
    under = _under_transparent(lambda b: b.owns_graph(graph))
    if under is not None:  # reached through the Taylor level above it
        yield under
        return
    _refuse_hiding(graph)
    b = builder_of(graph)
    with b.active():
        yield b

