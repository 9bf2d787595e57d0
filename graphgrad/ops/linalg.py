"""Layer ``ops``: matrix products (``matmul`` and its spellings mm, bmm, mv, dot, outer)."""

from __future__ import annotations

from graphgrad.backend import result_float_dtype, xp

from .arithmetic import needs_grad
from .base import Op, Spec, broadcast_shapes, fmt_shape

__all__ = ["matmul", "mm", "bmm", "mv", "dot", "vdot", "outer", "inner"]


class Matmul(Op):
    """NumPy/PyTorch ``matmul``: vectors, matrices, and batches that broadcast."""

    @staticmethod
    def forward(a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                               f"{a.ndim}D and {b.ndim}D")
        return xp.matmul(a, b)

    @staticmethod
    def vjp(g, out, a, b):
        ga = gb = None
        if a.ndim == 1 and b.ndim == 1:
            return (g * b if needs_grad(a) else None), (g * a if needs_grad(b) else None)
        if a.ndim == 1:  # (k) @ (..., k, n) -> (..., n)
            if needs_grad(a):
                ga = (g.unsqueeze(-2) @ b.mT).squeeze(-2)
            if needs_grad(b):
                gb = a.unsqueeze(-1) @ g.unsqueeze(-2)
            return ga, gb
        if b.ndim == 1:  # (..., m, k) @ (k) -> (..., m)
            if needs_grad(a):
                ga = g.unsqueeze(-1) @ b.unsqueeze(-2)
            if needs_grad(b):
                gb = (a.mT @ g.unsqueeze(-1)).squeeze(-1)
            return ga, gb
        if needs_grad(a):
            ga = g @ b.mT
        if needs_grad(b):
            gb = a.mT @ g
        return ga, gb

    @classmethod
    def infer(cls, a, b) -> Spec:
        if a.ndim == 0 or b.ndim == 0:
            raise RuntimeError(f"matmul: both arguments to matmul need to be at least 1D, but "
                               f"they are {a.ndim}D and {b.ndim}D")
        sa, sb = a.shape, b.shape
        ka = sa[-1]
        kb = sb[0] if len(sb) == 1 else sb[-2]
        if ka is not None and kb is not None and ka != kb:
            raise RuntimeError(f"matmul: shapes {fmt_shape(sa)} and {fmt_shape(sb)} cannot be "
                               f"multiplied ({ka} != {kb})")
        batch = broadcast_shapes("matmul", sa[:-2], sb[:-2])
        shape = batch + (sa[-2:-1] if len(sa) > 1 else ()) + (sb[-1:] if len(sb) > 1 else ())
        dt = xp.result_type(a.dtype, b.dtype)
        cast = result_float_dtype(dt, a.dtype, b.dtype)
        return Spec(shape, cast if cast is not None else dt)


def matmul(input, other):
    return Matmul.apply(input, other)


def _check_ndim(name: str, t, ndim: int, what: str) -> None:
    if t.ndim != ndim:
        raise RuntimeError(f"{name}: {what} must be a {ndim}D tensor, got {t.ndim}D "
                           f"with shape {fmt_shape(tuple(t.shape))}")


def mm(input, mat2):
    _check_ndim("mm", input, 2, "self")
    _check_ndim("mm", mat2, 2, "mat2")
    return Matmul.apply(input, mat2)


def bmm(input, mat2):
    _check_ndim("bmm", input, 3, "batch1")
    _check_ndim("bmm", mat2, 3, "batch2")
    return Matmul.apply(input, mat2)


def mv(input, vec):
    _check_ndim("mv", input, 2, "self")
    _check_ndim("mv", vec, 1, "vec")
    return Matmul.apply(input, vec)


def dot(input, other):
    _check_ndim("dot", input, 1, "self")
    _check_ndim("dot", other, 1, "other")
    return Matmul.apply(input, other)


vdot = inner = dot


def outer(input, vec2):
    return input.unsqueeze(-1) * vec2.unsqueeze(-2)
