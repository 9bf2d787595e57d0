"""Layer ``tensor``: Value (the graph node) and Tensor (the user's class), leaf
creation, the dispatch stack of modes and the single dispatch function.

It knows no particular op: those live in ``graphgrad.ops``. Modules:
``value`` (the node and its one constructor), ``tensor`` (the Tensor API), ``views``
(views, version counters, rebasing), ``grad_fn`` (what ``grad_fn`` shows),
``modes`` (the dispatch stack and grad mode), ``dispatch`` (``dispatch`` and
``record``), ``creation`` (factories and the random generator), ``toposort``.
"""

from .creation import *  # noqa: F401,F403
from .creation import __all__ as _creation_all
from .device import cuda, device
from .dispatch import dispatch, record
from .grad_fn import AccumulateGrad, BackwardNode, RemovableHandle
from .modes import (Mode, active_modes, current_mode, is_active, is_grad_enabled, pop_mode,
                    push_mode, set_grad_mode)
from .size import Size
from .sparse_tensor import SparseTensor, leaf_of
from .tensor import Tensor
from .value import Extras, Value

__all__ = ["Value", "Tensor", "Size", "Extras", "BackwardNode", "AccumulateGrad",
           "RemovableHandle", "SparseTensor", "record", "dispatch", "Mode", "push_mode",
           "pop_mode",
           "current_mode", "active_modes", "is_active", "is_grad_enabled", "set_grad_mode",
           "device", "cuda", *_creation_all]
