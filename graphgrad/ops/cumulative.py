"""Layer ``ops``: cumulative products along a dim (``cumprod``; ``cumsum`` is in
``reduce``).

The gradient must hold where the input has zeros, and be differentiable again there:
``out / input`` (the textbook rule) divides by zero. The rules use the products with
one factor left out, ``C[k, i] = prod_{j <= i, j != k} x_j`` (the derivative of
``out[i]`` by ``x[k]`` for ``k <= i``), computed as the cumprod of ``n`` copies of the
slice with a 1 put in place of ``x[k]`` in copy ``k``: exact everywhere and written in
graphgrad ops (so the second derivative differentiates it again), at a cost of ``n``
times the input's size, as PyTorch's own rule when a graph of the gradient is built.
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor.creation import _leaf

from .base import Op, normalize_dim
from .compare import where
from .reduce import _along_dim_batched
from .triangular import Triu

__all__ = ["cumprod"]


def _eye(n: int):
    return _leaf(xp.eye(n, dtype=xp.bool_))


def _omitted_products(x):
    """For ``x`` (..., n): ``C`` (..., n, n) with ``C[..., k, i]`` the product of
    ``x[..., :i + 1]`` without ``x[..., k]`` for ``i >= k``, and 0 for ``i < k``."""
    n = x.shape[-1]
    copies = x.unsqueeze(-2).expand(*x.shape[:-1], n, n)
    left_out = where(_eye(n), 1.0, copies)
    return Triu.apply(Cumprod.apply(left_out, dim=left_out.ndim - 1), diagonal=0)


class Cumprod(Op):
    holomorphic = True
    promotes = False

    @staticmethod
    def forward(a, *, dim):
        dtype = xp.int64 if a.dtype.kind in "bui" else None
        if a.ndim == 0:
            return a.astype(dtype or a.dtype)
        return xp.cumprod(a, axis=dim, dtype=dtype)

    @staticmethod
    def vjp(g, out, a, *, dim):
        if a.ndim == 0:
            return (g,)
        products = _omitted_products(a.movedim(dim, -1))
        grad = (products * g.movedim(dim, -1).unsqueeze(-2)).sum(dim=-1)
        return (grad.movedim(-1, dim),)

    @staticmethod
    def jvp(dots, out, a, *, dim):
        if a.ndim == 0:
            return dots[0]
        products = _omitted_products(a.movedim(dim, -1))
        tangent = (products * dots[0].movedim(dim, -1).unsqueeze(-1)).sum(dim=-2)
        return tangent.movedim(-1, dim)

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        return _along_dim_batched(cls, vals[0], bdims[0], dim), 0


def cumprod(input, dim: int, *, dtype=None):
    """``out[i] = input[0] * ... * input[i]`` along ``dim``."""
    if dtype is not None:
        input = input.to(dtype)
    d = normalize_dim(dim, input.ndim, "cumprod") if input.ndim else 0
    return Cumprod.apply(input, dim=d)
