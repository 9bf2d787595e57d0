"""Layer ``backends``: the backends that run a Graph node by node with the IR's
interpreter (``graphgrad.graph.Interpreter``).

* ``"eager"``: the interpreter, Python scalars handed to ops as they are;
* ``"print"``: prints the graph as a table and as PyTorch-style Python (the
  GraphModule's ``code``), then runs it like "eager"
  (the lecture's demo of what the compiler is handed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphgrad.graph import Graph, Interpreter
from graphgrad.graph.readable_code import readable_code

__all__ = ["eager", "print_backend", "graph_of"]


def graph_of(gm: Any) -> Graph:
    """The IR graph a backend is handed: ``gm.graph`` of a GraphModule (what
    ``graphgrad.compile`` passes, as PyTorch does), or a bare ``Graph``."""
    if isinstance(gm, Graph):
        return gm
    ir = getattr(gm, "ir", None)   # a GraphModule's graph is the torch.fx-style view of it
    return ir if isinstance(ir, Graph) else gm.graph


class _NoWrap(Interpreter):
    """The IR interpreter with Python scalars passed to ops as they are (a float read at
    run time keeps Python-scalar semantics, as in eager code)."""

    def run(self, *args, feeds=None):
        g = self.graph
        env = dict(zip(g.inputs, args, strict=True))
        self.execute([n for n in g.nodes if n not in env], env)
        out = g.output_node
        return () if out is None else env[out]


def eager(gm: Any, example_inputs: list) -> Callable:
    return _NoWrap(graph_of(gm)).run


def print_backend(gm: Any, example_inputs: list) -> Callable:
    graph = graph_of(gm)
    print(f"--- graph {graph.name}: {sum(n.kind not in ('placeholder', 'output') for n in graph)}"
          f" ops ---")
    print(graph.tabular())
    code = getattr(gm, "code", None)   # a GraphModule's: PyTorch-style, as torch.fx prints
    print(code if isinstance(code, str) else readable_code(graph).src)
    return eager(graph, example_inputs)
