"""Layer ``ops``: the vector p-norm over ``dim`` (``linalg.vector_norm``, ``torch.norm``
with a numeric p or "fro"), a reduction with its own rules: the gradient is guarded
where the norm is 0, and the Taylor rule composes |x|, the power and the sum."""

from __future__ import annotations

import math

from graphgrad.backend import xp

from .base import scalar_name
from .compare import where
from .reduce import _Reduce, _dims, _kept_shape, expand_back
from . import taylor as ts

__all__ = ["norm", "vector_norm"]

class Norm(_Reduce):
    """Vector p-norm over ``dim``: ``(sum |x|^p)^(1/p)``, p in (0, inf]."""

    saves_output = True
    promotes = False

    @staticmethod
    def forward(a, *, p, dim, keepdim):
        x = xp.abs(a)
        if p == math.inf:
            r = xp.amax(x, axis=dim, keepdims=keepdim)
        elif p == -math.inf:
            r = xp.amin(x, axis=dim, keepdims=keepdim)
        elif p == 0:
            r = xp.sum(x != 0, axis=dim, keepdims=keepdim).astype(x.dtype)
        elif p == 2:
            r = xp.sqrt(xp.sum(x * x, axis=dim, keepdims=keepdim))
        elif p == 1:
            r = xp.sum(x, axis=dim, keepdims=keepdim)
        else:
            r = xp.sum(x ** p, axis=dim, keepdims=keepdim) ** (1.0 / p)
        return xp.asarray(r, dtype=x.dtype)

    @staticmethod
    def vjp(g, out, a, *, p, dim, keepdim):
        shape = a.shape
        ge = expand_back(g, shape, dim, keepdim)
        oe = expand_back(out, shape, dim, keepdim)
        if p == 0:
            return (ge * 0,)
        if p == 1:
            return (ge * a.sign(),)
        if p in (math.inf, -math.inf):
            mask = (a.abs() == oe).to(g.dtype)
            return (ge * a.sign() * mask / mask.sum(dim=dim, keepdim=True),)
        safe = where(oe == 0, 1.0, oe)
        if p == 2:
            return (where(oe == 0, 0.0, ge * a / safe),)
        grad = ge * a * a.abs() ** (p - 2) / safe ** (p - 1)
        return (where(oe == 0, 0.0, grad),)


    @staticmethod
    def taylor(series, out, a, *, p, dim, keepdim):
        order = ts.order_of(series)
        if p == 0:
            return [None] * order  # a count of non-zeros: piecewise constant
        # |x|: sign(x_0) x_k, 0 at x_0 = 0 (abs's rule, PyTorch's subgradient)
        mag = a.abs()
        absx = ts.full(mag, ts.scale_series(series[0], a.sign()), order)

        def reduced(t):
            return None if t is None else t.reshape(tuple(out.shape))
        if p == 1:
            return [reduced(None if t is None else t.sum(dim=dim, keepdim=True))
                    for t in absx[1:]]
        kept = expand_back(out, a.shape, dim, keepdim)
        if p in (math.inf, -math.inf):
            # the series of the element attaining the extremum, averaged over ties (amax's
            # convention, and JAX's for reduce_max)
            mask = (mag == kept).to(a.dtype)
            share = mask / mask.sum(dim=dim, keepdim=True)
            return [reduced(None if t is None else (t * share).sum(dim=dim, keepdim=True))
                    for t in absx[1:]]
        if p == 2:  # |x|^2 = x^2: Leibniz, no division
            powered = ts.mul_series(ts.full(a, series[0], order),
                                    ts.full(a, series[0], order), order)
        else:
            # the power recurrence divides by |x_0|: an element at 0 contributes a zero
            # series (|x|^p is flat there to orders below p, as the gradient's 0 says)
            at_zero = mag == 0
            safe = ts.full(where(at_zero, 1.0, mag), absx[1:], order)
            powered = [None if t is None else where(at_zero, 0.0, t)
                       for t in ts.pow_series(safe, safe[0] ** p, p, order)]
        total = [None if t is None else t.sum(dim=dim, keepdim=True) for t in powered]
        # out = total^(1/p), again dividing by total_0 = out^p: a zero norm gets a zero
        # series, as its gradient is 0 there
        o = out if keepdim else out.reshape(_kept_shape(a.shape, dim))
        zero = o == 0
        safe_o = where(zero, 1.0, o)
        root = ts.pow_series([safe_o ** p, *total], safe_o, 1.0 / p, order)
        return [reduced(None if t is None else where(zero, 0.0, t)) for t in root]


def vector_norm(input, ord=2, dim=None, keepdim: bool = False, *, dtype=None):
    if input._array.dtype.kind not in "fc":
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as "
                           f"input. Got {scalar_name(input._array.dtype)}")
    if dtype is not None:  # computed in that dtype, as PyTorch
        input = input.to(dtype)
    return Norm.apply(input, p=float(ord), dim=_dims(input, dim, "norm"), keepdim=keepdim)


def norm(input, p="fro", dim=None, keepdim: bool = False, dtype=None):
    """``torch.norm``: the vector p-norm of the flattened input or over ``dim``
    (``"fro"`` is p=2)."""
    if p == "fro" or p is None:
        p = 2
    if isinstance(p, str):
        raise NotImplementedError(f"norm: p={p!r} (matrix norms) is not supported")
    return vector_norm(input, p, dim, keepdim, dtype=dtype)


