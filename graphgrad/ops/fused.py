"""Layer ``ops``: what the fused kernels (recurrent layers, attention, losses) share: when
a backward may run on arrays as one op, and the packed 1-D buffer such an op returns its
several cotangents in.

Kernel vjps. An op whose backward has an array kernel (an op with ``differentiable =
False``: ``CrossEntropyBackward``) may define ``kernel_vjp``, with ``vjp``'s signature,
returning its cotangents made by that kernel op (or None: no kernel for these inputs).
Its result cannot be differentiated again, so two kinds of backward may use it: a plain
eager backward (``array_backward()``: the op's own ``vjp`` calls it) and a compiled
backward, which graph differentiation builds with ``passes.grad(..., kernels=True)``
(backends/aot.py: that graph is never differentiated again; ``create_graph=True``
reruns the op-by-op graph). ``kernel_vjp`` runs on Symbols there, so it only calls ops
and reads metadata (a Symbol's ``_array`` is a stand-in). An op defines it only where
its kernel beats what the fusion pass makes of the composite rule in a compiled
backward (measured per op, noted there); other ops keep their array kernel inside
``vjp``, for eager backward alone."""

from __future__ import annotations

import math

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, active_modes, is_grad_enabled

__all__ = ["array_backward", "pack", "unpack"]


def array_backward() -> bool:
    """Whether a vjp may run as an array kernel: a plain eager backward, nothing
    recorded (no ``create_graph``) and no function transform active. Otherwise it must
    run as graphgrad ops, so that its result differentiates further."""
    return not is_grad_enabled() and not active_modes()


def pack(arrays) -> xp.ndarray:
    return xp.concatenate([a.reshape(-1) for a in arrays])


def unpack(flat, shapes) -> list:
    """The pieces of a packed 1-D buffer (a tensor), as views of it. In a plain eager
    backward (``array_backward``: nothing recorded, no transform) they are made as
    arrays: the slice-and-reshape ops would record nothing and cost two dispatches a
    piece, a tenth of a fused backward's time at a Transformer layer's sizes. A piece
    much smaller than the buffer is copied: it is typically a parameter's gradient, which
    lives on in ``.grad`` and as a view would keep the whole buffer (the input's
    gradient with it) alive."""
    pieces, at = [], 0
    fast = array_backward() and type(flat) is Tensor
    for shape in shapes:
        size = math.prod(shape)
        if fast:
            piece = flat._array[at:at + size].reshape(shape)
            pieces.append(Tensor._make(piece.copy() if 8 * size < flat._array.size
                                       else piece))
        else:
            pieces.append(flat[at:at + size].reshape(*shape))
        at += size
    return pieces
