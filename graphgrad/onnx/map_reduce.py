"""Layer ``onnx``: mappings of reductions (sum, mean, max/min, prod, logsumexp, norms,
arg-max/min, cumulative sums), softmax and matrix products.

ONNX moved the ``axes`` of ReduceSum from an attribute to an input in opset 13, and of
the other reductions in opset 18; ``_reduce`` writes whichever the opset wants.
"""

from __future__ import annotations

from graphgrad.graph import Node

from .emitter import Emitter, Val
from .errors import UnsupportedOperatorError
from .mapping import norm_dim, onnx_mapping, out_dtype

__all__: list[str] = []

_REDUCE = {"Sum": "ReduceSum", "Mean": "ReduceMean", "Amax": "ReduceMax",
           "Amin": "ReduceMin", "Prod": "ReduceProd", "Logsumexp": "ReduceLogSumExp"}


def _axes(node: Node, rank: int) -> list[int] | None:
    dim = node.params.get("dim")
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:  # PyTorch's dim=() reduces everything
        return None
    return [norm_dim(d, rank) for d in dims]


def _reduce(em: Emitter, onnx_op: str, x: str, axes: list[int] | None,
            keepdim: bool) -> str:
    attrs = {"keepdims": int(keepdim)}
    axes_as_input = onnx_op == "ReduceSum" or em.opset >= 18
    if axes is None:
        return em.op(onnx_op, [x], **attrs)
    if axes_as_input:
        return em.op(onnx_op, [x, em.ints(axes)], **attrs)
    return em.op(onnx_op, [x], axes=axes, **attrs)


@onnx_mapping(*_REDUCE)
def _reduction(em: Emitter, node: Node, args: list) -> str:
    x: Val = args[0]
    name = em.cast(x, out_dtype(node))  # PyTorch sums ints as int64, bools too
    return _reduce(em, _REDUCE[node.op.__name__], name, _axes(node, x.rank),
                   node.params.get("keepdim", False))


@onnx_mapping("Norm")
def _norm(em: Emitter, node: Node, args: list) -> str:
    p = node.params.get("p", 2)
    ops = {1: "ReduceL1", 2: "ReduceL2"}
    if p not in ops:
        raise UnsupportedOperatorError("Norm", em.opset, f"Only p=1 and p=2 norms have an "
                                       f"ONNX mapping in graphgrad (got p={p}).")
    x: Val = args[0]
    return _reduce(em, ops[p], em.cast(x, out_dtype(node)), _axes(node, x.rank),
                   node.params.get("keepdim", False))


@onnx_mapping("Argmax", "Argmin")
def _arg_extreme(em: Emitter, node: Node, args: list) -> str:
    x: Val = args[0]
    op = "ArgMax" if node.op.__name__ == "Argmax" else "ArgMin"
    dim, keepdim = node.params.get("dim"), node.params.get("keepdim", False)
    if dim is None:  # over the flattened tensor
        flat = em.op("Reshape", [x.name, em.ints([-1])])
        out = em.op(op, [flat], axis=0, keepdims=0)
        if keepdim:
            out = em.op("Reshape", [out, em.ints([1] * x.rank)])
        return out
    return em.op(op, [x.name], axis=norm_dim(dim, x.rank), keepdims=int(keepdim),
                 select_last_index=0)


@onnx_mapping("Softmax", "LogSoftmax")
def _softmax(em: Emitter, node: Node, args: list) -> str:
    x: Val = args[0]
    # from opset 13 the axis is one dim, as PyTorch's dim
    return em.op(node.op.__name__, [em.cast(x, out_dtype(node))],
                 axis=norm_dim(node.params["dim"], x.rank))


@onnx_mapping("Cumsum")
def _cumsum(em: Emitter, node: Node, args: list) -> str:
    x: Val = args[0]
    axis = em.op("Squeeze", [em.ints([norm_dim(node.params["dim"], x.rank)])])
    return em.op("CumSum", [em.cast(x, out_dtype(node)), axis])


@onnx_mapping("Matmul")
def _matmul(em: Emitter, node: Node, args: list) -> str:
    return em.op("MatMul", [em.cast(a, out_dtype(node)) for a in args[:2]])


@onnx_mapping("Linear")
def _linear(em: Emitter, node: Node, args: list) -> str:
    dtype = out_dtype(node)
    x, w = args[0], args[1]
    b = args[2] if node.nargs > 2 and args[2] is not None else None
    xs, ws = em.cast(x, dtype), em.cast(w, dtype)
    if x.rank == 2 and w.rank == 2:  # Gemm: Y = X W^T + b, the bias broadcast
        ins = [xs, ws] + ([em.cast(b, dtype)] if b is not None else [])
        return em.op("Gemm", ins, transB=1)
    y = em.op("MatMul", [xs, em.op("Transpose", [ws], perm=[1, 0]) if w.rank == 2 else ws])
    return em.op("Add", [y, em.cast(b, dtype)]) if b is not None else y
