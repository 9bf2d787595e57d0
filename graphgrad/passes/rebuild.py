"""Layer ``passes``: the one way a pass makes its result: ``Rebuild`` copies a Graph node
by node, letting the pass keep, drop or replace each node, and ``run_pass`` applies a
pass to a graph and to every control-flow sub-graph in it.

The convention every pass follows: **a pass never mutates its argument.** It returns a
new Graph when it changed something and the very same Graph object when it did not (so
``optimize`` sees a fixed point by identity). Sub-graphs the pass left alone are shared
between the old graph and the new one; a sub-graph two nodes share (a ``while_loop`` and
its ``while_grad``) is rewritten once and stays shared.

Because the result is a copy, state keyed by the old graph's nodes (a Session's variable
values, a seeded random node's generator under ``("rng", node)``) must be re-keyed to run
the new one: ``carry_state(state, node_map)``. Graphs whose state is keyed by name
(graphgrad.fx's ``call_module`` targets and ``variable`` reads, which a GraphModule looks
up again after ``gm.graph = new``) and jit traces (parameters are placeholders) need
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from graphgrad.graph import Graph, Node, verify

__all__ = ["Rebuild", "run_pass", "subgraphs_postorder", "carry_state", "PassResult",
           "GraphPass"]


class Rebuild:
    """A copy of ``graph`` under construction. Walk ``graph.nodes`` in order and call, per
    node, ``keep`` (copy it, inputs remapped), ``replace`` (its users read another node of
    the new graph instead) or ``drop``; ``finish`` returns the new Graph, or ``graph``
    itself when no call changed anything.

    ``subs`` maps ``id`` of an old sub-graph to its rewritten form; ``keep`` substitutes
    them. ``node_map`` maps each old node to the new node that now stands for it."""

    def __init__(self, graph: Graph, subs: dict[int, Graph] | None = None):
        self.old = graph
        self.new = Graph(graph.name)
        self.new.header = list(graph.header)
        self.subs = subs or {}
        self.node_map: dict[Node, Node] = {}
        self.changed = False

    def arg(self, value):
        """An old input (node or literal) as the new graph sees it."""
        return self.node_map[value] if isinstance(value, Node) else value

    def keep(self, node: Node, **changes) -> Node:
        """Copy ``node`` into the new graph. ``changes`` (``inputs``, ``params``, ``op``,
        ``nargs``...) override its fields; inputs given there are new-graph values."""
        if changes:
            self.changed = True
        subgraphs = {k: self.subs.get(id(g), g) for k, g in node.subgraphs.items()}
        if any(subgraphs[k] is not g for k, g in node.subgraphs.items()):
            self.changed = True
        fields = {
            "op": node.op,
            "inputs": tuple(self.arg(i) for i in node.inputs),
            "deps": tuple(self.node_map[d] for d in node.deps),
            "params": dict(node.params),
            "spec": node.spec,
            "subgraphs": subgraphs,
            "value": node.value,
            "nargs": node.nargs,
            "target": None if node.target is None else self.node_map[node.target],
        }
        fields.update(changes)
        new = self.new.add(node.kind, node.name, **fields)
        self.node_map[node] = new
        return new

    def constant(self, node: Node, array) -> Node:
        """Replace ``node`` by a constant node holding ``array`` (its control inputs kept:
        a node that waited on it still waits on them)."""
        self.changed = True
        new = self.new.add("constant", node.name, value=array, spec=node.spec,
                           deps=tuple(self.node_map[d] for d in node.deps))
        self.node_map[node] = new
        return new

    def replace(self, node: Node, by: Node) -> None:
        """The users of ``node`` read ``by`` (a node of the new graph) instead."""
        self.changed = True
        self.node_map[node] = by

    def drop(self, node: Node) -> None:
        self.changed = True

    def finish(self, stamp: str) -> Graph:
        """The new graph with ``stamp`` in its printed header, or the old one unchanged."""
        if not self.changed:
            return self.old
        self.new.inputs = [self.node_map[p] for p in self.old.inputs]
        self.new.header.append(stamp)
        return self.new


def subgraphs_postorder(graph: Graph) -> list[Graph]:
    """Every graph reachable from ``graph`` through sub-graphs, each once, inner graphs
    before the graphs that hold them and ``graph`` itself last. Iterative."""
    order: list[Graph] = []
    seen = {id(graph)}
    todo: list[tuple[Graph, bool]] = [(graph, False)]
    while todo:
        g, expanded = todo.pop()
        if expanded:
            order.append(g)
            continue
        todo.append((g, True))
        for n in reversed(g.nodes):
            for sub in reversed(list(n.subgraphs.values())):
                if id(sub) not in seen:
                    seen.add(id(sub))
                    todo.append((sub, False))
    return order


class PassResult(NamedTuple):
    """What ``run_pass`` returns: the graph (the argument itself when nothing changed)
    and the old -> new node map of every graph it rewrote, sub-graphs included."""

    graph: Graph
    node_map: dict
    changed: bool


def run_pass(graph: Graph, rewrite: Callable[[Graph, dict[int, Graph]], Rebuild],
             name: str) -> PassResult:
    """Apply ``rewrite`` (one graph and its rewritten sub-graphs -> a finished-or-not
    ``Rebuild``) to ``graph`` and every sub-graph, innermost first; verify the result
    (every shape rule re-run) when it changed. Recursion-free: sub-graphs are listed
    first, then rewritten in that order."""
    subs: dict[int, Graph] = {}
    node_map: dict[Node, Node] = {}
    for g in subgraphs_postorder(graph):
        rb = rewrite(g, subs)
        before = g.count()
        new = rb.finish(f"{name}: {before} -> {rb.new.count() if rb.changed else before} nodes")
        if new is not g:
            subs[id(g)] = new
            node_map.update(rb.node_map)
    result = subs.get(id(graph), graph)
    if result is not graph:
        verify(result)
    return PassResult(result, node_map, result is not graph)


class GraphPass(NamedTuple):
    """A pass: its name (stamped in the header of the graphs it makes) and its per-graph
    ``rewrite``. Calling it runs it on a graph and its sub-graphs (``run_pass``)."""

    name: str
    rewrite: Callable[[Graph, dict[int, Graph]], Rebuild]

    def __call__(self, graph: Graph) -> PassResult:
        return run_pass(graph, self.rewrite, self.name)


def carry_state(state: dict, node_map: dict[Node, Node]) -> dict:
    """``state`` (a Session's or an Interpreter's) re-keyed for the graph a pass made:
    variable nodes and seeded random nodes (``("rng", node)``) become their new nodes;
    other keys (module names) stay. Values are shared, not copied; assignments made
    while running the new graph go to the returned dict."""
    out = {}
    for key, value in state.items():
        if isinstance(key, Node):
            key = node_map.get(key, key)
        elif isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], Node):
            key = (key[0], node_map.get(key[1], key[1]))
        out[key] = value
    return out
