"""Layer ``nn``: the Transformer: encoder and decoder layers, their stacks and
``Transformer``, PyTorch's modules with their submodule names (so state_dicts load
across), post-norm by default or pre-norm (``norm_first``)."""

from __future__ import annotations

import copy
from collections.abc import Callable

from graphgrad.ops.addmm_activation import linear_relu
from graphgrad.tensor import Tensor, full

from .. import init

from .. import functional as F
from .attention import MultiheadAttention, _check_causal
from .container import ModuleList
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

__all__ = ["TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
           "TransformerDecoder", "Transformer"]


def _activation(activation: str | Callable) -> Callable:
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if isinstance(activation, str):
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return activation


class _TransformerLayer(Module):
    """The parts of an encoder or decoder layer, registered in PyTorch's order (its repr
    and state_dict follow it): the attentions, the feed-forward block, ``norm_first``,
    one LayerNorm and one dropout per residual block."""

    _attentions: tuple[str, ...] = ("self_attn",)

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        for name in self._attentions:
            setattr(self, name, MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                   batch_first=batch_first, dtype=dtype))
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        blocks = len(self._attentions) + 1
        for i in range(1, blocks + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias,
                                                dtype=dtype))
        for i in range(1, blocks + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _activation(activation)

    def _hidden(self, x) -> Tensor:
        """The feed-forward block's ``activation(linear1(x))``; with relu, a plain
        ``linear1`` (no hooks) and real floats as one op, PyTorch's ``_addmm_activation``
        (its fast path): linear1's output is then not kept alive for backward."""
        lin = self.linear1
        if self.activation is F.relu and type(lin) is Linear and lin._hooks is None \
                and x.dtype.is_floating_point and not x.dtype.is_complex and x.ndim >= 2:
            return linear_relu(x, lin.weight, lin.bias)
        return self.activation(lin(x))


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention then a feed-forward block, each with dropout, a residual
    connection and a LayerNorm (after the sum, or before the block with ``norm_first``)."""

    def forward(self, src: Tensor, src_mask=None, src_key_padding_mask=None,
                is_causal: bool = False) -> Tensor:
        if src.ndim == 3 and self._on_rows():
            lead = tuple(src.shape[:2])
            out = self._blocks(src.reshape(-1, src.shape[-1]), src_mask, src_key_padding_mask,
                               is_causal, lead)
            return out.reshape(src.shape)
        return self._blocks(src, src_mask, src_key_padding_mask, is_causal, None)

    def _on_rows(self) -> bool:
        """Whether the layer may run on its input's rows, (L*N, E) or (N*L, E): every
        block but the attention works on each position alone, and a linear map of a
        3-D input records two reshapes (a Transformer step's most numerous nodes). Only
        with PyTorch's own submodules and no hooks on them, which would see 2-D inputs;
        the attention then gets the two leading dims."""
        if type(self.self_attn) is not MultiheadAttention:
            return False
        # (no generator expressions here: graphgrad.compile interprets this method)
        for m in (self.self_attn, self.linear1, self.linear2, self.norm1, self.norm2,
                  self.dropout, self.dropout1, self.dropout2):
            if m._hooks is not None:
                return False
        return type(self.linear1) is Linear and type(self.linear2) is Linear and \
            type(self.norm1) is LayerNorm and type(self.norm2) is LayerNorm and \
            type(self.dropout) is Dropout and type(self.dropout1) is Dropout and \
            type(self.dropout2) is Dropout

    def _blocks(self, x, src_mask, src_key_padding_mask, is_causal: bool,
                lead: tuple | None) -> Tensor:
        """The layer on ``x``: its input, or (``lead``: the input's two leading dims)
        its rows."""
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal,
                                   lead)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal,
                                          lead))
        return self.norm2(x + self._ff_block(x))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal: bool,
                  lead: tuple | None = None) -> Tensor:
        attn = self.self_attn
        if lead is None:
            x = attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                     need_weights=False, is_causal=is_causal)[0]
        else:  # x: rows; MultiheadAttention.forward's checks, then its rows' path
            _check_causal(is_causal, attn_mask)
            seq = 1 if attn.batch_first else 0
            x = attn._attend(x, x, x, lead, lead, seq, attn_mask, key_padding_mask, False)[0]
        return self.dropout1(x)

    def _ff_block(self, x) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self._hidden(x))))


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` applied in turn, then ``norm``."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm=None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src: Tensor, mask=None, src_key_padding_mask=None,
                is_causal: bool | None = None) -> Tensor:
        out = src
        if src.ndim == 3 and self._on_rows():
            # the layers pass their rows on: one reshape in and one out for the stack
            lead = tuple(src.shape[:2])
            out = src.reshape(-1, src.shape[-1])
            for layer in self.layers:
                out = layer._blocks(out, mask, src_key_padding_mask, bool(is_causal), lead)
            out = out.reshape(src.shape)
        else:
            for layer in self.layers:
                out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                            is_causal=bool(is_causal))
        return self.norm(out) if self.norm is not None else out

    def _on_rows(self) -> bool:
        """Whether every layer is a plain TransformerEncoderLayer (no hooks) that may run
        on rows (``TransformerEncoderLayer._on_rows``)."""
        for layer in self.layers:
            if type(layer) is not TransformerEncoderLayer or layer._hooks is not None or \
                    not layer._on_rows():
                return False
        return True


class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention, attention over the encoder's ``memory``, then a feed-forward
    block, each with dropout, a residual connection and a LayerNorm."""

    _attentions = ("self_attn", "multihead_attn")

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask,
                                   tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                           memory_is_causal))
        return self.norm3(x + self._ff_block(x))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal: bool) -> Tensor:
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x) -> Tensor:
        return self.dropout3(self.linear2(self.dropout(self._hidden(x))))


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` applied in turn, then ``norm``."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int,
                 norm=None) -> None:
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask,
                        memory_key_padding_mask=memory_key_padding_mask,
                        tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return self.norm(out) if self.norm is not None else out


class Transformer(Module):
    """An encoder stack and a decoder stack (each ending in a LayerNorm), all matrices
    re-initialised with ``xavier_uniform_`` as PyTorch's."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = F.relu,
                 custom_encoder=None, custom_decoder=None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                      batch_first, norm_first, bias, device, dtype)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src: Tensor, tgt: Tensor, src_mask=None, tgt_mask=None,
                memory_mask=None, src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        batched = src.ndim == 3
        batch_dim = 0 if self.batch_first else 1
        if batched and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """(sz, sz) float mask: -inf above the diagonal (future positions), 0 elsewhere."""
        from graphgrad import ops
        from graphgrad.tensor.creation import arange
        future = arange(sz).unsqueeze(0) > arange(sz).unsqueeze(1)
        return ops.where(future, full((sz, sz), float("-inf"), dtype=dtype), 0.0)
