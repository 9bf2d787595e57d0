"""Layer ``ops``: dropout's product as one op, ``x * keep / (1 - p)`` with ``keep`` a
boolean mask (broadcast over x), PyTorch's ``native_dropout`` given its mask.

The mask is drawn by the caller (``nn.functional.dropout``, from graphgrad's
generator), so the op is a pure function, linear in x: its backward is the op itself on
the gradient, and it keeps one byte per element (the mask) where a product with a float
scale array kept four. The scale 1/(1-p) is taken in x's dtype (exact in float64).
"""

from __future__ import annotations

from graphgrad.backend import xp

from .base import Op, Spec, broadcast_shapes
from .batching import align, logical_ndim

__all__: list[str] = []


def keep_scale(p: float) -> float:
    """What a kept element is multiplied by (at p = 1 nothing is kept)."""
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


class NativeDropout(Op):
    """``x * keep * 1/(1-p)`` for x (floating) and a boolean ``keep`` broadcastable to it."""

    holomorphic = True  # linear
    promotes = False
    saves_inputs = (1,)  # the mask only

    @staticmethod
    def forward(x, keep, *, p):
        out = xp.multiply(x, keep, dtype=x.dtype)
        out *= x.dtype.type(keep_scale(p))
        return out

    @staticmethod
    def vjp(g, out, x, keep, *, p):
        return NativeDropout.apply(g, keep, p=p), None

    @staticmethod
    def jvp(dots, out, x, keep, *, p):
        return None if dots[0] is None else NativeDropout.apply(dots[0], keep, p=p)

    @staticmethod
    def taylor(series, out, x, keep, *, p):
        return [None if t is None else NativeDropout.apply(t, keep, p=p) for t in series[0]]

    @classmethod
    def batch(cls, vals, bdims, *, p):
        rank = max(logical_ndim(v, d) for v, d in zip(vals, bdims, strict=True))
        args = [v if d is None else align(v, d, rank) for v, d in zip(vals, bdims, strict=True)]
        return cls.apply(*args, p=p), 0

    @classmethod
    def infer(cls, x, keep, *, p) -> Spec:
        return Spec(broadcast_shapes("dropout", x.shape, keep.shape), x.dtype)
