"""Layer ``nn``: ``nn.functional``'s ``scaled_dot_product_attention`` (masks, causal,
dropout, grouped heads) on the fused op of ``ops.attention``, and the attention with
its weights that ``MultiheadAttention`` returns."""

from __future__ import annotations

import math

from graphgrad.ops.attention import ScaledDotProductAttention, _shapes, _split
from graphgrad.backend import bool_
from graphgrad.tensor.creation import random_tensor, zeros

from .dropouts import _check_probability

__all__ = ["scaled_dot_product_attention"]


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False):
    """``softmax(q k^T * scale + mask) v`` over the last two dims, as PyTorch's reference
    implementation: a boolean mask keeps where True, a float mask is added, ``is_causal``
    keeps ``j <= i``, ``dropout_p`` drops weights (the rest scaled by 1/(1-p));
    ``enable_gqa`` repeats key/value heads (dim -3) to the query's."""
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be "
                           "set when is_causal=True")
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        reps = query.shape[-3] // key.shape[-3]
        key = _repeat_heads(key, reps)
        value = _repeat_heads(value, reps)
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    return _attention(query, key, value, attn_mask, dropout_p, bool(is_causal), scale,
                      False)[0]


def attention_with_weights(query, key, value, attn_mask, dropout_p: float, scale: float):
    """(output, weights) of attention, the weights after dropout as ``MultiheadAttention``
    returns them: one op, whose two results are views of its output buffer."""
    flat, keep = _attention(query, key, value, attn_mask, dropout_p, False, scale, True)
    return _split(flat, *_shapes(query, key, value, attn_mask, keep))


def _attention(query, key, value, attn_mask, dropout_p: float, is_causal: bool, scale,
               need_weights: bool):
    """The fused op's output and the dropout keep-mask (None without dropout). The mask
    is drawn here from graphgrad's generator, one uniform sample per weight compared
    with p: the stream ``F.dropout`` of the weights draws (and at p = 1 none, as it)."""
    rest = () if attn_mask is None else (attn_mask,)
    params = {"scale": float(scale), "is_causal": is_causal}
    if need_weights:
        params["need_weights"] = True
    if dropout_p > 0.0:
        _check_probability(dropout_p)
        dtype = query._array.dtype
        _, w_shape = _shapes(query, key, value, attn_mask, None)
        if dropout_p == 1.0:
            keep = zeros(w_shape, dtype=bool_)
        else:  # (a plain uniform draw: the capture frontends record it as a random node)
            keep = random_tensor(lambda rng, s: rng.random(s), w_shape, dtype) >= dropout_p
        return ScaledDotProductAttention.apply(query, key, value, *rest, keep,
                                               dropout_p=float(dropout_p), **params), keep
    return ScaledDotProductAttention.apply(query, key, value, *rest, **params), None


def _repeat_heads(t, reps: int):
    """Each head (dim -3) ``reps`` times in a row: ``repeat_interleave(reps, dim=-3)``."""
    shape = tuple(t.shape)
    expanded = t.unsqueeze(-3).expand(*shape[:-2], reps, *shape[-2:])
    return expanded.reshape(*shape[:-3], shape[-3] * reps, *shape[-2:])
