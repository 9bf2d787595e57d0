"""Layer ``nn``: activation modules, each a thin wrapper of its ``functional`` form."""

from __future__ import annotations

from graphgrad.tensor import Tensor, full

from .. import functional as F
from ..init import constant_
from ..parameter import Parameter
from .module import Module

__all__ = ["ReLU", "Tanh", "Sigmoid", "GELU", "Softplus", "SiLU", "LeakyReLU", "ELU",
           "Softmax", "LogSoftmax", "ReLU6", "Hardtanh", "Hardsigmoid", "Hardswish", "Mish",
           "PReLU", "GLU", "Softmin", "SELU", "CELU", "Softsign", "Tanhshrink", "Threshold",
           "Hardshrink", "Softshrink"]


class _Inplace(Module):
    """An activation with PyTorch's ``inplace`` flag, shown in its repr when set."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Inplace):
    def forward(self, input: Tensor) -> Tensor:
        return F.relu(input, inplace=self.inplace)


class Tanh(Module):
    def forward(self, input: Tensor) -> Tensor:
        return F.tanh(input)


class Sigmoid(Module):
    def forward(self, input: Tensor) -> Tensor:
        return F.sigmoid(input)


class SiLU(_Inplace):
    def forward(self, input: Tensor) -> Tensor:
        return F.silu(input, inplace=self.inplace)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input: Tensor) -> Tensor:
        return F.softplus(input, beta=self.beta, threshold=self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace
                                                          else "")


class ELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softmax(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.softmax(input, dim=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.log_softmax(input, dim=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Hardtanh(Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0,
                 inplace: bool = False) -> None:
        super().__init__()
        if max_val <= min_val:  # PyTorch's assert
            raise AssertionError(f"max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return (f"min_val={self.min_val}, max_val={self.max_val}"
                + (", inplace=True" if self.inplace else ""))


class ReLU6(Hardtanh):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Hardsigmoid(_Inplace):
    def forward(self, input: Tensor) -> Tensor:
        return F.hardsigmoid(input, self.inplace)

    def extra_repr(self) -> str:
        return ""  # PyTorch's repr does not show the flag


class Hardswish(Hardsigmoid):
    def forward(self, input: Tensor) -> Tensor:
        return F.hardswish(input, self.inplace)


class Mish(_Inplace):
    def forward(self, input: Tensor) -> Tensor:
        return F.mish(input, self.inplace)


class SELU(_Inplace):
    def forward(self, input: Tensor) -> Tensor:
        return F.selu(input, self.inplace)


class CELU(ELU):
    """ELU's parameters and repr, with the continuously differentiable formula."""

    def forward(self, input: Tensor) -> Tensor:
        return F.celu(input, self.alpha, self.inplace)


class PReLU(Module):
    """``x`` where positive, ``weight * x`` elsewhere, with a learned slope (one, or one
    per channel), initialised to ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(full((num_parameters,), init, dtype=dtype))

    def reset_parameters(self) -> None:
        constant_(self.weight, self.init)

    def forward(self, input: Tensor) -> Tensor:
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class GLU(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmin(Softmax):
    def forward(self, input: Tensor) -> Tensor:
        return F.softmin(input, self.dim)


class Softsign(Module):
    def forward(self, input: Tensor) -> Tensor:
        return F.softsign(input)


class Tanhshrink(Module):
    def forward(self, input: Tensor) -> Tensor:
        return F.tanhshrink(input)


class Threshold(Module):
    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return (f"threshold={self.threshold}, value={self.value}"
                + (", inplace=True" if self.inplace else ""))


class Hardshrink(Module):
    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, input: Tensor) -> Tensor:
        return F.hardshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    def forward(self, input: Tensor) -> Tensor:
        return F.softshrink(input, self.lambd)
