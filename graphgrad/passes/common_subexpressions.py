"""Layer ``passes``: ``common_subexpression_elimination``: nodes that compute the same
thing become one.

Two nodes are the same computation when they have the same kind and op, the same data
inputs (after the earlier merges of this pass) in the same order, equal params, the same
sub-graphs (the same objects) and the same control inputs: a node merged with one that
waits on fewer nodes would let its control dependants run too early. Params and literal
inputs are compared by ``keys.value_key`` (types and float bits count; arrays by
identity); constants by ``keys.constant_key`` (small ones by value).

Never merged: nodes with side effects (``purity.has_side_effects``: two draws are two
samples), placeholders (distinct inputs), variable reads (an ``assign`` between two reads
of a variable changes what the second one reads), groups and the output.

The later node of a pair goes; its users read the earlier one, which precedes all of
them, so the order stays topological. Two outputs that were equal computations become
the same tensor object, as with torch.fx's CSE. Sub-graphs are handled the same way,
each on its own (a sub-graph never reads its parent's nodes directly).
"""

from __future__ import annotations

from graphgrad.graph import Graph, Node

from .keys import constant_key, value_key
from .purity import has_side_effects
from .rebuild import GraphPass, Rebuild

__all__ = ["common_subexpression_elimination", "CSE"]

_MERGEABLE = frozenset({"call", "constant", "item", "shape", "vjp", "cond", "while_loop",
                        "while_grad"})


def _key(node: Node, rb: Rebuild) -> tuple:
    """What makes ``node`` this computation, in terms of the new graph's nodes."""
    inputs = tuple(("node", id(rb.node_map[i])) if isinstance(i, Node) else value_key(i)
                   for i in node.inputs)
    deps = frozenset(id(rb.node_map[d]) for d in node.deps)
    subgraphs = tuple((k, id(rb.subs.get(id(g), g))) for k, g in node.subgraphs.items())
    value = constant_key(node.value) if node.kind == "constant" else None
    return (node.kind, id(node.op), node.nargs, inputs, value_key(node.params), subgraphs,
            value, deps)


def _rewrite(graph: Graph, subs: dict) -> Rebuild:
    rb = Rebuild(graph, subs)
    seen: dict[tuple, Node] = {}
    for n in graph.nodes:
        if n.kind not in _MERGEABLE or has_side_effects(n):
            rb.keep(n)
            continue
        key = _key(n, rb)
        first = seen.get(key)
        if first is not None and first.spec == n.spec:
            rb.replace(n, first)
        else:
            seen[key] = rb.keep(n)
    return rb


CSE = GraphPass("common_subexpression_elimination", _rewrite)


def common_subexpression_elimination(graph: Graph) -> Graph:
    """``graph`` with repeated computations merged (see the module docstring): a new
    Graph, or ``graph`` itself when there were none. The argument is never changed."""
    return CSE(graph).graph
