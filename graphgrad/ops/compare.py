"""Layer ``ops``: comparisons, logical and bitwise ops (shifts too; not differentiable),
and ``where``."""

from __future__ import annotations

from graphgrad.backend import result_type, torch_promotion, xp

from .base import NO_PARAMS, scalar_name
from .elementwise import WIDE_DTYPES, Elementwise
from . import taylor as ts

__all__ = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
           "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "where",
           "isnan", "isinf", "isfinite", "equal", "allclose", "isclose", "bitwise_left_shift",
           "bitwise_right_shift"]


class _Predicate(Elementwise):
    differentiable = False
    saves_inputs = ()
    promotes = False


class Eq(_Predicate):
    holomorphic = True
    forward = staticmethod(xp.equal)


class Ne(_Predicate):
    holomorphic = True
    forward = staticmethod(xp.not_equal)


class Lt(_Predicate):
    forward = staticmethod(xp.less)


class Le(_Predicate):
    forward = staticmethod(xp.less_equal)


class Gt(_Predicate):
    forward = staticmethod(xp.greater)


class Ge(_Predicate):
    forward = staticmethod(xp.greater_equal)


class LogicalAnd(_Predicate):
    forward = staticmethod(xp.logical_and)


class LogicalOr(_Predicate):
    forward = staticmethod(xp.logical_or)


class LogicalXor(_Predicate):
    forward = staticmethod(xp.logical_xor)


class LogicalNot(_Predicate):
    forward = staticmethod(xp.logical_not)


class BitwiseAnd(_Predicate):
    forward = staticmethod(xp.bitwise_and)


class BitwiseOr(_Predicate):
    forward = staticmethod(xp.bitwise_or)


class BitwiseXor(_Predicate):
    forward = staticmethod(xp.bitwise_xor)


class BitwiseNot(_Predicate):
    forward = staticmethod(xp.invert)


class Isnan(_Predicate):
    forward = staticmethod(xp.isnan)


class Isinf(_Predicate):
    forward = staticmethod(xp.isinf)


class Isfinite(_Predicate):
    forward = staticmethod(xp.isfinite)


class Where(Elementwise):
    """``where(condition, input, other)``: input where condition holds, else other."""

    holomorphic = True
    saves_inputs = (0,)  # only the condition is read by the rule
    promotes = False  # the condition takes no part in type promotion: forward promotes

    @staticmethod
    def forward(cond, a, b):
        if getattr(cond, "dtype", None) != xp.bool_:
            raise RuntimeError(f"where expected condition to be a boolean tensor, but got a "
                               f"tensor with dtype {scalar_name(xp.asarray(cond).dtype)}")
        out = xp.asarray(xp.where(cond, a, b))
        # mixed dtypes, or two Python numbers (NumPy's float64)
        if out.dtype in WIDE_DTYPES or any(getattr(v, "dtype", out.dtype) != out.dtype
                                     for v in (a, b)):
            cast = torch_promotion(out.dtype, [a, b])
            if cast is not None:
                out = out.astype(cast)
        return out

    @staticmethod
    def vjp(g, out, cond, a, b):
        return None, where(cond, g, 0.0), where(cond, 0.0, g)

    @staticmethod
    def jvp(dots, out, cond, a, b):
        da, db = dots[1], dots[2]
        return where(cond, 0.0 if da is None else da, 0.0 if db is None else db)

    taylor = classmethod(ts.linear_taylor)


def _binary(op):
    def fn(input, other):
        return op.apply(input, other)
    fn.__name__ = op.__name__.lower()
    return fn


eq, ne, lt, le, gt, ge = (_binary(o) for o in (Eq, Ne, Lt, Le, Gt, Ge))
logical_and, logical_or, logical_xor = (_binary(o) for o in (LogicalAnd, LogicalOr, LogicalXor))
bitwise_and, bitwise_or, bitwise_xor = (_binary(o) for o in (BitwiseAnd, BitwiseOr, BitwiseXor))


def logical_not(input):
    return LogicalNot.apply(input)


def bitwise_not(input):
    return BitwiseNot.apply(input)


def isnan(input):
    return Isnan.apply(input)


def isinf(input):
    return Isinf.apply(input)


def isfinite(input):
    return Isfinite.apply(input)


def where(condition, input=None, other=None):
    """``where(c, x, y)``; ``where(c)`` alone is ``nonzero(c, as_tuple=True)``."""
    if input is None and other is None:
        from .index import nonzero
        return nonzero(condition, as_tuple=True)
    from graphgrad.tensor import dispatch
    return dispatch(Where, (condition, input, other), NO_PARAMS)


def equal(input, other) -> bool:
    """True when both tensors have the same shape and elements."""
    return input.shape == other.shape and bool(xp.array_equal(input._array, other._array))


def isclose(input, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    return IsClose.apply(input, other, rtol=rtol, atol=atol, equal_nan=equal_nan)


def allclose(input, other, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    return bool(xp.all(isclose(input, other, rtol, atol, equal_nan)._array))


class IsClose(_Predicate):
    @staticmethod
    def forward(a, b, *, rtol, atol, equal_nan):
        return xp.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


# ---- bitwise shifts ----------------------------------------------------------------

def _integers_only(kernel: str, a, b) -> None:
    """PyTorch has shift kernels for integer (and bool) dtypes only."""
    kinds = [getattr(v, "dtype", xp.asarray(v).dtype).kind for v in (a, b)]
    if any(k in "fc" for k in kinds):
        from graphgrad.tensor import Tensor

        promoted = Tensor._make(xp.empty((), result_type(a, b)))  # PyTorch's promotion
        raise NotImplementedError(f'"{kernel}" not implemented for '
                                  f"'{scalar_name(promoted._array.dtype)}'")


class BitwiseLeftShift(_Predicate):
    """``<<``: integer (and bool) dtypes only; shifting by the bit width or more gives 0."""

    @staticmethod
    def forward(a, b):
        _integers_only("lshift_cpu", a, b)
        return xp.left_shift(a, b)


class BitwiseRightShift(_Predicate):
    """``>>``, arithmetic for signed dtypes (a negative number shifted far gives -1)."""

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
