"""Layer ``static``: ``gradients(ys, xs)``: the backward graph as more nodes of the
default graph (graph extension by ``graphgrad.graph.grad``)."""

from __future__ import annotations

from graphgrad.graph import grad, symbol

from .graph import get_default_graph
from .tensors import convert_to_tensor

__all__ = ["gradients"]


def gradients(ys, xs, grad_ys=None, name: str = "gradients", stop_gradients=None) -> list:
    """d(sum of ys)/dx for each x, as Symbols (None where x does not reach ys)."""
    ys = list(ys) if isinstance(ys, (list, tuple)) else [ys]
    xs = list(xs) if isinstance(xs, (list, tuple)) else [xs]
    ir = get_default_graph().ir
    if grad_ys is not None:
        grad_ys = list(grad_ys) if isinstance(grad_ys, (list, tuple)) else [grad_ys]
        grad_ys = [None if g is None else convert_to_tensor(g) for g in grad_ys]
    for t in (*ys, *xs):
        if t._node.graph is not ir:
            raise ValueError(f"Tensor {t!r} is not an element of this graph.")
    outs = grad(ir, [y._node for y in ys], [x._node for x in xs], grad_ys)
    return [None if n is None else symbol(n) for n in outs]
