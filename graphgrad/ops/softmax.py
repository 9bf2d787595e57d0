"""Layer ``ops``: softmax and log_softmax over one dim, and log_softmax's backward as one
array kernel (the step every classifier's training runs)."""

from __future__ import annotations

from graphgrad.backend import xp

from . import taylor as ts
from .arithmetic import Mul, Sub
from .base import Op, Spec, normalize_dim
from .fused import array_backward
from .batching import by_example
from .reduce import Sum, along_dim_batched
from .refusals import no_kernel
from .unary import Exp

__all__ = ["softmax", "log_softmax"]


class _SoftmaxBase(Op):
    promotes = False
    saves_inputs = ()
    saves_output = True

    @classmethod
    def infer(cls, a, *, dim) -> Spec:
        dt = a.dtype if a.dtype.kind in "fc" else xp.dtype(xp.float32)
        return Spec(a.shape, dt)

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        return along_dim_batched(cls, vals[0], bdims[0], dim), 0


class Softmax(_SoftmaxBase):
    holomorphic = True

    @staticmethod
    def forward(a, *, dim):
        if a.dtype.kind not in "fc":
            no_kernel("softmax", a, dim)
        # initial: an empty slice has no maximum, and softmax of nothing is nothing
        e = xp.exp(a - xp.maximum.reduce(xp.real(a), axis=dim, keepdims=True, initial=-xp.inf))
        return e / xp.add.reduce(e, axis=dim, keepdims=True)

    @staticmethod
    def vjp(g, out, a, *, dim):
        return (out * (g - (g * out).sum(dim=dim, keepdim=True)),)

    @staticmethod
    def jvp(dots, out, a, *, dim):
        d = dots[0]
        return out * (d - (d * out).sum(dim=dim, keepdim=True))

    @staticmethod
    def taylor(series, out, a, *, dim):
        # e / sum(e) with e = exp(x - lse(x_0)): e_0 is the output, its sum is one
        k = ts.order_of(series)
        _, e = ts.logsumexp_series(series[0], out, dim, k)
        total = [1.0] + [None if t is None else t.sum(dim=dim, keepdim=True) for t in e[1:]]
        return ts.div_series(e, total, out, k)


class LogSoftmax(_SoftmaxBase):
    holomorphic = True

    @staticmethod
    def forward(a, *, dim):
        if a.dtype.kind not in "fc":
            no_kernel("log_softmax", a, dim)
        s = a - xp.maximum.reduce(xp.real(a), axis=dim, keepdims=True, initial=-xp.inf)
        return s - xp.log(xp.add.reduce(xp.exp(s), axis=dim, keepdims=True))

    @staticmethod
    def vjp(g, out, a, *, dim):
        # g - softmax(a) * sum(g), the ops applied directly (not through g.sum, g - ...):
        # this rule runs in every classifier's training step, where the methods'
        # argument handling shows
        # (no ``kernel_vjp``, ops/fused.py: in a compiled backward the rule below is one row
        # group, as fast as LogSoftmaxBackward, 26.5 against 27.5 ms for a forward+backward
        # on (4096, 1024) float32, and it fuses with its neighbours)
        if g.ndim and g.shape == out.shape and g.dtype == out.dtype and array_backward():
            # a plain eager backward: the same in one buffer, where the ops below make
            # three arrays of the input's size (a language model's (tokens, vocabulary))
            return (LogSoftmaxBackward.apply(g, out, dim=dim),)
        total = Sum.apply(g, dim=(dim,) if g.ndim else (), keepdim=True)  # a 0-d tensor: itself
        return (Sub.apply(g, Mul.apply(Exp.apply(out), total)),)

    @staticmethod
    def jvp(dots, out, a, *, dim):
        d = dots[0]
        return d - (out.exp() * d).sum(dim=dim, keepdim=True)

    @staticmethod
    def taylor(series, out, a, *, dim):
        k = ts.order_of(series)  # x - logsumexp(x)
        lse, _ = ts.logsumexp_series(series[0], out.exp(), dim, k)
        return [ts.plus(x, None if t is None else -t) for x, t in zip(series[0], lse,
                                                                      strict=True)]


class LogSoftmaxBackward(Op):
    """``log_softmax``'s vjp on arrays, ``g - exp(out) * sum(g)`` in one buffer. Only a
    plain eager backward runs it (``array_backward``), so it carries no gradient."""

    holomorphic = True  # exp, sums, products: analytic (the complex step goes through)
    differentiable = False
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(g, out, *, dim):
        r = xp.exp(out)
        r *= xp.add.reduce(g, axis=dim, keepdims=True)
        return xp.subtract(g, r, out=r)

    @classmethod
    def infer(cls, g, out, *, dim) -> Spec:
        return Spec(out.shape, out.dtype)

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        return by_example(cls, vals, bdims, dim=dim)



def softmax(input, dim: int, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return Softmax.apply(input, dim=normalize_dim(dim, input.ndim, "softmax"))


def log_softmax(input, dim: int, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return LogSoftmax.apply(input, dim=normalize_dim(dim, input.ndim, "log_softmax"))
