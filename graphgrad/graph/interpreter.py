"""Layer ``graph``: ``Interpreter``, which runs a Graph, one method per node kind.

Values are Tensors (arrays are wrapped on the way in). ``call`` nodes go through the
one dispatch point, so whatever is on the dispatch stack sees them: run eagerly they
compute; run under a GraphBuilder on Symbols they copy the graph into another one
(which is how graph differentiation inlines sub-graphs). Every IR consumer (the
session, the scheduler, the backends) subclasses this class.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, Value
from graphgrad.tensor.modes import current_mode

from .errors import FailedPreconditionError, InvalidArgumentError
from .graph import Graph
from .node import Dyn, Node
from .spec import tf_dtype_name
from .symbol import Symbol, symbol
from .python_call import run_python_call
from .random_node import add_random, draw
from .vjp_node import run_vjp_rule, while_grad_replay

__all__ = ["Interpreter", "as_tensor", "needed_nodes"]


def as_tensor(value) -> Tensor:
    if isinstance(value, Value):
        return value
    return Tensor(xp.asarray(value))


def needed_nodes(graph: Graph, fetches: Iterable[Node], fed: Iterable[Node] = ()) -> list[Node]:
    """The nodes that must run to compute ``fetches`` given the ``fed`` ones, in graph
    order (TF's pruning). Iterative."""
    fed = set(fed)
    need: set[Node] = set()
    todo = [f for f in fetches]
    while todo:
        n = todo.pop()
        if n in need:
            continue
        need.add(n)
        if n in fed:
            continue
        todo.extend(n.input_nodes())
        todo.extend(n.deps)  # an assign does not read its target node (state does)
    return [n for n in graph.nodes if n in need]


class Interpreter:
    """Run ``graph``: ``run(*args)`` binds ``graph.inputs`` and returns the outputs.

    ``state`` maps variable nodes to their current values (a Session owns it)."""

    def __init__(self, graph: Graph, state: dict | None = None):
        self.graph = graph
        self.state = {} if state is None else state

    def sub(self, graph: Graph) -> Interpreter:
        """The interpreter for a sub-graph (same class, same state)."""
        return type(self)(graph, self.state)

    # ---- whole-graph entry points ------------------------------------------------------

    def run(self, *args, feeds: dict | None = None) -> tuple:
        g = self.graph
        if len(args) != len(g.inputs):
            raise TypeError(f"graph {g.name!r} takes {len(g.inputs)} inputs "
                            f"({', '.join(p.name for p in g.inputs)}), got {len(args)}")
        env: dict[Node, object] = {p: _wrap(a) for p, a in zip(g.inputs, args, strict=True)}
        if feeds:
            env.update({k: _wrap(v) for k, v in feeds.items()})
        self.execute([n for n in g.nodes if n not in env], env)
        out = g.output_node
        return () if out is None else env[out]

    def execute(self, nodes: Sequence[Node], env: dict) -> dict:
        """Run ``nodes`` (in a valid order) into ``env``; the scheduler overrides this."""
        for node in nodes:
            env[node] = self.run_node(node, env)
        return env

    def run_node(self, node: Node, env: dict):
        args = [env[i] if isinstance(i, Node) else i for i in node.inputs]
        return getattr(self, "run_" + node.kind)(node, args)

    # ---- one method per node kind ------------------------------------------------------

    def run_placeholder(self, node: Node, args: list):
        shape = node.spec.shape if node.spec is not None else None
        dims = "" if shape is None else \
            " and shape [" + ",".join("?" if d is None else str(d) for d in shape) + "]"
        raise InvalidArgumentError(
            f"You must feed a value for placeholder tensor '{node.name}' with dtype "
            f"{tf_dtype_name(node.spec.dtype)}{dims}\n\t [[{{{{node {node.name}}}}}]]", node)

    def run_constant(self, node: Node, args: list):
        return as_tensor(node.value)

    def run_variable(self, node: Node, args: list):
        var = node.target or node  # a later read of a variable names the variable
        value = self.state.get(var)
        if value is None:
            raise FailedPreconditionError(
                f"Attempting to use uninitialized value {var.name}\n\t "
                f"[[{{{{node {var.name}}}}}]]", node)
        return value

    def run_call(self, node: Node, args: list):
        params = node.params
        if node.nargs != len(args):  # bind the run-time params (Dyn) to their inputs
            params = {k: tuple(int(args[e.index]) if isinstance(e, Dyn) else e for e in v)
                      if isinstance(v, tuple) else v for k, v in params.items()}
            args = args[:node.nargs]
        return node.op.apply(*args, **params)

    def run_call_module(self, node: Node, args: list):
        """A module called as one node: the state holds it under its qualified name."""
        return self.state[node.params["target"]](*args)

    def run_call_function(self, node: Node, args: list):
        """A call recorded without its inputs' ranks: made now, on the values."""
        return run_python_call(node.kind, node.params, args)

    run_call_method = run_call_function

    def run_item(self, node: Node, args: list):
        return args[0][node.params["index"]]

    def run_shape(self, node: Node, args: list):
        x = args[0]
        if isinstance(x, Symbol):
            from .builder import building
            with building(x.graph) as b:
                return b.shape_of(x)
        return as_tensor(xp.asarray(x._array.shape, dtype=xp.int64))

    def run_assign(self, node: Node, args: list):
        value = args[0]
        mode = node.params.get("mode", "assign")
        old = self.state.get(node.target)
        if mode != "assign":
            if old is None:
                self.run_variable(node.target, [])
            value = old + value if mode == "add" else old - value
        value = as_tensor(value)
        if value._array.dtype != node.spec.dtype:
            value = as_tensor(value._array.astype(node.spec.dtype))
        self.state[node.target] = value
        return value

    def run_random(self, node: Node, args: list):
        """Fresh samples each run; while a graph is being built (running on Symbols)
        the node is copied instead, so that the copy draws when it runs."""
        from .builder import GraphBuilder
        top = current_mode()
        if isinstance(top, GraphBuilder) or any(isinstance(a, Symbol) for a in args):
            from .builder import building
            graph = next((a.graph for a in args if isinstance(a, Symbol)), None)
            with building(graph) if graph is not None else top.active() as b:
                dims = [args[d.index] if isinstance(d, Dyn) else d
                        for d in node.params["shape"]]
                extra = {k: v for k, v in node.params.items()
                         if k not in ("dist", "shape", "seed")}
                return symbol(add_random(b, node.params["dist"], dims, node.spec.dtype, extra,
                                         node.params["seed"], node.name))
        return draw(node, self.state, args)

    def run_group(self, node: Node, args: list):
        return None

    def run_output(self, node: Node, args: list):
        return tuple(args)

    def run_cond(self, node: Node, args: list):
        pred, rest = args[0], args[1:]
        if isinstance(pred, Symbol):  # run on Symbols: copy the node into the new graph
            return self._copy_multi(node, args)
        branch = node.subgraphs["then" if bool(pred) else "else"]
        return self.sub(branch).run(*rest)

    def run_while_loop(self, node: Node, args: list):
        if any(isinstance(a, Symbol) for a in args):
            return self._copy_multi(node, args)
        n = node.params["n"]
        state, caps = list(args[:n]), list(args[n:])
        cond, body = self.sub(node.subgraphs["cond"]), self.sub(node.subgraphs["body"])
        while bool(cond.run(*state, *caps)[0]):
            state = list(body.run(*state, *caps))
        return tuple(state)

    def run_while_grad(self, node: Node, args: list):
        """The reverse of a while_loop (vjp_node.while_grad_replay)."""
        if any(isinstance(a, Symbol) for a in args):
            return self._copy_multi(node, args)
        n, m = node.params["n"], node.params["m"]
        run = {k: self.sub(g).run for k, g in node.subgraphs.items()}
        return while_grad_replay(run["cond"], run["body"], run["vjp"], list(args[:n]),
                                 list(args[n:n + m]), list(args[n + m:]))

    def run_vjp(self, node: Node, args: list):
        if any(isinstance(a, Symbol) for a in args):
            return self._copy_multi(node, args)
        return run_vjp_rule(node.params, args, self)

    def _copy_multi(self, node: Node, args: list):
        from .builder import building
        graph = next(a for a in args if isinstance(a, Symbol)).graph
        with building(graph) as b:
            return tuple(b.multi(node.kind, args, node.subgraphs, node.spec, node.params))


def _wrap(v):
    return v if isinstance(v, Value) or v is None else as_tensor(v)
