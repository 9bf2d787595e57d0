"""Layer ``static``: ``gradients(ys, xs)``: the backward graph as more nodes of the
default graph (graph extension by ``graphgrad.passes.grad``), to any order: the result
can be differentiated again, also through ``cond`` and ``while_loop``."""

from __future__ import annotations

from graphgrad.graph import symbol
from graphgrad.passes import grad

from .graph import get_default_graph
from .tensors import convert_to_tensor

__all__ = ["gradients", "UnconnectedGradients"]


class UnconnectedGradients:
    """What ``gradients`` returns for an x that the ys do not depend on (TF's enum)."""

    NONE = "none"
    ZERO = "zero"


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def gradients(ys, xs, grad_ys=None, name: str = "gradients", colocate_gradients_with_ops=False,
              gate_gradients=False, aggregation_method=None, stop_gradients=None,
              unconnected_gradients=UnconnectedGradients.NONE) -> list:
    """d(sum of ys)/dx for each x, as Symbols; the ``stop_gradients`` count as constants;
    an unconnected x gets None (or zeros with ``unconnected_gradients="zero"``)."""
    ys, xs = _as_list(ys), _as_list(xs)
    mode = getattr(unconnected_gradients, "value", unconnected_gradients)
    if mode not in (UnconnectedGradients.NONE, UnconnectedGradients.ZERO):
        raise ValueError(f"Unknown value for unconnected_gradients: '{mode}'")
    ir = get_default_graph().ir
    if grad_ys is not None:
        grad_ys = [None if g is None else convert_to_tensor(g) for g in _as_list(grad_ys)]
    stop = [] if stop_gradients is None else _as_list(stop_gradients)
    for t in (*ys, *xs, *stop):
        if t._node.graph is not ir:
            raise ValueError(f"Tensor {t!r} is not an element of this graph.")
    outs = grad(ir, [y._node for y in ys], [x._node for x in xs], grad_ys,
                stop=[s._node for s in stop])
    res = [None if n is None else symbol(n) for n in outs]
    if mode == UnconnectedGradients.ZERO:
        from .math_ops import zeros_like
        res = [zeros_like(x) if r is None else r for r, x in zip(res, xs, strict=True)]
    return res
