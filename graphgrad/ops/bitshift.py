"""Layer ``ops``: bitwise shifts of integer tensors (``<<``, ``>>``,
``bitwise_left_shift``, ``bitwise_right_shift``). Not differentiable; shifting by the
bit width or more gives 0 (or -1 for a negative number shifted right), as in PyTorch.
"""

from __future__ import annotations

from graphgrad.backend import from_numpy_dtype, result_type, xp

from .compare import _Predicate

__all__ = ["bitwise_left_shift", "bitwise_right_shift"]

_SCALAR_TYPES = {"float32": "Float", "float64": "Double", "float16": "Half",
                 "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def _integers_only(kernel: str, a, b) -> None:
    """PyTorch has shift kernels for integer (and bool) dtypes only."""
    kinds = [getattr(v, "dtype", xp.asarray(v).dtype).kind for v in (a, b)]
    if any(k in "fc" for k in kinds):
        name = from_numpy_dtype(result_type(a, b)).name  # PyTorch's promotion names it
        raise NotImplementedError(f'"{kernel}" not implemented for '
                                  f"'{_SCALAR_TYPES.get(name, name)}'")


class BitwiseLeftShift(_Predicate):
    @staticmethod
    def forward(a, b):
        _integers_only("lshift_cpu", a, b)
        return xp.left_shift(a, b)


class BitwiseRightShift(_Predicate):
    @staticmethod
    def forward(a, b):
        _integers_only("rshift_cpu", a, b)
        return xp.right_shift(a, b)


def bitwise_left_shift(input, other):
    """``input << other`` elementwise (integer dtypes)."""
    return BitwiseLeftShift.apply(input, other)


def bitwise_right_shift(input, other):
    """``input >> other`` elementwise (an arithmetic shift for signed dtypes)."""
    return BitwiseRightShift.apply(input, other)
