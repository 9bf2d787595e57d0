"""Layer ``ops``: compound arithmetic that PyTorch offers as one call: addmm, addmv,
addbmm, baddbmm, addcmul, addcdiv, lerp and nan_to_num (out-of-place forms).

Each is a composite of the ops it is made of (matmul, mul, div, add, where), so its
values, dtypes and gradients to any order are theirs.
"""

from __future__ import annotations

from graphgrad.backend import from_numpy_dtype, xp
from graphgrad.tensor import Value
from graphgrad.tensor import Tensor

from .base import C_NAMES, scalar_name

__all__ = ["addmm", "addmv", "addbmm", "baddbmm", "addcmul", "addcdiv", "lerp", "nan_to_num"]


def _scaled(t, factor):
    return t if factor == 1 else t * factor


def _plus_product(input, product, beta, alpha):
    """``beta * input + alpha * product``, ``input`` broadcast to the product's shape
    (not the other way); ``beta == 0`` ignores the input, its nan and inf included."""
    product = _scaled(product, alpha)
    shape = tuple(product.shape)
    bias = input.expand(*shape) if tuple(input.shape) != shape else input
    if beta == 0:
        return product
    return _scaled(bias, beta) + product


def _check_ndim(name: str, t, ndim: int, what: str) -> None:
    if t.ndim != ndim:
        raise RuntimeError(f"{name} must be a {what}, got {t.ndim}-D tensor")


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)`` for matrices ``mat1`` and ``mat2``."""
    _check_ndim("mat1", mat1, 2, "matrix")
    _check_ndim("mat2", mat2, 2, "matrix")
    if mat1.shape[1] != mat2.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x"
                           f"{mat1.shape[1]} and {mat2.shape[0]}x{mat2.shape[1]})")
    return _plus_product(input, mat1 @ mat2, beta, alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat @ vec)`` for a matrix and a vector."""
    if mat.ndim != 2 or vec.ndim != 1 or input.ndim > 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {input.ndim}, {mat.ndim}, "
                           f"{vec.ndim}")
    if mat.shape[1] != vec.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({', '.join(map(str, input.shape))}), "
                           f"mat ({'x'.join(map(str, mat.shape))}), vec "
                           f"({', '.join(map(str, vec.shape))})")
    return _plus_product(input, mat @ vec, beta, alpha)


def _check_batches(batch1, batch2) -> None:
    for name, t in (("batch1", batch1), ("batch2", batch2)):
        if t.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)``: a batch of matrix products."""
    _check_batches(batch1, batch2)
    if batch1.shape[0] != batch2.shape[0] or batch1.shape[2] != batch2.shape[1]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{batch1.shape[0]}, {batch1.shape[2]}] but got: "
                           f"[{batch2.shape[0]}, {batch2.shape[1]}].")
    return _plus_product(input, batch1 @ batch2, beta, alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * sum_b (batch1[b] @ batch2[b])``: the batch of products
    summed."""
    _check_batches(batch1, batch2)
    if batch1.shape[0] != batch2.shape[0]:
        raise RuntimeError(f"batch1 and batch2 must have same number of batches, got "
                           f"{batch1.shape[0]} and {batch2.shape[0]}")
    if batch1.shape[2] != batch2.shape[1]:
        raise RuntimeError(f"Incompatible matrix sizes for bmm ({batch1.shape[1]}x"
                           f"{batch1.shape[2]} and {batch2.shape[1]}x{batch2.shape[2]})")
    return _plus_product(input, (batch1 @ batch2).sum(dim=0), beta, alpha)


def addcmul(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2`` (all three broadcast)."""
    return input + _scaled(tensor1 * tensor2, value)


def _integral(t) -> bool:
    return isinstance(t, Value) and t._array.dtype.kind in "biu"


def addcdiv(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2`` (all three broadcast)."""
    if _integral(tensor1) and _integral(tensor2):
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future  release "
            "addcdiv will perform a true division of tensor1 and tensor2. The historic addcdiv "
            "behavior can be implemented as (input + value * torch.trunc(tensor1 / tensor2))"
            ".to(input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) "
            "for float inputs. The future addcdiv behavior is just the latter implementation: "
            "(input + value * tensor1 / tensor2), for all dtypes.")
    return input + _scaled(tensor1 / tensor2, value)


def _dtype_name(t) -> str:
    return from_numpy_dtype(t._array.dtype).name


def lerp(input, end, weight):
    """``input + weight * (end - input)``, computed as PyTorch does: from ``end`` when
    ``|weight| >= 0.5`` (so a weight of 1 gives ``end`` exactly)."""
    from .compare import where
    for name, t in (("end", end), ("weight", weight)):
        if isinstance(t, Value) and t._array.dtype != input._array.dtype:
            want, got = (C_NAMES.get(_dtype_name(x), _dtype_name(x)) for x in (input, t))
            raise RuntimeError(f"expected dtype {want} for `{name}` but got dtype {got}")
    if input._array.dtype.kind not in "fc":
        raise NotImplementedError(f'"lerp_kernel_scalar" not implemented for '
                                  f"'{scalar_name(input._array.dtype)}'")
    span = end - input
    if not isinstance(weight, Value):
        return input + weight * span if abs(weight) < 0.5 else end - span * (1 - weight)
    return where(weight.abs() < 0.5, input + weight * span, end - span * (1 - weight))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (by default
    the dtype's largest and lowest finite values; ``nan=None`` is 0); integer tensors
    are copied. The gradient is 1 where the input is finite and 0 where it was
    replaced."""
    from .compare import isinf, isnan, where
    from .unary import clone
    if input._array.dtype.kind not in "fc":
        return clone(input)
    nan = 0.0 if nan is None else nan
    info = xp.finfo(input._array.dtype)
    high = float(info.max) if posinf is None else posinf
    low = float(info.min) if neginf is None else neginf
    # isinf and a sign test, not comparisons with inf: a graph's printed code cannot
    # spell an inf constant. The replacements are tensors of the input's dtype: a
    # where of two Python floats would be float32, where float64's bounds overflow
    high, low = (Tensor._make(xp.asarray(v, dtype=input._array.dtype)) for v in (high, low))
    out = where(isinf(input), where(input > 0, high, low), input)
    return where(isnan(input), nan, out)
