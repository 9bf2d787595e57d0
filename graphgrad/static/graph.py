"""Layer ``static``: TF1's ``Graph`` and the default-graph stack.

A static Graph owns one IR ``graphgrad.graph.Graph`` plus TF's collections (global
and trainable variables). Ops are only added while building; nothing runs until
``Session.run``. Building happens through the IR's GraphBuilder, activated by the
static functions and by any Symbol's Tensor methods.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from graphgrad.graph import Graph as IRGraph
from graphgrad.graph import building

__all__ = ["Graph", "get_default_graph", "reset_default_graph", "graph_of"]


class Graph:
    """A TF1 graph: the IR it builds and its variable collections."""

    def __init__(self):
        self.ir = IRGraph("graph")
        self.ir.static = self  # the IR graph knows its static owner (for Symbols)
        self.variables: list = []
        self.trainable_variables: list = []
        self.seed: int | None = None  # the graph-level random seed (set_random_seed)

    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        """Make this the default graph; inside, graphgrad ops on its tensors add nodes."""
        _STACK.stack.append(self)
        try:
            with building(self.ir):
                yield self
        finally:
            _STACK.stack.remove(self)

    def building(self):
        return building(self.ir)

    def get_operations(self) -> list:
        from graphgrad.graph import symbol
        return [symbol(n) for n in self.ir.nodes]

    def get_tensor_by_name(self, name: str):
        from graphgrad.graph import symbol
        base = name.split(":")[0]
        try:
            return symbol(self.ir.node(base))
        except KeyError:
            raise KeyError(f"The name '{name}' refers to a Tensor which does not exist. The "
                           f"operation, '{base}', does not exist in the graph.") from None

    def __repr__(self) -> str:
        return f"<graphgrad.static.Graph: {len(self.ir.nodes)} nodes>"


class _Defaults(threading.local):
    """The ``as_default`` graphs of this thread, innermost last: TF keeps the default
    graph stack per thread, while the global default graph is the process's."""

    def __init__(self):
        self.stack: list[Graph] = []


_STACK = _Defaults()
_DEFAULT = [Graph()]


def get_default_graph() -> Graph:
    stack = _STACK.stack
    return stack[-1] if stack else _DEFAULT[0]


def reset_default_graph() -> None:
    """A fresh global default graph (TF: not allowed inside a ``with g.as_default()``)."""
    if _STACK.stack:
        raise AssertionError("Do not use tf.reset_default_graph() to clear nested graphs. If "
                             "you need a cleared graph, exit the nesting and create a new "
                             "graph.")
    _DEFAULT[0] = Graph()


def graph_of(sym) -> Graph:
    return sym._node.graph.static if hasattr(sym._node.graph, "static") else None
