"""Layer ``ops``: scaled dot-product attention as one op, ``softmax(q k^T scale + mask)
v`` over the last two dims, with dropout on the weights and the weights as a second
output on request, and its analytic backward as one op.

The attention weights are kept for the backward only while they are no more than the
inputs' values (short sequences: the recomputation, a product, an exp and a softmax,
is a third of the backward's time there), in the output's own buffer, behind it;
longer ones are recomputed from q and k, which keeps a step's memory at the inputs'
size rather than (L x S) per head, as fused kernels do. Dropout (PyTorch's:
``w = dropout(softmax(...), p)``, kept weights scaled by 1/(1-p)) takes its keep-mask
as a boolean input, drawn by the caller from graphgrad's generator (``nn.functional``),
so the op stays a pure function: the backward and every transform see the same mask,
one byte per weight. With ``need_weights`` the output is one 1-D buffer holding the
output then the (dropped) weights, which the caller views as the two results; each
gets its own gradient. The backward is written once, ``_attention_vjp``, over a small namespace of
array functions; plain eager backward runs it on arrays as
``ScaledDotProductAttentionBackward`` (one op), ``create_graph`` and the function
transforms run it as graphgrad ops, so derivatives of every order differentiate the
same program.

The mask is PyTorch's: a boolean mask keeps the positions where it is True, a float
mask is added to the scores; ``is_causal`` keeps key j <= query i. The inputs after q,
k, v are the mask (if any), then the keep-mask (when ``dropout_p`` > 0).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, is_grad_enabled, tensor

from .base import Op, Spec, broadcast_shapes
from .batching import align, by_example, logical_ndim, to_front
from .compare import Where
from .fused import array_backward, unpack
from .join import Cat
from .softmax import Softmax
from .shape import Permute
from .taylor_composite import Jet, jets

__all__: list[str] = []


def _col_sums(a):
    """The sums over dim -2 (kept), as a product with a vector of ones (BLAS)."""
    if a.shape[-2] == 0 or a.dtype.kind not in "fc" or a.dtype.itemsize < 4:
        return a.sum(axis=-2, keepdims=True)  # (float16: no BLAS; its reduction is wider)
    return (xp.ones(a.shape[-2], a.dtype) @ a)[..., None, :]


def _weights_t_array(q, key, mask, scale, is_causal, shift: bool = False):
    """The attention weights transposed, (..., S, L): the scores computed as k q^T and
    the softmax taken over dim -2. NumPy reduces and broadcasts along a short last dim
    row by row (attention's rows of S = 32: ~5 ns an element); along dim -2 it works on
    whole rows of L at once, and the column sums are a vector-matrix product (BLAS):
    ~1.7x faster at (16, 4, 32, 32). Products read the transposed views in place.

    Real scores none of which is large enough for exp to overflow are exponentiated
    without subtracting each column's max (``shift``): the shift only guards against
    overflow, costs a reduction over dim -2 and a pass, and adds a rounding."""
    s = xp.matmul(key, _t(q))
    s *= s.dtype.type(scale)
    if is_causal:  # keep key j <= query i: (j, i) of the lower triangle's transpose
        n_q, n_k = q.shape[-2], key.shape[-2]
        s[..., ~xp.tri(n_q, n_k, dtype=bool).T] = -xp.inf
    if mask is not None:
        m = _t(mask if mask.ndim >= 2 else mask.reshape(1, -1))
        if m.dtype == bool:
            s = xp.where(m, s, -xp.inf)
        elif s.shape == xp.broadcast_shapes(s.shape, m.shape):
            s += m
        else:  # a mask with more leading dims than the scores
            s = s + m
    bounds = None if shift or s.dtype.kind != "f" else _EXP_SAFE.get(s.dtype.itemsize)
    if bounds is not None and s.size and s.max() <= bounds[0]:
        xp.exp(s, out=s)
        sums = _col_sums(s)
        if sums.min() >= bounds[1]:
            s /= sums
            return s
        # a column so small that its sum underflowed, or fully masked (NaN there, as
        # PyTorch): the scores again, shifted
        return _weights_t_array(q, key, mask, scale, is_causal, shift=True)
    s -= _col_max(s)
    xp.exp(s, out=s)
    s /= _col_sums(s)
    return s


# per itemsize of a real float: the largest score exp may take unshifted (exp of it times
# a column's length stays far from overflow), and the smallest column sum of the
# unshifted exps kept (above it, no weight of consequence has underflowed to a
# subnormal: those lie below tiny / sum relative to the column's largest)
_EXP_SAFE = {ft.bits // 8: (0.5 * math.log(float(ft.max)), float(ft.tiny) ** 0.5)
             for ft in (xp.finfo(xp.float32), xp.finfo(xp.float64))}


def _col_max(a):
    """The max over dim -2 (kept), halving the rows pairwise: NumPy reduces a dim
    that is not the last one short row by short row (~4x slower at 32 rows); each
    halving is one elementwise maximum over whole matrices. Exact, NaN propagating."""
    n = a.shape[-2]
    if n < 2:
        return a.max(axis=-2, keepdims=True)
    h = n // 2
    acc = xp.maximum(a[..., :h, :], a[..., h:2 * h, :])
    if n % 2:
        xp.maximum(acc[..., :1, :], a[..., 2 * h:, :], out=acc[..., :1, :])
    while h > 1:
        n, h = h, h // 2
        xp.maximum(acc[..., :h, :], acc[..., h:2 * h, :], out=acc[..., :h, :])
        if n % 2:
            xp.maximum(acc[..., :1, :], acc[..., 2 * h:n, :], out=acc[..., :1, :])
        acc = acc[..., :h, :]
    return acc


def _mask_jet(s, mask, is_causal):
    """``_mask_tensor`` on jets: masked scores are the constant -inf (no series)."""
    if is_causal:
        n_q, n_k = s.primal.shape[-2:]
        s = Jet.apply(Where, tensor(xp.tri(n_q, n_k, dtype=bool)), s, float("-inf"))
    if mask is not None:
        s = (Jet.apply(Where, mask.primal, s, float("-inf")) if _is_bool(mask.primal)
             else s + mask)
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


def _keep_scale(dropout_p: float) -> float:
    """What dropout multiplies a kept weight by (every weight is dropped at p = 1)."""
    return 0.0 if dropout_p >= 1.0 else 1.0 / (1.0 - dropout_p)


def _drop_array(a, keep, dropout_p):
    r = a * keep
    r *= r.dtype.type(_keep_scale(dropout_p))
    return r


def _drop_tensor(a, keep, dropout_p):
    return Where.apply(keep, a * _keep_scale(dropout_p), 0.0)


def _softmax_vjp_t_array(p_t, dp_t):
    """``p (dp - sum_keys(dp p))`` on the transposed weights, in dp's buffer (the
    backward's own product)."""
    dp_t -= _col_sums(dp_t * p_t)
    dp_t *= p_t
    return dp_t


def _softmax_vjp_t_tensor(p_t, dp_t):
    return p_t * (dp_t - (dp_t * p_t).sum(dim=-2, keepdim=True))


def _product_array(a, b, slot):
    return xp.matmul(a, b, out=slot)


def _scaled_array(a, scale):
    a *= a.dtype.type(scale)  # (a is the product's own slot)
    return a


def _copy_array(a, slot):
    slot[...] = a
    return slot


# the backward's product a @ b and its scaling write each cotangent into its slot of
# the packed result (no concatenation after); as tensors they are plain ops
_ARRAYS = SimpleNamespace(weights_t=_weights_t_array, drop=_drop_array,
                          softmax_vjp_t=_softmax_vjp_t_array, product=_product_array,
                          scaled=_scaled_array, copy=_copy_array)
_TENSORS = SimpleNamespace(mask=_mask_tensor, softmax=lambda s: Softmax.apply(s, dim=-1),
                           weights_t=lambda *a: _t(_weights(_TENSORS, *a)), drop=_drop_tensor,
                           softmax_vjp_t=_softmax_vjp_t_tensor,
                           product=lambda a, b, slot: a @ b, scaled=lambda a, scale: a * scale,
                           copy=lambda a, slot: a)


def _half(*arrays) -> bool:
    """float16 operands: the kernels compute in float32, as PyTorch's accumulate (NumPy's
    float16 products round every step and have no BLAS)."""
    return xp.result_type(*arrays) == xp.float16


def _widened(arrays) -> list:
    return [a.astype(xp.float32) if a.dtype == xp.float16 else a for a in arrays]


def _parts(rest: tuple, dropout_p: float) -> tuple:
    """(mask, keep) from the inputs after q, k, v (either may be None)."""
    keep = rest[-1] if dropout_p > 0.0 else None
    mask = rest[0] if len(rest) > (keep is not None) else None
    return mask, keep


def _shapes(q, k, v, mask, keep) -> tuple:
    """The shapes of the output and of the weights (values, tensors or specs)."""
    lead = [q.shape[:-2], k.shape[:-2]]
    lead += [m.shape[:-2] for m in (mask, keep) if m is not None]
    w_shape = (*broadcast_shapes("scaled_dot_product_attention", *lead),
               q.shape[-2], k.shape[-2])
    out_lead = broadcast_shapes("scaled_dot_product_attention", w_shape[:-2], v.shape[:-2])
    return (*out_lead, q.shape[-2], v.shape[-1]), w_shape


def _split(flat, out_shape: tuple, w_shape: tuple) -> tuple:
    """The output and the weights in a ``need_weights`` buffer (views of it)."""
    n = math.prod(out_shape)
    return flat[:n].reshape(out_shape), flat[n:].reshape(w_shape)


def _weights(k, q, key, mask, scale, is_causal):
    return k.softmax(k.mask((q @ _t(key)) * scale, mask, is_causal))


def _attention_vjp(k, g, g_weights, q, key, v, mask, keep, scale, is_causal, dropout_p,
                   float_mask_grad: bool, slots=(None,) * 4, p_t=None):
    """(dq, dk, dv[, d mask]) of attention at cotangents ``g`` of its output and
    ``g_weights`` (or None) of its dropped weights, with the weights transposed
    (``_weights_t_array``): p^T (recomputed unless given), and the softmax's vjp ds^T.
    On arrays each cotangent is written into its ``slots`` entry."""
    if p_t is None:
        p_t = k.weights_t(q, key, mask, scale, is_causal)
    keep_t = None if keep is None else _t(keep)
    w_t = p_t if keep is None else k.drop(p_t, keep_t, dropout_p)
    dv = k.product(w_t, g, slots[2])
    dw_t = v @ _t(g)
    if g_weights is not None:
        dw_t = dw_t + _t(g_weights)
    dp_t = dw_t if keep is None else k.drop(dw_t, keep_t, dropout_p)
    ds_t = k.softmax_vjp_t(p_t, dp_t)
    grads = [k.scaled(k.product(_t(ds_t), key, slots[0]), scale),
             k.scaled(k.product(ds_t, q, slots[1]), scale), dv]
    if float_mask_grad:
        grads.append(k.copy(_t(ds_t), slots[3]))
    return grads


def _kept_size(p_t, q, k, v) -> int:
    """How many weights the forward keeps after its output, in the output's own buffer,
    for the array backward: all of them when they are no more than the inputs' values
    (memory stays at the inputs' size, as with none kept), else none (recomputed); none
    where no backward can follow (grad mode off: inference keeps nothing)."""
    if p_t.dtype.kind != "f" or p_t.dtype != xp.result_type(p_t, v) or not is_grad_enabled():
        return 0  # (complex, or the output's dtype would round them)
    return p_t.size if p_t.size <= q.size + k.size + v.size else 0


def _kept_weights(out, w_shape: tuple):
    """The transposed weights the forward kept behind its output (``_kept_size``), a
    tensor on that memory, or None (not kept, or the output is no longer the forward's
    own array)."""
    p_t = _kept_array(out._array, w_shape)
    return None if p_t is None else Tensor._make(p_t)


def _kept_array(a, w_shape: tuple):
    """``_kept_weights`` on the output's array: the transposed weights, or None."""
    store = a.base
    n_w = math.prod(w_shape)
    if store is None or store.ndim != 1 or store.size != a.size + n_w or \
            store.dtype != a.dtype or n_w == 0 or \
            store.__array_interface__["data"][0] != a.__array_interface__["data"][0]:
        return None
    return store[a.size:].reshape(*w_shape[:-2], w_shape[-1], w_shape[-2])


def _grad_shapes(out_shape, q, k, v, float_mask: bool) -> list:
    """The shapes of the cotangents as the backward computes them: every one has the
    output's leading dims (the engine then sums broadcast dims away)."""
    lead = tuple(out_shape[:-2])
    shapes = [(*lead, *q.shape[-2:]), (*lead, *k.shape[-2:]), (*lead, *v.shape[-2:])]
    if float_mask:
        shapes.append((*lead, q.shape[-2], k.shape[-2]))
    return shapes


def _kernel_grads(g, q, k, v, rest, kept, scale, is_causal, dropout_p, need_weights,
                  float_mask, out_shape, behind: bool = False) -> list:
    """The cotangents by ``ScaledDotProductAttentionBackward``; ``kept``: the transposed
    weights, or (``behind``) the forward's output, which may hold them behind it."""
    flags = {"weights_behind": True} if behind else {"kept_weights": kept is not None}
    flat = ScaledDotProductAttentionBackward.apply(
        g, q, k, v, *rest, *(() if kept is None else (kept,)), scale=scale,
        is_causal=is_causal, float_mask_grad=float_mask, dropout_p=dropout_p,
        need_weights=need_weights, **flags)
    return unpack(flat, _grad_shapes(out_shape, q, k, v, float_mask))


class ScaledDotProductAttention(Op):
    """``softmax(q k^T scale + mask) v`` for q (..., L, E), k (..., S, E), v (..., S, Ev),
    an optional mask broadcastable to (..., L, S) and, with ``dropout_p`` > 0, the
    boolean keep-mask of the weights; with ``need_weights`` the output and the weights
    packed in one 1-D buffer."""

    holomorphic = True  # analytic: the complex step goes through it
    # the array backward reads the weights kept behind the output (``_kept_weights``):
    # the output must stay until then
    saves_output = True

    @staticmethod
    def forward(q, k, v, *rest, scale, is_causal, dropout_p=0.0, need_weights=False):
        if _half(q, k, v):
            out = ScaledDotProductAttention.forward(
                *_widened((q, k, v, *rest)), scale=scale, is_causal=is_causal,
                dropout_p=dropout_p, need_weights=need_weights)
            return out.astype(xp.float16)
        mask, keep = _parts(rest, dropout_p)
        p_t = _weights_t_array(q, k, mask, scale, is_causal)
        shape = xp.broadcast_shapes(p_t.shape[:-2], v.shape[:-2]) + (q.shape[-2], v.shape[-1])
        store = None
        if not need_weights:
            store = xp.empty(math.prod(shape) + _kept_size(p_t, q, k, v),
                             xp.result_type(p_t, v))
            if store.size > math.prod(shape):  # the weights before dropout, kept
                store[math.prod(shape):].reshape(p_t.shape)[...] = p_t
        if keep is not None:
            if p_t.shape == _t(keep).shape:  # (the weights are this call's own buffer)
                p_t *= _t(keep)
                p_t *= p_t.dtype.type(_keep_scale(dropout_p))
            else:
                p_t = _drop_array(p_t, _t(keep), dropout_p)
        p = _t(p_t)
        if not need_weights:
            buf = store[:math.prod(shape)]
            if p.ndim < 4:
                return xp.matmul(p, v, out=buf.reshape(shape))
            # (B, H, L, Ev) laid out as (B, L, H, Ev), as PyTorch's CPU kernels do: merging
            # the heads back into (B, L, H * Ev) rows is then a view, not a copy
            order = (*range(len(shape) - 3), len(shape) - 2, len(shape) - 3, len(shape) - 1)
            buf = buf.reshape(tuple(shape[i] for i in order))
            return xp.matmul(p, v, out=buf.transpose(order))
        out_shape = xp.broadcast_shapes(p.shape[:-2], v.shape[:-2]) + (q.shape[-2],
                                                                        v.shape[-1])
        flat = xp.empty(math.prod(out_shape) + p.size, xp.result_type(p, v))
        out, weights = _split(flat, out_shape, p.shape)
        xp.matmul(p, v, out=out)
        weights[...] = p
        return flat

    @staticmethod
    def vjp(g, out, q, k, v, *rest, scale, is_causal, dropout_p=0.0, need_weights=False):
        mask, keep = _parts(rest, dropout_p)
        float_mask = mask is not None and not _is_bool(mask) and mask._requires_grad
        out_shape, w_shape = _shapes(q, k, v, mask, keep)
        if array_backward():
            kept = None if need_weights else _kept_weights(out, w_shape)
            grads = _kernel_grads(g, q, k, v, rest, kept, scale, is_causal, dropout_p,
                                  need_weights, float_mask, out_shape)
        else:
            g_out, g_w = _split(g, out_shape, w_shape) if need_weights else (g, None)
            grads = _attention_vjp(_TENSORS, g_out, g_w, q, k, v, mask, keep, scale,
                                   is_causal, dropout_p, float_mask)
        if mask is not None and len(grads) == 3:
            grads.append(None)
        return (*grads, *((None,) if keep is not None else ()))

    @staticmethod
    def kernel_vjp(g, out, q, k, v, *rest, scale, is_causal, dropout_p=0.0,
                   need_weights=False):
        """The vjp as one ``ScaledDotProductAttentionBackward`` (ops/fused.py). It reads
        the forward's output too (``weights_behind``): when the compiled forward ran with
        gradients on, the weights are behind it, as in eager, and the backward does not
        recompute them (a product, an exp and a softmax: ~0.2 ms of a Transformer
        layer's compiled backward at (16, 4, 32, 16)); otherwise it recomputes them."""
        mask, keep = _parts(rest, dropout_p)
        float_mask = mask is not None and not _is_bool(mask) and mask._requires_grad
        out_shape, _ = _shapes(q, k, v, mask, keep)
        grads = _kernel_grads(g, q, k, v, rest, None if need_weights else out, scale,
                              is_causal, dropout_p, need_weights, float_mask, out_shape,
                              behind=not need_weights)
        if mask is not None and len(grads) == 3:
            grads.append(None)
        return (*grads, *((None,) if keep is not None else ()))

    @staticmethod
    def jvp(dots, out, q, k, v, *rest, scale, is_causal, dropout_p=0.0, need_weights=False):
        mask, keep = _parts(rest, dropout_p)
        dq, dk, dv = dots[0], dots[1], dots[2]
        dmask = dots[3] if mask is not None and len(dots) > 3 else None
        p = _weights(_TENSORS, q, k, mask, scale, is_causal)
        w = p if keep is None else _drop_tensor(p, keep, dropout_p)
        terms = [t for t in (None if dq is None else (dq @ _t(k)) * scale,
                             None if dk is None else (q @ _t(dk)) * scale, dmask)
                 if t is not None]
        result = None if dv is None else w @ dv
        dw = None
        if terms:
            ds = terms[0]
            for t in terms[1:]:
                ds = ds + t
            dw = p * (ds - (ds * p).sum(dim=-1, keepdim=True))
            if keep is not None:
                dw = _drop_tensor(dw, keep, dropout_p)
            result = dw @ v if result is None else result + dw @ v
        if not need_weights or result is None:
            return result
        out_shape, w_shape = _shapes(q, k, v, mask, keep)
        dw = w.new_zeros(w_shape) if dw is None else dw.expand(*w_shape)
        return Cat.apply(result.expand(*out_shape).reshape(-1), dw.reshape(-1), dim=0)

    @staticmethod
    def taylor(series, out, q, k, v, *rest, scale, is_causal, dropout_p=0.0,
               need_weights=False):
        """The composite softmax(q k^T scale + mask) v on jets (Matmul's bilinear rule,
        Softmax's rule; dropout is linear with a constant mask)."""
        mask, keep = _parts(rest, dropout_p)
        values = (q, k, v) if mask is None else (q, k, v, mask)
        q, k, v, *extra = jets(series[:len(values)], values)
        s = _mask_jet((q @ k.mT) * scale, extra[0] if extra else None, is_causal)
        w = Jet.apply(Softmax, s, dim=-1)
        if keep is not None:
            w = w.map(lambda t: _drop_tensor(t, keep, dropout_p))
        result = w @ v
        if not need_weights:
            return result.terms
        return Jet.join([result, w], lambda ts: Cat.apply(ts[0].reshape(-1),
                                                          ts[1].reshape(-1), dim=0)).terms

    @classmethod
    def batch(cls, vals, bdims, **params):
        """Batch dims to the front of q, k, v (the products broadcast over leading dims);
        the masks are lined up with them (unbatched, they right-align as they are). A
        ``need_weights`` buffer is re-packed per example."""
        size = next(x.shape[d] for x, d in zip(vals, bdims, strict=True) if d is not None)
        rank = max(logical_ndim(x, d) for x, d in zip(vals[:3], bdims[:3], strict=True))
        args = [align(x, d, rank) if d is not None
                else x.unsqueeze(0).expand(size, *x.shape)
                for x, d in zip(vals[:3], bdims[:3], strict=True)]
        for m, dm in zip(vals[3:], bdims[3:], strict=True):
            args.append(m if dm is None else align(to_front(m, dm), 0, rank))
        out = cls.apply(*args, **params)
        if not params.get("need_weights"):
            return out, 0
        mask, keep = _parts(tuple(args[3:]), params.get("dropout_p", 0.0))
        result, weights = _split(out, *_shapes(*args[:3], mask, keep))
        return Cat.apply(result.reshape(size, -1), weights.reshape(size, -1), dim=1), 0

    @classmethod
    def infer(cls, q, k, v, *rest, scale, is_causal, dropout_p=0.0,
              need_weights=False) -> Spec:
        out_shape, w_shape = _shapes(q, k, v, *_parts(rest, dropout_p))
        if need_weights:
            return Spec((math.prod(out_shape) + math.prod(w_shape),), q.dtype)
        return Spec(out_shape, q.dtype)


class ScaledDotProductAttentionBackward(Op):
    """Attention's backward on arrays: (g, q, k, v[, mask][, keep]) -> dq, dk, dv (and
    the float mask's cotangent at the scores' shape) packed in one 1-D buffer; with
    ``need_weights`` g is the packed cotangent of the output and the weights. The last
    input is the transposed weights with ``kept_weights``, or with ``weights_behind``
    the forward's output, behind which the forward may have kept them (a compiled
    backward's graph cannot ask which: the run tells). Plain eager backward and compiled
    backward only (nothing recorded): under ``create_graph`` the same code runs as
    graphgrad ops."""

    holomorphic = True  # analytic: the complex step goes through it

    differentiable = False

    @staticmethod
    def forward(g, q, k, v, *rest, scale, is_causal, float_mask_grad, dropout_p=0.0,
                need_weights=False, kept_weights=False, weights_behind=False):
        p_t = None
        if weights_behind:
            rest, out = rest[:-1], rest[-1]
            p_t = _kept_array(out, _shapes(q, k, v, *_parts(rest, dropout_p))[1])
            kept_weights = p_t is not None
            if kept_weights:
                rest = (*rest, p_t)
        if _half(q, k, v):
            return ScaledDotProductAttentionBackward.forward(
                *_widened((g, q, k, v, *rest)), scale=scale, is_causal=is_causal,
                float_mask_grad=float_mask_grad, dropout_p=dropout_p,
                need_weights=need_weights, kept_weights=kept_weights).astype(xp.float16)
        if kept_weights:
            rest, p_t = rest[:-1], rest[-1]
        mask, keep = _parts(rest, dropout_p)
        out_shape, w_shape = _shapes(q, k, v, mask, keep)
        g_w = None
        if need_weights:
            g, g_w = _split(g, out_shape, w_shape)
        # the packed result, allocated first: each cotangent is computed into its place
        sources = (g, q, k, v, mask) if float_mask_grad else (g, q, k, v)
        shapes = _grad_shapes(out_shape, q, k, v, float_mask_grad)
        flat = xp.empty(sum(math.prod(s) for s in shapes), xp.result_type(*sources))
        slots, at = [], 0
        for shape in shapes:
            slots.append(flat[at:at + math.prod(shape)].reshape(shape))
            at += math.prod(shape)
        _attention_vjp(_ARRAYS, g, g_w, q, k, v, mask, keep, scale, is_causal, dropout_p,
                       float_mask_grad, slots, p_t)
        return flat

    @classmethod
    def batch(cls, vals, bdims, **params):
        return by_example(cls, vals, bdims, **params)

    @classmethod
    def infer(cls, g, q, k, v, *rest, scale, is_causal, float_mask_grad, dropout_p=0.0,
              need_weights=False, kept_weights=False, weights_behind=False) -> Spec:
        out_shape, _ = _shapes(q, k, v, *_parts(
            rest[:-1] if kept_weights or weights_behind else rest, dropout_p))
        shapes = _grad_shapes(out_shape, q, k, v, float_mask_grad)
        return Spec((sum(math.prod(s) for s in shapes),), q.dtype)
