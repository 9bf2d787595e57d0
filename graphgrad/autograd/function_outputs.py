"""Layer ``autograd``: the several outputs of one custom ``autograd.Function`` call.

graphgrad's ops have one output each. A Function whose forward returns several values
is still one op: its output packs the floating-point outputs, each raveled, into one
1-D array of their common dtype, and every output the user gets is a slice of it,
reshaped and cast back (graphgrad ops, so they differentiate to any order). The
gradients of all outputs meet in the packed array, so the user's ``backward`` runs once
with the gradient of every output, as in PyTorch. Outputs that are not floating point
(indices, masks), that forward marked non-differentiable, or that are not tensors stay
outside the pack and are returned as they are.
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.ops import cat
from graphgrad.tensor import Tensor, Value, zeros

__all__ = ["Layout", "pack_arrays", "pack_tensors", "pack_batched", "unpack",
           "unpack_grads"]


class Layout:
    """Where each output of a call lives: ``("packed", offset, shape, dtype)`` or
    ``("plain", value)``; ``dtype`` is the packed array's."""

    __slots__ = ("entries", "dtype", "size")

    def __init__(self, outputs: tuple, plain_ids: set[int] = frozenset(),
                 shapes: tuple | None = None):
        shapes = shapes or tuple(getattr(o, "shape", None) for o in outputs)
        packed = [o._array.dtype if isinstance(o, Value) else o.dtype
                  for o in outputs if _is_packed(o, plain_ids)]
        self.dtype = xp.result_type(*packed) if packed else xp.dtype(xp.float32)
        entries, offset = [], 0
        for o, shape in zip(outputs, shapes, strict=True):
            if _is_packed(o, plain_ids):
                shape = tuple(shape)
                entries.append(("packed", offset, shape, _dtype_of(o)))
                offset += int(xp.prod(shape, dtype=xp.int64))
            else:
                entries.append(("plain", o))
        self.entries, self.size = tuple(entries), offset


def _dtype_of(o):
    return o._array.dtype if isinstance(o, Value) else o.dtype


def _is_packed(o, plain_ids) -> bool:
    return (isinstance(o, Value) and id(o) not in plain_ids
            and xp.issubdtype(o._array.dtype, xp.inexact))


def pack_arrays(outputs: tuple, plain_ids: set[int]) -> tuple:
    """``(packed array, layout)`` of forward's results (eagerly, on arrays)."""
    layout = Layout(outputs, plain_ids)
    parts = [o._array.reshape(-1).astype(layout.dtype, copy=False)
             for o, e in zip(outputs, layout.entries, strict=True) if e[0] == "packed"]
    packed = xp.concatenate(parts) if parts else xp.zeros(0, layout.dtype)
    return packed, layout


def pack_tensors(values: tuple, layout: Layout) -> Tensor:
    """The packed tensor of ``values`` (one per output; None for a zero), with graphgrad
    ops: tangents in forward AD, outputs of a forward run under vmap."""
    parts = []
    for v, e in zip(values, layout.entries, strict=True):
        if e[0] != "packed":
            continue
        _, _, shape, _ = e
        if v is None:
            v = zeros(shape, dtype=layout.dtype)
        parts.append(v.reshape(-1).to(layout.dtype))
    return cat(parts) if parts else zeros(0, dtype=layout.dtype)


def pack_batched(outs: tuple, out_dims: tuple, batch_size: int, name: str) -> tuple:
    """``(packed, layout)`` of a Function's ``vmap`` results: each output's batch dim
    first (broadcast where it has none), one packed row per example."""
    for o in outs:
        if not (isinstance(o, Value) and xp.issubdtype(o._array.dtype, xp.inexact)):
            raise NotImplementedError(
                f"graphgrad: vmap of {name}, whose outputs are not all floating-point "
                f"tensors, is not supported yet")
    fronts = [o.movedim(d, 0) if d is not None
              else o.unsqueeze(0).expand(batch_size, *o.shape)
              for o, d in zip(outs, out_dims, strict=True)]
    layout = Layout(tuple(fronts), shapes=tuple(f.shape[1:] for f in fronts))
    packed = cat([f.reshape(batch_size, -1).to(layout.dtype) for f in fronts], 1)
    return packed, layout


def unpack(packed: Value, layout: Layout) -> tuple:
    """The outputs the user gets back from ``packed``."""
    return tuple(_slice(packed, e) if e[0] == "packed" else e[1] for e in layout.entries)


def unpack_grads(g: Value, layout: Layout, materialize: bool) -> tuple:
    """The gradient of each output, for ``backward``: a slice of the packed gradient,
    zeros for a tensor outside the pack (None if ``set_materialize_grads(False)``), None
    for a value that is not a tensor."""
    grads = []
    for e in layout.entries:
        if e[0] == "packed":
            grads.append(_slice(g, e))
        elif isinstance(e[1], Value) and materialize:
            grads.append(zeros(tuple(e[1].shape), dtype=e[1].dtype))
        else:
            grads.append(None)
    return tuple(grads)


def _slice(packed: Value, entry: tuple) -> Tensor:
    _, offset, shape, dtype = entry
    size = int(xp.prod(shape, dtype=xp.int64))
    part = packed.narrow(0, offset, size).reshape(shape)
    return part if part._array.dtype == dtype else part.to(dtype)
