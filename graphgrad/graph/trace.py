"""Layer ``graph``: ``trace(fn, *specs)``, the smallest frontend: run ``fn`` on Symbols of
fresh placeholders under a GraphBuilder and return the Graph it built. Tests and the
capture frontends use it; it follows only the Python path taken (no control flow)."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from graphgrad.backend import xp
from graphgrad.tensor import Value

from .builder import GraphBuilder
from .graph import Graph
from .spec import Spec
from .symbol import symbol

__all__ = ["trace"]


def _spec(x) -> Spec:
    if isinstance(x, Spec):
        return x
    arr = x._array if isinstance(x, Value) else xp.asarray(x)
    return Spec(arr.shape, arr.dtype)


def trace(fn: Callable, *examples, name: str | None = None, **static) -> Graph:
    """The Graph of ``fn`` applied to placeholders shaped like ``examples`` (Specs,
    tensors or arrays); keyword ``static`` arguments are passed through as constants."""
    g = Graph(name or getattr(fn, "__name__", "graph"))
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    b = GraphBuilder(g)
    phs = [g.placeholder(_spec(x), names[k] if k < len(names) else f"x{k}")
           for k, x in enumerate(examples)]
    with b.active():
        out = fn(*[symbol(p) for p in phs], **static)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        nodes = [b.node_of(o, literal_ok=False) for o in outs]
    g.set_outputs(nodes)
    return g
