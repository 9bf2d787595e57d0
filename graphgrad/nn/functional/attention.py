"""Layer ``nn``: ``nn.functional``'s ``scaled_dot_product_attention`` (masks, causal,
dropout, grouped heads): the fused op of ``ops.attention``, or with dropout the
composite."""

from __future__ import annotations


from graphgrad import ops
from graphgrad.ops.attention import ScaledDotProductAttention

from .dropouts import dropout

__all__ = ["scaled_dot_product_attention"]


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False):
    """``softmax(q k^T * scale + mask) v`` over the last two dims, as PyTorch's reference
    implementation: a boolean mask keeps where True, a float mask is added, ``is_causal``
    keeps ``j <= i``; ``enable_gqa`` repeats key/value heads (dim -3) to the query's."""
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be "
                           "set when is_causal=True")
    import math

    from graphgrad.tensor.creation import arange
    n_q, n_k = query.shape[-2], key.shape[-2]
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        reps = query.shape[-3] // key.shape[-3]
        key = _repeat_heads(key, reps)
        value = _repeat_heads(value, reps)
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    if dropout_p == 0.0:  # one op; its backward recomputes the weights
        rest = () if attn_mask is None else (attn_mask,)
        return ScaledDotProductAttention.apply(query, key, value, *rest, scale=float(scale),
                                               is_causal=bool(is_causal))
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        attn_mask = arange(n_q).unsqueeze(1) >= arange(n_k).unsqueeze(0)
    if attn_mask is not None:
        if attn_mask._array.dtype.kind == "b":
            scores = ops.where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = ops.softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ value


def _repeat_heads(t, reps: int):
    """Each head (dim -3) ``reps`` times in a row: ``repeat_interleave(reps, dim=-3)``."""
    shape = tuple(t.shape)
    expanded = t.unsqueeze(-3).expand(*shape[:-2], reps, *shape[-2:])
    return expanded.reshape(*shape[:-3], shape[-3] * reps, *shape[-2:])
