"""Layer ``onnx``: the table from graphgrad op class names to ONNX mappings.

A mapping is ``fn(em, node, args) -> str``: it emits the ONNX nodes for one call node of
the IR (``args``: its data inputs as ``Val``s and Python scalars, Dyn inputs included at
their indices) and returns the name of the value that holds the node's output, in the
dtype of the node's Spec. Register one with ``@onnx_mapping("OpName", ...)``; adding an
op to the exporter means adding one function in one of the ``map_*.py`` files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from graphgrad.graph import Dyn, Node

from .emitter import Emitter, Val

__all__ = ["MAPPINGS", "onnx_mapping", "shape_input", "out_dtype", "rank_of", "norm_dim"]

Mapping = Callable[[Emitter, Node, list], str]
MAPPINGS: dict[str, Mapping] = {}


def onnx_mapping(*op_names: str) -> Callable[[Mapping], Mapping]:
    def register(fn: Mapping) -> Mapping:
        for name in op_names:
            MAPPINGS[name] = fn
        return fn
    return register


def out_dtype(node: Node) -> Any:
    return node.spec.dtype


def rank_of(node: Node) -> int:
    return len(node.spec.shape)


def norm_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def shape_input(em: Emitter, node: Node, args: list, sizes: Sequence[Any]) -> str:
    """An int64 vector of ``sizes``, whose ``Dyn(i)`` entries are data input ``i`` (a
    size computed in the graph, e.g. the batch size read with Shape)."""
    if not any(isinstance(s, Dyn) for s in sizes):
        return em.ints([int(s) for s in sizes])
    parts = []
    for s in sizes:
        if isinstance(s, Dyn):
            v = args[s.index]
            if isinstance(v, Val):
                name = em.cast(v, "int64")
                parts.append(em.unsqueeze(name, [0]) if v.rank == 0 else name)
            else:
                parts.append(em.ints([int(v)]))
        else:
            parts.append(em.ints([int(s)]))
    return em.op("Concat", parts, axis=0)
