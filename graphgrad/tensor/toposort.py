"""Layer ``tensor``: the one topological sort of graphgrad. The autograd engine sorts
the tensor graph with it (a Value's inputs that require grad, each as the node
recorded it), and the IR (``graph.verify``) sorts a Graph's nodes by data and control
edges with it, through ``parents``.

Iterative depth-first search with one iterator per node on an explicit stack, so a
graph of any depth sorts without touching Python's recursion limit; each node comes
after all of its parents, and among independent nodes roots keep their given order
(a list that is already topological comes back unchanged). The tensor graph is
walked inline, without a call per node: it is sorted on every backward pass, where a
``parents`` callback cost 5-7% of the pass on small ops (bench/op_overhead.py's chain).
A tensor graph cannot have a cycle; a ``parents`` graph can, and a cycle is reported
with the nodes on it, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from .value import Value
from .views import input_as_recorded

__all__ = ["toposort", "CycleError"]

T = TypeVar("T")


class CycleError(ValueError):
    """The graph has a cycle; ``cycle`` lists its nodes, each a parent of the next."""

    def __init__(self, cycle: list):
        super().__init__(f"cycle through {len(cycle)} nodes")
        self.cycle = cycle


def toposort(roots: Sequence[T], parents: Callable[[T], Iterable[T]] | None = None
             ) -> list[T]:
    """The nodes reachable from ``roots``, each after all of its parents: through
    ``parents(node)``, or (without it) through the inputs of Values that require
    grad. Nodes are told apart by identity (tensors compare elementwise). Raises
    ``CycleError`` on a cycle."""
    tensors = parents is None
    order: list = []
    seen: set[int] = set()
    on_path: set[int] = set()  # the nodes being walked: an edge back to one is a cycle
    for root in roots:
        if id(root) in seen:
            continue
        seen.add(id(root))
        nodes = [root]
        inputs = [iter(root.inputs if tensors else parents(root))]
        if not tensors:
            on_path.add(id(root))
        while inputs:
            for p in inputs[-1]:
                if tensors:
                    if not (isinstance(p, Value) and p._requires_grad):
                        continue
                    if p._extras is not None:
                        p = input_as_recorded(nodes[-1], p)
                    pid = id(p)
                    if pid in seen:
                        continue
                    seen.add(pid)
                    if p.op is None:  # a leaf is done at once: no push and pop
                        order.append(p)
                        continue
                    nodes.append(p)
                    inputs.append(iter(p.inputs))
                    break
                if id(p) in seen:
                    if id(p) in on_path:
                        raise CycleError(_cycle(nodes, p))
                    continue
                seen.add(id(p))
                on_path.add(id(p))
                nodes.append(p)
                inputs.append(iter(parents(p)))
                break
            else:
                inputs.pop()
                node = nodes.pop()
                order.append(node)
                if not tensors:
                    on_path.discard(id(node))
    return order


def _cycle(nodes: list, start) -> list:
    """The nodes of the cycle closed by an edge back to ``start``: the path from
    ``start`` up (the walk goes from child to parent, so it is reversed)."""
    first = next(i for i, n in enumerate(nodes) if n is start)
    return list(reversed(nodes[first:]))
