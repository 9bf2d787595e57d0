"""Layer ``ops``: arithmetic on broadcast tensors: + - * / // % ** neg, maximum, minimum."""

from __future__ import annotations

import math

from graphgrad.backend import xp
from graphgrad.tensor import Value, dispatch

from .compare import where
from .base import NO_PARAMS
from .elementwise import Elementwise
from .refusals import SEQUENCES, sequence_operand
from . import taylor as ts

__all__ = ["add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "neg", "maximum",
           "minimum", "needs_grad", "true_divide", "subtract", "multiply", "divide", "fmod",
           "rsub", "negative", "atan2"]


def needs_grad(x) -> bool:
    """Whether a rule should bother computing the cotangent for input ``x``."""
    return isinstance(x, Value) and x._requires_grad


class Add(Elementwise):
    holomorphic = True
    saves_inputs = ()
    forward = staticmethod(xp.add)

    @staticmethod
    def vjp(g, out, a, b):
        return g, g

    @staticmethod
    def jvp(dots, out, a, b):
        return Add.apply(_t(dots[0]), _t(dots[1]))

    taylor = classmethod(ts.linear_taylor)


_SUB_BOOL = ("Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
             "trying to invert a mask, use the `~` or `logical_not()` operator instead.")


_BOOL = xp.dtype(xp.bool_)  # NumPy's dtype objects of builtin types are singletons


def _is_bool(v) -> bool:
    return v.dtype is _BOOL if type(v) is xp.ndarray else type(v) is bool


def _subtract(a, b):
    """NumPy subtracts a bool array from a float one; PyTorch refuses any bool operand.
    (Inline tests: a subtraction is a common op, and two helper calls cost half again
    NumPy's own time on small arrays.)"""
    ta, tb = type(a), type(b)
    a_bool = a.dtype is _BOOL if ta is xp.ndarray else ta is bool
    b_bool = b.dtype is _BOOL if tb is xp.ndarray else tb is bool
    if a_bool and b_bool:  # (NumPy's own refusal, which the error path rewords)
        return xp.subtract(a, b)
    if a_bool or b_bool:
        raise RuntimeError(_SUB_BOOL)
    return xp.subtract(a, b)


class Sub(Elementwise):
    holomorphic = True
    saves_inputs = ()
    forward = staticmethod(_subtract)

    @staticmethod
    def vjp(g, out, a, b):
        return g, (-g if needs_grad(b) else None)

    @staticmethod
    def jvp(dots, out, a, b):
        return Sub.apply(_t(dots[0]), _t(dots[1]))

    taylor = classmethod(ts.linear_taylor)


def _other_operand_saved(a, b) -> tuple:
    """a * b saves b for a's gradient and a for b's: only what a needed gradient uses."""
    return tuple(i for i, other in ((0, b), (1, a)) if needs_grad(other))


class Mul(Elementwise):
    holomorphic = True
    forward = staticmethod(xp.multiply)
    saves_inputs = staticmethod(_other_operand_saved)

    @staticmethod
    def vjp(g, out, a, b):
        return (g * b if needs_grad(a) else None), (g * a if needs_grad(b) else None)

    @staticmethod
    def jvp(dots, out, a, b):
        da, db = dots
        return _plus(da * b if da is not None else None, a * db if db is not None else None)

    @staticmethod
    def taylor(series, out, a, b):
        k = ts.order_of(series)  # Leibniz: y_k = sum_j a_j b_{k-j}
        return ts.mul_series(ts.full(a, series[0], k), ts.full(b, series[1], k), k)


def _integer_division(fn, no_bool: str | None = None):
    """``fn`` (an integer-valued division) that refuses a zero divisor when both operands
    are integers, as PyTorch does (NumPy returns 0 with a warning), and two bool operands
    when PyTorch has no bool kernel (``no_bool`` names it)."""
    def forward(a, b, **params):
        if no_bool and _is_bool(a) and _is_bool(b):
            raise NotImplementedError(f'"{no_bool}_cpu" not implemented for \'Bool\'')
        if _integral(a) and _integral(b) and xp.any(xp.asarray(b) == 0):
            raise RuntimeError("ZeroDivisionError")
        return fn(a, b, **params)
    return staticmethod(forward)


def _integral(v) -> bool:
    return v.dtype.kind in "biu" if hasattr(v, "dtype") else isinstance(v, int)


class Div(Elementwise):
    holomorphic = True
    # a / b: a's gradient reads b; b's reads a and b
    saves_inputs = staticmethod(lambda a, b, **_: (0, 1) if needs_grad(b) else (1,))

    @staticmethod
    def forward(a, b, *, rounding_mode=None):
        if rounding_mode is None:
            return xp.true_divide(a, b)
        return _rounded_division(a, b, rounding_mode=rounding_mode)

    @staticmethod
    def vjp(g, out, a, b, *, rounding_mode=None):
        if rounding_mode is not None:  # piecewise constant
            return (g * 0 if needs_grad(a) else None), (g * 0 if needs_grad(b) else None)
        ga = g / b if needs_grad(a) else None
        gb = -g * a / (b * b) if needs_grad(b) else None
        return ga, gb

    @staticmethod
    def jvp(dots, out, a, b, *, rounding_mode=None):
        if rounding_mode is not None:
            return None
        da, db = dots
        return _plus(da / b if da is not None else None,
                     -db * out / b if db is not None else None)

    @staticmethod
    def taylor(series, out, a, b, *, rounding_mode=None):
        k = ts.order_of(series)
        if rounding_mode is not None:  # piecewise constant
            return [None] * k
        return ts.div_series(ts.full(a, series[0], k), ts.full(b, series[1], k), out, k)


@_integer_division
def _rounded_division(a, b, *, rounding_mode):
    if rounding_mode == "floor":
        return xp.floor_divide(a, b)
    q = xp.trunc(xp.true_divide(a, b))
    dt = xp.result_type(a, b)
    return q.astype(dt) if dt.kind in "iu" else q


class FloorDivide(Elementwise):
    differentiable = False  # PyTorch: "the derivative for 'floor_divide' is not implemented"
    saves_inputs = ()
    forward = _integer_division(xp.floor_divide)


class Remainder(Elementwise):
    """Python's ``%``: the result takes the divisor's sign (``torch.remainder``)."""

    forward = _integer_division(xp.remainder, "remainder")

    @staticmethod
    def vjp(g, out, a, b):
        gb = -g * (a / b).floor() if needs_grad(b) else None
        return g, gb

    @staticmethod
    def jvp(dots, out, a, b):
        da, db = dots
        return _plus(da, -db * (a / b).floor() if db is not None else None)

    taylor = classmethod(ts.linear_taylor)  # a - floor(a / b) b: linear between jumps


class Fmod(Elementwise):
    """C's fmod: the result takes the dividend's sign."""

    forward = _integer_division(xp.fmod)

    @staticmethod
    def vjp(g, out, a, b):
        gb = -g * (a / b).trunc() if needs_grad(b) else None
        return g, gb

    @staticmethod
    def jvp(dots, out, a, b):
        da, db = dots
        return _plus(da, -db * (a / b).trunc() if db is not None else None)

    taylor = classmethod(ts.linear_taylor)


class Pow(Elementwise):
    """``a ** b`` for tensor or scalar base and exponent."""

    holomorphic = True
    saves_output = True

    @staticmethod
    def forward(a, b):
        if type(b) is xp.ndarray and b.dtype.kind in "iu" and xp.result_type(a, b).kind in "iu":
            return _integer_power(a, b)  # (a Python int base stays weakly typed)
        out = xp.power(a, b)
        if xp.result_type(a, b) == xp.bool_:  # NumPy has no bool loop (int8); PyTorch keeps bool
            return out.astype(xp.bool_)
        return out

    @staticmethod
    def vjp(g, out, a, b):
        ga = gb = None
        if needs_grad(a):
            if isinstance(b, Value):
                ga = where(b == 0, 0.0, g * b * a ** _minus_one(b))
            elif b == 0:
                ga = g * 0
            else:
                ga = g * b * a ** (b - 1)
        if needs_grad(b):
            gb = g * out * _log_base(a, b)
        return ga, gb

    @staticmethod
    def jvp(dots, out, a, b):
        da, db = dots
        ta = tb = None
        if da is not None:
            if isinstance(b, Value):
                ta = where(b == 0, 0.0, da * b * a ** _minus_one(b))
            else:
                ta = da * 0 if b == 0 else da * b * a ** (b - 1)
        if db is not None:
            tb = db * out * _log_base(a, b)
        return _plus(ta, tb)

    @staticmethod
    def taylor(series, out, a, b):
        k = ts.order_of(series)
        sa, sb = series
        if sb is None:  # a constant exponent
            if isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 4:
                # repeated products: exact at a_0 = 0, where the recurrence divides by it
                x = ts.full(a, sa, k)
                y, y0 = [None] * k, 1.0
                for _ in range(b):
                    y = ts.mul_series(ts.full(y0, y, k), x, k)
                    y0 = a * y0
                return y
            return ts.pow_series(ts.full(a, sa, k), out, b, k)
        # a ** b = exp(b log a), log a masked as the gradient's (0 at a zero base with
        # b >= 0, nan for a negative number as base)
        log_a = _log_base(a, b)
        logs = ts.log_series(ts.full(a, sa, k), log_a, k) if sa is not None else [None] * k
        z = ts.mul_series(ts.full(b, sb, k), ts.full(log_a, logs, k), k)
        y = ts.exp_series(ts.full(b * log_a, z, k), out, k)
        if sa is not None:
            # log_series divides by a_0: at a zero base y_1 is the jvp's (masked as the
            # gradient); higher terms are nan there, where t^b(t) has log t terms
            y[0] = Pow.jvp((sa[0], sb[0]), out, a, b)
        return y


def _t(d):
    """An absent tangent is zero; the scalar 0.0 broadcasts like any tensor would."""
    return 0.0 if d is None else d


def _plus(x, y):
    """Sum of tangent terms, where None is an absent (zero) term."""
    if x is None:
        return y
    if y is None:
        return x
    return x + y


def _minus_one(b):
    """b - 1, except 1 where b == 0: the exponent in d(a^b)/da = b a^(b-1), whose b == 0
    terms are masked to 0, so that 0^-1 is never computed (no inf, no warning)."""
    return where(b == 0, 1.0, b - 1)


def _log_base(a, b):
    """log a, the factor in d(a^b)/db = a^b log a, with PyTorch's mask: 0 (not nan) where
    a == 0 and b >= 0. Computed without log(0), so no inf enters the graph there; a
    Python base of 0 or below no longer fails in math.log."""
    if isinstance(a, Value):
        zero_base = (a == 0) & (b >= 0)
        return where(zero_base, 0.0, where(zero_base, 1.0, a).log())
    if a == 0:  # log 0 = -inf matters only where b < 0
        return where(b >= 0, 0.0, -math.inf)
    return math.log(a) if a > 0 else math.nan


class Neg(Elementwise):
    holomorphic = True
    saves_inputs = ()
    forward = staticmethod(xp.negative)

    @staticmethod
    def vjp(g, out, a):
        return (-g,)

    @staticmethod
    def jvp(dots, out, a):
        return -dots[0]

    taylor = classmethod(ts.linear_taylor)


class Maximum(Elementwise):
    forward = staticmethod(xp.maximum)

    @staticmethod
    def vjp(g, out, a, b):
        # ties share the gradient equally, as in PyTorch
        half = g * 0.5
        ga = where(a > b, g, where(a == b, half, 0.0)) if needs_grad(a) else None
        gb = where(b > a, g, where(a == b, half, 0.0)) if needs_grad(b) else None
        return ga, gb

    @staticmethod
    def jvp(dots, out, a, b):
        da, db = _t(dots[0]), _t(dots[1])
        return where(a > b, da, where(a == b, (da + db) * 0.5, db))

    taylor = classmethod(ts.linear_taylor)  # the larger input's jet; ties average (JAX)


class Minimum(Elementwise):
    forward = staticmethod(xp.minimum)

    @staticmethod
    def vjp(g, out, a, b):
        half = g * 0.5
        ga = where(a < b, g, where(a == b, half, 0.0)) if needs_grad(a) else None
        gb = where(b < a, g, where(a == b, half, 0.0)) if needs_grad(b) else None
        return ga, gb

    @staticmethod
    def jvp(dots, out, a, b):
        da, db = _t(dots[0]), _t(dots[1])
        return where(a < b, da, where(a == b, (da + db) * 0.5, db))

    taylor = classmethod(ts.linear_taylor)


class Atan2(Elementwise):
    forward = staticmethod(xp.arctan2)

    @staticmethod
    def vjp(g, out, a, b):
        denom = a * a + b * b
        return ((g * b / denom) if needs_grad(a) else None,
                (-g * a / denom) if needs_grad(b) else None)

    @staticmethod
    def jvp(dots, out, a, b):
        da, db = dots
        denom = a * a + b * b
        return _plus(da * b / denom if da is not None else None,
                     -db * a / denom if db is not None else None)

    @staticmethod
    def taylor(series, out, a, b):
        # z' = (b a' - a b') / (a^2 + b^2): the numerator's and the denominator's series
        # by Leibniz, their quotient by the division rule, then z_k = q_{k-1} / k. It
        # divides by a_0^2 + b_0^2 only (JAX's rule divides by b_0, through atan(a / b))
        order = ts.order_of(series)
        fa, fb = (ts.full(x, s, order) for x, s in zip((a, b), series, strict=True))

        def rate(f):  # the series of dx/dt: (j + 1) x_{j+1} at t^j
            return [None if f[j + 1] is None else f[j + 1] * float(j + 1)
                    for j in range(order)]
        da, db = rate(fa), rate(fb)
        num = [ts.plus(ts.cauchy(fb, da, m), None if (c := ts.cauchy(fa, db, m)) is None
                       else -c) for m in range(order)]
        den = [a * a + b * b] + ts.mul_series(fa, fa, order - 1)
        den = [den[0]] + [ts.plus(t, u) for t, u in zip(
            den[1:], ts.mul_series(fb, fb, order - 1), strict=True)]
        q0 = None if num[0] is None else num[0] / den[0]
        q = [q0] + (ts.div_series(num, den, q0, order - 1) if q0 is not None or any(
            t is not None for t in num) else [None] * (order - 1))
        return [None if t is None else t / float(k) for k, t in enumerate(q, start=1)]


def add(input, other, *, alpha=1):
    if type(other) in SEQUENCES:
        raise sequence_operand("add", input, other)
    # dispatch directly (not Add.apply): the functional form is as cheap as ``+``
    return dispatch(Add, (input, other if alpha == 1 else other * alpha), NO_PARAMS)


def sub(input, other, *, alpha=1):
    if type(other) in SEQUENCES:
        raise sequence_operand("sub", input, other)
    return dispatch(Sub, (input, other if alpha == 1 else other * alpha), NO_PARAMS)


def rsub(input, other, *, alpha=1):
    return sub(other, input, alpha=alpha)


def mul(input, other):
    if type(other) in SEQUENCES:
        raise sequence_operand("mul", input, other)
    return dispatch(Mul, (input, other), NO_PARAMS)


def _integer_power(a, b):
    """Integers to a tensor of integer powers, as PyTorch computes them: a negative power
    gives 1 for a base of 1, +-1 for -1 (by parity), and 0 for any other base. (NumPy
    refuses negative powers; PyTorch refuses only a negative Python number as power.)"""
    negative = b < 0
    if not negative.any():
        return xp.power(a, b)
    out = xp.power(a, xp.where(negative, 0, b))
    at_negative = xp.where(a == 1, 1, xp.where(a == -1, xp.where(b % 2 == 0, 1, -1), 0))
    return xp.where(negative, at_negative, out).astype(out.dtype)


def div(input, other, *, rounding_mode: str | None = None):
    if type(other) in SEQUENCES:
        raise sequence_operand("div", input, other)
    if rounding_mode is None:
        return dispatch(Div, (input, other), NO_PARAMS)
    if rounding_mode not in ("floor", "trunc"):
        raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                         f"but found '{rounding_mode}'")
    return Div.apply(input, other, rounding_mode=rounding_mode)


def floor_divide(input, other):
    if type(other) in SEQUENCES:
        raise sequence_operand("floor_divide", input, other)
    return FloorDivide.apply(input, other)


def remainder(input, other):
    if type(other) in SEQUENCES:
        raise sequence_operand("remainder", input, other)
    return Remainder.apply(input, other)


def fmod(input, other):
    if type(other) in SEQUENCES:
        raise sequence_operand("fmod", input, other)
    return Fmod.apply(input, other)


def pow(input, exponent):
    if type(exponent) in SEQUENCES:
        raise sequence_operand("pow", input, exponent)
    return Pow.apply(input, exponent)


def neg(input):
    return Neg.apply(input)


def maximum(input, other):
    if type(other) in SEQUENCES:
        raise sequence_operand("maximum", input, other)
    return Maximum.apply(input, other)


def minimum(input, other):
    if type(other) in SEQUENCES:
        raise sequence_operand("minimum", input, other)
    return Minimum.apply(input, other)


def atan2(input, other):
    if type(other) in SEQUENCES:
        raise sequence_operand("atan2", input, other)
    return Atan2.apply(input, other)


true_divide = divide = div
subtract = sub
multiply = mul
negative = neg
