"""Layer ``tensor``: the one dispatch function every op call goes through, and the
context stack that transforms (forward AD, vmap, tracers) push themselves onto.

``dispatch(op, args, params)`` hands the call to the interpreter on top of the stack;
with an empty stack it runs the op eagerly, recording a graph node only when a
gradient is needed. This function is the eager hot path: keep it small.
"""

from __future__ import annotations

from typing import Any

from graphgrad.backend import promote_result, xp

from .value import Tensor, Value, mark_view, record

__all__ = ["dispatch", "push_interpreter", "pop_interpreter", "current_interpreter",
           "is_grad_enabled", "set_grad_mode", "Interpreter"]

_ndarray = xp.ndarray
_grad_enabled = True
_stack: list = []
_top = None


class Interpreter:
    """Base of everything that sits on the context stack. ``process`` receives each op
    call made while it is on top; it may call ``dispatch`` again for the level below
    (``lowered()`` pops it for the duration)."""

    def process(self, op, args: tuple, params: dict):
        raise NotImplementedError

    def lowered(self):
        return _Lowered(self)


class _Lowered:
    __slots__ = ("interp", "index")

    def __init__(self, interp):
        self.interp = interp

    def __enter__(self):
        global _top
        self.index = _stack.index(self.interp)
        del _stack[self.index]
        _top = _stack[-1] if _stack else None

    def __exit__(self, *exc):
        global _top
        _stack.insert(self.index, self.interp)
        _top = _stack[-1]


def push_interpreter(interp: Interpreter) -> None:
    global _top
    _stack.append(interp)
    _top = interp


def pop_interpreter(interp: Interpreter) -> None:
    global _top
    if not _stack or _stack[-1] is not interp:
        raise RuntimeError("graphgrad: interpreter stack corrupted (popped out of order)")
    _stack.pop()
    _top = _stack[-1] if _stack else None


def current_interpreter():
    return _top


def is_grad_enabled() -> bool:
    """Whether ops record the graph for reverse-mode differentiation."""
    return _grad_enabled


def set_grad_mode(mode: bool) -> bool:
    """Set grad mode; returns the previous mode (used by ``graphgrad.autograd.grad_mode``)."""
    global _grad_enabled
    prev = _grad_enabled
    _grad_enabled = bool(mode)
    return prev


def dispatch(op, args: tuple, params: dict) -> Any:
    """Run ``op`` on ``args`` (tensors and Python scalars) with keyword ``params``."""
    if _top is not None:
        return _top.process(op, args, params)
    arrays = [a._array if isinstance(a, Value) else a for a in args]
    try:
        out = op.forward(*arrays, **params)
    except Exception as e:  # the shape/dtype rule explains what NumPy only hints at
        raise op.explain_failure(e, args, params) from e
    if type(out) is not _ndarray:  # ufuncs return NumPy scalars for 0-d inputs
        out = xp.asarray(out)
    if op.promotes:
        odt = out.dtype
        for a in arrays:  # inputs of one dtype giving it: NumPy and PyTorch agree
            if type(a) is _ndarray and a.dtype is not odt:
                out = promote_result(op.forward, arrays, params, out)
                break
    if _grad_enabled and op.differentiable and out.dtype.kind in "fc":
        for a in args:
            if isinstance(a, Value) and a._requires_grad:
                return record(op, args, params, out)
    t = Tensor.__new__(Tensor)
    t._array = out
    t.op = None
    t.inputs = ()
    t.params = None
    t._requires_grad = False
    t._grad = None
    t._version_counter = None
    t._extras = None
    if op.view:
        mark_view(t, op, args, params)
    return t
