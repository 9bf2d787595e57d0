"""Layer ``tensor``: the one topological sort of graphgrad, for any graph given as roots
and a ``parents`` function: the tensor graph (autograd walks ``Value.inputs``) and the
IR (``graph.verify`` walks a Node's data and control inputs) both use it.

Iterative depth-first search with one iterator per node on an explicit stack, so a
graph of any depth sorts without touching Python's recursion limit; each node comes
after all of its parents, and among independent nodes roots keep their given order
(a list that is already topological comes back unchanged). A cycle is reported with
the nodes on it, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

__all__ = ["toposort", "CycleError"]

T = TypeVar("T")


class CycleError(ValueError):
    """The graph has a cycle; ``cycle`` lists its nodes, each a parent of the next."""

    def __init__(self, cycle: list):
        super().__init__(f"cycle through {len(cycle)} nodes")
        self.cycle = cycle


def toposort(roots: Iterable[T], parents: Callable[[T], Iterable[T]],
             key: Callable[[T], Hashable] = id) -> list[T]:
    """The nodes reachable from ``roots`` through ``parents``, each after all of its
    parents. Nodes are told apart by ``key`` (identity by default: tensors compare
    elementwise). Raises ``CycleError`` on a cycle."""
    order: list[T] = []
    done: dict = {}  # key -> True once emitted, False while on the stack
    for root in roots:
        k = key(root)
        if k in done:
            continue
        done[k] = False
        stack = [(root, iter(parents(root)))]
        while stack:
            node, it = stack[-1]
            for p in it:  # resumes where this node's walk stopped last time
                kp = key(p)
                state = done.get(kp)
                if state is None:
                    done[kp] = False
                    stack.append((p, iter(parents(p))))
                    break
                if state is False:
                    raise CycleError(_cycle(stack, kp, key))
            else:
                stack.pop()
                done[key(node)] = True
                order.append(node)
    return order


def _cycle(stack: list, start: Hashable, key: Callable) -> list:
    """The nodes of the cycle closed by an edge back to ``start``: the stack from
    ``start`` up (the walk goes from child to parent, so it is reversed)."""
    nodes = [n for n, _ in stack]
    first = next(i for i, n in enumerate(nodes) if key(n) == start)
    return list(reversed(nodes[first:]))
