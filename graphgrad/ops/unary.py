"""Layer ``ops``: elementwise math of one tensor (exp, log, trig, activations, rounding,
clamp)."""

from __future__ import annotations

import math

from graphgrad.backend import result_type, xp

from .arithmetic import Mul
from .compare import Gt
from .elementwise import Diagonal
from . import taylor as ts
# the copying ops and the special functions live in their own files; their names stay
# importable from here, where they were first defined
from .copies import Cast, Clone, Detach, cast, clone, detach  # noqa: F401
from .special import Erf, Softplus, erf, softplus, special_erf  # noqa: F401

__all__ = ["exp", "log", "log1p", "expm1", "log2", "log10", "sin", "cos", "tan", "tanh",
           "sinh", "cosh", "asin", "acos", "atan", "sigmoid", "relu", "softplus",
           "abs", "sign", "sqrt", "rsqrt", "reciprocal", "erf", "clamp", "clip", "floor",
           "ceil", "round", "trunc", "cast", "clone", "square", "silu", "arcsin", "arccos",
           "arctan", "absolute", "special_erf", "detach", "asinh", "acosh", "atanh", "arcsinh",
           "arccosh", "arctanh", "exp2"]

_LN2 = math.log(2.0)


class _Unary(Diagonal):
    saves_inputs = True


class _FromOutput(Diagonal):
    """Unary ops whose derivative is a function of the output (as PyTorch saves it)."""

    saves_inputs = ()
    saves_output = True


class Exp(_FromOutput):
    holomorphic = True
    forward = staticmethod(xp.exp)

    @staticmethod
    def vjp(g, out, a):
        return (g * out,)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)
        return ts.exp_series(ts.full(a, series[0], k), out, k)


class Expm1(_FromOutput):
    holomorphic = True
    forward = staticmethod(xp.expm1)

    @staticmethod
    def vjp(g, out, a):
        return (g * (out + 1),)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)  # y' = (y + 1) x'
        x, y, g = ts.full(a, series[0], k), [out], [out + 1]
        for i in range(1, k + 1):
            y.append(ts.ode_term(x, g, i))
            g.append(y[i])
        return y[1:]


class Log(_Unary):
    holomorphic = True
    forward = staticmethod(xp.log)

    @staticmethod
    def vjp(g, out, a):
        return (g / a,)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)
        return ts.log_series(ts.full(a, series[0], k), out, k)


class Log1p(_Unary):
    holomorphic = True
    forward = staticmethod(xp.log1p)

    @staticmethod
    def vjp(g, out, a):
        return (g / (a + 1),)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)
        return ts.log_series(ts.full(a + 1, series[0], k), out, k)


class Log2(_Unary):
    holomorphic = True
    forward = staticmethod(xp.log2)

    @staticmethod
    def vjp(g, out, a):
        return (g / (a * math.log(2.0)),)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)  # log(x) / log 2
        return ts.scale_series(ts.log_series(ts.full(a, series[0], k), out * _LN2, k),
                               1 / _LN2)


class Log10(_Unary):
    holomorphic = True
    forward = staticmethod(xp.log10)

    @staticmethod
    def vjp(g, out, a):
        return (g / (a * math.log(10.0)),)

    @staticmethod
    def taylor(series, out, a):
        k, ln10 = ts.order_of(series), math.log(10.0)
        return ts.scale_series(ts.log_series(ts.full(a, series[0], k), out * ln10, k),
                               1 / ln10)


class Sin(_Unary):
    holomorphic = True
    forward = staticmethod(xp.sin)

    @staticmethod
    def vjp(g, out, a):
        return (g * a.cos(),)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)
        return ts.sin_cos_series(ts.full(a, series[0], k), out, a.cos(), k)[0]


class Cos(_Unary):
    holomorphic = True
    forward = staticmethod(xp.cos)

    @staticmethod
    def vjp(g, out, a):
        return (-g * a.sin(),)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)
        return ts.sin_cos_series(ts.full(a, series[0], k), a.sin(), out, k)[1]


class Tan(_FromOutput):
    holomorphic = True
    forward = staticmethod(xp.tan)

    @staticmethod
    def vjp(g, out, a):
        return (g * (out * out + 1),)

    @staticmethod
    def taylor(series, out, a):
        # y' = w x' with w = 1 + y^2 carried alongside
        k = ts.order_of(series)
        x, y, w = ts.full(a, series[0], k), [out], [out * out + 1]
        for i in range(1, k + 1):
            y.append(ts.ode_term(x, w, i))
            if i < k:
                w.append(ts.square_cauchy(y, i))
        return y[1:]


class Tanh(_FromOutput):
    holomorphic = True
    forward = staticmethod(xp.tanh)

    @staticmethod
    def vjp(g, out, a):
        return (g * (1 - out * out),)

    @staticmethod
    def taylor(series, out, a):
        # the ODE y' = w x' with w = 1 - y^2 carried alongside: no division
        k = ts.order_of(series)
        x, y, w = ts.full(a, series[0], k), [out], [1 - out * out]
        for i in range(1, k + 1):
            y.append(ts.ode_term(x, w, i))
            if i < k:  # y_K needs w up to K-1
                w.append(ts.square_cauchy(y, i, -1.0))
        return y[1:]


class Sinh(_Unary):
    holomorphic = True
    forward = staticmethod(xp.sinh)

    @staticmethod
    def vjp(g, out, a):
        return (g * a.cosh(),)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)
        return ts.sin_cos_series(ts.full(a, series[0], k), out, a.cosh(), k, 1.0)[0]


class Cosh(_Unary):
    holomorphic = True
    forward = staticmethod(xp.cosh)

    @staticmethod
    def vjp(g, out, a):
        return (g * a.sinh(),)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)
        return ts.sin_cos_series(ts.full(a, series[0], k), a.sinh(), out, k, 1.0)[1]


class Asin(_Unary):
    holomorphic = True
    forward = staticmethod(xp.arcsin)

    @staticmethod
    def vjp(g, out, a):
        return (g * (1 - a * a).rsqrt(),)

    @staticmethod
    def taylor(series, out, a):
        return _inverse_rule(series, a, 1.0, -1.0, -0.5)  # y' = (1 - x^2)^(-1/2) x'


class Acos(_Unary):
    holomorphic = True
    forward = staticmethod(xp.arccos)

    @staticmethod
    def vjp(g, out, a):
        return (-g * (1 - a * a).rsqrt(),)

    @staticmethod
    def taylor(series, out, a):
        return ts.scale_series(_inverse_rule(series, a, 1.0, -1.0, -0.5), -1.0)


class Atan(_Unary):
    holomorphic = True
    forward = staticmethod(xp.arctan)

    @staticmethod
    def vjp(g, out, a):
        return (g / (a * a + 1),)

    @staticmethod
    def taylor(series, out, a):
        return _inverse_rule(series, a, 1.0, 1.0, -1.0)  # y' = x' / (1 + x^2)


class Asinh(_Unary):
    holomorphic = True
    forward = staticmethod(xp.arcsinh)

    @staticmethod
    def vjp(g, out, a):
        return (g * (a * a + 1).rsqrt(),)

    @staticmethod
    def taylor(series, out, a):
        return _inverse_rule(series, a, 1.0, 1.0, -0.5)


class Acosh(_Unary):
    holomorphic = True
    forward = staticmethod(xp.arccosh)

    @staticmethod
    def vjp(g, out, a):
        return (g * (a * a - 1).rsqrt(),)

    @staticmethod
    def taylor(series, out, a):
        return _inverse_rule(series, a, -1.0, 1.0, -0.5)


class Atanh(_Unary):
    holomorphic = True
    forward = staticmethod(xp.arctanh)

    @staticmethod
    def vjp(g, out, a):
        return (g / (1 - a * a),)

    @staticmethod
    def taylor(series, out, a):
        return _inverse_rule(series, a, 1.0, -1.0, -1.0)


class Exp2(_FromOutput):
    holomorphic = True
    forward = staticmethod(xp.exp2)

    @staticmethod
    def vjp(g, out, a):
        return (g * out * _LN2,)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)  # exp(x log 2)
        return ts.exp_series(ts.full(a * _LN2, ts.scale_series(series[0], _LN2), k), out, k)


class Sigmoid(_FromOutput):
    holomorphic = True

    @staticmethod
    def forward(a):
        kind = a.dtype.kind
        if kind == "c":  # the analytic continuation, for the complex step
            return 1 / (1 + xp.exp(-a))
        if kind != "f" or a.dtype.itemsize < 4:
            # bool and integers in float64 (dispatch rounds to the default dtype); float16
            # in float32, as PyTorch computes it (float16 steps lose digits)
            return Sigmoid.forward(a.astype(xp.float64 if kind != "f" else xp.float32)) \
                .astype(a.dtype if kind == "f" else xp.float64)
        # one buffer, in place; exp(-a) may overflow to inf, and 1 / (1 + inf) is the
        # right 0 (the warning is silenced, not the value)
        e = xp.negative(a, out=xp.empty_like(a))  # (an array even for 0-d input)
        with xp.errstate(over="ignore"):
            xp.exp(e, out=e)
        e += 1
        return xp.reciprocal(e, out=e)

    @staticmethod
    def vjp(g, out, a):
        return (g * out * (1 - out),)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)
        return ts.sigmoid_series(ts.full(a, series[0], k), out, k)


def _inverse_rule(series, a, c0: float, c2: float, power: float) -> list:
    """The rule of an inverse trig/hyperbolic function, y' = (c0 + c2 x^2)^power x':
    the jet of c0 + c2 x^2, then of its power, then the general pattern."""
    k = ts.order_of(series)
    x = ts.full(a, series[0], k)
    u = ts.quadratic_series(x, c0, c2, k)
    g0 = u[0] ** power
    return ts.by_derivative(x, [g0, *ts.pow_series(u, g0, power, k)], k)


def relu_array(a, out=None):
    """``max(a, 0)`` (into ``out`` if given) against a row of zeros: NumPy's maximum with
    a scalar runs a loop without SIMD, ~3x slower than against a zero row broadcast
    (same values, NaN and -0.0 included)."""
    return xp.maximum(a, xp.zeros(a.shape[-1:], a.dtype), out=out)


class Relu(_FromOutput):
    promotes = False

    @staticmethod
    def forward(a):
        if a.dtype.kind == "b":
            raise RuntimeError("Boolean inputs not supported for relu")
        return relu_array(a)

    @staticmethod
    def vjp(g, out, a):
        return (Mul.apply(g, Gt.apply(out, 0)),)  # not the methods: a training step's hot path

    # x_k where x_0 > 0, else 0 (at the kink 0, as the vjp; JAX averages to x_k / 2)
    taylor = classmethod(ts.linear_taylor)


class Abs(_Unary):
    promotes = False
    @staticmethod
    def forward(a):
        if a.dtype.kind == "b":
            raise NotImplementedError('"abs_cpu" not implemented for \'Bool\'')
        return xp.abs(a)

    @staticmethod
    def vjp(g, out, a):
        return (g * a.sign(),)

    taylor = classmethod(ts.linear_taylor)  # sign(x_0) x_k; 0 at x_0 = 0 (JAX: +x_k)


class _ZeroGrad(_Unary):
    """Piecewise-constant ops: differentiable with derivative zero, as in PyTorch."""

    saves_inputs = ()
    promotes = False

    @staticmethod
    def vjp(g, out, a, **params):
        return (g * 0,)

    taylor = classmethod(ts.zero_taylor)


class Sign(_ZeroGrad):
    @staticmethod
    def forward(a):
        return a.copy() if a.dtype == xp.bool_ else xp.sign(a)  # NumPy has no bool loop


def _rounding(fn, name: str):
    """A rounding op's forward: PyTorch has no bool kernel for it (NumPy keeps the bools,
    or makes float16 of them)."""
    def forward(a, **params):
        if a.dtype == xp.bool_:
            raise NotImplementedError(f'"{name}_vml_cpu" not implemented for \'Bool\'')
        return fn(a, **params)
    return staticmethod(forward)


class Floor(_ZeroGrad):
    forward = _rounding(xp.floor, "floor")


class Ceil(_ZeroGrad):
    forward = _rounding(xp.ceil, "ceil")


class Trunc(_ZeroGrad):
    forward = _rounding(xp.trunc, "trunc")


class Round(_ZeroGrad):
    forward = _rounding(lambda a, *, decimals=0: xp.round(a, decimals), "round")


class Sqrt(_FromOutput):
    holomorphic = True
    forward = staticmethod(xp.sqrt)

    @staticmethod
    def vjp(g, out, a):
        return (g / (2 * out),)

    @staticmethod
    def taylor(series, out, a):
        # y_k = (x_k - sum_{j=1..k-1} y_j y_{k-j}) / (2 y_0)
        k = ts.order_of(series)
        x, y = ts.full(a, series[0], k), [out]
        for i in range(1, k + 1):
            inner = ts.cauchy(y, y, i, 1, i - 1)
            num = x[i] if inner is None else (-inner if x[i] is None else x[i] - inner)
            y.append(None if num is None else num / (2 * out))
        return y[1:]


class Rsqrt(_FromOutput):
    holomorphic = True

    @staticmethod
    def forward(a):
        return 1 / xp.sqrt(a)

    @staticmethod
    def vjp(g, out, a):
        return (-0.5 * g * out * out * out,)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)
        return ts.pow_series(ts.full(a, series[0], k), out, -0.5, k)


class Reciprocal(_FromOutput):
    holomorphic = True

    @staticmethod
    def forward(a):
        return 1 / a

    @staticmethod
    def vjp(g, out, a):
        return (-g * out * out,)

    @staticmethod
    def taylor(series, out, a):
        k = ts.order_of(series)
        return ts.div_series([1.0] + [None] * k, ts.full(a, series[0], k), out, k)


class Clamp(_Unary):
    """Clamp to ``[min, max]`` (scalar bounds; tensor bounds go through maximum/minimum)."""

    promotes = False

    @staticmethod
    def forward(a, *, min=None, max=None):
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        # PyTorch's promotion of the tensor with both bounds (an int tensor clamped to
        # 2.5 is float32), then the clip in that dtype
        want = result_type(a, *(b for b in (min, max) if b is not None))
        return xp.clip(a if a.dtype == want else a.astype(want), min, max)

    @staticmethod
    def vjp(g, out, a, *, min=None, max=None):
        mask = None
        if min is not None:
            mask = a >= min
        if max is not None:
            upper = a <= max
            mask = upper if mask is None else mask & upper
        return (g * mask,)

    taylor = classmethod(ts.linear_taylor)  # x_k inside and on a bound (the vjp), else 0


def _unary(op, name):
    def fn(input):
        return op.apply(input)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}`` (op ``{op.__name__}``)."
    return fn


exp = _unary(Exp, "exp")
expm1 = _unary(Expm1, "expm1")
log = _unary(Log, "log")
log1p = _unary(Log1p, "log1p")
log2 = _unary(Log2, "log2")
log10 = _unary(Log10, "log10")
sin = _unary(Sin, "sin")
cos = _unary(Cos, "cos")
tan = _unary(Tan, "tan")
tanh = _unary(Tanh, "tanh")
sinh = _unary(Sinh, "sinh")
cosh = _unary(Cosh, "cosh")
asin = arcsin = _unary(Asin, "asin")
acos = arccos = _unary(Acos, "acos")
atan = arctan = _unary(Atan, "atan")
asinh = arcsinh = _unary(Asinh, "asinh")
acosh = arccosh = _unary(Acosh, "acosh")
atanh = arctanh = _unary(Atanh, "atanh")
exp2 = _unary(Exp2, "exp2")
sigmoid = _unary(Sigmoid, "sigmoid")
relu = _unary(Relu, "relu")
abs = absolute = _unary(Abs, "abs")
sign = _unary(Sign, "sign")
floor = _unary(Floor, "floor")
ceil = _unary(Ceil, "ceil")
trunc = _unary(Trunc, "trunc")
sqrt = _unary(Sqrt, "sqrt")
rsqrt = _unary(Rsqrt, "rsqrt")
reciprocal = _unary(Reciprocal, "reciprocal")


def round(input, *, decimals: int = 0):
    return Round.apply(input, decimals=decimals) if decimals else Round.apply(input)


def silu(input):
    """``x * sigmoid(x)``."""
    return input * sigmoid(input)


def square(input):
    if input._array.dtype == xp.bool_:  # PyTorch squares as pow(input, 2): int64 for bools
        input = cast(input, "int64")
    return input * input


def clamp(input, min=None, max=None):
    """Clamp to ``[min, max]``; bounds may be numbers or tensors."""
    from graphgrad.tensor import Value
    from graphgrad.tensor.creation import invalid_arguments, is_number
    if not all(b is None or isinstance(b, Value) or is_number(b) for b in (min, max)):
        raise invalid_arguments("clamp", (min, max), ("Tensor min = None, Tensor max = None",
                                                      "Number min = None, Number max = None"))
    if isinstance(min, Value) or isinstance(max, Value):
        from .arithmetic import maximum, minimum
        out = input
        if min is not None:
            out = maximum(out, min)
        if max is not None:
            out = minimum(out, max)
        return out
    return Clamp.apply(input, min=min, max=max)


clip = clamp
