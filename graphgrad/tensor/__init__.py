"""Layer ``tensor``: Value (the graph node) and Tensor (the user's class), leaf
creation, and the single dispatch function with its context stack.

It knows no particular op: those live in ``graphgrad.ops``.
"""

from .creation import *  # noqa: F401,F403
from .creation import __all__ as _creation_all
from .device import cuda, device
from .dispatch import (Interpreter, current_interpreter, dispatch, is_grad_enabled,
                       pop_interpreter, push_interpreter, set_grad_mode)
from .value import AccumulateGrad, BackwardNode, Extras, RemovableHandle, Size, Tensor, Value, record

__all__ = ["Value", "Tensor", "Size", "Extras", "BackwardNode", "AccumulateGrad",
           "RemovableHandle", "record", "dispatch", "Interpreter", "push_interpreter",
           "pop_interpreter", "current_interpreter", "is_grad_enabled", "set_grad_mode",
           "device", "cuda",
           *_creation_all]
