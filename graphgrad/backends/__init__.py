"""Layer ``backends``: Graph -> callable, what runs a ``graphgrad.graph.Graph``.

A backend is ``backend(gm, example_inputs) -> callable`` (PyTorch's convention): ``gm`` a
``graphgrad.fx.GraphModule`` whose ``gm.graph`` is the IR (a bare ``Graph`` is taken too),
the callable taking the graph's inputs and returning the tuple of its outputs.
``graphgrad.compile(backend=...)`` hands each graph it captures to one, looked up by
name (registry.py: ``BACKENDS``, ``register_backend``, ``lookup_backend``, also
reachable as ``graphgrad.dynamo.BACKENDS`` etc.).

* ``"eager"``: the IR interpreter, node by node (eager.py);
* ``"print"``: prints the graph as a table and as Python, then runs it like "eager"
  (eager.py);
* ``"default"`` (also ``"inductor"``): the graph optimized by ``graphgrad.passes``, then
  its printed Python program exec'd once, or a program on the arrays themselves where
  no gradient is needed (array_program.py).

This package sits above ``passes`` (the default backend optimizes first) and below
``nn`` and the capture frontends. Not to be confused with ``graphgrad.backend``
(singular), the array namespace at the bottom of the layers.
"""

from .array_program import array_program, default
from .eager import eager, graph_of, print_backend
from .registry import BACKENDS, lookup_backend, register_backend

__all__ = ["BACKENDS", "register_backend", "lookup_backend", "eager", "print_backend",
           "default", "array_program", "graph_of"]
