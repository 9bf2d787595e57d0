"""Layer ``ops``: scaled dot-product attention as one op, ``softmax(q k^T scale + mask)
v`` over the last two dims, with its analytic backward as one op.

The attention weights are not saved: the backward recomputes them from q and k (one
product and a softmax), which keeps a step's memory at the inputs' size rather than
(L x S) per head, as fused kernels do. The backward is written once, ``_attention_vjp``,
over a small namespace of array functions; plain eager backward runs it on arrays as
``ScaledDotProductAttentionBackward`` (one op), ``create_graph`` and the function
transforms run it as graphgrad ops, so derivatives of every order differentiate the
same program.

The mask is PyTorch's: a boolean mask keeps the positions where it is True, a float
mask is added to the scores; ``is_causal`` keeps key j <= query i.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from graphgrad.backend import xp
from graphgrad.tensor import tensor

from .base import Op, Spec, broadcast_shapes
from .batching import align, logical_ndim, to_front
from .compare import Where
from .fused import array_backward, pack, unpack
from .reduce import Softmax
from .shape import Permute

__all__: list[str] = []


def _softmax_array(s):
    s -= s.max(axis=-1, keepdims=True)
    xp.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s


def _mask_array(s, mask, is_causal):
    if is_causal:
        n_q, n_k = s.shape[-2:]
        s[..., ~xp.tri(n_q, n_k, dtype=bool)] = -xp.inf
    if mask is not None:
        if mask.dtype == bool:
            s = xp.where(mask, s, -xp.inf)
        else:
            s += mask
    return s


def _is_bool(mask) -> bool:
    return getattr(mask, "_array", mask).dtype.kind == "b"


def _mask_tensor(s, mask, is_causal):
    if is_causal:
        n_q, n_k = s.shape[-2:]
        s = Where.apply(tensor(xp.tri(n_q, n_k, dtype=bool)), s, float("-inf"))
    if mask is not None:
        s = Where.apply(mask, s, float("-inf")) if _is_bool(mask) else s + mask
    return s


def _t(a):
    """The transpose of the last two dims."""
    order = (*range(a.ndim - 2), a.ndim - 1, a.ndim - 2)
    return a.transpose(order) if isinstance(a, xp.ndarray) else Permute.apply(a, dims=order)


_ARRAYS = SimpleNamespace(mask=_mask_array, softmax=_softmax_array,
                          total=lambda a: a.sum(axis=-1, keepdims=True))
_TENSORS = SimpleNamespace(mask=_mask_tensor, softmax=lambda s: Softmax.apply(s, dim=-1),
                           total=lambda a: a.sum(dim=-1, keepdim=True))


def _weights(k, q, key, mask, scale, is_causal):
    return k.softmax(k.mask((q @ _t(key)) * scale, mask, is_causal))


def _attention_vjp(k, g, q, key, v, mask, scale, is_causal, float_mask_grad: bool):
    """(dq, dk, dv[, d mask]) of attention at a cotangent ``g`` of its output."""
    p = _weights(k, q, key, mask, scale, is_causal)
    dv = _t(p) @ g
    dp = g @ _t(v)
    ds = p * (dp - k.total(dp * p))  # the softmax's vjp, the row sums of dp p
    grads = [(ds @ key) * scale, (_t(ds) @ q) * scale, dv]
    if float_mask_grad:
        grads.append(ds)
    return grads


def _grad_shapes(g, q, k, v, float_mask: bool) -> list:
    """The shapes of the cotangents as the backward computes them: every one has the
    output's leading dims (the engine then sums broadcast dims away)."""
    lead = tuple(g.shape[:-2])
    shapes = [(*lead, *q.shape[-2:]), (*lead, *k.shape[-2:]), (*lead, *v.shape[-2:])]
    if float_mask:
        shapes.append((*lead, q.shape[-2], k.shape[-2]))
    return shapes


class ScaledDotProductAttention(Op):
    """``softmax(q k^T scale + mask) v`` for q (..., L, E), k (..., S, E), v (..., S, Ev)
    and an optional mask broadcastable to (..., L, S)."""

    holomorphic = True  # analytic: the complex step goes through it

    @staticmethod
    def forward(q, k, v, mask=None, *, scale, is_causal):
        s = xp.matmul(q, _t(k))
        s *= s.dtype.type(scale)
        return xp.matmul(_softmax_array(_mask_array(s, mask, is_causal)), v)

    @staticmethod
    def vjp(g, out, q, k, v, mask=None, *, scale, is_causal):
        float_mask = mask is not None and not _is_bool(mask) and mask._requires_grad
        if array_backward():
            flat = ScaledDotProductAttentionBackward.apply(
                g, q, k, v, *(() if mask is None else (mask,)), scale=scale,
                is_causal=is_causal, float_mask_grad=float_mask)
            grads = unpack(flat, _grad_shapes(g, q, k, v, float_mask))
        else:
            grads = _attention_vjp(_TENSORS, g, q, k, v, mask, scale, is_causal, float_mask)
        if mask is not None and len(grads) == 3:
            grads.append(None)
        return tuple(grads)

    @staticmethod
    def jvp(dots, out, q, k, v, mask=None, *, scale, is_causal):
        dq, dk, dv = dots[0], dots[1], dots[2]
        dmask = dots[3] if mask is not None and len(dots) > 3 else None
        p = _weights(_TENSORS, q, k, mask, scale, is_causal)
        terms = [t for t in (None if dq is None else (dq @ _t(k)) * scale,
                             None if dk is None else (q @ _t(dk)) * scale, dmask)
                 if t is not None]
        result = None if dv is None else p @ dv
        if terms:
            ds = terms[0]
            for t in terms[1:]:
                ds = ds + t
            dp = p * (ds - (ds * p).sum(dim=-1, keepdim=True))
            result = dp @ v if result is None else result + dp @ v
        return result

    @classmethod
    def batch(cls, vals, bdims, **params):
        """Batch dims to the front of q, k, v (the products broadcast over leading dims);
        the mask is lined up with them (unbatched, it right-aligns as it is)."""
        size = next(x.shape[d] for x, d in zip(vals, bdims, strict=True) if d is not None)
        rank = max(logical_ndim(x, d) for x, d in zip(vals[:3], bdims[:3], strict=True))
        args = [align(x, d, rank) if d is not None
                else x.unsqueeze(0).expand(size, *x.shape)
                for x, d in zip(vals[:3], bdims[:3], strict=True)]
        if len(vals) > 3:
            m, dm = vals[3], bdims[3]
            args.append(m if dm is None else align(to_front(m, dm), 0, rank))
        return cls.apply(*args, **params), 0

    @classmethod
    def infer(cls, q, k, v, mask=None, *, scale, is_causal) -> Spec:
        lead = broadcast_shapes("scaled_dot_product_attention", q.shape[:-2], k.shape[:-2],
                                v.shape[:-2])
        return Spec((*lead, q.shape[-2], v.shape[-1]), q.dtype)


class ScaledDotProductAttentionBackward(Op):
    """Attention's backward on arrays: (g, q, k, v[, mask]) -> dq, dk, dv (and the float
    mask's cotangent at the scores' shape) packed in one 1-D buffer. Plain eager
    backward only (nothing recorded): under ``create_graph`` the same code runs as
    graphgrad ops."""

    holomorphic = True  # analytic: the complex step goes through it

    differentiable = False

    @staticmethod
    def forward(g, q, k, v, mask=None, *, scale, is_causal, float_mask_grad):
        grads = _attention_vjp(_ARRAYS, g, q, k, v, mask, scale, is_causal, float_mask_grad)
        return pack(grads)

    @classmethod
    def batch(cls, vals, bdims, **params):
        size = next(x.shape[d] for x, d in zip(vals, bdims, strict=True) if d is not None)
        outs = [cls.apply(*(x if d is None else x.select(d, b)
                            for x, d in zip(vals, bdims, strict=True)), **params)
                for b in range(size)]
        from .join import Stack
        return Stack.apply(*outs, dim=0), 0

    @classmethod
    def infer(cls, g, q, k, v, mask=None, *, scale, is_causal, float_mask_grad) -> Spec:
        return Spec((sum(math.prod(s) for s in _grad_shapes(g, q, k, v, float_mask_grad)),),
                    q.dtype)
