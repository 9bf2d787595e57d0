"""Layer ``graph``: the eager (define-by-run) graph of tensors as an IR ``Graph``, to
print and draw it: ``graphgrad.autograd.draw(y)`` (exposed there by the package root:
``autograd`` sits below ``graph``).

Eager mode records each op on the Values it makes (op, inputs, params); this walks
those records back from the given tensors. Leaves that require grad become inputs
(ellipses), other leaves constants, every recorded op a node. Drawing ``y`` together
with the gradient that ``backward(create_graph=True)`` or ``autograd.grad(...,
create_graph=True)`` made shows the lecture's graph extension: the gradient's nodes
that are not part of ``y``'s graph are the backward pass, drawn filled red, and they
read the forward nodes they need.
"""

from __future__ import annotations

from pathlib import Path

from graphgrad.tensor import Value
from graphgrad.tensor.toposort import toposort

from .dot import render, to_dot
from .graph import Graph
from .node import Node
from .spec import Spec

__all__ = ["from_tensors", "draw"]


def _parents(v: Value) -> list[Value]:
    return [i for i in v.inputs if isinstance(i, Value)] if v.op is not None else []


def from_tensors(*tensors: Value, names: dict[str, Value] | None = None,
                 forward: tuple[Value, ...] = ()) -> tuple[Graph, list[Node]]:
    """(the Graph of every recorded op that ``tensors`` came from, the nodes not in the
    graph of ``forward``: the backward part). ``names`` names tensors (e.g.
    ``{"x": x}``); other leaves are ``x0, x1...`` (requiring grad) or constants."""
    label = {id(v): k for k, v in (names or {}).items()}
    order = toposort(list(tensors), _parents)
    seen_forward = {id(v) for v in toposort(list(forward), _parents)} if forward else None
    g = Graph("eager")
    nodes: dict[int, Node] = {}
    backward: list[Node] = []
    for v in order:
        spec = Spec(v._array.shape, v._array.dtype)
        if v.op is None:
            if v._requires_grad or id(v) in label:
                node = g.placeholder(spec, label.get(id(v), f"x{len(g.inputs)}"))
            else:
                node = g.add("constant", label.get(id(v), "const"), spec=spec,
                             value=v._array)
        else:
            ins = [nodes[id(i)] if isinstance(i, Value) else i for i in v.inputs]
            node = g.add("call", label.get(id(v), v.op.__name__.lower()), op=v.op,
                         inputs=ins, params=dict(v.params or {}), spec=spec)
        nodes[id(v)] = node
        if seen_forward is not None and id(v) not in seen_forward:
            backward.append(node)
    g.set_outputs([nodes[id(t)] for t in tensors])
    return g, backward


def draw(*tensors: Value, path: str | Path | None = None, names: dict[str, Value] | None
         = None, legend: bool = True) -> str | Path:
    """Draw the eager graph that ``tensors`` came from: the DOT text, or with ``path``
    the picture Graphviz renders (svg, png). The first tensor is the forward result;
    nodes of the others (gradients made with ``create_graph=True``) that are not in its
    graph are the backward pass, filled red::

        x = gg.tensor(2.0, requires_grad=True)
        y = x.sin() * x
        (dy,) = gg.autograd.grad(y, x, create_graph=True)
        gg.autograd.draw(y, dy, names={"x": x}, path="extension.png")
    """
    if not tensors or not all(isinstance(t, Value) for t in tensors):
        raise TypeError("draw() expects one or more Tensors")
    graph, backward = from_tensors(*tensors, names=names, forward=tensors[:1])
    if path is None:
        return to_dot(graph, legend=legend, backward=backward)
    return render(graph, path, legend=legend, backward=backward)
