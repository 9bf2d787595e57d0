"""Layer ``nn``: padding layers (constant, zero, reflection, replication), each
``F.pad`` with its padding spelled out per side as PyTorch stores it."""

from __future__ import annotations

from graphgrad.tensor import Tensor

from .. import functional as F
from .module import Module

__all__ = ["ConstantPad1d", "ConstantPad2d", "ZeroPad1d", "ZeroPad2d", "ReflectionPad1d",
           "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d"]


class _PadNd(Module):
    _n = 1
    _mode = "constant"

    def __init__(self, padding) -> None:
        super().__init__()
        self.padding = (padding,) * (2 * self._n) if isinstance(padding, int) \
            else tuple(padding)

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    pass


class ConstantPad2d(_ConstantPadNd):
    _n = 2


class ZeroPad1d(ConstantPad1d):
    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(ZeroPad1d):
    _n = 2


class ReflectionPad1d(_PadNd):
    _mode = "reflect"


class ReflectionPad2d(ReflectionPad1d):
    _n = 2


class ReplicationPad1d(_PadNd):
    _mode = "replicate"


class ReplicationPad2d(ReplicationPad1d):
    _n = 2
