"""Layer ``nn``: ``Unfold`` (im2col) and ``Fold`` (col2im) as modules."""

from __future__ import annotations

from graphgrad.tensor import Tensor

from .. import functional as F
from .module import Module

__all__ = ["Fold", "Unfold"]


class Unfold(Module):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input: Tensor) -> Tensor:
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Fold(Unfold):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1) -> None:
        super().__init__(kernel_size, dilation, padding, stride)
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                      self.stride)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}, " + super().extra_repr()
