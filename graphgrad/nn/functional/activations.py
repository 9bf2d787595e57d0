"""Layer ``nn``: ``nn.functional``'s activation functions (``relu``, ``gelu``,
``softmax``...), each as graphgrad ops; the in-place forms (``inplace=True``) write
through ``apply_inplace``, so their backward still sees the old value."""

from __future__ import annotations

import warnings

from graphgrad import ops
from graphgrad.ops import sigmoid, softplus, tanh
from graphgrad.ops.inplace import apply_inplace

__all__ = ["relu", "silu", "leaky_relu", "elu", "softmax", "log_softmax", "logsigmoid", "hardtanh",
           "relu6", "hardsigmoid", "hardswish", "mish", "prelu", "glu", "softmin", "selu", "celu",
           "softsign", "tanhshrink", "threshold", "hardshrink", "softshrink"]


def _activation(input, fn, inplace: bool, name: str):
    """``fn(input)``; with ``inplace=True`` written over ``input`` as an in-place op whose
    backward still sees the old value (a ``copy_`` of ``fn(input)`` would bump the version
    of a tensor ``fn``'s backward reads)."""
    return apply_inplace(input, fn, name=name) if inplace else fn(input)


def relu(input, inplace: bool = False):
    return input.relu_() if inplace else ops.relu(input)


def silu(input, inplace: bool = False):
    return _activation(input, ops.silu, inplace, "silu_")


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    return _activation(input, lambda x: ops.where(x > 0, x, x * negative_slope), inplace,
                       "leaky_relu_")


def elu(input, alpha: float = 1.0, inplace: bool = False):
    return _activation(input, lambda x: ops.where(x > 0, x, alpha * ops.expm1(
        ops.clamp(x, max=0.0))), inplace, "elu_")


def _implicit_dim(name: str, ndim: int, stacklevel: int) -> int:
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  f"to include dim=X as an argument.", UserWarning, stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None):
    """``ops.softmax``; without ``dim``, PyTorch's deprecated implicit choice (with its
    warning): dim 0 for 0-, 1- and 3-d inputs, else 1."""
    if dim is None:
        dim = _implicit_dim("softmax", input.ndim, _stacklevel)
    return ops.softmax(input, dim, dtype=dtype)


def log_softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None):
    if dim is None:
        dim = _implicit_dim("log_softmax", input.ndim, _stacklevel)
    return ops.log_softmax(input, dim, dtype=dtype)


def logsigmoid(input):
    return -softplus(-input)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """``input`` clipped to [min_val, max_val], with gradient 0 at the clip points (as
    PyTorch's, where ``clamp`` would pass it)."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _activation(input, lambda x: ops.where(x <= min_val, min_val, ops.where(
        x >= max_val, max_val, x)), inplace, "hardtanh_")


def relu6(input, inplace: bool = False):
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input, inplace: bool = False):
    """``relu6(x + 3) / 6``."""
    return _activation(input, lambda x: ops.where(x <= -3.0, 0.0, ops.where(
        x >= 3.0, 1.0, x / 6 + 0.5)), inplace, "hardsigmoid_")


def hardswish(input, inplace: bool = False):
    """``x * relu6(x + 3) / 6``; at -3 and 3 the gradient is that of the outer pieces (0
    and 1), as PyTorch's."""
    return _activation(input, lambda x: ops.where(x <= -3.0, 0.0, ops.where(
        x >= 3.0, x, x * (x + 3) / 6)), inplace, "hardswish_")


def mish(input, inplace: bool = False):
    return _activation(input, lambda x: x * tanh(softplus(x)), inplace, "mish_")


def prelu(input, weight):
    """``x`` where positive, ``weight * x`` elsewhere; ``weight`` has one value or one per
    channel (dim 1)."""
    channels = input.shape[1] if input.ndim >= 2 else 1
    if weight.numel() != 1 and weight.numel() != channels:
        raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                           f"parameter numbers = {weight.numel()} and channel size = "
                           f"{channels}.")
    w = weight.reshape((-1,) + (1,) * (input.ndim - 2)) if input.ndim >= 2 else weight
    return ops.where(input > 0, input, w * input)


def glu(input, dim: int = -1):
    """``a * sigmoid(b)`` for the two halves ``a, b`` of ``input`` along ``dim``."""
    if input.shape[dim] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension "
                           f"{dim % input.ndim} is size {input.shape[dim]}")
    a, b = ops.chunk(input, 2, dim)
    return a * sigmoid(b)


def softmin(input, dim: int | None = None, _stacklevel: int = 3, dtype=None):
    if dim is None:
        dim = _implicit_dim("softmin", input.ndim, _stacklevel)
    return ops.softmax(-input, dim, dtype=dtype)


_SELU_ALPHA = 1.6732632423543772848170429916717


_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace: bool = False):
    return _activation(input, lambda x: _SELU_SCALE * elu(x, _SELU_ALPHA), inplace, "selu_")


def celu(input, alpha: float = 1.0, inplace: bool = False):
    """``max(0, x) + min(0, alpha (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _activation(input, lambda x: ops.where(x > 0, x, alpha * ops.expm1(
        ops.clamp(x, max=0.0) / alpha)), inplace, "celu_")


def softsign(input):
    return input / (1 + input.abs())


def tanhshrink(input):
    return input - tanh(input)


def threshold(input, threshold: float, value: float, inplace: bool = False):
    """``x`` where ``x > threshold``, else ``value``."""
    return _activation(input, lambda x: ops.where(x > threshold, x, value), inplace,
                       "threshold_")


def hardshrink(input, lambd: float = 0.5):
    return ops.where((input > lambd) | (input < -lambd), input, 0.0)


def softshrink(input, lambd: float = 0.5):
    return ops.where(input > lambd, input - lambd, ops.where(input < -lambd, input + lambd, 0.0))
