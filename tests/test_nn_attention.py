"""Attention and transformers against PyTorch: scaled_dot_product_attention,
MultiheadAttention (masks, unbatched input, errors), TransformerEncoder,
TransformerDecoder and Transformer."""


from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import close, copy_weights, rand, twin_layers

import graphgrad as gg
from graphgrad import nn
from graphgrad.nn import functional as F

SDPA = [
    ("plain", {}, (2, 3, 4, 8), (2, 3, 6, 8)),
    ("causal", {"is_causal": True}, (2, 2, 5, 4), (2, 2, 5, 4)),
    ("causal_rect", {"is_causal": True}, (1, 2, 3, 4), (1, 2, 6, 4)),
    ("scale", {"scale": 0.3}, (2, 4, 4), (2, 7, 4)),
    ("bool_mask", {"mask": "bool"}, (2, 3, 4, 8), (2, 3, 6, 8)),
    ("float_mask", {"mask": "float"}, (2, 3, 4, 8), (2, 3, 6, 8)),
    ("gqa", {"enable_gqa": True}, (2, 4, 3, 8), (2, 2, 5, 8)),
]


@pytest.mark.parametrize("name,kw,q_shape,kv_shape", SDPA, ids=[s[0] for s in SDPA])
def test_scaled_dot_product_attention_matches_torch(name, kw, q_shape, kv_shape):
    kw = dict(kw)
    arrays = [rand(*q_shape, seed=1), rand(*kv_shape, seed=2), rand(*kv_shape, seed=3)]
    mask = kw.pop("mask", None)
    mask_arr = None
    if mask == "bool":
        mask_arr = np.random.default_rng(4).random((q_shape[-2], kv_shape[-2])) > 0.3
        mask_arr[:, 0] = True  # no row fully masked
    elif mask == "float":
        mask_arr = rand(q_shape[-2], kv_shape[-2], seed=4)
    results = []
    for lib in (gg, torch):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        m = None if mask_arr is None else lib.tensor(mask_arr)
        out = lib.nn.functional.scaled_dot_product_attention(*ts, attn_mask=m, **kw)
        (out * lib.tensor(rand(*out.shape, seed=5))).sum().backward()
        results.append([out] + [t.grad for t in ts])
    for a, b in zip(*results, strict=True):
        close(a, b)
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal=True"):
        F.scaled_dot_product_attention(gg.ones(1, 2, 2), gg.ones(1, 2, 2), gg.ones(1, 2, 2),
                                       attn_mask=gg.ones(2, 2), is_causal=True)


# ---- MultiheadAttention -------------------------------------------------------------------
def _mha_masks(kind, n, h, lq, lk):
    """(attn_mask, key_padding_mask) numpy arrays for a case; no row is fully blocked."""
    rng = np.random.default_rng(9)
    if kind == "bool":
        m = rng.random((lq, lk)) < 0.3
        m[:, 0] = False
        pad = np.zeros((n, lk), bool)
        pad[:, -1] = True
        return m, pad
    if kind == "float3d":
        return rng.standard_normal((n * h, lq, lk)), None
    if kind == "float_pad":
        return None, rng.standard_normal((n, lk))
    if kind == "causal":
        return np.triu(np.ones((lq, lk), bool), 1), None
    return None, None


MHA = [
    ("self", {}, {}, "none"),
    ("batch_first", {"batch_first": True}, {}, "none"),
    ("kdim_vdim", {"kdim": 5, "vdim": 3}, {}, "none"),
    ("no_bias", {"bias": False}, {}, "none"),
    ("bool_masks", {}, {}, "bool"),
    ("float_mask_3d", {"batch_first": True}, {"average_attn_weights": False}, "float3d"),
    ("float_padding", {}, {}, "float_pad"),
    ("causal", {}, {"is_causal": True}, "causal"),
    ("no_weights", {}, {"need_weights": False}, "bool"),
]


@pytest.mark.parametrize("name,kw,call_kw,masks", MHA, ids=[m[0] for m in MHA])
def test_multihead_attention_matches_torch(name, kw, call_kw, masks):
    e, h, n, lq, lk = 6, 3, 2, 4, 5
    g_mod, t_mod = twin_layers(lambda m: m.MultiheadAttention(e, h, **kw))
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    kdim, vdim = kw.get("kdim", e), kw.get("vdim", e)
    lead = (lambda size: (n, size)) if kw.get("batch_first") else (lambda size: (size, n))
    arrays = [rand(*lead(lq), e, seed=1), rand(*lead(lk), kdim, seed=2),
              rand(*lead(lk), vdim, seed=3)]
    attn_mask, pad_mask = _mha_masks(masks, n, h, lq, lk)
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        xs = [lib.tensor(a, requires_grad=True) for a in arrays]
        am = None if attn_mask is None else lib.tensor(attn_mask)
        pm = None if pad_mask is None else lib.tensor(pad_mask)
        out, weights = mod(*xs, key_padding_mask=pm, attn_mask=am, **call_kw)
        loss = (out * lib.tensor(rand(*out.shape, seed=4))).sum()
        if weights is not None:
            loss = loss + (weights * lib.tensor(rand(*weights.shape, seed=5))).sum()
        loss.backward()
        results.append([out, weights] + [x.grad for x in xs]
                       + [p.grad for _, p in mod.named_parameters()])
    for a, b in zip(*results, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            close(a, b)


def test_multihead_attention_unbatched_and_errors_match_torch():
    g_mod, t_mod = twin_layers(lambda m: m.MultiheadAttention(4, 2))
    x = rand(3, 4)
    out_g, w_g = g_mod(*(gg.tensor(x),) * 3)
    out_t, w_t = t_mod(*(torch.tensor(x),) * 3)
    close(out_g, out_t)
    close(w_g, w_t)
    for lib in (gg, torch):
        with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
            lib.nn.MultiheadAttention(5, 2)
        with pytest.raises(ValueError, match="embed_dim and num_heads must be greater than 0"):
            lib.nn.MultiheadAttention(0, 2)
        m = lib.nn.MultiheadAttention(4, 2)
        with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
            m(*(lib.ones(3, 1, 4),) * 3, is_causal=True)


# ---- Transformer encoder ------------------------------------------------------------------
ENCODERS = [
    ("post_norm", lambda m: m.TransformerEncoderLayer(8, 2, 16, 0.0), {}),
    ("pre_norm_gelu_batch_first", lambda m: m.TransformerEncoderLayer(
        8, 4, 12, 0.0, activation="gelu", batch_first=True, norm_first=True), {}),
    ("masks", lambda m: m.TransformerEncoderLayer(8, 2, 16, 0.0), {"masks": True}),
    ("encoder", lambda m: m.TransformerEncoder(m.TransformerEncoderLayer(8, 2, 16, 0.0), 2,
                                               norm=m.LayerNorm(8),
                                               enable_nested_tensor=False), {}),
]


@pytest.mark.parametrize("name,make,kw", ENCODERS, ids=[e[0] for e in ENCODERS])
def test_transformer_encoder_matches_torch(name, make, kw):
    g_mod, t_mod = twin_layers(make)
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    x = rand(5, 3, 8)
    call = {}
    if kw.get("masks"):
        pad = np.zeros((3, 5), bool)
        pad[0, -2:] = True
        call = {"src_mask": np.triu(np.full((5, 5), -np.inf), 1), "src_key_padding_mask": pad}
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        xt = lib.tensor(x, requires_grad=True)
        out = mod(xt, **{k: lib.tensor(v) for k, v in call.items()})
        (out * lib.tensor(rand(*out.shape, seed=2))).sum().backward()
        results.append([out, xt.grad] + [p.grad for _, p in mod.named_parameters()])
    for a, b in zip(*results, strict=True):
        close(a, b, 1e-9, 1e-11)


DECODERS = [
    ("decoder_layer", lambda m: m.TransformerDecoderLayer(8, 2, 16, 0.0), {}),
    ("decoder_layer_pre_norm_gelu", lambda m: m.TransformerDecoderLayer(
        8, 4, 12, 0.0, activation="gelu", norm_first=True), {"masks": True}),
    ("decoder", lambda m: m.TransformerDecoder(m.TransformerDecoderLayer(8, 2, 16, 0.0), 2,
                                               norm=m.LayerNorm(8)), {"masks": True}),
]


@pytest.mark.parametrize("name,make,kw", DECODERS, ids=[d[0] for d in DECODERS])
def test_transformer_decoder_matches_torch(name, make, kw):
    g_mod, t_mod = twin_layers(make)
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    tgt, mem = rand(4, 3, 8), rand(6, 3, 8, seed=1)
    call = {}
    if kw.get("masks"):
        pad = np.zeros((3, 6), bool)
        pad[1, -2:] = True
        call = {"tgt_mask": np.triu(np.full((4, 4), -np.inf), 1),
                "memory_key_padding_mask": pad}
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        xt, xm = lib.tensor(tgt, requires_grad=True), lib.tensor(mem, requires_grad=True)
        out = mod(xt, xm, **{k: lib.tensor(v) for k, v in call.items()})
        (out * lib.tensor(rand(*out.shape, seed=2))).sum().backward()
        results.append([out, xt.grad, xm.grad] + [p.grad for _, p in mod.named_parameters()])
    for a, b in zip(*results, strict=True):
        close(a, b, 1e-9, 1e-11)


def test_transformer_matches_torch():
    torch.manual_seed(0)
    t_mod = torch.nn.Transformer(8, 2, 2, 1, 16, 0.0, batch_first=True).double()
    g_mod = nn.Transformer(8, 2, 2, 1, 16, 0.0, batch_first=True).double()
    copy_weights(g_mod, t_mod)
    assert repr(g_mod) == repr(t_mod)
    src, tgt = rand(3, 5, 8), rand(3, 4, 8, seed=1)
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        xs, xt = lib.tensor(src, requires_grad=True), lib.tensor(tgt, requires_grad=True)
        mask = lib.nn.Transformer.generate_square_subsequent_mask(4, dtype=lib.float64)
        out = mod(xs, xt, tgt_mask=mask, tgt_is_causal=True)
        (out * lib.tensor(rand(*out.shape, seed=2))).sum().backward()
        results.append([out, xs.grad, xt.grad] + [p.grad for _, p in mod.named_parameters()])
    for a, b in zip(*results, strict=True):
        close(a, b, 1e-9, 1e-11)
    # every matrix re-initialised with xavier_uniform_ (bound sqrt(6 / (fan_in + fan_out)))
    gg.manual_seed(0)
    w = nn.Transformer(8, 2, 1, 1, 16).encoder.layers[0].linear1.weight
    assert float(w.detach().abs().max()) <= np.sqrt(6 / (8 + 16))
    for lib in (gg, torch):
        m = lib.nn.Transformer(8, 2, 1, 1, 16)
        with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
            m(lib.ones(5, 2, 8), lib.ones(4, 3, 8))
        with pytest.raises(RuntimeError, match="the feature number of src and tgt must be "
                           "equal to d_model"):
            m(lib.ones(5, 2, 8), lib.ones(4, 2, 6))
