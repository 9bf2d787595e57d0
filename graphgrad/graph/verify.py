"""Layer ``graph``: the verifier, and the IR's topological order (graphgrad's one sort,
``tensor.toposort``, over data and control edges).

``verify(graph)`` checks, for the graph and every sub-graph: each input is a node of
the same graph (no dangling edges), no cycle through data or control edges, the list
order is topological, control-flow sub-graph signatures match the node, and every
call node's Spec is what its op's shape rule says. Errors name the nodes.
"""

from __future__ import annotations

from graphgrad.tensor.toposort import CycleError
from graphgrad.tensor.toposort import toposort as generic_toposort

from .errors import GraphError
from .graph import Graph
from .node import MULTI_KINDS, Node

__all__ = ["verify", "toposort", "propagate_specs"]


def toposort(graph: Graph) -> list[Node]:
    """The nodes of ``graph`` ordered by data and control edges, by graphgrad's one
    topological sort (graphgrad.tensor.toposort; a topological list keeps its order).
    Edges to nodes of other graphs are left to ``_check_edges``."""
    members = set(graph.nodes)

    def parents(n: Node) -> list[Node]:
        return [i for i in (*n.input_nodes(), *n.deps) if i in members]
    try:
        return generic_toposort(graph.nodes, parents)
    except CycleError as e:
        cycle = e.cycle
    pos = {n: k for k, n in enumerate(graph.nodes)}
    first = min(range(len(cycle)), key=lambda k: pos[cycle[k]])
    cycle = cycle[first:] + cycle[:first]  # start at the earliest node
    raise GraphError(f"graph {graph.name!r} has a cycle through the nodes "
                     f"{', '.join(n.name for n in cycle)}")


def _check_edges(graph: Graph) -> None:
    members = set(graph.nodes)
    seen: set[Node] = set()
    for n in graph.nodes:
        for kind, ins in (("input", n.input_nodes()), ("control input", n.deps)):
            for i in ins:
                if i not in members:
                    where = f"graph {i.graph.name!r}" if i.graph is not graph else "no graph"
                    raise GraphError(f"node {n.name!r} of graph {graph.name!r} has a dangling "
                                     f"{kind} {i.name!r} (it belongs to {where})")
        if n.kind == "assign" and n.target not in members:
            raise GraphError(f"node {n.name!r} assigns to {n.target.name!r}, which is not in "
                             f"graph {graph.name!r}")
        seen.add(n)
    for p in graph.inputs:
        if p.kind != "placeholder" or p not in members:
            raise GraphError(f"graph {graph.name!r} lists {p.name!r} as an input, but it is "
                             f"not one of its placeholders")
    for k, n in enumerate(graph.nodes):
        if n.kind == "output" and k != len(graph.nodes) - 1:
            raise GraphError(f"the output node {n.name!r} of graph {graph.name!r} is not last")


def _check_signature(node: Node) -> None:
    def fail(msg):
        raise GraphError(f"{node.kind} node {node.name!r}: {msg}")
    sg = node.subgraphs
    if node.kind == "vjp":
        if len(node.spec) != len(node.params["wrt"]):
            fail(f"has {len(node.spec)} outputs for {len(node.params['wrt'])} inputs")
    elif node.kind == "cond":
        for key in ("then", "else"):
            if key not in sg:
                fail(f"has no {key!r} sub-graph")
            g = sg[key]
            if len(g.inputs) != len(node.inputs) - 1:
                fail(f"sub-graph {g.name!r} takes {len(g.inputs)} inputs but the node passes "
                     f"{len(node.inputs) - 1}")
            if len(g.outputs) != len(node.spec):
                fail(f"sub-graph {g.name!r} returns {len(g.outputs)} values but the node has "
                     f"{len(node.spec)} outputs")
    elif node.kind in ("while_loop", "while_grad"):
        n = node.params.get("n")
        if n is None:
            fail("has no loop-variable count 'n'")
        for key in ("cond", "body"):
            if key not in sg:
                fail(f"has no {key!r} sub-graph")
        c, b = sg["cond"], sg["body"]
        nin = len(node.inputs) - (n if node.kind == "while_grad" else 0)
        for g in (c, b):
            if len(g.inputs) != nin:
                fail(f"sub-graph {g.name!r} takes {len(g.inputs)} inputs, expected {nin}")
        if len(c.outputs) != 1:
            fail(f"condition {c.name!r} must return one value, returns {len(c.outputs)}")
        if len(b.outputs) != n:
            fail(f"body {b.name!r} returns {len(b.outputs)} values for {n} loop variables")


def propagate_specs(graph: Graph) -> None:
    """Re-run every call node's shape rule; raise where the stored Spec disagrees."""
    from .builder import GraphBuilder
    for n in graph.nodes:
        if n.kind != "call":
            continue
        spec = GraphBuilder.infer(n.op, list(n.inputs[:n.nargs]), n.params,
                                  n.nargs != len(n.inputs))
        if _dims(spec) != _dims(n.spec) or spec.dtype != n.spec.dtype:
            raise GraphError(f"node {n.name!r} ({n.op.__name__}) is recorded as {n.spec} but "
                             f"its shape rule gives {spec}")


def _dims(spec) -> tuple | None:
    """A Spec's shape as a tuple; None for an unknown rank."""
    return None if spec.shape is None else tuple(spec.shape)


def verify(graph: Graph) -> None:
    """Check ``graph`` and all its sub-graphs; raise GraphError naming the culprit."""
    todo = [graph]
    while todo:
        g = todo.pop()
        _check_edges(g)
        order = toposort(g)
        pos = {n: k for k, n in enumerate(g.nodes)}
        for n in order:
            for i in (*n.input_nodes(), *n.deps):
                if pos[i] > pos[n]:
                    raise GraphError(f"node {n.name!r} comes before its input {i.name!r} in "
                                     f"graph {g.name!r} (the list is not topological)")
            if n.kind in MULTI_KINDS:
                _check_signature(n)
                todo.extend(n.subgraphs.values())
        propagate_specs(g)
