"""Per-op cases for the forward-mode (jvp) and vmap tests in ``test_func.py``.

Each case is one small function written once against a namespace ``m``: graphgrad
itself, or ``TORCH`` (torch under graphgrad's names where they differ, e.g.
``m.gelu``). ``make(rng)`` returns one example's inputs as NumPy arrays; the test
turns them into tensors of both frameworks, stacks several examples for vmap, and
compares graphgrad with ``torch.func``. ``ops`` names the ``graphgrad.ops.REGISTRY``
entries the case is meant to exercise: a test checks they really are dispatched, and
another fails when a registered op has no case.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as TNF

__all__ = ["Case", "CASES", "TORCH"]


class _TorchNamespace:
    """``torch`` under graphgrad's function names where those differ."""

    gelu = staticmethod(TNF.gelu)
    softplus = staticmethod(TNF.softplus)
    pad = staticmethod(TNF.pad)
    one_hot = staticmethod(TNF.one_hot)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


TORCH = _TorchNamespace()


@dataclass(frozen=True)
class Case:
    name: str
    ops: tuple[str, ...]
    fn: Callable          # fn(m, *inputs)
    make: Callable        # make(rng) -> tuple of NumPy arrays: one example
    diff: tuple | None = None  # inputs that get tangents (None: every float input)
    jvp: bool = True      # False for cases made only of non-differentiable ops
    in_dims: tuple = ()   # the vmap in_dims variants to try (empty: the defaults)
    vmap_error: bool = False  # both frameworks refuse to vmap it (dynamic shapes)
    rtol: float = 1e-9


# ---- input makers ---------------------------------------------------------------------

def normal(*shape):
    return lambda rng: rng.standard_normal(shape)


def positive(*shape):
    return lambda rng: rng.uniform(0.5, 2.0, shape)


def unit(*shape):
    return lambda rng: rng.uniform(-0.9, 0.9, shape)


def integral(*shape, low=-2, high=3):
    """Small integers stored as float64: comparisons then see ties."""
    return lambda rng: rng.integers(low, high, shape).astype(np.float64)


def ints(*shape, low=0, high=4):
    return lambda rng: rng.integers(low, high, shape)


def bools(*shape):
    return lambda rng: rng.random(shape) < 0.5


def special(*shape):
    """Floats with some nan and inf in them."""
    def make(rng):
        a = rng.standard_normal(shape)
        flat = a.reshape(-1)
        flat[rng.integers(0, flat.size, 2)] = np.nan
        flat[rng.integers(0, flat.size, 2)] = np.inf
        flat[rng.integers(0, flat.size, 1)] = -np.inf
        return a
    return make


def near(*shape):
    """Two arrays that are equal in some places and close in others."""
    def make(rng):
        a = rng.standard_normal(shape)
        b = a + rng.choice([0.0, 1e-9, 1e-3], shape)
        return a, b
    return make


def inputs(*makers):
    return lambda rng: tuple(m(rng) for m in makers)


def _case(name, ops, fn, make, **kw) -> Case:
    if isinstance(ops, str):
        ops = (ops,)
    return Case(name, tuple(ops), fn, make, **kw)


X = (3, 4)  # the example shape of most cases

# ---- unary elementwise ----------------------------------------------------------------

_UNARY = {
    "Abs": (lambda m, x: m.abs(x), normal),
    "Acos": (lambda m, x: m.acos(x), unit),
    "Asin": (lambda m, x: m.asin(x), unit),
    "Atan": (lambda m, x: m.atan(x), normal),
    "Ceil": (lambda m, x: m.ceil(x), normal),
    "Cos": (lambda m, x: m.cos(x), normal),
    "Cosh": (lambda m, x: m.cosh(x), normal),
    "Erf": (lambda m, x: m.erf(x), normal),
    "Exp": (lambda m, x: m.exp(x), normal),
    "Detach": (lambda m, x: m.detach(x) * x, normal),  # the tangent flows through x only
    "Expm1": (lambda m, x: m.expm1(x), normal),
    "Floor": (lambda m, x: m.floor(x), normal),
    "Log": (lambda m, x: m.log(x), positive),
    "Log10": (lambda m, x: m.log10(x), positive),
    "Log1p": (lambda m, x: m.log1p(x), positive),
    "Log2": (lambda m, x: m.log2(x), positive),
    "Neg": (lambda m, x: m.neg(x), normal),
    "Reciprocal": (lambda m, x: m.reciprocal(x), positive),
    "Relu": (lambda m, x: m.relu(x), normal),
    "Round": (lambda m, x: m.round(x), normal),
    "Rsqrt": (lambda m, x: m.rsqrt(x), positive),
    "Sigmoid": (lambda m, x: m.sigmoid(x), normal),
    "Sign": (lambda m, x: m.sign(x), normal),
    "Sin": (lambda m, x: m.sin(x), normal),
    "Sinh": (lambda m, x: m.sinh(x), normal),
    "Sqrt": (lambda m, x: m.sqrt(x), positive),
    "Tan": (lambda m, x: m.tan(x), unit),
    "Tanh": (lambda m, x: m.tanh(x), normal),
    "Trunc": (lambda m, x: m.trunc(x), normal),
    "Clone": (lambda m, x: m.clone(x), normal),
}

CASES: list[Case] = [_case(op.lower(), op, fn, inputs(maker(*X)))
                     for op, (fn, maker) in _UNARY.items()]

CASES += [
    _case("round_decimals", "Round", lambda m, x: m.round(x * 10, decimals=1),
          inputs(normal(*X))),
    _case("gelu", "Gelu", lambda m, x: m.gelu(x), inputs(normal(*X))),
    _case("gelu_tanh", "Gelu", lambda m, x: m.gelu(x, approximate="tanh"), inputs(normal(*X))),
    _case("gelu_backward", "GeluBackward",
          lambda m, g, x: (m.ops.REGISTRY["GeluBackward"].apply(g, x, approximate="tanh")
                           if m is not TORCH else m.func.vjp(
                               lambda v: m.nn.functional.gelu(v, approximate="tanh"), x)[1](
                               g)[0]),
          inputs(normal(*X), normal(*X)), jvp=False),
    _case("softplus", "Softplus", lambda m, x: m.softplus(x * 3, beta=2.0, threshold=4.0),
          inputs(normal(*X))),
    _case("clamp", "Clamp", lambda m, x: m.clamp(x, min=-0.5, max=0.5), inputs(normal(*X))),
    _case("clamp_min", "Clamp", lambda m, x: m.clamp(x, min=0.1), inputs(normal(*X))),
    _case("cast_float32", "Cast", lambda m, x: x.to(m.float32) * 2, inputs(normal(*X)),
          rtol=1e-6),
    _case("sum_of_float32", ("Cast", "Sum"), lambda m, x: x.float().sum(dim=0).double(),
          inputs(normal(*X)), rtol=1e-6),
]

# ---- binary elementwise ---------------------------------------------------------------

_BINARY = {
    "Add": (lambda m, x, y: m.add(x, y), normal, normal),
    "Sub": (lambda m, x, y: m.sub(x, y), normal, normal),
    "Mul": (lambda m, x, y: m.mul(x, y), normal, normal),
    "Div": (lambda m, x, y: m.div(x, y), normal, positive),
    "Pow": (lambda m, x, y: m.pow(x, y), positive, normal),
    "Maximum": (lambda m, x, y: m.maximum(x, y), normal, normal),
    "Minimum": (lambda m, x, y: m.minimum(x, y), normal, normal),
    "Atan2": (lambda m, x, y: m.atan2(x, y), normal, normal),
    "Fmod": (lambda m, x, y: m.fmod(x * 3, y), normal, positive),
    "Remainder": (lambda m, x, y: m.remainder(x * 3, y), normal, positive),
}

for _op, (_fn, _mx, _my) in _BINARY.items():
    CASES.append(_case(_op.lower(), _op, _fn, inputs(_mx(*X), _my(*X))))
    # the second operand broadcasts along the first dim of the first
    CASES.append(_case(_op.lower() + "_bcast", _op, _fn, inputs(_mx(*X), _my(X[1]))))

CASES += [
    _case("add_alpha_scalar", ("Add", "Mul"), lambda m, x, y: m.add(x, y, alpha=2.5) + 1.5,
          inputs(normal(*X), normal(*X))),
    _case("rsub_scalar", "Sub", lambda m, x: 2.0 - x, inputs(normal(*X))),
    _case("div_scalar", "Div", lambda m, x: 1.5 / x, inputs(positive(*X))),
    _case("pow_scalar_exponent", "Pow", lambda m, x: x ** 3, inputs(normal(*X))),
    _case("pow_scalar_base", "Pow", lambda m, x: 2.0 ** x, inputs(normal(*X))),
    _case("floor_divide", "FloorDivide", lambda m, x, y: m.floor_divide(x * 3, y),
          inputs(normal(*X), positive(*X)), jvp=False),
]

# ---- comparisons, logical, bitwise, predicates ----------------------------------------

for _op, _name in [("Eq", "eq"), ("Ne", "ne"), ("Lt", "lt"), ("Le", "le"), ("Gt", "gt"),
                   ("Ge", "ge")]:
    CASES.append(_case(_name, _op, lambda m, x, y, _n=_name: getattr(m, _n)(x, y),
                       inputs(integral(*X), integral(*X)), jvp=False))
for _op, _name in [("LogicalAnd", "logical_and"), ("LogicalOr", "logical_or"),
                   ("LogicalXor", "logical_xor")]:
    CASES.append(_case(_name, _op, lambda m, x, y, _n=_name: getattr(m, _n)(x, y),
                       inputs(bools(*X), bools(*X)), jvp=False))
for _op, _name in [("BitwiseAnd", "bitwise_and"), ("BitwiseOr", "bitwise_or"),
                   ("BitwiseXor", "bitwise_xor")]:
    CASES.append(_case(_name, _op, lambda m, x, y, _n=_name: getattr(m, _n)(x, y),
                       inputs(ints(*X, high=16), ints(*X, high=16)), jvp=False))
CASES += [
    _case("logical_not", "LogicalNot", lambda m, x: m.logical_not(x), inputs(bools(*X)),
          jvp=False),
    _case("bitwise_not", "BitwiseNot", lambda m, x: m.bitwise_not(x),
          inputs(ints(*X, high=16)), jvp=False),
    _case("bitwise_not_bool", "BitwiseNot", lambda m, x: m.bitwise_not(x), inputs(bools(*X)),
          jvp=False),
    _case("isnan", "Isnan", lambda m, x: m.isnan(x), inputs(special(*X)), jvp=False),
    _case("isinf", "Isinf", lambda m, x: m.isinf(x), inputs(special(*X)), jvp=False),
    _case("isfinite", "Isfinite", lambda m, x: m.isfinite(x), inputs(special(*X)), jvp=False),
    _case("isclose", "IsClose", lambda m, x, y: m.isclose(x, y, rtol=1e-6), near(*X),
          jvp=False),
    _case("where", "Where", lambda m, c, x, y: m.where(c, x, y),
          inputs(bools(*X), normal(*X), normal(*X))),
    _case("where_from_gt_scalar", ("Where", "Gt"), lambda m, x: m.where(x > 0, x * x, 0.5),
          inputs(normal(*X))),
    _case("where_bcast", "Where", lambda m, c, x, y: m.where(c, x, y),
          inputs(bools(X[1]), normal(*X), normal(X[1]))),
]

# ---- reductions and normalizations ----------------------------------------------------

CASES += [
    _case("sum", "Sum", lambda m, x: m.sum(x), inputs(normal(*X))),
    _case("sum_dim", "Sum", lambda m, x: m.sum(x, dim=1), inputs(normal(*X))),
    _case("sum_dims_keepdim", "Sum", lambda m, x: m.sum(x, dim=(0, 1), keepdim=True),
          inputs(normal(*X))),
    _case("mean", "Mean", lambda m, x: m.mean(x), inputs(normal(*X))),
    _case("mean_dim_keepdim", "Mean", lambda m, x: m.mean(x, dim=0, keepdim=True),
          inputs(normal(*X))),
    _case("prod", "Prod", lambda m, x: m.prod(x), inputs(positive(*X))),
    _case("prod_dim", "Prod", lambda m, x: m.prod(x, dim=1), inputs(normal(*X))),
    _case("amax", "Amax", lambda m, x: m.amax(x, dim=1), inputs(normal(*X))),
    _case("amax_all", "Amax", lambda m, x: m.amax(x, dim=(0, 1)), inputs(normal(*X))),
    _case("amin", "Amin", lambda m, x: m.amin(x, dim=0, keepdim=True), inputs(normal(*X))),
    _case("max_dim", ("Argmax", "Gather"), lambda m, x: m.max(x, dim=1), inputs(normal(*X))),
    _case("min_all", "Amin", lambda m, x: m.min(x), inputs(normal(*X))),
    _case("argmax", "Argmax", lambda m, x: m.argmax(x, dim=1), inputs(normal(*X)), jvp=False),
    _case("argmax_all", "Argmax", lambda m, x: m.argmax(x), inputs(normal(*X)), jvp=False),
    _case("argmin", "Argmin", lambda m, x: m.argmin(x, dim=0, keepdim=True),
          inputs(normal(*X)), jvp=False),
    _case("norm", "Norm", lambda m, x: m.norm(x), inputs(normal(*X))),
    _case("norm_p1_dim", "Norm", lambda m, x: m.norm(x, p=1, dim=1), inputs(normal(*X))),
    _case("norm_p3_keepdim", "Norm", lambda m, x: m.norm(x, p=3, dim=0, keepdim=True),
          inputs(normal(*X))),
    _case("logsumexp", "Logsumexp", lambda m, x: m.logsumexp(x, dim=1), inputs(normal(*X))),
    _case("logsumexp_keepdim", "Logsumexp", lambda m, x: m.logsumexp(x, dim=0, keepdim=True),
          inputs(normal(*X))),
    _case("softmax", "Softmax", lambda m, x: m.softmax(x, dim=1), inputs(normal(*X))),
    _case("softmax_dim0", "Softmax", lambda m, x: m.softmax(x, dim=0), inputs(normal(*X))),
    _case("log_softmax", "LogSoftmax", lambda m, x: m.log_softmax(x, dim=-1),
          inputs(normal(*X))),
    _case("cumsum", "Cumsum", lambda m, x: m.cumsum(x, dim=1), inputs(normal(*X))),
    _case("cumsum_dim0", "Cumsum", lambda m, x: m.cumsum(x, dim=0), inputs(normal(*X))),
    _case("var_std", ("Mean", "Sub", "Sum"),
          lambda m, x: (m.var(x, dim=1), m.std(x, dim=0)), inputs(normal(*X))),
]

# ---- shape ----------------------------------------------------------------------------

CASES += [
    _case("reshape", "Reshape", lambda m, x: x.reshape(4, 3), inputs(normal(*X))),
    _case("reshape_flat", "Reshape", lambda m, x: x.reshape(-1), inputs(normal(*X))),
    _case("unsqueeze_squeeze", "Reshape", lambda m, x: x.unsqueeze(1).squeeze(0) * 1,
          inputs(normal(*X))),
    _case("permute", "Permute", lambda m, x: x.permute(2, 0, 1), inputs(normal(2, 3, 4))),
    _case("transpose", "Permute", lambda m, x: x.transpose(0, 1), inputs(normal(*X))),
    _case("movedim", "Permute", lambda m, x: m.movedim(x, 0, -1), inputs(normal(2, 3, 4))),
    _case("expand", "Expand", lambda m, x: x.expand(3, 4), inputs(normal(3, 1))),
    _case("expand_new_dims", "Expand", lambda m, x: x.expand(2, 3, 4), inputs(normal(4))),
    _case("sum_to_size", "SumToSize", lambda m, x: x.sum_to_size(4, 1),
          inputs(normal(2, 4, 3))),
    _case("repeat", "Repeat", lambda m, x: x.repeat(2, 1, 3), inputs(normal(*X))),
    _case("flip", "Flip", lambda m, x: x.flip(0), inputs(normal(*X))),
    _case("flip_both", "Flip", lambda m, x: x.flip((0, 1)), inputs(normal(*X))),
]

# ---- indexing -------------------------------------------------------------------------

CASES += [
    _case("getitem_slices", "Getitem", lambda m, x: x[1:, ::2], inputs(normal(*X))),
    _case("getitem_int", "Getitem", lambda m, x: x[0], inputs(normal(*X))),
    _case("getitem_negative", "Getitem", lambda m, x: x[:, -1], inputs(normal(*X))),
    _case("getitem_ellipsis_none", ("Getitem", "Reshape"), lambda m, x: x[..., None, 1],
          inputs(normal(*X))),
    _case("getitem_tensor", "Getitem", lambda m, x, i: x[i], inputs(normal(*X), ints(5, high=3)),
          in_dims=((0, None), (1, None))),
    _case("getitem_tensor_dim1", "Getitem", lambda m, x, i: x[:, i],
          inputs(normal(*X), ints(2, 2, high=4)), in_dims=((0, None), (-1, None))),
    _case("getitem_split_advanced", "Getitem", lambda m, x, i, j: x[i, :, j],
          inputs(normal(2, 3, 4), ints(5, high=2), ints(5, high=4)),
          in_dims=((0, None, None), (2, None, None))),
    _case("index_select", "Getitem", lambda m, x, i: m.index_select(x, 1, i),
          inputs(normal(*X), ints(3, high=4)), in_dims=((0, None), (1, None))),
    _case("index_put", "IndexPut", lambda m, x, i, v: m.index_put(x, (i,), v),
          inputs(normal(*X), ints(2, high=3), normal(2, 4)),
          in_dims=((0, None, 0), (1, None, None), (None, None, 0))),
    _case("index_put_accumulate", "IndexPut",
          lambda m, x, i, v: m.index_put(x, (i,), v, accumulate=True),
          inputs(normal(*X), lambda rng: np.array([0, 2, 0]), normal(3, 4)),
          in_dims=((0, None, 0), (None, None, 1), (1, None, None))),
    _case("index_put_scalar_value", "IndexPut",
          lambda m, x, i: m.index_put(x, (i,), m.tensor(2.5, dtype=m.float64)),
          inputs(normal(*X), ints(2, high=3)), in_dims=((1, None),)),
    _case("gather", "Gather", lambda m, x, i: m.gather(x, 1, i),
          inputs(normal(*X), ints(3, 2, high=4))),
    _case("gather_dim0", "Gather", lambda m, x, i: m.gather(x, 0, i),
          inputs(normal(*X), ints(2, 4, high=3)), in_dims=((0, 0), (1, None), (None, 0))),
    _case("scatter_add", "ScatterAdd", lambda m, x, i, s: m.scatter_add(x, 1, i, s),
          inputs(normal(*X), ints(3, 2, high=4), normal(3, 2))),
    _case("scatter_add_dim0", "ScatterAdd", lambda m, x, i, s: m.scatter_add(x, 0, i, s),
          inputs(normal(*X), ints(2, 4, high=3), normal(2, 4)),
          in_dims=((0, 0, 0), (None, None, 0), (1, 0, None))),
    _case("binary_cross_entropy", "BinaryCrossEntropy",
          lambda m, p, t: m.nn.functional.binary_cross_entropy(p, t, reduction="none"),
          inputs(lambda rng: rng.uniform(0.05, 0.95, X), lambda rng: rng.uniform(0, 1, X))),
    _case("nll_loss", "NllLoss", lambda m, x, t: m.nn.functional.nll_loss(x, t),
          inputs(normal(*X), ints(3, high=4)),
          in_dims=((0, None), (1, None), (None, 0), (0, 0))),
    _case("nll_loss_gradient", "NllLossBackward",
          lambda m, x, t, s: m.func.vjp(lambda y: m.nn.functional.nll_loss(y, t), x)[1](s)[0],
          inputs(normal(*X), ints(3, high=4), normal()), diff=(2,),
          in_dims=((None, None, 0), (None, 0, 0), (None, 0, None), (0, None, None))),
    _case("cross_entropy", "CrossEntropy",
          lambda m, x, t: m.nn.functional.cross_entropy(x, t), inputs(normal(*X), ints(3, high=4)),
          in_dims=((0, None), (1, None), (None, 0), (0, 0))),
    _case("cross_entropy_options", "CrossEntropy",
          lambda m, x, t, w: m.nn.functional.cross_entropy(
              x, t, weight=w, ignore_index=1, label_smoothing=0.2, reduction="none"),
          inputs(normal(*X), ints(3, high=4), positive(4)), diff=(0,),
          in_dims=((0, None, None), (0, 0, None))),  # (torch cannot batch only the targets)
    _case("cross_entropy_gradient", "CrossEntropyBackward",
          lambda m, *a: _cross_entropy_gradient(m, *a),
          inputs(normal(*X), ints(3, high=4), normal(), positive(4)), jvp=False,
          in_dims=((0, None, None, None), (0, 0, 0, None), (None, None, 0, None))),
    _case("one_hot", "OneHot", lambda m, i: m.one_hot(i, num_classes=5),
          inputs(ints(3, high=5)), jvp=False),
    _case("view_dtype", "ViewDtype", lambda m, x: x.view(m.int64) + 0, inputs(normal(*X)),
          jvp=False),
    _case("nonzero", "Nonzero", lambda m, x: m.nonzero(x), inputs(bools(*X)), jvp=False,
          vmap_error=True),
]

# ---- joining and padding --------------------------------------------------------------

CASES += [
    _case("cat", "Cat", lambda m, x, y: m.cat([x, y], dim=1), inputs(normal(*X), normal(3, 2))),
    _case("cat_dim0_three", "Cat", lambda m, x, y: m.cat([x, y, x], dim=0),
          inputs(normal(*X), normal(2, 4))),
    _case("stack", "Stack", lambda m, x, y: m.stack([x, y], dim=1),
          inputs(normal(*X), normal(*X))),
    _case("stack_last", "Stack", lambda m, x, y: m.stack([x, y], dim=-1),
          inputs(normal(*X), normal(*X))),
    _case("pad", "Pad", lambda m, x: m.pad(x, (1, 2)), inputs(normal(*X))),
    _case("pad_2d_value", "Pad", lambda m, x: m.pad(x, (1, 0, 2, 1), value=0.5),
          inputs(normal(*X))),
]

# ---- matmul ---------------------------------------------------------------------------

CASES += [
    _case("matmul_vv", "Matmul", lambda m, a, b: m.matmul(a, b), inputs(normal(4), normal(4))),
    _case("matmul_mv", "Matmul", lambda m, a, b: m.matmul(a, b), inputs(normal(*X), normal(4))),
    _case("matmul_vm", "Matmul", lambda m, a, b: m.matmul(a, b),
          inputs(normal(4), normal(4, 5))),
    _case("matmul_mm", "Matmul", lambda m, a, b: m.matmul(a, b),
          inputs(normal(*X), normal(4, 5))),
    _case("matmul_bmm", "Matmul", lambda m, a, b: m.matmul(a, b),
          inputs(normal(2, 3, 4), normal(2, 4, 5))),
    _case("matmul_broadcast", "Matmul", lambda m, a, b: m.matmul(a, b),
          inputs(normal(2, 3, 4), normal(4, 5))),
]

# ---- the fused linear op (nn.functional.linear on a matrix of examples) --------------

CASES += [
    _case("linear_bias", "Linear", lambda m, x, w, b: m.nn.functional.linear(x, w, b),
          inputs(normal(*X), normal(5, 4), normal(5)),
          in_dims=((0, None, None), (1, None, None), (None, 0, None), (None, None, 0),
                   (0, 0, 0), (None, 1, 0))),
    _case("linear_no_bias", "Linear", lambda m, x, w: m.nn.functional.linear(x, w),
          inputs(normal(*X), normal(5, 4)), in_dims=((0, None), (None, 0), (0, 0))),
    _case("linear_bias_rows", "Linear", lambda m, x, w, b: m.nn.functional.linear(x, w, b),
          inputs(normal(*X), normal(5, 4), normal(3, 1)),
          in_dims=((0, None, None), (None, None, 0), (0, 0, 1))),
]

# ---- sorting, triangles, diagonals, shifts, cumulative products, einsum ---------------

CASES += [
    _case("sort", ("Argsort", "Gather"), lambda m, x: m.sort(x, dim=1), inputs(normal(*X))),
    _case("sort_descending_dim0", ("Argsort", "Gather"),
          lambda m, x: m.sort(x, dim=0, descending=True), inputs(normal(*X))),
    _case("argsort", "Argsort", lambda m, x: m.argsort(x, dim=-1), inputs(normal(*X)),
          jvp=False),
    _case("argsort_ties", "Argsort",
          lambda m, x: m.argsort(x, dim=0, descending=True, stable=True),
          inputs(integral(*X)), jvp=False),
    _case("argsort_vector", "Argsort", lambda m, x: m.argsort(x), inputs(normal(4)),
          jvp=False),
    _case("topk", ("Argsort", "Gather"), lambda m, x: m.topk(x, 2, dim=1), inputs(normal(*X))),
    _case("topk_smallest", ("Argsort", "Gather"), lambda m, x: m.topk(x, 3, 0, largest=False),
          inputs(normal(*X))),
    _case("tril", "Tril", lambda m, x: m.tril(x), inputs(normal(*X))),
    _case("tril_offset_batched", "Tril", lambda m, x: m.tril(x, -1), inputs(normal(2, 3, 4))),
    _case("triu", "Triu", lambda m, x: m.triu(x, 1), inputs(normal(*X))),
    _case("triu_batched", "Triu", lambda m, x: m.triu(x), inputs(normal(2, 4, 3))),
    _case("cumprod", "Cumprod", lambda m, x: m.cumprod(x, dim=1), inputs(normal(*X))),
    _case("cumprod_zeros_dim0", "Cumprod", lambda m, x: m.cumprod(x * (x.abs() > 0.5), dim=0),
          inputs(normal(*X))),
    _case("cumprod_vector", "Cumprod", lambda m, x: m.cumprod(x, dim=0), inputs(normal(4))),
    _case("cumprod_gradient", "CumprodBackward",
          lambda m, x, g: m.func.vjp(lambda y: m.cumprod(y, dim=1), x)[1](g)[0],
          inputs(normal(*X), normal(*X)),
          in_dims=((0, 0), (None, 0), (1, None), (0, 1))),
    _case("cumprod_gradient_zeros", "CumprodBackward",
          lambda m, x, g: m.func.vjp(lambda y: m.cumprod(y * (y.abs() > 0.5), dim=0), x)[1](g)[0],
          inputs(normal(*X), normal(*X))),
    _case("diagonal", "Getitem", lambda m, x: m.diagonal(x, 1), inputs(normal(*X))),
    _case("diagonal_dims", "Getitem", lambda m, x: m.diagonal(x, -1, 2, 0),
          inputs(normal(3, 2, 4))),
    _case("trace", ("Getitem", "Sum"), lambda m, x: m.trace(x), inputs(normal(*X))),
    _case("roll", "Cat", lambda m, x: m.roll(x, (1, -1), (0, 1)), inputs(normal(*X))),
    _case("roll_flat", "Cat", lambda m, x: m.roll(x, 5), inputs(normal(*X))),
    _case("diff", "Sub", lambda m, x: m.diff(x, n=2, dim=1), inputs(normal(*X))),
    _case("diff_prepend", ("Cat", "Sub"), lambda m, x, p: m.diff(x, dim=0, prepend=p),
          inputs(normal(*X), normal(1, 4))),
    _case("einsum_matmul", "Matmul", lambda m, a, b: m.einsum("ij,jk->ik", a, b),
          inputs(normal(*X), normal(4, 2))),
    _case("einsum_trace_outer", ("Getitem", "Matmul"),
          lambda m, a, b: m.einsum("ii,j->j", a, b), inputs(normal(3, 3), normal(4))),
    _case("einsum_ellipsis", "Matmul", lambda m, a, b: m.einsum("...ij,...j->...i", a, b),
          inputs(normal(2, 3, 4), normal(4))),
    _case("addmm", ("Matmul", "Add"), lambda m, c, a, b: m.addmm(c, a, b, beta=0.5, alpha=2),
          inputs(normal(4), normal(3, 2), normal(2, 4))),
    _case("addcmul_addcdiv", ("Mul", "Div"),
          lambda m, a, b, c: m.addcdiv(m.addcmul(a, b, c), b, c),
          inputs(normal(*X), normal(*X), positive(*X))),
    _case("lerp", "Where", lambda m, a, b, w: m.lerp(a, b, w),
          inputs(normal(*X), normal(*X), unit(*X))),
    _case("nan_to_num", "Where", lambda m, x: m.nan_to_num(x, posinf=5.0), inputs(special(*X))),
]

CASES += [
    _case("kthvalue", ("Argsort", "Gather"), lambda m, x: m.kthvalue(x, 2, dim=1),
          inputs(normal(*X))),
    _case("median_dim", ("Argsort", "Gather"), lambda m, x: m.median(x, 0, keepdim=True),
          inputs(normal(*X))),
    _case("diag_embed", "IndexPut", lambda m, x: m.diag_embed(x, 1, 0, 2), inputs(normal(*X))),
    _case("diag", "IndexPut", lambda m, x: m.diag(x, -1), inputs(normal(4))),
    _case("baddbmm_addbmm", ("Matmul", "Sum"),
          lambda m, c, a, b: m.baddbmm(c, a, b, beta=0.5) + m.addbmm(c, a, b, alpha=2),
          inputs(normal(3, 2), normal(2, 3, 4), normal(2, 4, 2))),
    _case("addmv", "Matmul", lambda m, c, a, v: m.addmv(c, a, v, beta=2), inputs(normal(3),
                                                                                normal(*X),
                                                                                normal(4))),
]

CASES += [
    _case("cummax", ("CummaxIndices", "Gather"), lambda m, x: m.cummax(x, 1),
          inputs(normal(*X))),
    _case("cummin_ties", ("CumminIndices", "Gather"), lambda m, x: m.cummin(x, 0),
          inputs(integral(*X))),
    _case("cummax_indices_vector", "CummaxIndices", lambda m, x: m.cummax(x, 0).indices,
          inputs(normal(5)), jvp=False),
    _case("cummin_indices", "CumminIndices", lambda m, x: m.cummin(x, -1).indices,
          inputs(special(*X)), jvp=False),
]

CASES += [
    _case("searchsorted", "Searchsorted", lambda m, s, v: m.searchsorted(s, v),
          inputs(lambda rng: np.sort(rng.standard_normal(5)), normal(2, 3)), jvp=False),
    _case("searchsorted_rows", "Searchsorted", lambda m, s, v: m.searchsorted(s, v, right=True),
          inputs(lambda rng: np.sort(rng.standard_normal((2, 4)), axis=-1), normal(2, 3)),
          jvp=False),
]

# ---- the peer-suite ops: inverse hyperbolics, exp2, copysign, logcumsumexp, shifts,
# scatter/scatter_reduce, repeat_interleave, unfold ---------------------------------------

def _index_without_repeats(*shape, high):
    """An int64 index whose entries along dim 0 never repeat (scatter's overwrite is then
    well defined); ``shape[0] <= high``."""
    return lambda rng: np.stack([rng.permutation(high)[:shape[0]]
                                 for _ in range(int(np.prod(shape[1:])))], -1).reshape(shape)


CASES += [
    _case("asinh", "Asinh", lambda m, x: m.asinh(x), inputs(normal(*X))),
    _case("acosh", "Acosh", lambda m, x: m.acosh(x + 2), inputs(positive(*X))),
    _case("atanh", "Atanh", lambda m, x: x.atanh(), inputs(unit(*X))),
    _case("exp2", "Exp2", lambda m, x: m.exp2(x), inputs(normal(*X))),
    _case("copysign", "Copysign", lambda m, x, y: m.copysign(x, y),
          inputs(normal(*X), normal(X[1]))),
    _case("logcumsumexp", "Logcumsumexp", lambda m, x: m.logcumsumexp(x * 3, 1),
          inputs(normal(*X))),
    _case("logcumsumexp_dim0", "Logcumsumexp", lambda m, x: x.logcumsumexp(0),
          inputs(normal(*X))),
    _case("bitwise_shifts", ("BitwiseLeftShift", "BitwiseRightShift"),
          lambda m, x, y: (x << y, m.bitwise_right_shift(x, y), 3 << y),
          inputs(ints(*X, high=50), ints(*X, high=5)), jvp=False),
    _case("scatter_src", "Scatter", lambda m, x, i, s: m.scatter(x, 0, i, s),
          inputs(normal(*X), _index_without_repeats(2, 4, high=3), normal(2, 4)),
          in_dims=((0, 0, 0), (None, None, 0), (1, None, None))),
    _case("scatter_value", "Scatter", lambda m, x, i: x.scatter(1, i, 2.5),
          inputs(normal(*X), ints(3, 2, high=4))),
    _case("index_add", "IndexPut", lambda m, x, i, s: x.index_add(1, i, s, alpha=2.0),
          inputs(normal(*X), lambda rng: np.array([0, 3, 0]), normal(3, 3))),
    _case("repeat_interleave", "Getitem",
          lambda m, x: (m.repeat_interleave(x, 2, dim=1),
                        x.repeat_interleave(m.tensor([1, 0, 2]), dim=0)),
          inputs(normal(*X))),
    _case("unfold", "Unfold", lambda m, x: x.unfold(1, 2, 1), inputs(normal(*X))),
    _case("unfold_step", "Unfold", lambda m, x: x.unfold(0, 2, 2), inputs(normal(5, 3))),
]

# forward mode of scatter_reduce: PyTorch has it for the linear reductions only (the
# others are checked against graphgrad's own vjp in test_ops_peer_suite.py)
for _red in ("sum", "mean"):
    for _inc in (True, False):
        CASES.append(_case(
            f"scatter_reduce_{_red}_{_inc}", "ScatterReduce",
            (lambda r, inc: lambda m, x, i, s: m.scatter_reduce(x, 0, i, s, r,
                                                                include_self=inc))(_red, _inc),
            inputs(normal(*X), ints(2, 4, high=3), normal(2, 4)),
            in_dims=((0, 0, 0), (None, None, 0), (1, 0, None))))

# ---- sampling (graphgrad.ops.random) --------------------------------------------------
# Pure given their raw samples (the last input): torch computes the same transform of the
# samples, detached, as its samplers give zero tangents.

def _sampler(name, torch_fn):
    def fn(m, *xs, **params):
        if m is TORCH:
            return torch_fn(*xs)
        return getattr(m.ops.random, name).apply(*xs, **params)
    return fn


def uniform01(*shape):
    return lambda rng: rng.random(shape)


CASES += [
    _case("normal_op", "Normal",
          _sampler("Normal", lambda mean, std, z: (mean + std * z).detach() + 0 * (mean + std)),
          inputs(normal(*X), positive(*X), normal(*X))),
    _case("bernoulli_op", "Bernoulli",
          _sampler("Bernoulli", lambda p, u: (u < p).to(p.dtype) + 0 * p),
          inputs(lambda rng: rng.uniform(0.05, 0.95, X), uniform01(*X))),
    _case("multinomial_op", "Multinomial",
          lambda m, p, u: _sampler("Multinomial", lambda p, u: torch.topk(
              p / -torch.log1p(-u), 2).indices)(m, p, u, num_samples=2, replacement=False),
          inputs(positive(*X), uniform01(*X)), jvp=False),
    _case("multinomial_op_replacement", "Multinomial",
          lambda m, p, u: _sampler("Multinomial", lambda p, u: torch.searchsorted(
              torch.cumsum(p, -1) / p.sum(-1, keepdim=True), u, right=True).clamp(max=3))(
              m, p, u, num_samples=5, replacement=True),
          inputs(positive(*X), uniform01(3, 5)), jvp=False),
]

# convolution kernels: a batched weight runs as more groups, a batched input as more examples
CASES += [
    _case("conv2d", "Convolution",
          lambda m, x, w, b: m.nn.functional.conv2d(x, w, b, stride=(2, 1), padding=1,
                                                    dilation=(1, 2), groups=2),
          inputs(normal(2, 4, 5, 6), normal(6, 2, 3, 2), normal(6))),
    _case("conv_transpose1d", "Convolution",
          lambda m, x, w: m.nn.functional.conv_transpose1d(x, w, stride=2, padding=1,
                                                           output_padding=1),
          inputs(normal(2, 3, 5), normal(3, 2, 3))),
    _case("conv2d_weight_grad", "ConvolutionBackwardWeight",
          lambda m, x, w, g: m.func.vjp(lambda v: m.nn.functional.conv2d(x, v, stride=2),
                                        w)[1](g)[0],
          inputs(normal(2, 2, 5, 5), normal(3, 2, 2, 2), normal(2, 3, 2, 2)), diff=(0, 2),
          in_dims=((0, None, 0), (None, None, 0), (0, None, None))),
]

# pooling kernels: every input batched alike folds into the examples
CASES += [
    _case("max_pool2d", ("MaxPoolIndices", "TakePlanes"),
          lambda m, x: m.nn.functional.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
          inputs(normal(2, 3, 6, 5))),
    _case("max_pool_gradient", "PutPlanes",
          lambda m, x, g: m.func.vjp(lambda v: m.nn.functional.max_pool2d(v, 2), x)[1](g)[0],
          inputs(normal(2, 3, 4, 6), normal(2, 3, 2, 3)), diff=(1,),
          in_dims=((0, 0), (None, 0), (0, None))),
    _case("avg_pool2d", "AvgPool",
          lambda m, x: m.nn.functional.avg_pool2d(x, 3, stride=2, padding=1,
                                                  count_include_pad=False),
          inputs(normal(2, 3, 6, 5))),
    _case("avg_pool_gradient", "AvgPoolBackward",
          lambda m, x, g: m.func.vjp(lambda v: m.nn.functional.avg_pool2d(v, (2, 3), 1), x)[1](
              g)[0],
          inputs(normal(2, 3, 4, 6), normal(2, 3, 3, 4)), diff=(1,)),
    _case("adaptive_max_pool2d", ("AdaptiveMaxPoolIndices", "TakePlanes"),
          lambda m, x: m.nn.functional.adaptive_max_pool2d(x, (3, 4)),
          inputs(normal(2, 3, 5, 6))),
    _case("adaptive_avg_pool3d", "AdaptiveAvgPool",
          lambda m, x: m.nn.functional.adaptive_avg_pool3d(x, (2, 3, 2)),
          inputs(normal(2, 1, 3, 4, 5))),
]

# recurrent sequence ops: with unbatched weights the batch joins the examples; a batched
# weight runs one call per entry
def _recurrent(name, reference, backward=False, **params):
    from op_cases import _layer_backward_op, _layer_op

    made = (_layer_backward_op if backward else _layer_op)(name, reference, **params)

    def fn(m, *xs):
        return made(torch if m is TORCH else m, *xs)
    return fn


def _lstm_ref(*a):
    from op_cases import lstm_reference
    return lstm_reference(*a)


def _gru_ref(*a):
    from op_cases import gru_reference
    return gru_reference(*a)


def _rnn_ref(*a, **kw):
    from op_cases import rnn_reference
    return rnn_reference(*a, **kw)


_LSTM_IN = (normal(3, 2, 8), normal(2, 2), normal(2, 2), normal(8, 2))
_GRU_IN = (normal(3, 2, 6), normal(2, 2), normal(6, 2), normal(6))
CASES += [
    _case("lstm_layer", "LstmLayer", _recurrent("LstmLayer", _lstm_ref), inputs(*_LSTM_IN),
          in_dims=((0, 0, 0, None), (None, 0, None, None), (0, 0, 0, 0))),
    _case("gru_layer", "GruLayer", _recurrent("GruLayer", _gru_ref), inputs(*_GRU_IN),
          in_dims=((0, 0, None, None), (None, 0, None, None), (0, 0, 0, 0))),
    _case("lstm_layer_backward", "LstmLayerBackward",
          _recurrent("LstmLayerBackward", _lstm_ref, backward=True),
          inputs(normal(3, 2, 4), *_LSTM_IN), jvp=False),
    _case("gru_layer_backward", "GruLayerBackward",
          _recurrent("GruLayerBackward", _gru_ref, backward=True),
          inputs(normal(3, 2, 2), *_GRU_IN), jvp=False),
    _case("rnn_layer", "RnnLayer", _recurrent("RnnLayer", _rnn_ref, nonlinearity="tanh"),
          inputs(normal(3, 2, 3), normal(2, 3), normal(3, 3)),
          in_dims=((0, 0, None), (None, 0, None), (0, 0, 0))),
    _case("rnn_layer_backward", "RnnLayerBackward",
          _recurrent("RnnLayerBackward", _rnn_ref, backward=True, nonlinearity="relu"),
          inputs(normal(3, 2, 3), normal(3, 2, 3), normal(2, 3), normal(3, 3)), jvp=False),
]

# fused attention: q, k, v (and a float mask) batched or not
def _attention(backward=False, kept=False):
    def fn(m, *xs):
        from op_cases import _sdpa, _sdpa_backward, _sdpa_backward_kept, sdpa_reference
        if backward:
            return (_sdpa_backward_kept if kept else _sdpa_backward)(
                torch if m is TORCH else m, *xs)
        return (sdpa_reference if m is TORCH else _sdpa)(torch if m is TORCH else m, *xs)
    return fn


def _causal_attention(m, q, k, v):
    from op_cases import _sdpa, sdpa_reference
    return (sdpa_reference if m is TORCH else _sdpa)(torch if m is TORCH else m, q, k, v,
                                                      is_causal=True)


CASES += [
    _case("scaled_dot_product_attention", "ScaledDotProductAttention", _attention(),
          inputs(normal(2, 3, 4), normal(2, 5, 4), normal(2, 5, 3), normal(3, 5)),
          in_dims=((0, 0, 0, 0), (0, None, None, None), (None, 0, 0, None),
                   (0, 0, 0, None))),
    _case("scaled_dot_product_attention_causal", "ScaledDotProductAttention",
          _causal_attention, inputs(normal(2, 4, 3), normal(2, 4, 3), normal(2, 4, 2))),
    _case("scaled_dot_product_attention_backward", "ScaledDotProductAttentionBackward",
          _attention(backward=True),
          inputs(normal(3, 2), normal(3, 4), normal(5, 4), normal(5, 2), normal(3, 5)),
          jvp=False),
    _case("scaled_dot_product_attention_backward_kept", "ScaledDotProductAttentionBackward",
          _attention(backward=True, kept=True),
          inputs(normal(3, 2), normal(3, 4), normal(5, 4), normal(5, 2)), jvp=False),
]

# fused layer norm: x, weight and bias batched or not
def _layer_norm(m, x, *affine):
    return (torch if m is TORCH else m).nn.functional.layer_norm(x, (4,), *affine)


def _layer_norm_backward(m, g, x, w, b):
    from op_cases import _layer_norm_backward as backward
    return backward(torch if m is TORCH else m, g, x, w, b)


def _cross_entropy_gradient(m, x, t, g, w):
    from op_cases import _cross_entropy_gradient as backward
    return backward(torch if m is TORCH else m, x, t, g, w, label_smoothing=0.1)


def _log_softmax_backward(m, g, a):
    from op_cases import _log_softmax_backward as backward
    return backward(torch if m is TORCH else m, g, a)


CASES += [_case("log_softmax_backward", "LogSoftmaxBackward", _log_softmax_backward,
                inputs(normal(3, 4), normal(3, 4)), jvp=False)]


CASES += [
    _case("layer_norm", "NativeLayerNorm", _layer_norm,
          inputs(normal(3, 4), normal(4), normal(4)),
          in_dims=((0, None, None), (None, 0, 0), (0, 0, None), (1, None, 0))),
    _case("layer_norm_plain", "NativeLayerNorm", _layer_norm, inputs(normal(2, 3, 4))),
    _case("layer_norm_backward", "NativeLayerNormBackward", _layer_norm_backward,
          inputs(normal(3, 4), normal(3, 4), normal(4), normal(4)), jvp=False),
]


# fused attention with dropout (the keep-mask an input) and with its weights as an output
def _attention_full(m, q, k, v, *masks):
    from op_cases import _sdpa_full
    return _sdpa_full(torch if m is TORCH else m, q, k, v, *masks, need_weights=len(masks) > 1)


def _keep(*shape):
    return lambda rng: rng.random(shape) >= 0.25


CASES += [
    _case("scaled_dot_product_attention_dropout", "ScaledDotProductAttention", _attention_full,
          inputs(normal(2, 3, 4), normal(2, 5, 4), normal(2, 5, 3), _keep(2, 3, 5)),
          in_dims=((0, 0, 0, 0), (0, None, None, None), (None, 0, 0, 0), (0, 0, 0, None))),
    _case("scaled_dot_product_attention_weights", "ScaledDotProductAttention", _attention_full,
          inputs(normal(2, 3, 4), normal(2, 5, 4), normal(2, 5, 3), normal(3, 5),
                 _keep(2, 3, 5)),
          in_dims=((0, 0, 0, 0, 0), (0, None, None, None, None), (None, 0, 0, None, 0),
                   (0, 0, 0, 0, None))),
]


def _linear_relu(m, x, w, b):
    from op_cases import _linear_relu as f
    return f(torch if m is TORCH else m, x, w, b)


CASES += [
    _case("addmm_activation", "AddmmActivation", _linear_relu,
          inputs(normal(4, 3), normal(5, 3), normal(5)),
          in_dims=((0, None, None), (None, 0, 0), (1, 0, None))),
]


def _native_dropout(m, x, keep):
    from op_cases import _native_dropout as f
    return f(torch if m is TORCH else m, x, keep)


CASES += [
    _case("native_dropout", "NativeDropout", _native_dropout,
          inputs(normal(3, 4), _keep(3, 4)), in_dims=((0, None), (None, 0), (0, 0), (1, 0))),
]
