"""Layer ``nn``: ``Dropout`` (elementwise) and ``Dropout1d``/``Dropout2d`` (whole
channels), active in training mode only."""

from __future__ import annotations

from graphgrad.tensor import Tensor

from .. import functional as F
from .module import Module

__all__ = ["Dropout", "Dropout1d", "Dropout2d"]


class _DropoutNd(Module):
    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    def forward(self, input: Tensor) -> Tensor:
        if not self.training:   # the identity, read here: graphgrad.compile needs no break
            return input
        return F.dropout(input, self.p, self.training, self.inplace)


class Dropout2d(_DropoutNd):
    """Zeroes whole channels of (N, C, H, W) inputs."""

    def forward(self, input: Tensor) -> Tensor:
        if not self.training:   # the identity, read here: graphgrad.compile needs no break
            return input
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Dropout1d(_DropoutNd):
    """Zeroes whole channels of (N, C, L) inputs."""

    def forward(self, input: Tensor) -> Tensor:
        if not self.training:   # the identity, read here: graphgrad.compile needs no break
            return input
        return F.dropout1d(input, self.p, self.training, self.inplace)
