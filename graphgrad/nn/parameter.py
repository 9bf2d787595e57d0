"""Layer ``nn``: ``Parameter``, a leaf tensor that a ``Module`` registers as trainable.

A ``Parameter`` is a ``Tensor`` (same slots, same array) that requires grad by default
and prints as ``Parameter containing:``. Ops on it return plain tensors, as in PyTorch.
"""

from __future__ import annotations

from graphgrad.backend import get_default_dtype, xp
from graphgrad.tensor import Tensor

__all__ = ["Parameter", "Buffer"]


class Parameter(Tensor):
    """``Parameter(data, requires_grad=True)``: shares ``data``'s array."""

    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        arr = data._array if isinstance(data, Tensor) else (
            xp.empty((0,), get_default_dtype().np) if data is None else xp.asarray(data))
        p = cls._make(arr)
        if isinstance(data, Tensor):
            p._version_counter = data._version_counter
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True):
        pass  # all done in __new__ (Tensor.__init__ would convert data again)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __deepcopy__(self, memo: dict) -> Parameter:
        p = Parameter(Tensor(self._array.copy()), self.requires_grad)
        memo[id(self)] = p
        return p


class Buffer(Tensor):
    """``nn.Buffer(data, persistent=True)``: a tensor a module owns but does not train."""

    __slots__ = ()

    def __new__(cls, data: Tensor, *, persistent: bool = True):
        b = cls._make(data._array)
        b._version_counter = data._version_counter
        return b

    def __init__(self, data: Tensor, *, persistent: bool = True):
        pass
