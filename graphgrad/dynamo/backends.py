"""Layer ``dynamo``: the built-in backends. A backend is ``backend(graph, example_inputs)
-> callable`` (PyTorch's convention), the callable taking the graph's inputs and
returning the tuple of its outputs.

* ``"eager"``: the IR interpreter (``graphgrad.graph.Interpreter``);
* ``"print"``: prints the graph as a table and as Python, then runs it like "eager"
  (the lecture's demo of what the compiler is handed);
* ``"default"``: the graph's printed Python program, exec'd once (no per-node
  interpretation: the fastest backend graphgrad has).
"""

from __future__ import annotations

from collections.abc import Callable

from graphgrad.graph import Graph, Interpreter, python_code

__all__ = ["lookup_backend", "register_backend", "BACKENDS", "eager", "print_backend",
           "default"]


class _NoWrap(Interpreter):
    """The IR interpreter with Python scalars passed to ops as they are (a float read at
    run time keeps Python-scalar semantics, as in eager code)."""

    def run(self, *args, feeds=None):
        g = self.graph
        env = dict(zip(g.inputs, args, strict=True))
        self.execute([n for n in g.nodes if n not in env], env)
        out = g.output_node
        return () if out is None else env[out]


def eager(graph: Graph, example_inputs: list) -> Callable:
    return _NoWrap(graph).run


def print_backend(graph: Graph, example_inputs: list) -> Callable:
    print(f"--- graph {graph.name}: {sum(n.kind not in ('placeholder', 'output') for n in graph)}"
          f" ops ---")
    print(graph.tabular())
    print(graph.code)
    return eager(graph, example_inputs)


def default(graph: Graph, example_inputs: list) -> Callable:
    return python_code(graph, name="forward").fn


BACKENDS: dict[str, Callable] = {"eager": eager, "print": print_backend, "default": default,
                                 "inductor": default}


def register_backend(name: str, fn: Callable) -> Callable:
    BACKENDS[name] = fn
    return fn


def lookup_backend(backend) -> Callable:
    if callable(backend):
        return backend
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ValueError(f"Invalid backend: {backend!r}, see `graphgrad.compiler.list_backends()` "
                         f"for available backends ({', '.join(sorted(BACKENDS))})") from None
