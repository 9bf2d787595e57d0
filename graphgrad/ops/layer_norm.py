"""Layer ``ops``: layer normalization as one op, ``(x - mean) / sqrt(var + eps) * weight +
bias`` over the trailing ``normalized_shape`` dims (biased variance), with its backward
as one array kernel.

The composite is nine recorded ops forward and about thirty backward, each keeping its
temporaries alive until backward; the op keeps only its inputs (the statistics are
recomputed in backward: two row reductions) and runs as a few in-place NumPy steps,
its row sums as matrix-vector products (BLAS, several times faster than NumPy's
reduction over short rows). Plain eager backward runs ``NativeLayerNormBackward`` on
arrays; ``create_graph`` and the function transforms run the same derivative written
in graphgrad ops, so it differentiates to any order. The Taylor rule is the composite
on jets.
"""

from __future__ import annotations

import math

from graphgrad.backend import xp

from .base import Op, Spec, scalar_name
from .batching import align, by_example, materialize, to_front
from .fused import array_backward, unpack
from .reduce import Mean
from .taylor_composite import Jet, jets
from .unary import Rsqrt

__all__: list[str] = []


def _dims(x, normalized_shape: tuple) -> tuple:
    return tuple(range(x.ndim - len(normalized_shape), x.ndim))


def _check_float(a) -> None:
    if a.dtype.kind not in "fc":
        raise RuntimeError(f'"LayerNormKernelImpl" not implemented for '
                           f"'{scalar_name(a.dtype)}'")


def _centred(x, normalized_shape: tuple, eps: float):
    """The rows of x as (rows, n), centred (a new array), and the reciprocal standard
    deviation per row. Row sums are matrix-vector products (BLAS: NumPy's reduction
    over short rows goes row by row)."""
    n = math.prod(normalized_shape)
    # (rows counted from the leading dims: -1 cannot stand for them when n is 0)
    x2 = x.reshape(math.prod(x.shape[:x.ndim - len(normalized_shape)]), n)
    xc = x2 - (x2 @ xp.full(n, 1.0 / max(n, 1), x.dtype))[:, None]
    var = xp.einsum("ij,ij->i", xc, xc)
    var *= x.dtype.type(1.0 / max(n, 1))
    var += x.dtype.type(eps)
    rstd = xp.sqrt(var, out=var)
    xp.divide(1, rstd, out=rstd)
    return xc, rstd


def _common(x, *affine):
    """The inputs in the dtype the kernel computes in, and the result's dtype: their
    common dtype (PyTorch refuses mixed ones; NumPy would promote in pieces), float16
    computed in float32 as PyTorch's kernels accumulate (NumPy's float16 products and
    sums round every step)."""
    dt = xp.result_type(x, *affine)
    ct = xp.dtype(xp.float32) if dt == xp.float16 else dt
    return [a if a.dtype == ct else a.astype(ct) for a in (x, *affine)], dt


class NativeLayerNorm(Op):
    """``layer_norm(x, normalized_shape, weight, bias, eps)`` for inputs ``(x,)``,
    ``(x, weight)`` or ``(x, weight, bias)`` (weight and bias of ``normalized_shape``).
    PyTorch's grad_fn is ``NativeLayerNormBackward0``."""

    holomorphic = True  # analytic: the complex step goes through it (var = mean(xc^2))

    @staticmethod
    def forward(x, *affine, normalized_shape, eps):
        _check_float(x)
        (x, *affine), dt = _common(x, *affine)
        out, rstd = _centred(x, normalized_shape, eps)
        # each (rows, n) pass broadcasting a per-row or a per-column vector costs about
        # two plain ones here: the row scale and the weight as one outer product
        out *= rstd[:, None] * affine[0].reshape(-1) if affine else rstd[:, None]
        if len(affine) > 1:
            out += affine[1].reshape(-1)
        return out.reshape(x.shape).astype(dt, copy=False)

    @staticmethod
    def vjp(g, out, x, *affine, normalized_shape, eps):
        # (no ``kernel_vjp``, ops/fused.py: in a compiled backward the rule below fuses into
        # one row kernel, 15 ms for a forward+backward on (4096, 1024) float32 against
        # 33 ms with NativeLayerNormBackward; 30 against 34 ms with weight and bias)
        if array_backward():
            flat = NativeLayerNormBackward.apply(g, x, *affine,
                                                 normalized_shape=normalized_shape, eps=eps)
            return tuple(unpack(flat, [tuple(x.shape)]
                                + [tuple(normalized_shape)] * len(affine)))
        dims = _dims(x, normalized_shape)
        xhat, rstd = _stats_tensors(x, dims, eps)
        gw = g * affine[0] if affine else g
        dx = rstd * (gw - gw.mean(dim=dims, keepdim=True)
                     - xhat * (gw * xhat).mean(dim=dims, keepdim=True))
        # weight's and bias's cotangents at the output's shape: the engine sums the
        # leading dims away
        return (dx, *((g * xhat, g)[:len(affine)]))

    @staticmethod
    def decompose(x, *affine, normalized_shape, eps):
        """The op as its parts (mean, centring, variance, rsqrt, affine) in graphgrad ops,
        for a compiler that fuses them into one pass over the rows
        (``passes.decompose``); None where the parts would round differently (float16 and
        bfloat16 are computed in float32 by the op)."""
        if x.dtype.itemsize < 4 or x.dtype.is_complex:
            return None
        xhat, _ = _stats_tensors(x, _dims(x, normalized_shape), eps)
        if affine:
            xhat = xhat * affine[0]
        if len(affine) > 1:
            xhat = xhat + affine[1]
        return xhat

    @staticmethod
    def jvp(dots, out, x, *affine, normalized_shape, eps):
        dx = dots[0]
        dw = dots[1] if len(dots) > 1 else None
        db = dots[2] if len(dots) > 2 else None
        dims = _dims(x, normalized_shape)
        xhat, rstd = _stats_tensors(x, dims, eps)
        terms = []
        if dx is not None:
            dxhat = rstd * (dx - dx.mean(dim=dims, keepdim=True)
                            - xhat * (dx * xhat).mean(dim=dims, keepdim=True))
            terms.append(dxhat * affine[0] if affine else dxhat)
        if dw is not None:
            terms.append(xhat * dw)
        if db is not None:
            terms.append(db.expand(*out.shape))
        if not terms:
            return None
        result = terms[0]
        for t in terms[1:]:
            result = result + t
        return result

    @staticmethod
    def taylor(series, out, x, *affine, normalized_shape, eps):
        """The composite ``(x - mean) rsqrt(mean((x - mean)^2) + eps) w + b`` on jets."""
        x, *affine = jets(series, (x, *affine))
        dims = _dims(x.primal, normalized_shape)
        xc = x - Jet.apply(Mean, x, dim=dims, keepdim=True)
        var = Jet.apply(Mean, xc * xc, dim=dims, keepdim=True)
        y = xc * Jet.apply(Rsqrt, var + eps)
        if affine:
            y = y * affine[0]
        if len(affine) > 1:
            y = y + affine[1]
        return y.terms

    @classmethod
    def batch(cls, vals, bdims, **params):
        """The batch dim to the front of x (normalization is over trailing dims); a
        batched weight or bias is applied after the normalization, lined up with it."""
        if all(d is None for d in bdims[1:]):
            return cls.apply(to_front(vals[0], bdims[0]), *vals[1:], **params), 0
        size = next(v.shape[d] for v, d in zip(vals, bdims, strict=True) if d is not None)
        x = materialize(vals[0], bdims[0], size)
        y = cls.apply(x, **params)
        rank = x.ndim - 1
        w = align(vals[1], bdims[1], rank) if bdims[1] is not None else vals[1]
        y = y * w
        if len(vals) > 2:
            y = y + (align(vals[2], bdims[2], rank) if bdims[2] is not None else vals[2])
        return y, 0

    @classmethod
    def infer(cls, x, *affine, normalized_shape, eps) -> Spec:
        dtype = xp.result_type(x.dtype, *(a.dtype for a in affine))
        if dtype.kind not in "fc":
            _check_float(xp.empty(0, x.dtype))
        return Spec(tuple(x.shape), dtype)


def _stats_tensors(x, dims: tuple, eps: float):
    """x hat and the reciprocal standard deviation (kept dims), in graphgrad ops."""
    xc = x - x.mean(dim=dims, keepdim=True)
    rstd = Rsqrt.apply((xc * xc).mean(dim=dims, keepdim=True) + eps)
    return xc * rstd, rstd


class NativeLayerNormBackward(Op):
    """Layer norm's backward on arrays: (g, x[, weight[, bias]]) -> dx, d weight, d bias
    packed in one 1-D buffer (dx written in place there). Plain eager backward only
    (nothing recorded): under ``create_graph`` the vjp runs as graphgrad ops."""

    holomorphic = True
    differentiable = False

    @staticmethod
    def forward(g, x, *affine, normalized_shape, eps):
        (x, *affine), dt = _common(x, *affine)
        n = math.prod(normalized_shape)
        xc, rstd = _centred(x, normalized_shape, eps)
        rows = xc.shape[0]
        g2 = (g if g.shape == x.shape else xp.broadcast_to(g, x.shape)).reshape(rows, n)
        g2 = g2.astype(x.dtype, copy=False)
        flat = xp.empty(x.size + n * len(affine), x.dtype)
        dx = flat[:x.size].reshape(rows, n)
        # with xhat = xc r (r = rstd per row), gw = g w and means over the row:
        # dx = r (gw - mean(gw) - xhat mean(gw xhat)) = r gw - r mean(gw) - r^3 mean(gw xc) xc,
        # so xhat is never formed: its row sums come from g xc (BLAS products)
        if len(affine) > 1:  # d bias: the column sums of g
            xp.matmul(xp.ones(rows, x.dtype), g2, out=flat[x.size + n:])
        if affine:
            w = affine[0].reshape(-1)
            xp.multiply(g2, xc, out=dx)  # (dx's buffer as scratch)
            xp.matmul(rstd, dx, out=flat[x.size:x.size + n])  # d weight: sum of g xhat
            c2 = dx @ w
            c1 = g2 @ w
            rgw = rstd[:, None] * w  # r gw, the row scale and weight as one outer product
            rgw *= g2
        else:
            c2 = xp.einsum("ij,ij->i", g2, xc)
            c1 = g2 @ xp.ones(n, x.dtype)
            rgw = g2 * rstd[:, None]
        inv_n = x.dtype.type(1.0 / max(n, 1))
        c1 *= rstd
        c1 *= inv_n
        c2 *= rstd * rstd * rstd
        c2 *= inv_n
        xp.multiply(xc, c2[:, None], out=dx)
        xp.subtract(rgw, dx, out=dx)
        dx -= c1[:, None]
        return flat.astype(dt, copy=False)

    @classmethod
    def batch(cls, vals, bdims, **params):
        return by_example(cls, vals, bdims, **params)

    @classmethod
    def infer(cls, g, x, *affine, normalized_shape, eps) -> Spec:
        dtype = xp.result_type(x.dtype, *(a.dtype for a in affine))
        return Spec((math.prod(x.shape) + math.prod(normalized_shape) * len(affine),), dtype)


def layer_norm_op(x, weight, bias, normalized_shape: tuple, eps: float):
    """``F.layer_norm``'s op call: a bias without a weight is added after the op."""
    params = {"normalized_shape": tuple(normalized_shape), "eps": float(eps)}
    if weight is None:
        out = NativeLayerNorm.apply(x, **params)
        return out if bias is None else out + bias
    if bias is None:
        return NativeLayerNorm.apply(x, weight, **params)
    return NativeLayerNorm.apply(x, weight, bias, **params)
