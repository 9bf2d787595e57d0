"""Layer ``passes``: ``dead_code_elimination``: drop the nodes nothing needs.

A node is live when the output node needs it, through data inputs, control inputs
(``deps``) or the variable an ``assign`` writes (or a later read of a variable names),
or when it has side effects (``purity.has_side_effects``: random draws, assignments,
opaque module calls, and a cond/while whose sub-graph holds one), and so is everything
a live node needs. Every other node goes, except placeholders: they are the graph's
signature (a sub-graph's placeholders must match what its cond/while node passes).
A node with a control dependant is kept exactly when that dependant is live: a pure
node that only a dead node waited for orders nothing any more.

A graph with no output node is returned as it is: any of its nodes may be fetched (a
TF1 ``Session.run`` prunes per fetch), so none is dead; set its outputs first.

Sub-graphs (cond branches, loop bodies, gradient graphs) are cleaned the same way,
their outputs being their roots. Unused outputs of a cond/while node are not removed:
that would change the node's signature and both of its sub-graphs at once.
"""

from __future__ import annotations

from graphgrad.graph import Graph, Node

from .purity import has_side_effects
from .rebuild import GraphPass, Rebuild

__all__ = ["dead_code_elimination", "live_nodes", "DEAD_CODE"]


def live_nodes(graph: Graph) -> set[Node]:
    """The nodes of ``graph`` that its output or a side effect needs. Iterative."""
    todo = [n for n in graph.nodes
            if n.kind in ("output", "placeholder") or has_side_effects(n)]
    live: set[Node] = set()
    while todo:
        n = todo.pop()
        if n in live:
            continue
        live.add(n)
        todo.extend(n.input_nodes())
        todo.extend(n.deps)
        if n.target is not None:
            todo.append(n.target)
    return live


def _rewrite(graph: Graph, subs: dict) -> Rebuild:
    rb = Rebuild(graph, subs)
    if graph.output_node is None:
        for n in graph.nodes:
            rb.keep(n)
        return rb
    live = live_nodes(graph)
    for n in graph.nodes:
        if n in live:
            rb.keep(n)
        else:
            rb.drop(n)
    return rb


DEAD_CODE = GraphPass("dead_code_elimination", _rewrite)


def dead_code_elimination(graph: Graph) -> Graph:
    """``graph`` without its dead nodes (see the module docstring): a new Graph, or
    ``graph`` itself when every node is live. The argument is never changed."""
    return DEAD_CODE(graph).graph
