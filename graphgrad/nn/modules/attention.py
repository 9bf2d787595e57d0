"""Layer ``nn``: ``MultiheadAttention``, PyTorch's module with its parameter names
(``in_proj_weight``/``in_proj_bias`` packed, or ``q/k/v_proj_weight`` when the key and
value sizes differ, and ``out_proj``), masks and returned attention weights.

Mask conventions are PyTorch's and differ from ``scaled_dot_product_attention``'s: in
``attn_mask`` and ``key_padding_mask`` a True entry is a position that may NOT be
attended to; float masks are added to the scores.
"""

from __future__ import annotations

import math

from graphgrad import ops
from graphgrad.backend import bool_
from graphgrad.tensor import Tensor, empty

from .. import functional as F
from ..init import constant_, xavier_uniform_
from ..parameter import Parameter
from .linear import Linear
from .module import Module

__all__ = ["MultiheadAttention"]


class NonDynamicallyQuantizableLinear(Linear):
    """``out_proj``'s class in PyTorch (a plain ``Linear``), kept for its repr."""


class MultiheadAttention(Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are "
                                      "not supported")
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, dtype=dtype))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, dtype=dtype))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, dtype=dtype))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, dtype=dtype))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias,
                                                        dtype=dtype)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                xavier_uniform_(w)
        if self.in_proj_bias is not None:
            constant_(self.in_proj_bias, 0.0)
            constant_(self.out_proj.bias, 0.0)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask=None,
                need_weights: bool = True, attn_mask=None, average_attn_weights: bool = True,
                is_causal: bool = False):
        """``(attn_output, attn_weights)``: the output in the query's layout, and the
        weights (N, L, S), averaged over heads, or (N, H, L, S), or None."""
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use "
                               "the Transformer module method `generate_square_subsequent_mask` "
                               "to create this mask.")
        unbatched = query.ndim == 2
        if unbatched:  # (L, E): a batch of one
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:  # (N, L, E) -> (L, N, E)
            query, key, value = [t.transpose(0, 1) for t in (query, key, value)]
        n_q, batch, e = query.shape
        n_k = key.shape[0]
        h, hd = self.num_heads, self.head_dim
        q, k, v = self._project(query, key, value)
        # (L, N, E) -> (N * H, L, hd), as PyTorch's layout (its 3-d attn_mask matches it)
        q, k, v = [t.reshape(t.shape[0], batch * h, hd).transpose(0, 1) for t in (q, k, v)]
        mask = _additive(attn_mask, q.dtype)
        if mask is not None and mask.ndim == 2:
            mask = mask.unsqueeze(0)
        if key_padding_mask is not None:
            pad = _additive(key_padding_mask, q.dtype).reshape(batch, 1, 1, n_k)
            pad = pad.expand(batch, h, 1, n_k).reshape(batch * h, 1, n_k)
            mask = pad if mask is None else mask + pad
        if not need_weights and not (self.dropout > 0.0 and self.training):
            # the fused attention op: its backward recomputes the weights
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                 scale=math.sqrt(1.0 / hd))
        else:
            scores = (q * math.sqrt(1.0 / hd)) @ k.transpose(-2, -1)
            if mask is not None:
                scores = scores + mask
            weights = ops.softmax(scores, -1)
            if self.dropout > 0.0 and self.training:
                weights = F.dropout(weights, self.dropout)
            out = weights @ v
        out = out.transpose(0, 1).reshape(n_q * batch, e)
        out = self.out_proj(out).reshape(n_q, batch, e)
        if unbatched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        weights = weights.reshape(batch, h, n_q, n_k)
        if average_attn_weights:
            weights = weights.mean(dim=1)
        return out, (weights.squeeze(0) if unbatched else weights)

    def _project(self, query, key, value):
        e = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            wq, wk, wv = w[:e], w[e:2 * e], w[2 * e:]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)


def _additive(mask, dtype):
    """A boolean mask (True: blocked) as 0/-inf to add to scores; a float mask as it is."""
    if mask is None:
        return None
    if mask.dtype == bool_:   # (the dtype, not the array: a graph value has no values)
        return ops.where(mask, float("-inf"), 0.0).to(dtype)
    return mask.to(dtype)
