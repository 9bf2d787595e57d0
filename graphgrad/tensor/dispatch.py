"""Layer ``tensor``: the one dispatch function every op call goes through, and
``record``, the one place a graph node is made for an op's output.

``dispatch(op, args, params)`` hands the call to the mode on top of the dispatch stack
(``modes``); with an empty stack it runs the op eagerly, recording a graph node only
when a gradient is needed. This function is the eager hot path: keep it small.
"""

from __future__ import annotations

from typing import Any

from graphgrad.backend import promote_result, xp
from graphgrad.backend.sparse_array import SparseArray

from .modes import per_thread
from .sparse_tensor import SparseTensor
from .tensor import Tensor
from .value import Value
from .views import mark_view, saved_versions

__all__ = ["dispatch", "record"]

_ndarray = xp.ndarray
_make = Tensor._make


def record(op, args: tuple, params: dict, out, node: Value | None = None) -> Tensor:
    """Make the output of ``op`` a graph node that requires grad: a new tensor holding
    the array ``out``, or, given ``node``, that node (vmap's batched results are nodes
    of its logical graph; it marks their views itself, knowing where the values are)."""
    # Versions of the inputs as this node saw them: backward checks them against
    # in-place changes. None stands for "all zero", the common case.
    sv = None
    for a in args:
        if isinstance(a, Value) and a._version_counter is not None:
            sv = saved_versions(args)
            break
    if node is not None:
        node.op, node.inputs, node.params = op, args, params
        node._requires_grad, node._saved_versions = True, sv
        return node
    t = _make(out, op, args, params, True, sv)
    if op.view:
        mark_view(t, op, args, params)
    return t


def dispatch(op, args: tuple, params: dict) -> Any:
    """Run ``op`` on ``args`` (tensors and Python scalars) with keyword ``params``."""
    state = per_thread.state
    if state.top is not None:
        return state.top.process(op, args, params)
    arrays = [a._array if isinstance(a, Value) else a for a in args]
    try:
        out = op.forward(*arrays, **params)
    except Exception as e:  # the shape/dtype rule explains what NumPy only hints at
        raise op.explain_failure(e, args, params) from e
    if type(out) is not _ndarray:  # ufuncs return NumPy scalars for 0-d inputs
        if type(out) is SparseArray:  # a sparse op's result; off the dense path
            return _sparse_result(op, args, params, out, state)
        out = xp.asarray(out)
    if op.promotes:
        odt = out.dtype
        for a in arrays:  # inputs of one dtype giving it: NumPy and PyTorch agree
            if type(a) is _ndarray and a.dtype is not odt:
                out = promote_result(op.forward, arrays, params, out)
                break
    if state.grad_enabled and op.differentiable and out.dtype.kind in "fc":
        for a in args:
            if isinstance(a, Value) and a._requires_grad:
                return record(op, args, params, out)
    t = _make(out)
    if op.view:
        mark_view(t, op, args, params)
    return t


def _sparse_result(op, args: tuple, params: dict, out: SparseArray, state) -> SparseTensor:
    """``dispatch``'s end for an op whose result is sparse: a SparseTensor, recorded as
    a dense result is."""
    t = SparseTensor._make(out)
    if state.grad_enabled and op.differentiable and out.dtype.kind in "fc" and any(
            isinstance(a, Value) and a._requires_grad for a in args):
        return record(op, args, params, out, node=t)
    return t
