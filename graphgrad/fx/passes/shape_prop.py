"""Layer ``fx``: ``ShapeProp``, torch.fx's shape propagation (``torch.fx.passes.shape_prop``).

``ShapeProp(gm).propagate(*args)`` runs the graph on example inputs node by node and
stores each value's shape and dtype in the node's ``meta["tensor_meta"]`` (and
``meta["val"]``, ``meta["type"]``). A graph traced without example inputs records the
ranks it could not know as unknown (``f32[*]``); this is where they become known, as the
ops' shape rules run on the values. The graph itself is not changed: it still serves
inputs of every shape.
"""

from __future__ import annotations

from typing import Any

from graphgrad.graph import Spec
from graphgrad.tensor import Value

from ..graph_module import GraphModule
from ..interpreter import Interpreter
from ..node_view import FxNode, TensorMetadata

__all__ = ["ShapeProp"]


def tensor_metadata(value: Value) -> TensorMetadata:
    arr = value._array
    itemsize = arr.dtype.itemsize or 1
    return TensorMetadata(tuple(arr.shape), arr.dtype, bool(value.requires_grad),
                          tuple(s // itemsize for s in arr.strides))


class ShapeProp(Interpreter):
    """Run ``gm`` on example inputs, recording every node's shape and dtype."""

    def __init__(self, gm: GraphModule):
        super().__init__(gm)

    def run_node(self, n: FxNode) -> Any:
        result = super().run_node(n)
        if isinstance(result, Value):
            meta = tensor_metadata(result)
            n.meta["tensor_meta"] = meta
            n.meta["val"] = Spec(meta.shape, meta.dtype)
        n.meta["type"] = type(result)
        return result

    def propagate(self, *args) -> Any:
        """Run the graph on ``args``; returns its result, as torch.fx's does."""
        return self.run(*args)
