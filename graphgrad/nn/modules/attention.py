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
from ..functional.attention import attention_with_weights
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
        _check_causal(is_causal, attn_mask)
        unbatched = query.ndim == 2
        if unbatched:  # (L, E): a batch of one
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        # the inputs stay in their layout, (L, N, E) or batch first (N, L, E): the
        # projections read the rows as they are and the heads come out as views
        seq = 1 if self.batch_first and not unbatched else 0
        out, weights = self._attend(query, key, value, tuple(query.shape[:2]),
                                    tuple(key.shape[:2]), seq, attn_mask, key_padding_mask,
                                    need_weights)
        out = out.reshape(*query.shape[:2], self.embed_dim)
        if unbatched:
            out = out.squeeze(1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(dim=1)
        return out, (weights.squeeze(0) if unbatched else weights)

    def _attend(self, query, key, value, q_lead: tuple, k_lead: tuple, seq: int, attn_mask,
                key_padding_mask, need_weights: bool):
        """The attention's output as rows (L*N, E) or (N*L, E) after ``out_proj``, and
        its weights (or None). The inputs are 3-D in their layout, whose two leading
        dims are ``q_lead`` and ``k_lead`` (``seq`` says which one is the sequence), or
        already their rows: a Transformer layer keeps its activations as rows, so that
        no reshape is recorded around each linear map (two graph nodes each)."""
        batch, n_q, n_k = q_lead[1 - seq], q_lead[seq], k_lead[seq]
        hd = self.head_dim
        q, k, v = self._project(query, key, value, q_lead, k_lead, seq)
        mask = self._mask(attn_mask, key_padding_mask, batch, n_q, n_k, q.dtype)
        dropout_p = self.dropout if self.training else 0.0
        scale = math.sqrt(1.0 / hd)
        weights = None
        if need_weights:
            out, weights = attention_with_weights(q, k, v, mask, dropout_p, scale)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                 scale=scale)
        # (N, H, L, hd) -> the rows of the input's layout, (L*N, E) or (N*L, E)
        out = out.permute(2, 0, 1, 3) if seq == 0 else out.permute(0, 2, 1, 3)
        return self.out_proj(out.reshape(-1, self.embed_dim)), weights

    def _project(self, query, key, value, q_lead: tuple, k_lead: tuple, seq: int):
        """q, k, v as (N, H, L, hd) views of the projections: one GEMM for
        self-attention with the packed weight (PyTorch's in_proj_weight), one for key
        and value when they are the same tensor, else one each; each on the input's
        rows (one matrix: the weight's gradient is one GEMM)."""
        e = self.embed_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        if w is not None and query is key and key is value:
            return self._heads(F.linear(_rows(query), w, b), q_lead, seq, 3)
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if w is None:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        else:
            wq = w[:e]
            if key is value:
                kv = self._heads(F.linear(_rows(key), w[e:], None if b is None else b[e:]),
                                 k_lead, seq, 2)
                return (self._heads(F.linear(_rows(query), wq, bq), q_lead, seq, 1)[0], *kv)
            wk, wv = w[e:2 * e], w[2 * e:]
        # (no generator expressions here: graphgrad.compile interprets this method)
        return (self._heads(F.linear(_rows(query), wq, bq), q_lead, seq, 1)[0],
                self._heads(F.linear(_rows(key), wk, bk), k_lead, seq, 1)[0],
                self._heads(F.linear(_rows(value), wv, bv), k_lead, seq, 1)[0])

    def _heads(self, proj, lead: tuple, seq: int, parts: int):
        """A projection's rows (L*N or N*L, parts * E) as ``parts`` views (N, H, L, hd)
        (``lead``: the input's two leading dims): one reshape and one permute."""
        h, hd = self.num_heads, self.head_dim
        split = proj.reshape(lead[0], lead[1], parts, h, hd)
        split = split.permute(2, 1 - seq, 3, seq, 4)  # (parts, N, H, L, hd)
        return split.unbind(0)

    def _mask(self, attn_mask, key_padding_mask, batch: int, n_q: int, n_k: int, dtype):
        """The attention mask in the fused op's convention, broadcasting over
        (N, H, L, S): boolean masks (True: blocked here) as one keep-mask, else the
        float masks (a boolean one as 0/-inf) added."""
        h = self.num_heads
        if attn_mask is not None and attn_mask.ndim == 3:  # PyTorch's (N*H, L, S)
            attn_mask = attn_mask.reshape(batch, h, n_q, n_k)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.reshape(batch, 1, 1, n_k)
        if attn_mask is None or key_padding_mask is None:
            one = key_padding_mask if attn_mask is None else attn_mask
            if one is None:
                return None
            return one.logical_not() if one.dtype == bool_ else one.to(dtype)
        if attn_mask.dtype == bool_ and key_padding_mask.dtype == bool_:
            return attn_mask.logical_or(key_padding_mask).logical_not()
        return _additive(attn_mask, dtype) + _additive(key_padding_mask, dtype)


def _check_causal(is_causal: bool, attn_mask) -> None:
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use "
                           "the Transformer module method `generate_square_subsequent_mask` "
                           "to create this mask.")


def _rows(x):
    """A 3-D input's rows as one matrix (an input given as rows passes as it is)."""
    return x if x.ndim == 2 else x.reshape(-1, x.shape[-1])


def _additive(mask, dtype):
    """A boolean mask (True: blocked) as 0/-inf to add to scores; a float mask as it is."""
    if mask is None:
        return None
    if mask.dtype == bool_:   # (the dtype, not the array: a graph value has no values)
        return ops.where(mask, float("-inf"), 0.0).to(dtype)
    return mask.to(dtype)
