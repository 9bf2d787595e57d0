"""Layer ``passes``: which nodes a pass may remove, merge or evaluate ahead of time.

``graph.is_impure`` names the nodes whose value is not a function of their inputs or
that change state: ``random`` draws (dropping or merging one would shift every later
draw of the same generator) and ``assign``s, also inside a cond/while sub-graph. The
passes add one kind: ``call_module``, a module called as one opaque node (graphgrad.fx's
leaf modules). The passes cannot see into it and a module may update its own buffers
when called (a batch norm's running statistics in training mode), so it is treated as
impure, which torch.fx also does for a module marked ``_is_impure``; graphgrad cannot
know which ones are, so it keeps them all.
"""

from __future__ import annotations

from graphgrad.graph import Graph, Node, is_impure

__all__ = ["has_side_effects", "handed_out"]


def has_side_effects(node: Node) -> bool:
    """Whether ``node`` must run even when nothing uses its value, and may never be merged
    with another node: ``graph.is_impure`` or an opaque module call, itself or in one of
    its sub-graphs."""
    if is_impure(node):
        return True
    todo = [node]
    while todo:
        n = todo.pop()
        if n.kind == "call_module":
            return True
        for g in n.subgraphs.values():
            todo.extend(g.nodes)
    return False



def handed_out(graph: Graph) -> set[Node]:
    """The nodes whose values leave ``graph`` as the very tensors they are: the output
    node's inputs and the values ``assign`` nodes store. A pass must not make one of them
    a tensor the graph does not own afresh on each run (a constant's array, an input)."""
    out: set[Node] = set()
    for n in graph.nodes:
        if n.kind in ("output", "assign"):
            out.update(n.input_nodes())
    return out
