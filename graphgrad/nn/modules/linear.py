"""Layer ``nn``: ``Identity``, ``Linear`` (``y = x W^T + b``) and ``Bilinear``
(``y_k = x1^T W_k x2 + b_k``) with PyTorch's default initialisation."""

from __future__ import annotations

import math

from graphgrad.tensor import Tensor, empty

from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

__all__ = ["Identity", "Linear", "Bilinear"]


def weight_and_bias(module: Module, weight_shape: tuple, bias: bool, dtype) -> None:
    """Register an uninitialised ``weight`` and a bias of ``weight_shape[0]`` (or None),
    then run the module's ``reset_parameters`` (PyTorch's order of creation)."""
    module.weight = Parameter(empty(*weight_shape, dtype=dtype))
    if bias:
        module.bias = Parameter(empty(weight_shape[0], dtype=dtype))
    else:
        module.register_parameter("bias", None)
    module.reset_parameters()


class Identity(Module):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:
        return input


class Linear(Module):
    """``Linear(in_features, out_features, bias=True)``: weight (out, in) from
    ``kaiming_uniform_(a=sqrt(5))``, i.e. U(-1/sqrt(in), 1/sqrt(in)), bias likewise."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        weight_and_bias(self, (out_features, in_features), bias, dtype)

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Bilinear(Module):
    """``Bilinear(in1_features, in2_features, out_features)``: weight (out, in1, in2) and
    bias from U(-1/sqrt(in1), 1/sqrt(in1)), as PyTorch's."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        weight_and_bias(self, (out_features, in1_features, in2_features), bias, dtype)

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
