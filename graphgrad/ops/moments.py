"""Layer ``ops``: the moments ``var``, ``std``, ``var_mean``, ``std_mean``, built from the
reductions (mean, sum) with Bessel's correction."""

from __future__ import annotations

import builtins

from .compare import where
from .reduce import _dims_dtype_first, mean

__all__ = ["var", "std", "var_mean", "std_mean"]


def _var_dtype(a_dtype) -> None:
    if a_dtype.kind not in "fc":
        raise RuntimeError("std and var only support floating point and complex dtypes")


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def var(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """Variance over ``dim`` with Bessel's ``correction`` (default 1)."""
    if isinstance(dim, bool):  # var(x, False): the old unbiased positional form
        dim, unbiased = None, dim
    dims = _dims_dtype_first(input, dim, "var", lambda: _var_dtype(input._array.dtype))
    _var_dtype(input._array.dtype)
    n = 1
    for d in dims:
        n *= input.shape[d]
    centered = input - input.mean(dim=dims, keepdim=True)
    return (centered * centered).sum(dim=dims, keepdim=keepdim) / builtins.max(
        n - _correction(unbiased, correction), 0)


def std(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    v = var(input, dim, unbiased, keepdim, correction=correction)
    # where the variance is 0, sqrt's derivative is infinite; PyTorch's std gives the
    # gradient 0 there instead of nan. The inner where keeps nan out of the unused branch.
    flat = v == 0
    return where(flat, 0.0, where(flat, 1.0, v).sqrt())


def var_mean(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    return (var(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim))


def std_mean(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    return (std(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim))
