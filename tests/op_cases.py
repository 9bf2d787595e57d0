"""The op-level test table: one or more cases per registered op, and the user-level
composites built from them (var/std, max(dim), split, losses...).

A case is written once against a namespace ``m`` (``graphgrad`` or ``torch``; both have
``m.nn.functional``) and binds it twice, giving a graphgrad callable and the equivalent
torch callable; ``torch_fn`` overrides the torch side where the spellings differ.
``inputs`` is a hypothesis strategy of ``Example``s: the arrays (float64, int64 or bool;
float arrays are the differentiable inputs unless listed in ``nograd``) and the static
arguments (dims, index specs, flags) passed to both callables as keywords. Value domains
keep examples away from kinks and poles (positive inputs for log, no ties for max...) so
that the derivative exists and finite differences see a smooth function.

``ops`` names the ``graphgrad.ops.REGISTRY`` entries a case is meant to cover: a test
fails when a registered op has no case, and another checks that each case really
dispatches the ops it names. Used by ``test_ops_oracle.py`` (PyTorch as the oracle) and
``test_finite_differences.py`` (float64 finite differences).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import graphgrad as gg
from graphgrad.ops.convolution import ConvolutionBackwardWeight
from graphgrad.ops.cumulative import CumprodBackward
from graphgrad.ops.bce import BinaryCrossEntropy
from graphgrad.ops.cross_entropy import CrossEntropy, CrossEntropyBackward
from graphgrad.ops.nll import NllLoss, NllLossBackward
from graphgrad.ops import REGISTRY
from graphgrad.ops.pooling import AvgPoolBackward, PutPlanes

__all__ = ["Case", "CASES", "Example"]


class Example(NamedTuple):
    arrays: tuple           # NumPy arrays, the tensor inputs in order
    static: dict            # keyword arguments given to both callables
    nograd: frozenset = frozenset()  # positions of float arrays that get no gradient


@dataclass(frozen=True, repr=False)
class Case:
    name: str
    ops: tuple[str, ...]    # the REGISTRY entries this case is meant to exercise
    gg_fn: Callable         # gg_fn(*tensors, **static) -> tensor or tuple of tensors
    torch_fn: Callable      # the same on torch tensors
    inputs: Any             # hypothesis strategy of Example
    grad: bool = True       # differentiable: check first derivatives
    grad2: bool = True      # check second derivatives as well
    torch_grad: bool = True  # False: PyTorch cannot differentiate it; finite differences do
    fd: bool = True         # run the finite-difference test (False at ties and kinks)
    fd_eps: float = 1e-6
    float32: bool = True    # run the float32 dtype test
    rtol: float = 1e-9
    atol: float = 1e-11
    xfail: str = ""         # a known bug in a file this suite does not own: the reason

    def __repr__(self) -> str:  # hypothesis prints it in every failing example
        return f"<case {self.name}>"


def case(name, ops, fn, inputs, *, torch_fn=None, **kw) -> Case:
    """A case from one function of the namespace: ``fn(m, *tensors, **static)``."""
    def gg_side(*xs, **s):
        return fn(gg, *xs, **s)

    def torch_side(*xs, **s):
        return (torch_fn or fn)(torch, *xs, **s)
    ops = (ops,) if isinstance(ops, str) else tuple(ops)
    return Case(name, ops, gg_side, torch_side, inputs, **kw)


# ---- value domains: rng, shape -> float64 array ---------------------------------------

def normal(rng, shape):
    return rng.standard_normal(shape)


def uniform(lo, hi):
    return lambda rng, shape: rng.uniform(lo, hi, shape)


positive = uniform(0.5, 2.0)
unit = uniform(-0.9, 0.9)


def away(gap=0.2, hi=2.0):
    """|x| in [gap, hi] with a random sign: away from a kink at 0."""
    def make(rng, shape):
        return rng.uniform(gap, hi, shape) * rng.choice([-1.0, 1.0], shape)
    return make


def avoiding(points, gap=0.1, lo=-2.0, hi=2.0):
    """Uniform in [lo, hi], pushed at least ``gap`` away from each of ``points``."""
    def make(rng, shape):
        x = rng.uniform(lo, hi, shape)
        for p in points:
            near = np.abs(x - p) < gap
            x = np.where(near, p + np.where(x >= p, 1.0, -1.0) * gap * (1 + rng.random(shape)),
                         x)
        return x
    return make


def off_integers(lo=-3, hi=3, margin=0.1):
    """n + f with f in [margin, 1 - margin]: floor, ceil, trunc are flat there."""
    def make(rng, shape):
        return rng.integers(lo, hi, shape) + rng.uniform(margin, 1 - margin, shape)
    return make


def near_integers(lo=-3, hi=3, margin=0.1):
    """n + f with |f| <= 0.5 - margin: round is flat there."""
    def make(rng, shape):
        return rng.integers(lo, hi, shape) + rng.uniform(-0.5 + margin, 0.5 - margin, shape)
    return make


def distinct(rng, shape):
    """Values of random sign whose magnitudes differ pairwise by >= 0.02 and are >= 0.04
    (at most about 3.3): no ties in max/min/argmax or in |x| for the inf-norm, no zeros."""
    n = math.prod(shape)
    mags = (rng.permutation(n) + 1 + rng.uniform(-0.2, 0.2, n)) * 0.4
    return (mags * rng.choice([-1.0, 1.0], n)).reshape(shape) / max(1.0, n / 8)


def integral(lo=-2, hi=3):
    """Small integers as floats: comparisons and max/min then see ties."""
    return lambda rng, shape: rng.integers(lo, hi, shape).astype(np.float64)


def with_zeros(rng, shape):
    """Normal values with some exact zeros (prod's special cases)."""
    x = rng.standard_normal(shape)
    return np.where(rng.random(shape) < 0.3, 0.0, x)


def low_zero(rng, shape):
    """Uniform in (0.5, 2) with some exact zeros: the base of pow at 0."""
    return np.where(rng.random(shape) < 0.3, 0.0, rng.uniform(0.5, 2.0, shape))


def ints(lo=-4, hi=5):
    return lambda rng, shape: rng.integers(lo, hi, shape)


def bools(rng, shape):
    return rng.random(shape) < 0.5


def special(rng, shape):
    """Floats with nan, inf and -inf among them."""
    x = rng.standard_normal(shape)
    pick = rng.integers(0, 5, shape)
    return np.select([pick == 0, pick == 1, pick == 2], [np.nan, np.inf, -np.inf], x)


# ---- example strategies -----------------------------------------------------------------

SEEDS = st.integers(0, 2**32 - 1)


def shapes(min_dims=0, max_dims=3, min_side=1, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


@st.composite
def elementwise(draw, *domains, min_dims=0, max_dims=3, static=None):
    """Arrays of mutually broadcastable shapes (size-1 dims and 0-d included)."""
    if len(domains) == 1:
        shape_list = [draw(shapes(min_dims, max_dims))]
    else:
        shape_list = draw(hnp.mutually_broadcastable_shapes(
            num_shapes=len(domains), min_dims=min_dims, max_dims=max_dims, min_side=1,
            max_side=4)).input_shapes
    rng = np.random.default_rng(draw(SEEDS))
    arrays = tuple(d(rng, s) for d, s in zip(domains, shape_list, strict=True))
    return Example(arrays, dict(draw(static)) if static is not None else {})


@st.composite
def dims_of(draw, ndim, tuples=True, none=True):
    """A ``dim`` argument for a tensor of rank ``ndim``: None, an int or a tuple (negative
    dims included)."""
    kinds = ["int"] + (["none"] if none else []) + (["tuple"] if tuples and ndim > 1 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return None
    if ndim == 0:
        return draw(st.sampled_from([0, -1]))
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    picked = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    return tuple(d - ndim if draw(st.booleans()) else d for d in picked)


@st.composite
def reduction(draw, domain=normal, tuples=True, none=True, keepdim=True, min_dims=0,
              extra=None):
    """One array with a ``dim`` (and ``keepdim``) to reduce over."""
    shape = draw(shapes(min_dims=min_dims))
    static = {"dim": draw(dims_of(len(shape), tuples=tuples, none=none))}
    if keepdim:
        static["keepdim"] = draw(st.booleans())
    if extra is not None:
        static.update(draw(extra))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((domain(rng, shape),), static)


@st.composite
def one_dim(draw, domain=normal, min_dims=1, max_dims=3, extra=None):
    """One array with one int ``dim`` (softmax, cumsum, unbind...)."""
    shape = draw(shapes(min_dims=min_dims, max_dims=max_dims))
    nd = max(len(shape), 1)
    static = {"dim": draw(st.integers(-nd, nd - 1))}
    if extra is not None:
        static.update(draw(extra))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((domain(rng, shape),), static)


def fixed(*made, static=None, nograd=()):
    """Arrays of fixed shapes: ``made`` are (domain, shape) pairs."""
    @st.composite
    def strategy(draw):
        rng = np.random.default_rng(draw(SEEDS))
        arrays = tuple(d(rng, s) for d, s in made)
        return Example(arrays, dict(static or {}), frozenset(nograd))
    return strategy()


def sts(**strategies):
    """A strategy of dicts of static arguments."""
    return st.fixed_dictionaries(strategies)


# ---- the table -------------------------------------------------------------------------

CASES: list[Case] = []


def add(*cases: Case) -> None:
    CASES.extend(cases)


def _binary_float(name, op, fn, da=normal, db=normal, **kw):
    return case(name, op, fn, elementwise(da, db), **kw)


# arithmetic ----------------------------------------------------------------------------

add(
    _binary_float("add", "Add", lambda m, a, b: a + b),
    case("add_alpha", ("Add", "Mul"), lambda m, a, b: m.add(a, b, alpha=2.5),
         elementwise(normal, normal)),
    case("add_scalar", "Add", lambda m, a: 1.5 + a, elementwise(normal)),
    _binary_float("sub", "Sub", lambda m, a, b: a - b),
    case("sub_alpha", ("Sub", "Mul"), lambda m, a, b: m.sub(a, b, alpha=0.5),
         elementwise(normal, normal)),
    case("rsub_scalar", "Sub", lambda m, a: 2.0 - a, elementwise(normal)),
    _binary_float("mul", "Mul", lambda m, a, b: a * b),
    case("mul_scalar", "Mul", lambda m, a: a * 3.0, elementwise(normal)),
    _binary_float("div", "Div", lambda m, a, b: a / b, db=away(0.5)),
    case("rdiv_scalar", "Div", lambda m, a: 2.0 / a, elementwise(away(0.5))),
    # rounding division is piecewise constant: zero gradient (PyTorch's too)
    case("div_floor", "Div", lambda m, a, b: m.div(a, b, rounding_mode="floor"),
         elementwise(off_integers(), uniform(1.0, 1.0))),
    case("div_trunc", "Div", lambda m, a, b: m.div(a, b, rounding_mode="trunc"),
         elementwise(off_integers(), uniform(1.0, 1.0))),
    case("div_int", "Div", lambda m, a, b: a / b, elementwise(ints(), ints(1, 5)), grad=False),
    case("floor_divide", "FloorDivide", lambda m, a, b: m.floor_divide(a, b),
         elementwise(normal, away(0.5)), grad=False),
    case("floor_divide_int", "FloorDivide", lambda m, a, b: a // b,
         elementwise(ints(), ints(1, 5)), grad=False),
    # a / b kept away from integers: the remainder jumps there
    case("remainder", "Remainder", lambda m, a, b: a % b,
         elementwise(off_integers(), uniform(1.0, 1.0))),
    # (a * b) / b is a, off the integers
    case("remainder_tensor", "Remainder", lambda m, a, b: m.remainder(a * b, b),
         elementwise(off_integers(), away(0.5))),
    case("fmod", "Fmod", lambda m, a, b: m.fmod(a, b),
         elementwise(off_integers(), uniform(1.0, 1.0))),
    case("fmod_tensor", "Fmod", lambda m, a, b: m.fmod(a * b, b),
         elementwise(off_integers(), away(0.5))),
    case("neg", "Neg", lambda m, a: -a, elementwise(normal)),
    case("neg_method", "Neg", lambda m, a: a.neg(), elementwise(normal)),
    _binary_float("pow", "Pow", lambda m, a, b: a ** b, da=positive),
    case("pow_int_exponent", "Pow", lambda m, a: a ** 3, elementwise(normal)),
    case("pow_float_exponent", "Pow", lambda m, a: a ** 2.5, elementwise(positive)),
    case("pow_negative_exponent", "Pow", lambda m, a: a ** -1.5, elementwise(positive)),
    case("pow_zero_exponent", "Pow", lambda m, a: m.pow(a, 0), elementwise(normal)),
    case("rpow", "Pow", lambda m, a: 2.0 ** a, elementwise(normal)),
    # a Python base of 0 or below: d/db is 0 (masked) or -inf at 0, nan below 0; at 0
    # PyTorch's second derivative is nan, graphgrad's the derivative of the mask, 0
    case("rpow_zero_base", "Pow", lambda m, b: 0.0 ** b, elementwise(integral(0, 3)),
         fd=False, grad2=False),
    case("rpow_negative_base", "Pow", lambda m, b: (-2.0) ** b, elementwise(integral(-2, 3)),
         fd=False),
    case("pow_method_tensor", "Pow", lambda m, a, b: a.pow(b), elementwise(positive, normal)),
    # a == 0: PyTorch masks d/db to 0 for b >= 0 (not nan), and b == 0 gives d/da = 0;
    # its own second derivative is nan there, so only first order is compared
    case("pow_zero_base", "Pow", lambda m, a, b: a ** b,
         elementwise(low_zero, integral(0, 4)), grad2=False, fd=False),
    _binary_float("maximum", "Maximum", lambda m, a, b: m.maximum(a, b),
                  da=off_integers(margin=0.2), db=integral()),
    _binary_float("minimum", "Minimum", lambda m, a, b: m.minimum(a, b),
                  da=off_integers(margin=0.2), db=integral()),
    # ties share the gradient equally, as in PyTorch
    case("maximum_ties", "Maximum", lambda m, a, b: m.maximum(a, b),
         elementwise(integral(), integral()), fd=False),
    case("minimum_ties", "Minimum", lambda m, a, b: m.minimum(a, b),
         elementwise(integral(), integral()), fd=False),
    case("max_binary", "Maximum", lambda m, a, b: m.max(a, b),
         elementwise(off_integers(margin=0.2), integral())),
    case("min_binary", "Minimum", lambda m, a, b: m.min(a, b),
         elementwise(off_integers(margin=0.2), integral())),
    case("atan2", "Atan2", lambda m, a, b: m.atan2(a, b), elementwise(away(0.3), away(0.3))),
)

# elementwise math of one tensor -------------------------------------------------------

_UNARY = [
    # name, op, domain
    ("exp", "Exp", uniform(-2, 2)),
    ("expm1", "Expm1", uniform(-2, 2)),
    ("log", "Log", positive),
    ("log1p", "Log1p", uniform(-0.5, 2)),
    ("log2", "Log2", positive),
    ("log10", "Log10", positive),
    ("sin", "Sin", normal),
    ("cos", "Cos", normal),
    ("tan", "Tan", uniform(-1.2, 1.2)),
    ("tanh", "Tanh", normal),
    ("sinh", "Sinh", uniform(-2, 2)),
    ("cosh", "Cosh", uniform(-2, 2)),
    ("asin", "Asin", unit),
    ("acos", "Acos", unit),
    ("atan", "Atan", normal),
    ("sigmoid", "Sigmoid", uniform(-4, 4)),
    ("relu", "Relu", away(0.1)),
    ("erf", "Erf", normal),
    ("abs", "Abs", away(0.1)),
    ("sign", "Sign", away(0.1)),
    ("floor", "Floor", off_integers()),
    ("ceil", "Ceil", off_integers()),
    ("trunc", "Trunc", off_integers()),
    ("round", "Round", near_integers()),
    ("sqrt", "Sqrt", positive),
    ("rsqrt", "Rsqrt", positive),
    ("reciprocal", "Reciprocal", away(0.5)),
    ("clone", "Clone", normal),
    ("asinh", "Asinh", normal),
    ("acosh", "Acosh", uniform(1.2, 3.0)),
    ("atanh", "Atanh", unit),
    ("exp2", "Exp2", uniform(-2, 2)),
]


def _method(name):
    return lambda m, a: getattr(a, name)()


def _function(name):
    return lambda m, a: getattr(m, name)(a)


@st.composite
def _bounded(draw, domain, *bound_domains):
    """An array and bounds whose shapes broadcast to the array's."""
    shape = draw(shapes())
    rng = np.random.default_rng(draw(SEEDS))
    arrays = [domain(rng, shape)]
    for d in bound_domains:
        k = draw(st.integers(0, len(shape)))
        bshape = tuple(1 if draw(st.booleans()) else s for s in shape[len(shape) - k:])
        arrays.append(d(rng, bshape))
    return Example(tuple(arrays), {})


for _name, _op, _dom in _UNARY:
    add(case(_name, _op, _function(_name), elementwise(_dom)),
        case(f"{_name}_method", _op, _method(_name), elementwise(_dom)))

def _gelu_backward(mode):
    """GeluBackward (the plain eager backward's kernel) against torch's vjp of gelu."""
    def fn(m, g, a):
        if m is gg:
            return REGISTRY["GeluBackward"].apply(g, a, approximate=mode)
        return m.func.vjp(lambda v: m.nn.functional.gelu(v, approximate=mode), a)[1](g)[0]
    return fn


add(
    case("abs_operator", "Abs", lambda m, a: abs(a), elementwise(away(0.1))),
    case("sqrt_int", "Sqrt", lambda m, a: m.sqrt(a), elementwise(ints(0, 9)), grad=False),
    case("exp_bool", "Exp", lambda m, a: m.exp(a), elementwise(bools), grad=False),
    case("round_decimals", "Round", lambda m, a: m.round(a, decimals=1),
         elementwise(lambda rng, s: near_integers()(rng, s) / 10)),
    case("gelu", "Gelu", lambda m, a: m.nn.functional.gelu(a), elementwise(normal)),
    case("gelu_tanh", "Gelu", lambda m, a: m.nn.functional.gelu(a, approximate="tanh"),
         elementwise(normal)),
    *(case(f"gelu_backward_{mode}", "GeluBackward", _gelu_backward(mode),
           fixed((normal, (3, 5)), (normal, (3, 5))), grad=False) for mode in ("none", "tanh")),
    case("softplus", "Softplus", lambda m, a: m.nn.functional.softplus(a),
         elementwise(uniform(-3, 3))),
    # beta * x crosses the threshold at x = 1.5: the linear branch is used past it
    case("softplus_beta_threshold", "Softplus",
         lambda m, a: m.nn.functional.softplus(a, beta=2.0, threshold=3.0),
         elementwise(avoiding([1.5], 0.1, -3, 3))),
    case("clamp", "Clamp", lambda m, a: m.clamp(a, -0.5, 0.7),
         elementwise(avoiding([-0.5, 0.7], 0.05))),
    case("clamp_min", "Clamp", lambda m, a: m.clamp(a, min=0.2),
         elementwise(avoiding([0.2], 0.05))),
    case("clamp_max_method", "Clamp", lambda m, a: a.clamp(max=-0.3),
         elementwise(avoiding([-0.3], 0.05))),
    case("clip", "Clamp", lambda m, a: m.clip(a, -1.0, 1.0),
         elementwise(avoiding([-1.0, 1.0], 0.05))),
    # bounds that broadcast to the input's shape: PyTorch's own backward fails when they
    # make the result larger than the input
    case("clamp_tensor_bounds", ("Maximum", "Minimum"), lambda m, a, lo, hi: m.clamp(a, lo, hi),
         _bounded(off_integers(margin=0.2), integral(-2, 0), integral(1, 3))),
    # linear up to float32 rounding: a long finite-difference step keeps that rounding small
    case("cast_float32", "Cast", lambda m, a: a.float(), elementwise(normal), rtol=1e-6,
         atol=1e-7, fd_eps=1.0),
    case("cast_to_float64", "Cast", lambda m, a: a.to(m.float64).to(m.float32).double(),
         elementwise(normal), rtol=1e-6, atol=1e-7, fd_eps=1.0),
    case("cast_int", "Cast", lambda m, a: a.long(), elementwise(uniform(-5, 5)), grad=False),
    case("cast_bool", "Cast", lambda m, a: a.to(m.bool), elementwise(integral()), grad=False),
    case("cast_int_to_float", "Cast", lambda m, a: a.to(m.float32), elementwise(ints()),
         grad=False),
    case("view_dtype", "ViewDtype", lambda m, a: a.view(m.int64), elementwise(normal),
         grad=False, float32=False),
    case("view_dtype_halves", "ViewDtype", lambda m, a: a.reshape(-1).view(m.int32),
         elementwise(normal), grad=False, float32=False),
    case("silu", "Mul", lambda m, a: m.nn.functional.silu(a), elementwise(normal)),
    case("square", "Mul", lambda m, a: m.square(a), elementwise(normal)),
    case("leaky_relu", "Where", lambda m, a: m.nn.functional.leaky_relu(a, 0.1),
         elementwise(away(0.1))),
    case("elu", ("Where", "Expm1", "Clamp"), lambda m, a: m.nn.functional.elu(a, 0.7),
         elementwise(away(0.1))),
    case("logsigmoid", ("Neg", "Softplus"), lambda m, a: m.nn.functional.logsigmoid(a),
         elementwise(uniform(-4, 4))),
)

# comparisons, logical and bitwise ops, where -------------------------------------------

_COMPARE = [("eq", "Eq", "__eq__"), ("ne", "Ne", "__ne__"), ("lt", "Lt", "__lt__"),
            ("le", "Le", "__le__"), ("gt", "Gt", "__gt__"), ("ge", "Ge", "__ge__")]

for _name, _op, _dunder in _COMPARE:
    add(case(_name, _op, (lambda n: lambda m, a, b: getattr(m, n)(a, b))(_name),
             elementwise(integral(), integral()), grad=False),
        case(f"{_name}_operator", _op, (lambda d: lambda m, a, b: getattr(a, d)(b))(_dunder),
             elementwise(ints(-2, 3), integral()), grad=False),
        case(f"{_name}_scalar", _op, (lambda d: lambda m, a: getattr(a, d)(0.0))(_dunder),
             elementwise(integral()), grad=False))

_LOGICAL = [("logical_and", "LogicalAnd", "__and__"), ("logical_or", "LogicalOr", "__or__"),
            ("logical_xor", "LogicalXor", "__xor__")]
_BITWISE = [("bitwise_and", "BitwiseAnd", "__and__"), ("bitwise_or", "BitwiseOr", "__or__"),
            ("bitwise_xor", "BitwiseXor", "__xor__")]

for _name, _op, _dunder in _LOGICAL:
    add(case(_name, _op, (lambda n: lambda m, a, b: getattr(m, n)(a, b))(_name),
             elementwise(bools, bools), grad=False),
        case(f"{_name}_operator", _op, (lambda d: lambda m, a, b: getattr(a, d)(b))(_dunder),
             elementwise(bools, bools), grad=False),
        case(f"{_name}_numbers", _op, (lambda n: lambda m, a, b: getattr(m, n)(a, b))(_name),
             elementwise(integral(-1, 2), ints(-1, 2)), grad=False))

for _name, _op, _dunder in _BITWISE:
    add(case(_name, _op, (lambda n: lambda m, a, b: getattr(m, n)(a, b))(_name),
             elementwise(ints(-8, 8), ints(-8, 8)), grad=False),
        case(f"{_name}_operator", _op, (lambda d: lambda m, a, b: getattr(a, d)(b))(_dunder),
             elementwise(ints(0, 8), ints(0, 8)), grad=False))

add(
    case("logical_not", "LogicalNot", lambda m, a: m.logical_not(a), elementwise(integral()),
         grad=False),
    case("invert_bool", "LogicalNot", lambda m, a: ~a, elementwise(bools), grad=False),
    case("bitwise_not", "BitwiseNot", lambda m, a: m.bitwise_not(a),
         elementwise(ints(-8, 8)), grad=False),
    case("invert_int", "BitwiseNot", lambda m, a: ~a, elementwise(ints(-8, 8)), grad=False),
    case("isnan", "Isnan", lambda m, a: m.isnan(a), elementwise(special), grad=False),
    case("isinf", "Isinf", lambda m, a: m.isinf(a), elementwise(special), grad=False),
    case("isfinite", "Isfinite", lambda m, a: m.isfinite(a), elementwise(special), grad=False),
    case("isclose", "IsClose", lambda m, a, b: m.isclose(a, a + b, rtol=1e-3, atol=1e-3),
         elementwise(normal, lambda rng, s: rng.choice([0.0, 1e-5, 1e-2], s)), grad=False),
    case("isclose_equal_nan", "IsClose", lambda m, a, b: m.isclose(a, b, equal_nan=True),
         elementwise(special, special), grad=False),
    case("where", "Where", lambda m, c, a, b: m.where(c, a, b),
         elementwise(bools, normal, normal)),
    case("where_scalar", "Where", lambda m, c, a: m.where(c, a, 0.5),
         elementwise(bools, normal)),
    case("where_method", "Where", lambda m, c, a, b: a.where(c, b),
         elementwise(bools, normal, normal)),
    case("masked_fill", "Where", lambda m, a, c: a.masked_fill(c, -1.0),
         elementwise(normal, bools)),
)

# reductions -------------------------------------------------------------------------

add(
    case("sum_all", "Sum", lambda m, a: a.sum(), elementwise(normal)),
    case("sum", "Sum", lambda m, a, dim, keepdim: m.sum(a, dim, keepdim), reduction()),
    case("sum_int", "Sum", lambda m, a, dim, keepdim: m.sum(a, dim, keepdim),
         reduction(ints()), grad=False),
    case("sum_bool", "Sum", lambda m, a: a.sum(), elementwise(bools), grad=False),
    case("sum_dtype", "Sum", lambda m, a, dim: m.sum(a, dim, dtype=m.float64),
         reduction(ints(), keepdim=False), grad=False),
    case("mean", "Mean", lambda m, a, dim, keepdim: m.mean(a, dim, keepdim), reduction()),
    case("mean_all", "Mean", lambda m, a: a.mean(), elementwise(normal)),
    # torch.prod takes one int dim
    case("prod", "Prod", lambda m, a, dim, keepdim: m.prod(a, dim, keepdim),
         reduction(uniform(-1.5, 1.5), tuples=False, none=False)),
    case("prod_all", "Prod", lambda m, a: a.prod(), elementwise(uniform(-1.5, 1.5))),
    case("prod_zeros", "Prod", lambda m, a, dim, keepdim: m.prod(a, dim, keepdim),
         reduction(with_zeros, tuples=False, none=False)),
    case("prod_all_zeros", "Prod", lambda m, a: a.prod(), elementwise(with_zeros)),
    case("amax", "Amax", lambda m, a, dim, keepdim: m.amax(a, dim, keepdim),
         reduction(distinct, none=False)),
    case("amin", "Amin", lambda m, a, dim, keepdim: m.amin(a, dim, keepdim),
         reduction(distinct, none=False)),
    case("amax_all", "Amax", lambda m, a: m.amax(a), elementwise(distinct)),
    # amax/amin share the gradient evenly among ties, like torch.amax
    case("amax_ties", "Amax", lambda m, a, dim, keepdim: m.amax(a, dim, keepdim),
         reduction(integral(), none=False), fd=False),
    case("amin_ties", "Amin", lambda m, a, dim, keepdim: m.amin(a, dim, keepdim),
         reduction(integral(), none=False), fd=False),
    case("max_all", "Amax", lambda m, a: a.max(), elementwise(distinct)),
    case("min_all", "Amin", lambda m, a: m.min(a), elementwise(distinct)),
    # max(dim) gives (values, indices); the gradient goes to that one index
    case("max_dim", "Argmax", lambda m, a, dim, keepdim: m.max(a, dim, keepdim),
         reduction(distinct, tuples=False, none=False)),
    case("min_dim", "Argmin", lambda m, a, dim, keepdim: a.min(dim, keepdim),
         reduction(distinct, tuples=False, none=False)),
    case("max_dim_values", ("Argmax", "Gather"), lambda m, a, dim: m.max(a, dim=dim).values,
         reduction(distinct, tuples=False, none=False, keepdim=False, min_dims=1)),
    case("argmax", "Argmax", lambda m, a, dim, keepdim: m.argmax(a, dim, keepdim),
         reduction(distinct, tuples=False, none=False), grad=False),
    case("argmin", "Argmin", lambda m, a, dim, keepdim: a.argmin(dim, keepdim),
         reduction(distinct, tuples=False, none=False), grad=False),
    case("argmax_all", "Argmax", lambda m, a: m.argmax(a), elementwise(distinct), grad=False),
    case("argmin_all", "Argmin", lambda m, a: m.argmin(a), elementwise(distinct), grad=False),
    case("logsumexp", "Logsumexp", lambda m, a, dim, keepdim: m.logsumexp(a, dim, keepdim),
         reduction(none=False)),
    case("logsumexp_large", "Logsumexp", lambda m, a, dim: a.logsumexp(dim),
         reduction(uniform(500, 510), none=False, keepdim=False)),
    case("softmax", "Softmax", lambda m, a, dim: m.softmax(a, dim), one_dim()),
    case("softmax_0d", "Softmax", lambda m, a, dim: m.softmax(a, dim), one_dim(min_dims=0,
                                                                               max_dims=0)),
    case("log_softmax", "LogSoftmax", lambda m, a, dim: m.log_softmax(a, dim), one_dim()),
    # saturated: derivatives near 1e-11, below what finite differences resolve
    case("softmax_functional", "Softmax", lambda m, a, dim: m.nn.functional.softmax(a, dim),
         one_dim(uniform(-30, 30)), fd=False),
    case("log_softmax_method", "LogSoftmax", lambda m, a, dim: a.log_softmax(dim),
         one_dim(uniform(-30, 30))),
    case("cumsum", "Cumsum", lambda m, a, dim: m.cumsum(a, dim), one_dim()),
    case("cumsum_int", "Cumsum", lambda m, a, dim: a.cumsum(dim), one_dim(ints()), grad=False),
)


def _norm_p(ps):
    return sts(p=st.sampled_from(ps))


add(
    case("norm", "Norm", lambda m, a, dim, keepdim, p: m.norm(a, p, dim, keepdim),
         reduction(distinct, extra=_norm_p([1, 2, 3, math.inf, -math.inf, 0.5]))),
    case("norm_default", "Norm", lambda m, a: a.norm(), elementwise(normal)),
    # torch.norm's "fro" over 3+ dims is a matrix norm error: one dim here
    case("norm_fro_dim", "Norm", lambda m, a, dim: m.norm(a, dim=dim),
         reduction(normal, keepdim=False, tuples=False)),
    case("vector_norm", "Norm",
         lambda m, a, dim, keepdim, p: m.vector_norm(a, p, dim, keepdim),
         reduction(distinct, extra=_norm_p([1, 2, 3, math.inf])),
         torch_fn=lambda m, a, dim, keepdim, p: m.linalg.vector_norm(a, p, dim, keepdim)),
    # p=0 counts non-zeros: zero gradient
    case("norm_p0", "Norm", lambda m, a, dim: m.norm(a, 0, dim), reduction(with_zeros,
                                                                         keepdim=False)),
    # the 2-norm of a zero slice: PyTorch's subgradient 0 (its second derivative is nan)
    case("norm_zero_slice", "Norm", lambda m, a, dim: m.norm(a * 0, 2, dim),
         reduction(normal, keepdim=False), grad2=False, fd=False),
)


@st.composite
def _var_example(draw, domain=normal, min_count=1):
    """var/std over dims with more elements than the correction (else 0/0), and at least
    ``min_count`` of them (one element has variance 0, where std has a kink)."""
    shape = draw(shapes(min_dims=1))
    dim = draw(dims_of(len(shape)))
    reduced = _reduced(dim, len(shape))
    n = math.prod(shape[d] for d in reduced)
    assume(n >= min_count)
    correction = draw(st.sampled_from([c for c in (0, 1, 2) if c < n] or [0]))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((domain(rng, shape),),
                   {"dim": dim, "keepdim": draw(st.booleans()), "correction": correction})


def _reduced(dim, ndim) -> tuple:
    if dim is None:
        return tuple(range(ndim))
    return tuple(d % ndim for d in ((dim,) if isinstance(dim, int) else dim))


add(
    case("var", ("Sub", "Mean", "Mul", "Sum", "Div"),
         lambda m, a, dim, keepdim, correction: m.var(a, dim, keepdim=keepdim,
                                                      correction=correction),
         _var_example()),
    case("std", "Sqrt",
         lambda m, a, dim, keepdim, correction: m.std(a, dim, keepdim=keepdim,
                                                      correction=correction),
         _var_example(min_count=2)),
    # zero variance: PyTorch's gradient is 0 there (not nan); its second derivative is nan
    case("std_zero_variance", "Sqrt", lambda m, a: m.std(a, 0, correction=0, keepdim=True),
         elementwise(normal, min_dims=2, max_dims=2).map(
             lambda e: Example((e.arrays[0][:1],), {})), grad2=False, fd=False),
    case("var_default", (), lambda m, a: a.var(),
         elementwise(normal, min_dims=1).filter(lambda e: e.arrays[0].size > 1)),
    case("std_unbiased_false", (), lambda m, a: m.std(a, unbiased=False),
         elementwise(normal, min_dims=1).filter(lambda e: e.arrays[0].size > 1)),
    case("var_mean", (), lambda m, a, dim, keepdim, correction:
         m.var_mean(a, dim, keepdim=keepdim, correction=correction), _var_example()),
    case("std_mean", (), lambda m, a, dim, keepdim, correction:
         m.std_mean(a, dim, keepdim=keepdim, correction=correction), _var_example(min_count=2)),
)

# indexing ----------------------------------------------------------------------------

T = "T"  # where an index tensor goes in a static index


def _index_of(index, tensors):
    """The Python index with the index tensors put in place of the ``T`` marks."""
    it = iter(tensors)
    built = tuple(next(it) if isinstance(item, str) and item == T else item for item in index)
    return built if len(built) != 1 else built[0]


def _getitem(m, a, *index_tensors, index):
    return a[_index_of(index, index_tensors)]


@st.composite
def _basic_index(draw, new_axes=(0, 2)):
    """Ints, slices with positive steps (PyTorch has no negative ones), Ellipsis and
    ``new_axes`` (a range) Nones; fewer items than dims leaves the rest whole."""
    shape = draw(shapes(max_dims=4))
    items = []
    for size in shape:
        kind = draw(st.sampled_from(["int", "slice", "full"]))
        if kind == "int":
            items.append(draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-size - 1, size + 1))
            items.append(slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3]))))
        else:
            items.append(slice(None))
    if items and draw(st.booleans()):  # an Ellipsis standing for a run of items
        lo = draw(st.integers(0, len(items)))
        hi = draw(st.integers(lo, len(items)))
        items[lo:hi] = [Ellipsis]
    else:
        items = items[:draw(st.integers(0, len(items)))]
    for _ in range(draw(st.integers(*new_axes))):
        items.insert(draw(st.integers(0, len(items))), None)
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),), {"index": tuple(items)})


@st.composite
def _mask_index(draw):
    """A bool mask over some leading dims (after an optional full slice)."""
    shape = draw(shapes(min_dims=1))
    lead = draw(st.integers(0, len(shape) - 1))
    k = draw(st.integers(1, len(shape) - lead))
    rng = np.random.default_rng(draw(SEEDS))
    mask = rng.random(shape[lead:lead + k]) < 0.5
    index = (slice(None),) * lead + (T,)
    return Example((rng.standard_normal(shape), mask), {"index": index})


@st.composite
def _array_index(draw):
    """One to three integer index tensors (negative and repeated entries, broadcast shapes)
    among slices and ints; separated index tensors put their dims first, as in NumPy."""
    shape = draw(shapes(min_dims=1, max_dims=4))
    n_arrays = draw(st.integers(1, min(3, len(shape))))
    at = sorted(draw(st.lists(st.integers(0, len(shape) - 1), min_size=n_arrays,
                              max_size=n_arrays, unique=True)))
    index_shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=n_arrays, min_dims=0,
                                                          max_dims=2, max_side=4)).input_shapes
    rng = np.random.default_rng(draw(SEEDS))
    items, arrays = [], []
    for d, size in enumerate(shape):
        if d in at:
            items.append(T)
            arrays.append(rng.integers(-size, size, index_shapes[len(arrays)]))
        else:
            items.append(draw(st.sampled_from([slice(None), slice(None, None, 2), 0])))
    items = items[:max(at) + 1 + draw(st.integers(0, len(shape) - max(at) - 1))]
    return Example((rng.standard_normal(shape), *arrays), {"index": tuple(items)})


add(
    case("getitem_basic", "Getitem", _getitem, _basic_index()),
    case("getitem_int", "Getitem", lambda m, a: a[1], elementwise(normal, min_dims=1)
         .filter(lambda e: e.arrays[0].shape[0] > 1)),
    case("getitem_mask", "Getitem", _getitem, _mask_index()),
    # repeated indices: the backward must add up, not overwrite
    case("getitem_arrays", "Getitem", _getitem, _array_index()),
    case("getitem_list", "Getitem", lambda m, a: a[[0, 2, 0, -1]],
         fixed((normal, (3, 2)))),
    case("getitem_ellipsis_array", "Getitem", lambda m, a, i: a[..., i, None],
         fixed((normal, (2, 3, 4)), (ints(-4, 4), (5,)))),
    case("getitem_mask_full", "Getitem", lambda m, a, mask: a[mask],
         elementwise(normal, bools).filter(lambda e: e.arrays[0].shape == e.arrays[1].shape)),
    case("getitem_0d", "Getitem", lambda m, a: a[()], elementwise(normal, max_dims=0)),
    case("getitem_mask_and_int", "Getitem", lambda m, a, mask: a[mask, :, 1],
         fixed((normal, (3, 4, 2)), (bools, (3,)))),
    case("getitem_int_tensor_0d", "Getitem", lambda m, a, i, j: a[i, :, j],
         fixed((normal, (3, 4, 2)), (ints(0, 3), ()), (ints(0, 2), (2, 3)))),
    # PyTorch's placement of index-tensor dims where NumPy's differs
    case("getitem_int_and_array", "Getitem", lambda m, a, i: a[0, :, i],
         fixed((normal, (2, 3, 4)), (ints(0, 4), (5,)))),
    case("getitem_none_between_arrays", "Getitem", lambda m, a, i, j: a[i, None, j],
         fixed((normal, (3, 4, 2)), (ints(0, 3), (5,)), (ints(0, 4), (5,)))),
    case("getitem_empty_ellipsis", "Getitem", lambda m, a, i, j: a[:, i, ..., j],
         fixed((normal, (2, 3, 4)), (ints(0, 3), (5,)), (ints(0, 4), (5,)))),
    case("select", "Getitem", lambda m, a: m.select(a, 1, -1), fixed((normal, (2, 3, 2)))),
    case("narrow", "Getitem", lambda m, a: m.narrow(a, 0, 1, 2), fixed((normal, (4, 3)))),
    case("index_select", "Getitem", lambda m, a, i: m.index_select(a, 1, i),
         fixed((normal, (2, 3, 2)), (ints(0, 3), (5,)))),
    case("masked_select", "Getitem", lambda m, a, c: m.masked_select(a, c),
         elementwise(normal, bools)),
    case("take_along_dim", "Gather", lambda m, a, i: m.take_along_dim(a, i, dim=1),
         fixed((normal, (3, 4)), (ints(0, 4), (3, 6)))),
)


@st.composite
def _index_put_example(draw, accumulate):
    """Base, values and integer index tensors; without accumulate the written positions
    are distinct (repeated writes have no defined winner)."""
    shape = draw(shapes(min_dims=1, max_dims=3))
    k = draw(st.integers(1, len(shape)))
    rng = np.random.default_rng(draw(SEEDS))
    n = draw(st.integers(1, 6))
    if accumulate:
        idx = [rng.integers(-s, s, n) for s in shape[:k]]
    else:
        flat = rng.permutation(math.prod(shape[:k]))[:n]
        idx = list(np.unravel_index(flat, shape[:k]))
    values_shape = draw(st.sampled_from([(len(idx[0]),) + tuple(shape[k:]), tuple(shape[k:]),
                                         ()]))
    return Example((rng.standard_normal(shape), rng.standard_normal(values_shape), *idx),
                   {"accumulate": accumulate})


def _index_put(m, a, v, *idx, accumulate):
    return m.index_put(a, tuple(idx), v, accumulate=accumulate)


def _setitem(m, a, v, *index_tensors, index):
    out = a * 1.0  # a non-leaf copy to write into
    out[_index_of(index, index_tensors)] = v
    return out


@st.composite
def _setitem_example(draw, new_axes=False):
    base = draw(_basic_index((1, 2) if new_axes else (0, 0)))
    a = base.arrays[0]
    index = base.static["index"]
    target = a[index].shape
    rng = np.random.default_rng(draw(SEEDS))
    v_shape = draw(st.sampled_from([target, target[1:], ()]))
    return Example((a, rng.standard_normal(v_shape)), {"index": index})


add(
    case("index_put_accumulate", "IndexPut", _index_put, _index_put_example(True)),
    case("index_put", "IndexPut", _index_put, _index_put_example(False)),
    case("index_put_mask", "IndexPut",
         lambda m, a, v, mask: m.index_put(a, (mask,), v),
         fixed((normal, (3, 2)), (normal, (2,)),
               (lambda rng, s: np.array([True, False, True]), None))),
    case("setitem", "IndexPut", _setitem, _setitem_example()),
    case("setitem_new_axis", "IndexPut", _setitem, _setitem_example(new_axes=True)),
    case("setitem_int_and_array", "IndexPut",
         lambda m, a, v, i: _setitem(m, a, v, i, index=(0, slice(None), T)),
         fixed((normal, (2, 3, 4)), (normal, (3, 2)), (lambda rng, s: rng.permutation(4)[:2],
                                                      ()))),
    case("setitem_array", "IndexPut",
         lambda m, a, v, i: _setitem(m, a, v, i, index=(slice(None), T)),
         fixed((normal, (3, 4)), (normal, (3, 2)), (lambda rng, s: rng.permutation(4)[:2],
                                                   ()))),
)


@st.composite
def _gather_example(draw, scatter=False, larger_src=True):
    shape = draw(shapes(min_dims=1))
    nd = len(shape)
    dim = draw(st.integers(-nd, nd - 1))
    index_shape = tuple(draw(st.integers(1, 5)) if d == dim % nd else draw(st.integers(1, s))
                        for d, s in enumerate(shape))
    rng = np.random.default_rng(draw(SEEDS))
    index = rng.integers(0, shape[dim], index_shape)
    if not scatter:
        return Example((rng.standard_normal(shape), index), {"dim": dim})
    # scatter_add(base, dim, index, src): src at least as large as index in every dim
    base_shape = tuple(max(s, i) if d != dim % nd else s
                       for d, (s, i) in enumerate(zip(shape, index_shape, strict=True)))
    src_shape = tuple(i + draw(st.integers(0, int(larger_src))) for i in index_shape)
    return Example((rng.standard_normal(base_shape), index, rng.standard_normal(src_shape)),
                   {"dim": dim})


add(
    case("gather", "Gather", lambda m, a, i, dim: m.gather(a, dim, i), _gather_example()),
    case("gather_method", "Gather", lambda m, a, i, dim: a.gather(dim, i), _gather_example()),
    case("scatter_add", "ScatterAdd", lambda m, a, i, s, dim: m.scatter_add(a, dim, i, s),
         _gather_example(scatter=True, larger_src=False)),
    # a src larger than the index: PyTorch's backward fails on it, so only finite
    # differences check the gradient (zero outside the scattered block)
    case("scatter_add_larger_src", "ScatterAdd",
         lambda m, a, i, s, dim: m.scatter_add(a, dim, i, s), _gather_example(scatter=True),
         torch_grad=False),
    case("one_hot", "OneHot", lambda m, i: m.nn.functional.one_hot(i),
         elementwise(ints(0, 4)), grad=False),
    case("one_hot_classes", "OneHot", lambda m, i: m.nn.functional.one_hot(i, num_classes=5),
         elementwise(ints(0, 4)), grad=False),
    case("nonzero", "Nonzero", lambda m, a: m.nonzero(a), elementwise(integral(-1, 2)),
         grad=False),
    case("nonzero_tuple", "Nonzero", lambda m, a: m.nonzero(a, as_tuple=True),
         elementwise(bools, min_dims=1), grad=False),
)

# joining and splitting -----------------------------------------------------------------


@st.composite
def _join_example(draw, same_shape):
    shape = draw(shapes(min_dims=1))
    nd = len(shape)
    dim = draw(st.integers(-nd - same_shape, nd - 1 + same_shape))
    n = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(SEEDS))
    arrays = []
    for _ in range(n):
        s = list(shape)
        if not same_shape:
            s[dim] = draw(st.integers(1, 3))
        arrays.append(rng.standard_normal(s))
    return Example(tuple(arrays), {"dim": dim})


@st.composite
def _pad_example(draw):
    shape = draw(shapes(min_dims=1))
    k = draw(st.integers(1, len(shape)))
    pads = []
    for i in range(k):
        size = shape[len(shape) - 1 - i]
        lo = draw(st.integers(-(size - 1), 2))
        hi = draw(st.integers(-(size - 1 + min(lo, 0)), 2))
        pads += [lo, hi]
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),),
                   {"pad": tuple(pads), "value": draw(st.sampled_from([0.0, 1.5]))})


add(
    case("cat", "Cat", lambda m, *xs, dim: m.cat(xs, dim), _join_example(False)),
    case("concat", "Cat", lambda m, *xs, dim: m.concat(xs, dim=dim), _join_example(False)),
    # PyTorch's legacy rule: 1-d empty tensors are skipped
    case("cat_empty_1d", "Cat", lambda m, a, b: m.cat([a, b], 1),
         fixed((normal, (0,)), (normal, (2, 3)))),
    case("stack", "Stack", lambda m, *xs, dim: m.stack(xs, dim), _join_example(True)),
    case("hstack", "Cat", lambda m, a, b: m.hstack([a, b]),
         fixed((normal, (2, 3)), (normal, (2, 1)))),
    case("vstack", "Cat", lambda m, a, b: m.vstack([a, b]),
         fixed((normal, (3,)), (normal, (2, 3)))),
    case("pad", "Pad", lambda m, a, pad, value: m.nn.functional.pad(a, pad, value=value),
         _pad_example()),
    case("split", "Getitem", lambda m, a, dim, size: m.split(a, size, dim),
         one_dim(extra=sts(size=st.integers(1, 3)))),
    case("split_sections", "Getitem", lambda m, a: a.split([1, 3, 0, 2], 1),
         fixed((normal, (2, 6)))),
    case("chunk", "Getitem", lambda m, a, dim, chunks: m.chunk(a, chunks, dim),
         one_dim(extra=sts(chunks=st.integers(1, 4)))),
    case("unbind", "Getitem", lambda m, a, dim: m.unbind(a, dim), one_dim()),
    case("tensor_split", "Getitem", lambda m, a: m.tensor_split(a, 3, dim=1),
         fixed((normal, (2, 5)))),
)

# moving elements ---------------------------------------------------------------------


def _factor_shape(rng, numel, max_dims=3):
    """A random shape with ``numel`` elements."""
    dims = [1] * int(rng.integers(1, max_dims + 1))
    n, p = numel, 2
    while n > 1:
        while n % p:
            p += 1
        dims[int(rng.integers(len(dims)))] *= p
        n //= p
    return tuple(dims)


@st.composite
def _reshape_example(draw):
    shape = draw(shapes())
    rng = np.random.default_rng(draw(SEEDS))
    target = list(_factor_shape(rng, math.prod(shape)))
    if draw(st.booleans()):
        target[int(rng.integers(len(target)))] = -1
    return Example((rng.standard_normal(shape),), {"shape": tuple(target)})


@st.composite
def _permute_example(draw):
    shape = draw(shapes(min_dims=1, max_dims=4))
    perm = draw(st.permutations(range(len(shape))))
    perm = tuple(p - len(shape) if draw(st.booleans()) else p for p in perm)
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),), {"dims": perm})


@st.composite
def _two_dims(draw):
    shape = draw(shapes(min_dims=1, max_dims=4))
    nd = len(shape)
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),),
                   {"d0": draw(st.integers(-nd, nd - 1)), "d1": draw(st.integers(-nd, nd - 1))})


@st.composite
def _expand_example(draw):
    shape = draw(shapes(max_side=3))
    target = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
    for s in shape:  # size-1 dims grow; others stay (or are written -1)
        target.append(draw(st.integers(1, 3)) if s == 1 else
                      draw(st.sampled_from([s, -1])))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),), {"shape": tuple(target)})


@st.composite
def _repeat_example(draw):
    shape = draw(shapes(max_side=3))
    repeats = tuple(draw(st.integers(1, 3)) for _ in range(len(shape) + draw(st.integers(0, 2))))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),), {"repeats": repeats})


@st.composite
def _squeeze_example(draw):
    shape = tuple(s if draw(st.booleans()) else 1 for s in draw(shapes(max_dims=4)))
    nd = max(len(shape), 1)
    dim = draw(st.one_of(st.none(), st.integers(-nd, nd - 1),
                         st.lists(st.integers(0, nd - 1), unique=True, min_size=1,
                                  max_size=nd).map(tuple)))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),), {"dim": dim})


@st.composite
def _unsqueeze_example(draw):
    shape = draw(shapes())
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),),
                   {"dim": draw(st.integers(-len(shape) - 1, len(shape)))})


def _sizes(a, shape) -> tuple:
    """``shape`` with each -1 replaced by the size it keeps (broadcast_to has no -1)."""
    lead = len(shape) - a.ndim
    return tuple(a.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))


def _squeeze(m, a, dim):
    return a.squeeze() if dim is None else m.squeeze(a, dim)


@st.composite
def _flatten_example(draw):
    shape = draw(shapes(min_dims=1, max_dims=4))
    nd = len(shape)
    start = draw(st.integers(0, nd - 1))
    end = draw(st.integers(start, nd - 1))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),),
                   {"start": start - nd if draw(st.booleans()) else start,
                    "end": end - nd if draw(st.booleans()) else end})


@st.composite
def _flip_example(draw):
    shape = draw(shapes(min_dims=1))
    dims = tuple(draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=3)))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),), {"dims": dims})


add(
    case("reshape", "Reshape", lambda m, a, shape: m.reshape(a, shape), _reshape_example()),
    case("view", "Reshape", lambda m, a, shape: a.view(*shape), _reshape_example()),
    case("flatten", "Reshape", lambda m, a, start, end: m.flatten(a, start, end),
         _flatten_example()),
    case("flatten_0d", "Reshape", lambda m, a: a.flatten(), elementwise(normal, max_dims=0)),
    case("squeeze", "Reshape", _squeeze, _squeeze_example()),
    case("unsqueeze", "Reshape", lambda m, a, dim: m.unsqueeze(a, dim), _unsqueeze_example()),
    case("unflatten", "Reshape", lambda m, a: m.unflatten(a, 1, (2, 3)),
         fixed((normal, (2, 6, 1)))),
    case("permute", "Permute", lambda m, a, dims: m.permute(a, dims), _permute_example()),
    case("permute_method", "Permute", lambda m, a, dims: a.permute(*dims), _permute_example()),
    case("transpose", "Permute", lambda m, a, d0, d1: m.transpose(a, d0, d1), _two_dims()),
    case("movedim", "Permute", lambda m, a, d0, d1: m.movedim(a, d0, d1), _two_dims()),
    case("T", "Permute", lambda m, a: a.T, fixed((normal, (2, 3)))),
    case("mT", "Permute", lambda m, a: a.mT, elementwise(normal, min_dims=2, max_dims=4)),
    case("t", "Permute", lambda m, a: m.t(a), elementwise(normal, min_dims=2, max_dims=2)),
    case("t_vector", (), lambda m, a: m.t(a), elementwise(normal, max_dims=1)),
    # expanding to the same shape dispatches nothing: the ops are named by fixed cases
    case("expand", (), lambda m, a, shape: a.expand(shape), _expand_example()),
    case("expand_sizes", "Expand", lambda m, a: a.expand(2, -1, 3), fixed((normal, (4, 1)))),
    case("broadcast_to", (), lambda m, a, shape: m.broadcast_to(a, _sizes(a, shape)),
         _expand_example()),
    case("expand_as", "Expand", lambda m, a, b: a.expand_as(b),
         fixed((normal, (3, 1)), (normal, (2, 3, 4)))),
    case("sum_to_size", "SumToSize", lambda m, a: a.sum_to_size(4, 1),
         fixed((normal, (2, 4, 3)))),
    case("sum_to_size_rows", "SumToSize", lambda m, a: a.sum_to_size((1, 3)),
         fixed((normal, (4, 3)))),
    case("broadcast_tensors", (), lambda m, a, b: m.broadcast_tensors(a, b),
         elementwise(normal, normal)),
    case("repeat", "Repeat", lambda m, a, repeats: a.repeat(repeats), _repeat_example()),
    case("repeat_sizes", "Repeat", lambda m, a: a.repeat(2, 1, 3), fixed((normal, (4, 1)))),
    case("tile", "Repeat", lambda m, a: m.tile(a, (2,)), fixed((normal, (2, 3)))),
    case("flip", "Flip", lambda m, a, dims: m.flip(a, dims), _flip_example()),
)

# matrix products ------------------------------------------------------------------------


@st.composite
def _matmul_example(draw):
    """Every rank combination: vector or (batched) matrix on each side, batch dims that
    broadcast against each other."""
    batch_a, batch_b = draw(hnp.mutually_broadcastable_shapes(
        num_shapes=2, min_dims=0, max_dims=2, max_side=3)).input_shapes
    m_, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    a_shape = (k,) if draw(st.booleans()) else batch_a + (m_, k)
    b_shape = (k,) if draw(st.booleans()) else batch_b + (k, n)
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(a_shape), rng.standard_normal(b_shape)), {})


add(
    case("matmul", "Matmul", lambda m, a, b: a @ b, _matmul_example()),
    case("matmul_function", "Matmul", lambda m, a, b: m.matmul(a, b), _matmul_example()),
    case("matmul_vector_vector", "Matmul", lambda m, a, b: a @ b,
         fixed((normal, (4,)), (normal, (4,)))),
    case("matmul_vector_batch", "Matmul", lambda m, a, b: a @ b,
         fixed((normal, (3,)), (normal, (2, 2, 3, 4)))),
    case("matmul_batch_vector", "Matmul", lambda m, a, b: a @ b,
         fixed((normal, (2, 1, 4, 3)), (normal, (3,)))),
    case("matmul_broadcast_batch", "Matmul", lambda m, a, b: a @ b,
         fixed((normal, (2, 1, 4, 3)), (normal, (5, 3, 2)))),
    case("matmul_int", "Matmul", lambda m, a, b: a @ b,
         fixed((ints(), (2, 3)), (ints(), (3,))), grad=False),
    case("mm", "Matmul", lambda m, a, b: m.mm(a, b), fixed((normal, (2, 3)), (normal, (3, 4)))),
    case("bmm", "Matmul", lambda m, a, b: m.bmm(a, b),
         fixed((normal, (2, 2, 3)), (normal, (2, 3, 4)))),
    case("mv", "Matmul", lambda m, a, b: m.mv(a, b), fixed((normal, (2, 3)), (normal, (3,)))),
    case("dot", "Matmul", lambda m, a, b: m.dot(a, b), fixed((normal, (5,)), (normal, (5,)))),
    case("outer", "Mul", lambda m, a, b: m.outer(a, b), fixed((normal, (3,)), (normal, (4,)))),
    case("linear", "Linear", lambda m, x, w, b: m.nn.functional.linear(x, w, b),
         fixed((normal, (2, 5, 3)), (normal, (4, 3)), (normal, (4,)))),
)

# losses ---------------------------------------------------------------------------------

REDUCTIONS = st.sampled_from(["none", "sum", "mean"])


@st.composite
def _regression_example(draw, target_domain=normal):
    shape = draw(shapes())
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape), target_domain(rng, shape)),
                   {"reduction": draw(REDUCTIONS)})


@st.composite
def _classes_example(draw, probabilities=False, weights=True):
    """Logits (C,), (N, C) or (N, C, d) with class-index (or probability) targets, an
    optional class weight, ignore_index and label smoothing."""
    form = draw(st.sampled_from(["unbatched", "batch", "spatial"]))
    n, c, d = draw(st.integers(1, 4)), draw(st.integers(2, 4)), draw(st.integers(1, 3))
    shape, tshape = {"unbatched": ((c,), ()), "batch": ((n, c), (n,)),
                     "spatial": ((n, c, d), (n, d))}[form]
    rng = np.random.default_rng(draw(SEEDS))
    logits = rng.standard_normal(shape)
    static = {"reduction": draw(REDUCTIONS),
              "label_smoothing": draw(st.sampled_from([0.0, 0.0, 0.1, 0.3]))}
    if probabilities:
        target = rng.dirichlet(np.ones(c), size=tshape).astype(np.float64)
        target = np.moveaxis(target, -1, 1 if len(shape) > 1 else 0)
        arrays = [logits, target]
    else:
        target = np.asarray(rng.integers(0, c, tshape))
        ignore = draw(st.sampled_from([-100, 1]))
        if ignore != -100:
            static["ignore_index"] = ignore
            # one kept target, so that the mean does not divide by zero
            target.reshape(-1)[0] = 0  # a view: the array is contiguous
        arrays = [logits, target]
    nograd = set()
    if weights and draw(st.booleans()):
        arrays.append(rng.uniform(0.2, 2.0, c))
        nograd.add(2)  # PyTorch does not differentiate the class weight
    return Example(tuple(arrays), static, frozenset(nograd))


@st.composite
def _training_classes_example(draw, grad_output=False):
    """The training case: logits (N, C) and N class indices, nothing ignored or weighted
    (and, for the gradient op, an incoming gradient: a 0-d float)."""
    n, c = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(SEEDS))
    arrays = [rng.standard_normal((n, c)), np.asarray(rng.integers(0, c, n))]
    if grad_output:
        arrays.append(np.asarray(rng.standard_normal()))
    return Example(tuple(arrays), {}, frozenset({0}) if grad_output else frozenset())


def _nll_gradient(m, x, t, s):
    """The gradient of the mean NLL for an incoming gradient ``s``: NllLossBackward as a
    function of ``s`` (linear; ``x`` only gives it a shape)."""
    return m.func.vjp(lambda y: m.nn.functional.nll_loss(y, t), x)[1](s)[0]


@st.composite
def _cross_entropy_op_example(draw, grad_output=False):
    """What a ``CrossEntropy`` op sees: logits (N, C), class indices (N,), a reduction,
    label smoothing, maybe ``ignore_index`` and a class weight (a constant); for its
    gradient op, an incoming gradient of the loss's shape too."""
    n, c = draw(st.integers(1, 4)), draw(st.integers(2, 4))
    rng = np.random.default_rng(draw(SEEDS))
    target = rng.integers(0, c, n)
    static = {"reduction": draw(REDUCTIONS),
              "label_smoothing": draw(st.sampled_from([0.0, 0.2])),
              "ignore_index": draw(st.sampled_from([-100, 1]))}
    target[0] = 0  # one kept target: the mean does not divide by zero
    arrays = [rng.standard_normal((n, c)), target]
    if grad_output:
        arrays.append(rng.standard_normal((n,) if static["reduction"] == "none" else ()))
    nograd = {len(arrays) - 1} if grad_output else set()
    if draw(st.booleans()):
        nograd.add(len(arrays))
        arrays.append(rng.uniform(0.2, 2.0, c))
    return Example(tuple(arrays), static, frozenset(nograd))


def _cross_entropy_gradient(m, x, t, g, w=None, **kw):
    """CrossEntropyBackward (the plain eager backward's kernel) against torch's vjp."""
    if m is gg:
        args = (g, x, t) if w is None else (g, x, t, w)
        return CrossEntropyBackward.apply(*args, **kw)
    return m.func.vjp(lambda y: m.nn.functional.cross_entropy(y, t, weight=w, **kw), x)[1](g)[0]


def _cross_entropy(m, x, t, w=None, **kw):
    return m.nn.functional.cross_entropy(x, t, weight=w, **kw)


def _nll(m, x, t, w=None, **kw):
    kw.pop("label_smoothing")
    return m.nn.functional.nll_loss(m.log_softmax(x, 0 if x.ndim == 1 else 1), t, weight=w,
                                    **kw)


@st.composite
def _bce_example(draw, logits):
    shape = draw(shapes())
    rng = np.random.default_rng(draw(SEEDS))
    x = rng.standard_normal(shape) if logits else rng.uniform(0.05, 0.95, shape)
    arrays = [x, rng.uniform(0, 1, shape)]
    static = {"reduction": draw(REDUCTIONS)}
    if draw(st.booleans()):
        arrays.append(rng.uniform(0.2, 2.0, shape))
        static["weighted"] = True
    if logits and draw(st.booleans()):
        arrays.append(rng.uniform(0.2, 3.0, shape[-1:]))
        static["pos_weighted"] = True
    nograd = frozenset(range(2, len(arrays)))  # weights are constants, as in PyTorch
    return Example(tuple(arrays), static, nograd)


def _bce(m, x, t, *ws, reduction, weighted=False):
    return m.nn.functional.binary_cross_entropy(x, t, ws[0] if weighted else None,
                                                reduction=reduction)


def _bce_logits(m, x, t, *ws, reduction, weighted=False, pos_weighted=False):
    ws = list(ws)
    w = ws.pop(0) if weighted else None
    pw = ws.pop(0) if pos_weighted else None
    return m.nn.functional.binary_cross_entropy_with_logits(x, t, w, reduction=reduction,
                                                            pos_weight=pw)


add(
    case("mse_loss", ("Sub", "Mul"),
         lambda m, x, t, reduction: m.nn.functional.mse_loss(x, t, reduction=reduction),
         _regression_example()),
    case("l1_loss", "Abs",
         lambda m, x, t, reduction: m.nn.functional.l1_loss(x, t, reduction=reduction),
         _regression_example(lambda rng, s: rng.standard_normal(s) + 3)),
    case("huber_loss", "Where",
         lambda m, x, t, reduction: m.nn.functional.huber_loss(x, t, reduction=reduction,
                                                               delta=0.8),
         _regression_example()),
    case("smooth_l1_loss", "Where",
         lambda m, x, t, reduction: m.nn.functional.smooth_l1_loss(x, t, reduction=reduction,
                                                                   beta=0.5),
         _regression_example()),
    # the general path (a gather, except for the training case among the drawn examples)
    case("cross_entropy", "CrossEntropy", _cross_entropy, _classes_example()),
    case("cross_entropy_probabilities", "LogSoftmax", _cross_entropy,
         _classes_example(probabilities=True)),
    case("nll_loss", "LogSoftmax", _nll, _classes_example()),
    case("cross_entropy_training", "CrossEntropy",
         lambda m, x, t: m.nn.functional.cross_entropy(x, t), _training_classes_example()),
    case("nll_loss_training", "NllLoss",
         lambda m, x, t: m.nn.functional.nll_loss(x, t), _training_classes_example()),
    case("nll_loss_gradient", "NllLossBackward", _nll_gradient,
         _training_classes_example(grad_output=True)),
    # the ops themselves, as a graph records them
    case("nll_loss_op", "NllLoss", lambda m, x, t: NllLoss.apply(x, t),
         _training_classes_example(),
         torch_fn=lambda m, x, t: m.nn.functional.nll_loss(x, t)),
    case("cross_entropy_op", "CrossEntropy",
         lambda m, x, t, w=None, **kw: CrossEntropy.apply(*((x, t) if w is None else (x, t, w)),
                                                          **kw),
         _cross_entropy_op_example(), torch_fn=_cross_entropy),
    case("cross_entropy_backward_op", "CrossEntropyBackward", _cross_entropy_gradient,
         _cross_entropy_op_example(grad_output=True), grad=False),
    case("nll_loss_backward_op", "NllLossBackward",
         lambda m, x, t, s: NllLossBackward.apply(s, t, classes=x.shape[1]),
         _training_classes_example(grad_output=True), torch_fn=_nll_gradient),
    case("binary_cross_entropy", "BinaryCrossEntropy", _bce, _bce_example(logits=False)),
    case("binary_cross_entropy_op", "BinaryCrossEntropy",
         lambda m, x, t, *ws, **kw: BinaryCrossEntropy.apply(x, t), _bce_example(logits=False),
         torch_fn=lambda m, x, t, *ws, **kw: m.nn.functional.binary_cross_entropy(
             x, t, reduction="none")),
    case("binary_cross_entropy_with_logits", "Softplus", _bce_logits,
         _bce_example(logits=True)),
    case("normalize", ("Norm", "Clamp", "Div"),
         lambda m, a, dim: m.nn.functional.normalize(a, 2.0, dim),
         one_dim(away(0.3))),
)

_names = [c.name for c in CASES]
assert len(_names) == len(set(_names)), "case names must be unique"

# the fused linear op (nn.functional.linear on a matrix of examples) ----------------------


@st.composite
def _linear_example(draw):
    """x (N, in), weight (out, in) and no bias, or a bias that broadcasts to (N, out)."""
    n, k, o = (draw(st.integers(1, 4)) for _ in range(3))
    bias = draw(st.sampled_from([None, (o,), (1, o), (n, 1), (n, o), ()]))
    rng = np.random.default_rng(draw(SEEDS))
    arrays = [rng.standard_normal((n, k)), rng.standard_normal((o, k))]
    if bias is not None:
        arrays.append(rng.standard_normal(bias))
    return Example(tuple(arrays), {})


add(
    case("linear_2d", "Linear", lambda m, x, w, *b: m.nn.functional.linear(x, w, *b),
         _linear_example()),
    case("linear_module_shapes", "Linear", lambda m, x, w, b: m.nn.functional.linear(x, w, b),
         fixed((normal, (5, 3)), (normal, (4, 3)), (normal, (4,)))),
)

# stop-gradient: the value passes, the gradient does not (detach(a) * a has gradient
# detach(a), where finite differences see 2a: no fd test; torch.detach is the oracle)
add(
    case("detach_times_input", ("Detach", "Mul"), lambda m, a: m.detach(a) * a,
         elementwise(normal), fd=False, grad2=False),
)

# sorting ----------------------------------------------------------------------------------
# distinct values: no ties, so the order (and the gather that picks the values) is flat
# around the example and finite differences see a smooth function


@st.composite
def _topk_example(draw, domain=distinct):
    shape = draw(shapes(min_dims=1))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    static = {"dim": dim, "k": draw(st.integers(0, shape[dim])),
              "largest": draw(st.booleans())}
    rng = np.random.default_rng(draw(SEEDS))
    return Example((domain(rng, shape),), static)


_DESCENDING = sts(descending=st.booleans())

add(
    case("sort", ("Argsort", "Gather"),
         lambda m, a, dim, descending: m.sort(a, dim=dim, descending=descending),
         one_dim(distinct, extra=_DESCENDING)),
    case("sort_method", ("Argsort", "Gather"), lambda m, a, dim: a.sort(dim),
         one_dim(distinct)),
    case("sort_0d", "Argsort", lambda m, a: m.sort(a), elementwise(normal, max_dims=0)),
    # ties keep their order (stable=True: PyTorch guarantees the order then); the values
    # are not differentiable at ties, so no finite differences
    case("sort_ties_stable", ("Argsort", "Gather"),
         lambda m, a, dim, descending: m.sort(a, dim=dim, descending=descending, stable=True),
         one_dim(integral(), extra=_DESCENDING), fd=False),
    case("sort_int", "Argsort", lambda m, a, dim, descending: m.sort(a, dim, descending),
         one_dim(ints(), extra=_DESCENDING), grad=False),
    case("sort_bool", "Argsort", lambda m, a, dim: m.sort(a, dim=dim, stable=True),
         one_dim(bools), grad=False),
    # NaN sorts as the largest value: last ascending, first descending
    case("sort_nan", "Argsort",
         lambda m, a, dim, descending: m.sort(a, dim=dim, descending=descending, stable=True),
         one_dim(special, extra=_DESCENDING), grad=False),
    case("argsort", "Argsort", lambda m, a, dim, descending: m.argsort(a, dim, descending),
         one_dim(distinct, extra=_DESCENDING), grad=False),
    case("argsort_method_stable", "Argsort",
         lambda m, a, dim: a.argsort(dim=dim, descending=True, stable=True),
         one_dim(integral()), grad=False),
    case("msort", ("Argsort", "Gather"), lambda m, a: m.msort(a),
         elementwise(distinct, min_dims=1)),
    case("topk", "Argsort", lambda m, a, k, dim, largest: m.topk(a, k, dim, largest),
         _topk_example()),
    case("topk_method", ("Argsort", "Gather"), lambda m, a: a.topk(2),
         fixed((distinct, (3, 4)))),
    case("topk_0d", "Argsort", lambda m, a: m.topk(a, 1), elementwise(normal, max_dims=0)),
)

# triangles, diagonals, shifts, cumulative products -------------------------------------


@st.composite
def _matrices(draw, domain=normal, extra=None):
    """A (batched) matrix: 2 to 4 dims."""
    shape = draw(shapes(min_dims=2, max_dims=4))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((domain(rng, shape),), dict(draw(extra)) if extra is not None else {})


@st.composite
def _diagonal_example(draw, min_dims=2, max_dims=4, added_dims=0, max_offset=3):
    """An array, an offset and two distinct dims of a tensor with ``added_dims`` more
    dims than the array (diag_embed's result has one more)."""
    shape = draw(shapes(min_dims=min_dims, max_dims=max_dims))
    nd = len(shape) + added_dims
    d1, d2 = draw(st.lists(st.integers(-nd, nd - 1), min_size=2, max_size=2).filter(
        lambda ds: ds[0] % nd != ds[1] % nd))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),),
                   {"offset": draw(st.integers(-max_offset, max_offset)), "dim1": d1,
                    "dim2": d2})


@st.composite
def _roll_example(draw):
    shape = draw(shapes(min_dims=1))
    nd = len(shape)
    dims = draw(st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=nd))
    shifts = draw(st.lists(st.integers(-5, 5), min_size=len(dims), max_size=len(dims)))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),), {"shifts": tuple(shifts),
                                                   "dims": tuple(dims)})


@st.composite
def _diff_example(draw, domain=normal):
    shape = draw(shapes(min_dims=1))
    nd = len(shape)
    dim = draw(st.integers(-nd, nd - 1))
    rng = np.random.default_rng(draw(SEEDS))
    arrays = [domain(rng, shape)]
    static = {"n": draw(st.integers(0, 3)), "dim": dim, "where": draw(st.sampled_from(
        ["none", "prepend", "append", "both"]))}
    for side in ("prepend", "append"):
        if static["where"] in (side, "both"):
            other = list(shape)
            other[dim] = draw(st.integers(1, 2))
            arrays.append(domain(rng, tuple(other)))
    return Example(tuple(arrays), static)


def _diff(m, a, *ends, n, dim, where):
    ends = list(ends)
    prepend = ends.pop(0) if where in ("prepend", "both") else None
    append = ends.pop(0) if where in ("append", "both") else None
    return m.diff(a, n=n, dim=dim, prepend=prepend, append=append)


_DIAGONAL = sts(diagonal=st.integers(-3, 3))


@st.composite
def _cumprod_gradient_example(draw, domain):
    """An input, an incoming gradient of its shape, and a dim."""
    shape = draw(shapes(min_dims=1))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((domain(rng, shape), rng.standard_normal(shape)),
                   {"dim": draw(st.integers(-len(shape), len(shape) - 1))})


def _cumprod_gradient(m, a, g, dim):
    return m.func.vjp(lambda x: m.cumprod(x, dim), a)[1](g)[0]


def _cumprod_backward_op(m, a, g, dim):
    return CumprodBackward.apply(g, a, dim=dim % a.ndim)

add(
    case("tril", "Tril", lambda m, a, diagonal: m.tril(a, diagonal), _matrices(extra=_DIAGONAL)),
    case("tril_method", "Tril", lambda m, a: a.tril(), _matrices()),
    case("triu", "Triu", lambda m, a, diagonal: m.triu(a, diagonal), _matrices(extra=_DIAGONAL)),
    case("triu_method", "Triu", lambda m, a, diagonal: a.triu(diagonal=diagonal),
         _matrices(extra=_DIAGONAL)),
    case("triu_int", "Triu", lambda m, a: m.triu(a, 1), _matrices(ints()), grad=False),
    case("tril_bool", "Tril", lambda m, a: m.tril(a, -1), _matrices(bools), grad=False),
    case("diagonal", "Getitem", lambda m, a, offset, dim1, dim2: m.diagonal(a, offset, dim1,
                                                                           dim2),
         _diagonal_example()),
    case("diagonal_method", "Getitem", lambda m, a: a.diagonal(), _matrices()),
    case("trace", ("Getitem", "Sum"), lambda m, a: m.trace(a),
         elementwise(normal, min_dims=2, max_dims=2)),
    case("trace_method_int", ("Getitem", "Sum"), lambda m, a: a.trace(),
         fixed((ints(), (3, 4))), grad=False),
    # a shift that is a multiple of the size moves nothing: no cat then
    case("roll", (), lambda m, a, shifts, dims: m.roll(a, shifts, dims), _roll_example()),
    case("roll_flat", "Cat", lambda m, a: m.roll(a, 2), fixed((normal, (2, 3)))),
    case("roll_method", "Cat", lambda m, a: a.roll((1, -1), (0, 1)), fixed((normal, (3, 4)))),
    case("diff", (), _diff, _diff_example()),
    case("diff_method", "Sub", lambda m, a: a.diff(dim=0), fixed((normal, (4, 3)))),
    case("diff_bool", "LogicalXor", lambda m, a: m.diff(a), fixed((bools, (3, 5))),
         grad=False),
    case("cumprod", "Cumprod", lambda m, a, dim: m.cumprod(a, dim), one_dim(uniform(-1.5, 1.5))),
    # zeros: out / input would divide by zero; the rule must not (nor its derivative)
    case("cumprod_zeros", "Cumprod", lambda m, a, dim: a.cumprod(dim), one_dim(with_zeros)),
    case("cumprod_0d", "Cumprod", lambda m, a: m.cumprod(a, 0), elementwise(normal, max_dims=0)),
    case("cumprod_int", "Cumprod", lambda m, a, dim: m.cumprod(a, dim), one_dim(ints()),
         grad=False),
    # cumprod's gradient as a function of the input and the incoming gradient: its
    # derivatives are cumprod's second and third. The op itself, as a graph records it
    # (a graph cannot trace through func.vjp); torch's side is its vjp
    case("cumprod_gradient", "CumprodBackward", _cumprod_backward_op,
         _cumprod_gradient_example(uniform(-1.5, 1.5)), torch_fn=_cumprod_gradient),
    case("cumprod_gradient_zeros", "CumprodBackward", _cumprod_backward_op,
         _cumprod_gradient_example(with_zeros), torch_fn=_cumprod_gradient),
)

# einsum: the common forms, each a fixed equation and shapes ----------------------------

_EINSUM = [
    # name, equation, shapes, ops
    ("matmul", "ij,jk->ik", [(2, 3), (3, 4)], "Matmul"),
    ("batched", "bij,bjk->bik", [(2, 2, 3), (2, 3, 4)], "Matmul"),
    ("transposed_operands", "ji,kj->ik", [(3, 2), (4, 3)], ("Matmul", "Permute")),
    ("transpose", "ij->ji", [(2, 3)], "Permute"),
    ("trace", "ii", [(3, 3)], ("Getitem", "Sum")),
    ("diagonal", "ii->i", [(3, 3)], "Getitem"),
    ("repeated_three", "iji->j", [(3, 2, 3)], ("Getitem", "Sum")),
    ("outer", "i,j->ij", [(3,), (4,)], "Matmul"),
    ("dot", "i,i->", [(4,), (4,)], "Matmul"),
    ("sum_all", "ijk->", [(2, 3, 4)], "Sum"),
    ("sum_dims", "ijk->j", [(2, 3, 4)], "Sum"),
    ("implicit", "ij,jk", [(2, 3), (3, 4)], "Matmul"),
    ("implicit_sorted", "ba", [(2, 3)], "Permute"),
    ("three_operands", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)], "Matmul"),
    ("bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)], "Matmul"),
    ("ellipsis", "...ij,...jk->...ik", [(5, 2, 3), (3, 4)], "Matmul"),
    ("ellipsis_middle", "i...j->j...i", [(2, 3, 4, 5)], "Permute"),
    ("ellipsis_summed", "...i->i", [(2, 3, 4)], "Sum"),
    ("broadcast_size_one", "bi,bj->ij", [(1, 2), (3, 4)], ("Matmul", "Expand")),
    ("hadamard", "ij,ij->ij", [(2, 3), (2, 3)], "Matmul"),
    ("scalar_operand", ",ij->ij", [(), (2, 3)], "Matmul"),
    ("upper_case", "Ab,bA", [(3, 2), (2, 3)], "Matmul"),
]


def _einsum_case(name, equation, shape_list, ops):
    return case(f"einsum_{name}", ops, lambda m, *xs: m.einsum(equation, *xs),
                fixed(*[(normal, s) for s in shape_list]))


add(*[_einsum_case(*row) for row in _EINSUM])
add(
    case("einsum_list_operands", "Matmul", lambda m, a, b: m.einsum("ij,jk", [a, b]),
         fixed((normal, (2, 3)), (normal, (3, 4)))),
    case("einsum_int", "Matmul", lambda m, a, b: m.einsum("ij,j->i", a, b),
         fixed((ints(), (2, 3)), (ints(), (3,))), grad=False),
)

# compound arithmetic ----------------------------------------------------------------------


@st.composite
def _addmm_example(draw):
    n, k, p = (draw(st.integers(1, 4)) for _ in range(3))
    bias = draw(st.sampled_from([(n, p), (p,), (1, p), (n, 1), ()]))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(bias), rng.standard_normal((n, k)),
                    rng.standard_normal((k, p))),
                   {"beta": draw(st.sampled_from([1, 0.5, 0])),
                    "alpha": draw(st.sampled_from([1, -2.0]))})


add(
    case("addmm", "Matmul", lambda m, c, a, b, beta, alpha: m.addmm(c, a, b, beta=beta,
                                                                     alpha=alpha),
         _addmm_example()),
    case("addmm_method", ("Matmul", "Add"), lambda m, c, a, b: c.addmm(a, b),
         fixed((normal, (2, 4)), (normal, (2, 3)), (normal, (3, 4)))),
    case("addcmul", ("Add", "Mul"), lambda m, a, b, c: m.addcmul(a, b, c, value=0.5),
         elementwise(normal, normal, normal)),
    case("addcmul_method", ("Add", "Mul"), lambda m, a, b, c: a.addcmul(b, c),
         elementwise(normal, normal, normal)),
    case("addcdiv", ("Add", "Div"), lambda m, a, b, c: m.addcdiv(a, b, c, value=-2.0),
         elementwise(normal, normal, away(0.5))),
    case("addcdiv_method", ("Add", "Div"), lambda m, a, b, c: a.addcdiv(b, c),
         elementwise(normal, normal, away(0.5))),
    case("lerp_scalar", ("Add", "Mul"), lambda m, a, b: m.lerp(a, b, 0.3),
         elementwise(normal, normal)),
    case("lerp_scalar_high", ("Sub", "Mul"), lambda m, a, b: a.lerp(b, 0.8),
         elementwise(normal, normal)),
    # weights on both sides of 0.5 (where PyTorch switches formula) and outside [0, 1]
    case("lerp_tensor", "Where", lambda m, a, b, w: m.lerp(a, b, w),
         elementwise(normal, normal, avoiding([-0.5, 0.5], 0.05, -1.5, 1.5))),
    case("nan_to_num", "Where", lambda m, a: m.nan_to_num(a), elementwise(special),
         fd=False),
    case("nan_to_num_values", "Where",
         lambda m, a: a.nan_to_num(nan=1.5, posinf=100.0, neginf=-7.0), elementwise(special),
         fd=False),
    case("nan_to_num_finite", "Where", lambda m, a: m.nan_to_num(a), elementwise(normal)),
    case("nan_to_num_int", "Clone", lambda m, a: m.nan_to_num(a), elementwise(ints()),
         grad=False),
)

# kthvalue, median, diag, diag_embed, addmv, addbmm, baddbmm --------------------------------


def _distinct_with_nan(rng, shape):
    """Distinct values with some NaN among them."""
    return np.where(rng.random(shape) < 0.3, np.nan, distinct(rng, shape))


@st.composite
def _kth_example(draw, domain=distinct):
    shape = draw(shapes(min_dims=1))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((domain(rng, shape),), {"k": draw(st.integers(1, shape[dim])), "dim": dim,
                                           "keepdim": draw(st.booleans())})


@st.composite
def _batched_products_example(draw, summed):
    b, n, k, p = (draw(st.integers(1, 3)) for _ in range(4))
    out = (n, p) if summed else (b, n, p)
    bias = draw(st.sampled_from([out, out[-1:], (1,) * len(out), ()]))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(bias), rng.standard_normal((b, n, k)),
                    rng.standard_normal((b, k, p))),
                   {"beta": draw(st.sampled_from([1, 0.5, 0])),
                    "alpha": draw(st.sampled_from([1, -2.0]))})


@st.composite
def _addmv_example(draw):
    n, k = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(SEEDS))
    bias = draw(st.sampled_from([(n,), (1,), ()]))
    return Example((rng.standard_normal(bias), rng.standard_normal((n, k)),
                    rng.standard_normal(k)),
                   {"beta": draw(st.sampled_from([1, 0.5, 0])),
                    "alpha": draw(st.sampled_from([1, -2.0]))})


add(
    case("kthvalue", ("Argsort", "Gather"),
         lambda m, a, k, dim, keepdim: m.kthvalue(a, k, dim, keepdim), _kth_example()),
    case("kthvalue_method", ("Argsort", "Gather"), lambda m, a: a.kthvalue(3, 1),
         fixed((distinct, (3, 5)))),
    case("kthvalue_0d", "Argsort", lambda m, a: m.kthvalue(a, 1), elementwise(normal,
                                                                            max_dims=0)),
    case("median_dim", ("Argsort", "Gather"),
         lambda m, a, dim, keepdim: m.median(a, dim, keepdim),
         reduction(distinct, tuples=False, none=False, min_dims=1)),
    case("median_all", ("Argsort", "Gather"), lambda m, a: m.median(a),
         elementwise(distinct)),
    case("median_method_int", "Argsort", lambda m, a: a.median(0), fixed((ints(), (4, 3))),
         grad=False),
    # a slice with NaN has the median NaN, at the index of its first NaN (which index
    # PyTorch picks among other ties is its kernel's business: distinct values here)
    case("median_nan", "Argsort", lambda m, a, dim: m.median(a, dim),
         one_dim(_distinct_with_nan), grad=False),
    case("median_all_nan", "Argsort", lambda m, a: m.median(a),
         fixed((_distinct_with_nan, (3, 4))), grad=False),
    case("diag_vector", "IndexPut", lambda m, a, diagonal: m.diag(a, diagonal),
         elementwise(normal, min_dims=1, max_dims=1,
                     static=sts(diagonal=st.integers(-2, 2)))),
    case("diag_matrix", "Getitem", lambda m, a, diagonal: a.diag(diagonal),
         elementwise(normal, min_dims=2, max_dims=2,
                     static=sts(diagonal=st.integers(-2, 2)))),
    case("diag_embed", "IndexPut",
         lambda m, a, offset, dim1, dim2: m.diag_embed(a, offset, dim1, dim2),
         _diagonal_example(min_dims=1, max_dims=3, added_dims=1, max_offset=2)),
    case("diag_embed_method", "IndexPut", lambda m, a: a.diag_embed(), fixed((normal, (2, 3)))),
    case("addmv", "Matmul", lambda m, c, a, v, beta, alpha: m.addmv(c, a, v, beta=beta,
                                                                     alpha=alpha),
         _addmv_example()),
    case("baddbmm", "Matmul",
         lambda m, c, a, b, beta, alpha: m.baddbmm(c, a, b, beta=beta, alpha=alpha),
         _batched_products_example(summed=False)),
    case("addbmm", ("Matmul", "Sum"),
         lambda m, c, a, b, beta, alpha: c.addbmm(a, b, beta=beta, alpha=alpha),
         _batched_products_example(summed=True)),
)

# running maxima and minima: ties go to the latest index, NaN propagates -----------------

add(
    case("cummax", ("CummaxIndices", "Gather"), lambda m, a, dim: m.cummax(a, dim),
         one_dim(distinct)),
    case("cummin_method", ("CumminIndices", "Gather"), lambda m, a, dim: a.cummin(dim),
         one_dim(distinct)),
    case("cummax_0d", "CummaxIndices", lambda m, a: m.cummax(a, 0),
         elementwise(normal, max_dims=0)),
    # at ties the gradient goes to the latest of them (no finite differences at ties)
    case("cummax_ties", ("CummaxIndices", "Gather"), lambda m, a, dim: m.cummax(a, dim),
         one_dim(integral()), fd=False),
    case("cummin_ties", ("CumminIndices", "Gather"), lambda m, a, dim: m.cummin(a, dim),
         one_dim(integral()), fd=False),
    case("cummax_nan", "CummaxIndices", lambda m, a, dim: m.cummax(a, dim), one_dim(special),
         grad=False),
    case("cummin_nan", "CumminIndices", lambda m, a, dim: m.cummin(a, dim), one_dim(special),
         grad=False),
    case("cummax_int", "CummaxIndices", lambda m, a, dim: m.cummax(a, dim), one_dim(ints()),
         grad=False),
    case("cummin_bool", "CumminIndices", lambda m, a, dim: m.cummin(a, dim), one_dim(bools),
         grad=False),
)

# tensordot, rot90, triangle indices, logaddexp, xlogy ------------------------------------


@st.composite
def _tensordot_example(draw):
    """Operands that share ``n`` contracted dims: the last n of a and the first n of b
    (an int ``dims``), or the same dims listed in shuffled pairs."""
    n = draw(st.integers(0, 2))
    shared = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    free_a = draw(st.lists(st.integers(1, 3), max_size=2))
    free_b = draw(st.lists(st.integers(1, 3), max_size=2))
    rng = np.random.default_rng(draw(SEEDS))
    a, b = rng.standard_normal((*free_a, *shared)), rng.standard_normal((*shared, *free_b))
    if draw(st.booleans()):
        return Example((a, b), {"dims": n})
    pairs = draw(st.permutations(list(range(n))))
    dims = ([len(free_a) + i - a.ndim for i in pairs], list(pairs))
    return Example((a, b), {"dims": dims})


@st.composite
def _rot90_example(draw):
    shape = draw(shapes(min_dims=2))
    nd = len(shape)
    dims = draw(st.lists(st.integers(-nd, nd - 1), min_size=2, max_size=2).filter(
        lambda ds: ds[0] % nd != ds[1] % nd))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),), {"k": draw(st.integers(-5, 5)),
                                                   "dims": tuple(dims)})


def _lower_triangle(m, a, offset):
    rows, cols = m.tril_indices(a.shape[-2], a.shape[-1], offset)
    return a[..., rows, cols]


add(
    case("tensordot", (), lambda m, a, b, dims: m.tensordot(a, b, dims), _tensordot_example()),
    case("tensordot_fixed", ("Matmul", "Permute"),
         lambda m, a, b: m.tensordot(a, b, ([2, 0], [0, 1])),
         fixed((normal, (2, 3, 4)), (normal, (4, 2, 5)))),
    case("rot90", (), lambda m, a, k, dims: m.rot90(a, k, dims), _rot90_example()),
    case("rot90_method", ("Flip", "Permute"), lambda m, a: a.rot90(), fixed((normal, (2, 3)))),
    case("tril_indices_gather", "Getitem", _lower_triangle,
         _matrices(extra=sts(offset=st.integers(-2, 2)))),
    case("triu_indices", (), lambda m: m.triu_indices(3, 4, -1, dtype=m.int32), fixed(),
         grad=False),
    case("logaddexp", ("Exp", "Log"), lambda m, a, b: m.logaddexp(a, b),
         elementwise(normal, normal)),
    # far apart and large: the shift keeps exp from overflowing. PyTorch's own second
    # derivative overflows to nan there: finite differences check graphgrad's
    case("logaddexp_large", ("Exp", "Log"), lambda m, a, b: a.logaddexp(b),
         elementwise(uniform(500, 700), uniform(-700, 600)), grad2=False),
    # equal arguments: the derivative is 1/2 each, the second is not lost at the tie
    case("logaddexp_tie", ("Exp", "Log"), lambda m, a: m.logaddexp(a, a * 1.0),
         elementwise(normal)),
    case("logaddexp_inf", ("Exp", "Log"), lambda m, a, b: m.logaddexp(a, b),
         elementwise(special, special), grad=False),
    case("xlogy", ("Mul", "Log"), lambda m, a, b: m.xlogy(a, b),
         elementwise(with_zeros, positive)),
    case("xlogy_special", "Where", lambda m, a, b: a.xlogy(b),
         elementwise(lambda rng, s: np.where(rng.random(s) < 0.5, 0.0, 1.5), special),
         grad=False),
    case("xlogy_scalar_and_ints", ("Mul", "Log"),
         lambda m, a, b: m.xlogy(a, 2.5) + m.xlogy(2.0, b),
         elementwise(ints(0, 4), ints(1, 5)), grad=False),
)

# coordinate grids ---------------------------------------------------------------------------

add(
    case("meshgrid_ij", "Expand", lambda m, a, b, c: m.meshgrid(a, b, c, indexing="ij"),
         fixed((normal, (3,)), (normal, (2,)), (normal, (4,)))),
    case("meshgrid_xy_list", "Expand", lambda m, a, b: m.meshgrid([a, b], indexing="xy"),
         fixed((normal, (3,)), (normal, (2,)))),
    case("meshgrid_0d", "Expand", lambda m, a, b: m.meshgrid(a, b, indexing="xy"),
         fixed((normal, ()), (normal, (3,)))),
    case("cartesian_prod", "Stack", lambda m, a, b: m.cartesian_prod(a, b),
         fixed((normal, (3,)), (normal, (2,)))),
)

# searching sorted sequences -----------------------------------------------------------------


def _sorted_rows(rng, shape):
    """Small integers sorted along the last dim: values find ties in them (int64, so
    that the vmap tests repeat them rather than shuffle them out of order)."""
    return np.sort(rng.integers(-3, 3, shape), axis=-1)


add(
    case("searchsorted", "Searchsorted",
         lambda m, s, v, right: m.searchsorted(s, v, right=right),
         fixed((_sorted_rows, (5,)), (integral(-4, 4), (2, 3)),
               static={"right": False}), grad=False),
    case("searchsorted_right_rows", "Searchsorted",
         lambda m, s, v: m.searchsorted(s, v, side="right"),
         fixed((_sorted_rows, (2, 3, 4)), (integral(-4, 4), (2, 3, 2))), grad=False),
    case("searchsorted_int32_sorter", ("Gather", "Searchsorted"),
         lambda m, s, v, order: m.searchsorted(s, v, out_int32=True, sorter=order),
         fixed((lambda rng, shape: np.array([3, -1, 2, 0]), (4,)),
               (normal, (3,)), (lambda rng, shape: np.array([1, 3, 2, 0]), (4,))),
         grad=False),
    case("bucketize", "Searchsorted", lambda m, v, b: m.bucketize(v, b, right=True),
         fixed((integral(-4, 4), (3, 2)), (_sorted_rows, (4,))), grad=False),
)


# the peer-suite ops: copysign, logcumsumexp, shifts, scatter, scatter_reduce, index_add,
# repeat_interleave, unfold; the NumPy spellings axis=/keepdims= -------------------------

@st.composite
def _scatter_example(draw, unique=True, value=False):
    """(base, index[, src]) with ``dim``: the index's lines along ``dim`` never repeat
    when ``unique`` (an overwrite is then well defined); src has index's shape."""
    shape = draw(shapes(min_dims=1))
    nd = len(shape)
    dim = draw(st.integers(-nd, nd - 1))
    d = dim % nd
    index_shape = tuple(draw(st.integers(1, s)) for s in shape)
    rng = np.random.default_rng(draw(SEEDS))
    if unique:
        lines = np.moveaxis(np.zeros(index_shape, np.int64), d, -1)
        flat = lines.reshape(-1, lines.shape[-1])
        for row in flat:
            row[:] = rng.permutation(shape[d])[:len(row)]
        index = np.moveaxis(flat.reshape(lines.shape), -1, d)
    else:
        index = rng.integers(0, shape[d], index_shape)
    arrays = (rng.standard_normal(shape), index)
    if not value:
        arrays += (rng.standard_normal(index_shape),)
    return Example(arrays, {"dim": dim})


@st.composite
def _unfold_example(draw):
    shape = draw(shapes(min_dims=1))
    nd = len(shape)
    dim = draw(st.integers(-nd, nd - 1))
    size = draw(st.integers(0, shape[dim]))
    step = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(SEEDS))
    return Example((rng.standard_normal(shape),), {"dim": dim, "size": size, "step": step})


@st.composite
def _repeats_example(draw, tensor=False):
    shape = draw(shapes(min_dims=0))
    nd = max(len(shape), 1)
    # PyTorch refuses a dim of a 0-d input (test_ops_peer_suite.py checks its errors)
    dim = draw(st.one_of(st.none(), st.integers(-nd, nd - 1))) if shape else None
    rng = np.random.default_rng(draw(SEEDS))
    arrays = (rng.standard_normal(shape),)
    static = {"dim": dim}
    if tensor:  # counts made inside the function: vmap cannot batch them (data-dependent)
        n = int(np.prod(shape)) if dim is None else (shape[dim] if shape else 1)
        static["counts"] = tuple(int(c) for c in rng.integers(0, 3, n))
    else:
        static["repeats"] = draw(st.integers(0, 3))
    return Example(arrays, static)


def _index_add_example(fill=False):
    static = {"alpha": 1.5} if not fill else {}
    made = [(normal, (3, 4)), (lambda rng, s: np.array([0, 3, 0]), ())]
    if not fill:
        made.append((normal, (3, 3)))
    return fixed(*made, static=static)


add(
    case("copysign", "Copysign", lambda m, a, b: m.copysign(a, b),
         elementwise(away(0.1), away(0.1))),
    case("copysign_method_number", "Copysign", lambda m, a: a.copysign(-1.0),
         elementwise(away(0.1))),
    case("copysign_int", "Copysign", lambda m, a, b: m.copysign(a, b),
         elementwise(ints(), ints()), grad=False),
    case("logcumsumexp", "Logcumsumexp", lambda m, a, dim: m.logcumsumexp(a, dim),
         one_dim(uniform(-5, 5))),
    case("logcumsumexp_method", "Logcumsumexp", lambda m, a, dim: a.logcumsumexp(dim),
         one_dim(normal, min_dims=0)),
    case("bitwise_left_shift", "BitwiseLeftShift", lambda m, a, b: m.bitwise_left_shift(a, b),
         elementwise(ints(-50, 50), ints(0, 8)), grad=False),
    case("bitwise_right_shift", "BitwiseRightShift", lambda m, a, b: a >> b,
         elementwise(ints(-50, 50), ints(0, 8)), grad=False),
    case("shift_reflected", ("BitwiseLeftShift", "BitwiseRightShift"),
         lambda m, a: (3 << a, 100 >> a, a.__rlshift__(2)), elementwise(ints(0, 8)),
         grad=False),
    case("bitwise_reflected", ("BitwiseXor", "BitwiseAnd", "BitwiseOr"),
         lambda m, a: (5 ^ a, 6 & a, 9 | a, a.bitwise_not()), elementwise(ints()), grad=False),
    case("scatter", "Scatter", lambda m, a, i, s, dim: m.scatter(a, dim, i, s),
         _scatter_example()),
    case("scatter_value_method", "Scatter", lambda m, a, i, dim: a.scatter(dim, i, -1.5),
         _scatter_example(unique=False, value=True)),
    case("scatter_reduce_add", "Scatter",
         lambda m, a, i, s, dim: m.scatter(a, dim, i, s, reduce="add"),
         _scatter_example(unique=False), grad=False),
    case("scatter_reduce_multiply", "Scatter",
         lambda m, a, i, dim: a.scatter(dim, i, 1.5, reduce="multiply"),
         _scatter_example(unique=False, value=True), grad=False),
    case("index_add", "IndexPut", lambda m, a, i, s, alpha: a.index_add(1, i, s, alpha=alpha),
         _index_add_example()),
    case("index_fill", "IndexPut", lambda m, a, i: m.index_fill(a, 1, i, -2.0),
         _index_add_example(fill=True)),
    case("repeat_interleave", "Getitem",
         lambda m, a, dim, repeats: m.repeat_interleave(a, repeats, dim=dim),
         _repeats_example()),
    case("repeat_interleave_tensor", "Getitem",
         lambda m, a, dim, counts: a.repeat_interleave(m.tensor(counts, dtype=m.int64),
                                                       dim=dim),
         _repeats_example(tensor=True)),
    case("unfold", "Unfold", lambda m, a, dim, size, step: a.unfold(dim, size, step),
         _unfold_example()),
    case("sum_axis_keepdims", "Sum", lambda m, a, dim, keepdim: m.sum(a, axis=dim,
                                                                      keepdims=keepdim),
         reduction()),
    case("mean_axis_method", "Mean", lambda m, a, dim, keepdim: a.mean(axis=dim,
                                                                       keepdims=keepdim),
         reduction()),
    case("amax_axis", "Amax", lambda m, a, dim, keepdim: m.amax(a, axis=dim, keepdims=keepdim),
         reduction(distinct, none=False)),
    case("softmax_axis", "Softmax", lambda m, a, dim: m.softmax(a, axis=dim), one_dim()),
)

for _red in ("sum", "mean"):  # prod/amax/amin: tests/test_ops_peer_suite.py (no torch jvp)
    for _inc in (True, False):
        add(case(f"scatter_reduce_{_red}_{_inc}", "ScatterReduce",
                 (lambda r, inc: lambda m, a, i, s, dim: m.scatter_reduce(
                     a, dim, i, s, r, include_self=inc))(_red, _inc),
                 _scatter_example(unique=False)))

# sampling (graphgrad.ops.random) ----------------------------------------------------------
# The ops are pure given their raw samples (the last input, drawn by random_tensor in the
# public functions), so each case passes the samples in and torch computes the same
# transform of them; the gradients are zero, as torch's normal and bernoulli give.


def _sampling_op(name):
    def fn(*xs, **params):
        return getattr(gg.ops.random, name).apply(*xs, **params)
    return fn


def _torch_zero_grad(value, *inputs):
    """``value`` with zero gradients to ``inputs`` (torch's rule for its samplers)."""
    return value.detach() + sum(x.sum() * 0 for x in inputs)


add(
    case("normal_op", "Normal", lambda m, mean, std, z: _sampling_op("Normal")(mean, std, z),
         fixed((normal, (3, 1)), (positive, (4,)), (normal, (3, 4)), nograd=(2,)),
         torch_fn=lambda m, mean, std, z: _torch_zero_grad(mean + std * z, mean, std),
         fd=False),
    case("bernoulli_op", "Bernoulli", lambda m, p, u: _sampling_op("Bernoulli")(p, u),
         fixed((uniform(0.05, 0.95), (3, 4)), (uniform(0.0, 1.0), (3, 4)), nograd=(1,)),
         torch_fn=lambda m, p, u: _torch_zero_grad((u < p).to(p.dtype), p), fd=False),
    case("bernoulli_op_p", "Bernoulli",
         lambda m, x, u: _sampling_op("Bernoulli")(x, u, p=0.3),
         fixed((normal, (5,)), (uniform(0.0, 1.0), (5,))),
         torch_fn=lambda m, x, u: (u < 0.3).to(x.dtype), grad=False),
    case("multinomial_op", "Multinomial",
         lambda m, p, u: _sampling_op("Multinomial")(p, u, num_samples=3, replacement=False),
         fixed((positive, (2, 5)), (uniform(0.0, 1.0), (2, 5))),
         torch_fn=lambda m, p, u: m.topk(p / -m.log1p(-u), 3).indices, grad=False),
    case("multinomial_op_replacement", "Multinomial",
         lambda m, p, u: _sampling_op("Multinomial")(p, u, num_samples=6, replacement=True),
         fixed((positive, (4,)), (uniform(0.0, 1.0), (6,))),
         torch_fn=lambda m, p, u: m.searchsorted(m.cumsum(p, -1) / p.sum(), u, right=True)
         .clamp(max=3), grad=False, float32=False),
)

# convolution kernels (ops/conv_kernels.py): every kind through nn.functional -----------
# (few channels: the tap-by-tap path for many channels is tested in test_conv_kernels.py)


@st.composite
def _conv_example(draw):
    """conv{1,2,3}d or conv_transpose{1,2,3}d: batch 1-2, groups, odd sizes, strides,
    padding, dilation (and output_padding for the transposes), bias or none."""
    nd = draw(st.integers(1, 3))
    transposed = draw(st.booleans())
    groups = draw(st.integers(1, 2))
    c_in, c_out = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    side = 3 if nd == 3 else 5
    k = tuple(draw(st.integers(1, 3 if nd < 3 else 2)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    p = tuple(draw(st.integers(0, 2)) for _ in range(nd))
    size = tuple(max(1, di * (ki - 1) + 1 - 2 * pi) + draw(st.integers(0, side - 2))
                 for ki, di, pi in zip(k, d, p, strict=True))
    static = {"nd": nd, "transposed": transposed, "stride": s, "padding": p, "dilation": d,
              "groups": groups}
    if transposed:
        static["output_padding"] = tuple(draw(st.integers(0, max(si, di) - 1))
                                         for si, di in zip(s, d, strict=True))
        assume(all((e - 1) * si - 2 * pi + di * (ki - 1) + op + 1 > 0 for e, si, pi, di, ki, op
                   in zip(size, s, p, d, k, static["output_padding"], strict=True)))
    w_shape = (c_in, c_out // groups, *k) if transposed else (c_out, c_in // groups, *k)
    rng = np.random.default_rng(draw(SEEDS))
    arrays = [rng.standard_normal((draw(st.integers(1, 2)), c_in, *size)),
              rng.standard_normal(w_shape)]
    if draw(st.booleans()):
        arrays.append(rng.standard_normal(c_out))
    return Example(tuple(arrays), static)


def _conv(m, x, w, *b, nd, transposed, **kw):
    f = getattr(m.nn.functional, f"conv_transpose{nd}d" if transposed else f"conv{nd}d")
    return f(x, w, *b, **kw)


def _conv_weight_grad(m, x, g):
    """The op itself against torch's vjp of conv2d with respect to the weight."""
    geometry = dict(stride=(2, 2), padding=(1, 1), dilation=(1, 1), groups=2)
    if m is gg:
        return ConvolutionBackwardWeight.apply(x, g, kernel_size=(3, 2), **geometry)
    w = m.zeros(4, 2, 3, 2, dtype=x.dtype)
    return m.func.vjp(lambda v: m.nn.functional.conv2d(x, v, **geometry), w)[1](g)[0]


add(case("convolution", "Convolution", _conv, _conv_example()),
    case("convolution_weight_grad", "ConvolutionBackwardWeight", _conv_weight_grad,
         fixed((normal, (2, 4, 5, 4)), (normal, (2, 4, 3, 3)))))

# pooling kernels (ops/pooling.py): max pooling's index op and index-based gradient, and
# average pooling, over PyTorch's edge cases (ceil_mode windows past the edge, padding
# with dilation, count_include_pad=False, divisor_override) ------------------------------


@st.composite
def _pool_example(draw, avg: bool):
    nd = draw(st.integers(1, 3))
    k = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = (1,) * nd if avg else tuple(draw(st.integers(1, 2)) for _ in range(nd))
    p = tuple(draw(st.integers(0, ki // 2)) for ki in k)
    size = tuple(di * (ki - 1) + 1 + draw(st.integers(0, 3 if nd < 3 else 1))
                 for ki, di in zip(k, d, strict=True))
    static = {"nd": nd, "kernel_size": k, "stride": s, "padding": p,
              "ceil_mode": draw(st.booleans())}
    if avg:
        static["count_include_pad"] = draw(st.booleans())
        if nd > 1 and draw(st.booleans()):
            static["divisor_override"] = draw(st.integers(1, 5))
    else:
        static["dilation"] = d
    rng = np.random.default_rng(draw(SEEDS))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2)), *size)
    return Example((distinct(rng, shape),), static)


def _max_pool(m, x, nd, **kw):
    return getattr(m.nn.functional, f"max_pool{nd}d")(x, return_indices=True, **kw)


def _avg_pool(m, x, nd, **kw):
    return getattr(m.nn.functional, f"avg_pool{nd}d")(x, **kw)


_POOL_GEOMETRY = dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(1, 2),
                      ceil_mode=True)


def _max_pool_gradient(m, x, g):
    """PutPlanes itself against torch's vjp of max_pool2d (x only gives the indices)."""
    if m is gg:
        _, idx = m.nn.functional.max_pool2d(x, return_indices=True, **_POOL_GEOMETRY)
        return PutPlanes.apply(g, idx, size=tuple(x.shape[2:]), accumulate=True)
    return m.func.vjp(lambda v: m.nn.functional.max_pool2d(v, **_POOL_GEOMETRY), x)[1](g)[0]


def _avg_pool_gradient(m, g):
    geometry = dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), ceil_mode=True,
                    count_include_pad=False, divisor_override=None)
    if m is gg:
        return AvgPoolBackward.apply(g, size=(5, 6), **geometry)
    x = m.zeros(2, 3, 5, 6, dtype=g.dtype)
    return m.func.vjp(lambda v: m.nn.functional.avg_pool2d(v, **geometry), x)[1](g)[0]


add(case("max_pool", ("MaxPoolIndices", "TakePlanes"), _max_pool, _pool_example(False)),
    case("avg_pool", "AvgPool", _avg_pool, _pool_example(True)),
    case("max_pool_gradient", "PutPlanes", _max_pool_gradient,
         fixed((distinct, (2, 2, 5, 6)), (normal, (2, 2, 3, 6)), nograd=(0,))),
    case("avg_pool_gradient", "AvgPoolBackward", _avg_pool_gradient,
         fixed((normal, (2, 3, 3, 7)))))


def _adaptive_pool(m, x, kind, nd, output_size):
    f = getattr(m.nn.functional, f"adaptive_{kind}_pool{nd}d")
    return f(x, output_size, return_indices=True) if kind == "max" else f(x, output_size)


# uneven windows (overlapping, or longer than the input: repeated positions), None sizes
for _nd, _shape, _out in ((1, (2, 3, 7), (3,)), (2, (2, 2, 5, 4), (3, 6)),
                          (2, (1, 2, 6, 5), (None, 3)), (3, (1, 2, 3, 4, 5), (2, 3, 2))):
    add(case(f"adaptive_max_pool{_nd}d_{_out}", ("AdaptiveMaxPoolIndices", "TakePlanes"),
             _adaptive_pool, fixed((distinct, _shape), static=dict(kind="max", nd=_nd,
                                                                   output_size=_out))),
        case(f"adaptive_avg_pool{_nd}d_{_out}", "AdaptiveAvgPool", _adaptive_pool,
             fixed((normal, _shape), static=dict(kind="avg", nd=_nd, output_size=_out))))

# recurrent layers (ops/recurrent.py): the sequence ops against the same recurrence
# written step by step in torch; the fused backward ops against torch's vjp of it --------


def lstm_reference(m, xg, h0, c0, w):
    """An LSTM layer's recurrence in plain ops of ``m``: (L, N, 2H) of [h_t | c_t]."""
    h, c, out = h0, c0, []
    hidden = h0.shape[-1]
    for t in range(xg.shape[0]):
        i, f, g, o = (xg[t] + h @ w.T).split(hidden, -1)
        c = m.sigmoid(f) * c + m.sigmoid(i) * m.tanh(g)
        h = m.sigmoid(o) * m.tanh(c)
        out.append(m.cat([h, c], -1))
    return m.stack(out)


def gru_reference(m, xg, h0, w, b=None):
    h, out = h0, []
    hidden = h0.shape[-1]
    for t in range(xg.shape[0]):
        hg = h @ w.T if b is None else h @ w.T + b
        xr, xz, xn = xg[t].split(hidden, -1)
        hr, hz, hn = hg.split(hidden, -1)
        r, z = m.sigmoid(xr + hr), m.sigmoid(xz + hz)
        n = m.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        out.append(h)
    return m.stack(out)


def rnn_reference(m, xg, h0, w, *, nonlinearity):
    h, out = h0, []
    for t in range(xg.shape[0]):
        h = getattr(m, nonlinearity)(xg[t] + h @ w.T)
        out.append(h)
    return m.stack(out)


def _layer_op(name, reference, **params):
    def fn(m, *xs):
        if m is gg:
            return REGISTRY[name].apply(*xs, **params)
        return reference(m, *xs, **params)
    return fn


def _layer_backward_op(name, reference, **params):
    """The fused backward op on (g, *inputs) against torch's vjp of the reference."""
    def fn(m, g, *xs):
        if m is gg:
            return REGISTRY[name].apply(g, REGISTRY[name[:-8]].apply(*xs, **params), *xs,
                                        **params)
        _, pull = m.func.vjp(lambda *a: reference(m, *a, **params), *xs)
        return m.cat([d.reshape(-1) for d in pull(g)])
    return fn


_LSTM_SHAPES = ((normal, (3, 2, 8)), (normal, (2, 2)), (normal, (2, 2)), (normal, (8, 2)))
_GRU_SHAPES = ((normal, (3, 2, 6)), (normal, (2, 2)), (normal, (6, 2)), (normal, (6,)))
add(case("lstm_layer", "LstmLayer", _layer_op("LstmLayer", lstm_reference),
         fixed(*_LSTM_SHAPES)),
    case("gru_layer", "GruLayer", _layer_op("GruLayer", gru_reference), fixed(*_GRU_SHAPES)),
    case("gru_layer_no_bias", "GruLayer", _layer_op("GruLayer", gru_reference),
         fixed(*_GRU_SHAPES[:3])),
    case("lstm_layer_backward", "LstmLayerBackward",
         _layer_backward_op("LstmLayerBackward", lstm_reference),
         fixed((normal, (3, 2, 4)), *_LSTM_SHAPES), grad=False),
    case("gru_layer_backward", "GruLayerBackward",
         _layer_backward_op("GruLayerBackward", gru_reference),
         fixed((normal, (3, 2, 2)), *_GRU_SHAPES), grad=False))
_RNN_SHAPES = ((normal, (4, 2, 3)), (normal, (2, 3)), (normal, (3, 3)))
for _act in ("tanh", "relu"):
    add(case(f"rnn_layer_{_act}", "RnnLayer",
             _layer_op("RnnLayer", rnn_reference, nonlinearity=_act), fixed(*_RNN_SHAPES)),
        case(f"rnn_layer_backward_{_act}", "RnnLayerBackward",
             _layer_backward_op("RnnLayerBackward", rnn_reference, nonlinearity=_act),
             fixed((normal, (4, 2, 3)), *_RNN_SHAPES), grad=False))

# attention (ops/attention.py): the fused op and its fused backward, masks and causal -------


def _sdpa(m, q, k, v, *mask, **kw):
    return m.nn.functional.scaled_dot_product_attention(q, k, v, *mask, **kw)


def sdpa_reference(m, q, k, v, *mask, scale=None, is_causal=False):
    """PyTorch's math reference of attention (its fused CPU kernels have no double
    backward or forward-mode rule)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale
    if is_causal:
        mask = (m.ones(s.shape[-2], s.shape[-1], dtype=m.bool).tril(),)
    if mask:
        s = s.masked_fill(~mask[0], float("-inf")) if mask[0].dtype == m.bool else s + mask[0]
    return m.softmax(s, -1) @ v


def _sdpa_backward(m, g, q, k, v, *mask):
    """The fused backward against torch's vjp (q, k, v and a float mask)."""
    if m is gg:
        from graphgrad.ops.attention import ScaledDotProductAttentionBackward
        return ScaledDotProductAttentionBackward.apply(g, q, k, v, *mask, scale=0.5,
                                                       is_causal=False,
                                                       float_mask_grad=bool(mask))
    _, pull = m.func.vjp(lambda *a: sdpa_reference(m, *a, scale=0.5), q, k, v, *mask)
    return m.cat([d.reshape(-1) for d in pull(g)])


def _sdpa_backward_kept(m, g, q, k, v):
    """The fused backward given the weights the forward kept (transposed), against
    torch's vjp."""
    if m is gg:
        from graphgrad.ops.attention import ScaledDotProductAttentionBackward
        p_t = m.softmax((q @ k.transpose(-2, -1)) * 0.5, -1).transpose(-2, -1)
        return ScaledDotProductAttentionBackward.apply(g, q, k, v, p_t, scale=0.5,
                                                       is_causal=False, float_mask_grad=False,
                                                       kept_weights=True)
    return _sdpa_backward(m, g, q, k, v)


@st.composite
def _sdpa_example(draw):
    """q (B, H, L, E) with k, v broadcast over B or not, a bool or float mask or none."""
    rng = np.random.default_rng(draw(SEEDS))
    b, h, n_q, n_k, e = (draw(st.integers(1, 3)) for _ in range(5))
    kb = draw(st.sampled_from([b, 1]))
    arrays = [rng.standard_normal((b, h, n_q, e)), rng.standard_normal((kb, h, n_k, e)),
              rng.standard_normal((kb, h, n_k, draw(st.integers(1, 3))))]
    kind = draw(st.sampled_from(["none", "bool", "float", "causal"]))
    static = {"scale": draw(st.sampled_from([None, 0.3]))}
    if kind == "bool":
        keep = rng.random((n_q, n_k)) < 0.7
        keep[:, 0] = True  # no row fully masked (PyTorch gives NaN there)
        arrays.append(keep)
    elif kind == "float":
        arrays.append(rng.standard_normal((h, n_q, n_k)))
    elif kind == "causal":
        static["is_causal"] = True
    return Example(tuple(arrays), static)


add(case("scaled_dot_product_attention", "ScaledDotProductAttention", _sdpa, _sdpa_example(),
         torch_fn=sdpa_reference),
    case("scaled_dot_product_attention_backward", "ScaledDotProductAttentionBackward",
         _sdpa_backward, fixed((normal, (2, 3, 2)), (normal, (2, 3, 4)), (normal, (2, 5, 4)),
                               (normal, (2, 5, 2)), (normal, (2, 3, 5))), grad=False),
    case("scaled_dot_product_attention_backward_kept", "ScaledDotProductAttentionBackward",
         _sdpa_backward_kept, fixed((normal, (2, 3, 2)), (normal, (2, 3, 4)),
                                    (normal, (2, 5, 4)), (normal, (2, 5, 2))), grad=False))

# layer norm (ops/layer_norm.py): the fused op with or without weight and bias, and its
# fused backward against torch's vjp ---------------------------------------------------


def _layer_norm(m, x, *affine, normalized_shape):
    return m.nn.functional.layer_norm(x, normalized_shape, *affine)


def layer_norm_reference(m, x, *affine, normalized_shape):
    """PyTorch's layer norm composed of its primitives: its native kernel's derivatives
    are wrong from the third order on (its double backward is not differentiated
    exactly: on a (3, 4, 5) example the third directional derivative is -580.4 where
    the composite, graphgrad's jet and graphgrad's nested reverse mode give -437.6)."""
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xc = x - x.mean(dims, keepdim=True)
    out = xc * m.rsqrt((xc * xc).mean(dims, keepdim=True) + 1e-5)
    if affine:
        out = out * affine[0]
    return out + affine[1] if len(affine) > 1 else out


def _layer_norm_backward(m, g, x, w, b):
    if m is gg:
        from graphgrad.ops.layer_norm import NativeLayerNormBackward
        return NativeLayerNormBackward.apply(g, x, w, b, normalized_shape=tuple(w.shape),
                                             eps=1e-5)
    _, pull = m.func.vjp(lambda *a: m.nn.functional.layer_norm(a[0], tuple(w.shape), *a[1:]),
                         x, w, b)
    return m.cat([d.reshape(-1) for d in pull(g)])


def _log_softmax_backward(m, g, a):
    """LogSoftmaxBackward (the plain eager backward's kernel) against torch's vjp."""
    if m is gg:
        out = m.log_softmax(a, 1)
        return REGISTRY["LogSoftmaxBackward"].apply(g, out.detach(), dim=1)
    return m.func.vjp(lambda v: m.log_softmax(v, 1), a)[1](g)[0]


add(case("log_softmax_backward", "LogSoftmaxBackward", _log_softmax_backward,
         fixed((normal, (4, 6)), (normal, (4, 6))), grad=False))


add(case("layer_norm", "NativeLayerNorm", _layer_norm,
         fixed((normal, (3, 4, 5)), (normal, (4, 5)), (normal, (4, 5)),
               static={"normalized_shape": (4, 5)}), torch_fn=layer_norm_reference),
    case("layer_norm_native", "NativeLayerNorm", _layer_norm,  # to second order
         fixed((normal, (3, 4, 5)), (normal, (4, 5)), (normal, (4, 5)),
               static={"normalized_shape": (4, 5)})),
    case("layer_norm_weight", "NativeLayerNorm", _layer_norm,
         fixed((normal, (2, 3, 4)), (normal, (4,)), static={"normalized_shape": (4,)}),
         torch_fn=layer_norm_reference),
    case("layer_norm_plain", "NativeLayerNorm", _layer_norm,
         fixed((normal, (5, 3)), static={"normalized_shape": (3,)}),
         torch_fn=layer_norm_reference),
    case("layer_norm_backward", "NativeLayerNormBackward", _layer_norm_backward,
         fixed((normal, (3, 4, 5)), (normal, (3, 4, 5)), (normal, (4, 5)), (normal, (4, 5))),
         grad=False))


# attention with dropout (its keep-mask an input) and with its weights as a second output


def _sdpa_full(m, q, k, v, *masks, need_weights=False, p=0.25):
    """The fused op with a keep-mask (the last input; a float mask may come first),
    against the composite in torch with that mask."""
    if m is gg:
        from graphgrad.nn.functional.attention import _shapes, _split
        from graphgrad.ops.attention import ScaledDotProductAttention
        out = ScaledDotProductAttention.apply(q, k, v, *masks, scale=0.5, is_causal=False,
                                              dropout_p=p, need_weights=need_weights)
        if not need_weights:
            return out
        mask = masks[0] if len(masks) > 1 else None
        return _split(out, *_shapes(q, k, v, mask, masks[-1]))
    s = (q @ k.transpose(-2, -1)) * 0.5
    if len(masks) > 1:
        s = s + masks[0]
    w = m.softmax(s, -1) * masks[-1] / (1 - p)
    return (w @ v, w) if need_weights else w @ v


def _sdpa_full_backward(m, g, q, k, v, mask, keep):
    """The fused backward with packed cotangents of the output and the weights."""
    if m is gg:
        from graphgrad.ops.attention import ScaledDotProductAttentionBackward
        return ScaledDotProductAttentionBackward.apply(
            g, q, k, v, mask, keep, scale=0.5, is_causal=False, float_mask_grad=True,
            dropout_p=0.25, need_weights=True)
    _, pull = m.func.vjp(lambda *a: _sdpa_full(m, *a, keep, need_weights=True), q, k, v, mask)
    n = 2 * 3 * 2
    cts = (g[:n].reshape(2, 3, 2), g[n:].reshape(2, 3, 5))
    return m.cat([d.reshape(-1) for d in pull(cts)])


def _sdpa_weights(m, q, k, v):
    """(output, weights) without dropout: MultiheadAttention's need_weights call."""
    if m is gg:
        from graphgrad.nn.functional.attention import attention_with_weights
        return attention_with_weights(q, k, v, None, 0.0, 0.5)
    w = m.softmax((q @ k.transpose(-2, -1)) * 0.5, -1)
    return w @ v, w


def _keep(rng, shape):
    return rng.random(shape) >= 0.25


add(case("scaled_dot_product_attention_dropout", "ScaledDotProductAttention", _sdpa_full,
         fixed((normal, (2, 3, 4)), (normal, (2, 5, 4)), (normal, (2, 5, 2)),
               (_keep, (2, 3, 5)))),
    case("scaled_dot_product_attention_weights", "ScaledDotProductAttention", _sdpa_full,
         fixed((normal, (2, 3, 4)), (normal, (5, 4)), (normal, (2, 5, 2)), (normal, (3, 5)),
               (_keep, (2, 3, 5)), static={"need_weights": True})),
    case("scaled_dot_product_attention_weights_no_dropout", "ScaledDotProductAttention",
         _sdpa_weights, fixed((normal, (2, 3, 4)), (normal, (2, 5, 4)), (normal, (2, 5, 2)))),
    case("scaled_dot_product_attention_weights_backward", "ScaledDotProductAttentionBackward",
         _sdpa_full_backward,
         fixed((normal, (2 * 3 * 2 + 2 * 3 * 5,)), (normal, (2, 3, 4)), (normal, (2, 5, 4)),
               (normal, (2, 5, 2)), (normal, (2, 3, 5)), (_keep, (2, 3, 5))), grad=False))

# a linear layer and its relu as one op (ops/addmm_activation.py) ------------------------


def _linear_relu(m, x, w, *b):
    if m is gg:
        from graphgrad.ops.addmm_activation import linear_relu
        return linear_relu(x, w, *b)
    return m.relu(m.nn.functional.linear(x, w, *b))


add(case("addmm_activation", "AddmmActivation", _linear_relu,
         fixed((away(), (4, 3)), (normal, (5, 3)), (normal, (5,)))),
    case("addmm_activation_batched_rows", "AddmmActivation", _linear_relu,
         fixed((away(), (2, 4, 3)), (normal, (5, 3)))))

# dropout's product with its boolean mask (ops/dropout.py) -------------------------------


def _native_dropout(m, x, keep, p=0.3):
    if m is gg:
        from graphgrad.ops.dropout import NativeDropout
        return NativeDropout.apply(x, keep, p=p)
    return x * keep / (1 - p)


add(case("native_dropout", "NativeDropout", _native_dropout,
         fixed((normal, (3, 4)), (_keep, (3, 4)))),
    case("native_dropout_channels", "NativeDropout", _native_dropout,
         fixed((normal, (2, 3, 4)), (_keep, (2, 3, 1)))))
