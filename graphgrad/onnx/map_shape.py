"""Layer ``onnx``: mappings of ops that move data without computing: reshape, permute,
expand, concatenation, padding, flips, repeats, triangles, and indexing (``Getitem``:
ints, slices, None, Ellipsis and one integer index tensor; ``Gather``)."""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.graph import Node
from graphgrad.ops.index import TENSOR_SLOT

from .emitter import Emitter, Val
from .errors import UnsupportedOperatorError
from .mapping import norm_dim, onnx_mapping, out_dtype, rank_of, shape_input

__all__: list[str] = []

_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


@onnx_mapping("Reshape")
def _reshape(em: Emitter, node: Node, args: list) -> str:
    sizes = node.params["shape"]
    # ONNX reads a 0 as "copy the input's dim" unless allowzero=1; PyTorch means 0
    allowzero = int(any(not hasattr(s, "index") and s == 0 for s in sizes))
    return em.op("Reshape", [args[0].name, shape_input(em, node, args, sizes)],
                 allowzero=allowzero)


@onnx_mapping("Permute")
def _permute(em: Emitter, node: Node, args: list) -> str:
    rank = rank_of(node)
    return em.op("Transpose", [args[0].name],
                 perm=[norm_dim(d, rank) for d in node.params["dims"]])


@onnx_mapping("Expand")
def _expand(em: Emitter, node: Node, args: list) -> str:
    # PyTorch's -1 keeps a dim; ONNX's Expand broadcasts both ways, so 1 keeps it
    sizes = [s if hasattr(s, "index") or s != -1 else 1 for s in node.params["shape"]]
    return em.op("Expand", [args[0].name, shape_input(em, node, args, sizes)])


@onnx_mapping("Cat")
def _cat(em: Emitter, node: Node, args: list) -> str:
    dtype = out_dtype(node)
    parts = [em.cast(a, dtype) for a in args[:node.nargs]]
    return em.op("Concat", parts, axis=norm_dim(node.params["dim"], rank_of(node)))


@onnx_mapping("Stack")
def _stack(em: Emitter, node: Node, args: list) -> str:
    dtype, dim = out_dtype(node), norm_dim(node.params["dim"], rank_of(node))
    parts = [em.unsqueeze(em.cast(a, dtype), [dim]) for a in args[:node.nargs]]
    return em.op("Concat", parts, axis=dim)


@onnx_mapping("Pad")
def _pad(em: Emitter, node: Node, args: list) -> str:
    x: Val = args[0]
    pad = list(node.params["pad"])
    rank = x.rank
    begins, ends = [0] * rank, [0] * rank
    for k in range(len(pad) // 2):  # PyTorch pads the last dim first: (left, right, top...)
        begins[rank - 1 - k], ends[rank - 1 - k] = pad[2 * k], pad[2 * k + 1]
    value = em.cast(node.params.get("value", 0.0) or 0, out_dtype(node))
    return em.op("Pad", [x.name, em.ints(begins + ends), value], mode="constant")


@onnx_mapping("Flip")
def _flip(em: Emitter, node: Node, args: list) -> str:
    axes = [norm_dim(d, rank_of(node)) for d in node.params["dims"]]
    n = len(axes)
    return em.op("Slice", [args[0].name, em.ints([-1] * n), em.ints([_INT64_MIN] * n),
                           em.ints(axes), em.ints([-1] * n)])


@onnx_mapping("Repeat")
def _repeat(em: Emitter, node: Node, args: list) -> str:
    x: Val = args[0]
    repeats = list(node.params["repeats"])
    name = x.name
    if len(repeats) > x.rank:  # PyTorch adds leading dims of size 1 first
        name = em.unsqueeze(name, list(range(len(repeats) - x.rank)))
    return em.op("Tile", [name, em.ints(repeats)])


@onnx_mapping("Tril", "Triu")
def _triangle(em: Emitter, node: Node, args: list) -> str:
    k = em.ints([node.params.get("diagonal", 0)])
    upper = int(node.op.__name__ == "Triu")
    return em.op("Trilu", [args[0].name, em.op("Squeeze", [k])], upper=upper)


@onnx_mapping("Gather")
def _gather(em: Emitter, node: Node, args: list) -> str:
    x, index = args[0], args[1]
    return em.op("GatherElements", [x.name, em.cast(index, "int64")],
                 axis=norm_dim(node.params["dim"], x.rank))


def _is_tensor_slot(item) -> bool:
    return isinstance(item, str) and item == TENSOR_SLOT


@onnx_mapping("Getitem")
def _getitem(em: Emitter, node: Node, args: list) -> str:
    x: Val = args[0]
    spec = node.params["spec"]
    index_vals = list(args[1:node.nargs])
    if len(index_vals) > 1:
        raise UnsupportedOperatorError("Getitem", em.opset, "Indexing with more than one "
                                       "index tensor has no ONNX mapping in graphgrad yet.")
    if index_vals and index_vals[0].dtype.kind == "b":
        raise UnsupportedOperatorError("Getitem", em.opset, "Indexing with a boolean mask "
                                       "(a data-dependent shape) has no ONNX mapping in "
                                       "graphgrad yet.")
    consumed = sum(1 for s in spec if s is not None and s is not Ellipsis)
    name, d = x.name, 0
    for item in spec:
        if item is Ellipsis:
            d += x.rank - consumed
        elif item is None:
            name = em.unsqueeze(name, [d])
            d += 1
        elif isinstance(item, tuple):  # ("slice", start, stop, step)
            _, start, stop, step = item
            step = 1 if step is None else step
            start = 0 if start is None else start
            stop = _INT64_MAX if stop is None else stop
            if (start, stop, step) != (0, _INT64_MAX, 1):
                name = em.op("Slice", [name, em.ints([start]), em.ints([stop]), em.ints([d]),
                                       em.ints([step])])
            d += 1
        elif _is_tensor_slot(item):
            index = index_vals[0]
            name = em.op("Gather", [name, em.cast(index, "int64")], axis=d)
            d += index.rank
        else:  # an int: a 0-d index removes the dim
            name = em.op("Gather", [name, em.const(xp.asarray(int(item), dtype=xp.int64), "index")],
                         axis=d)
    return name

