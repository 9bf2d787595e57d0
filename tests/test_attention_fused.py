"""The fused attention op with dropout and with its weights as a second output, through
``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``: the dropout stream is
``F.dropout``'s (same seed, same mask, same results as the composite), the weights and
every gradient match PyTorch to second order in float64, and the export to ONNX.
The op itself (every transform, the Taylor rule) is in the op tables: op_cases.py and
jvp_vmap_cases.py ("scaled_dot_product_attention_dropout", "..._weights")."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import close, rand, twin_layers

import graphgrad as gg
from graphgrad.nn import functional as F


def _composite(q, k, v, p, scale):
    """attention as the composite the module used before the fused op: softmax, then
    F.dropout of the weights (graphgrad's stream: one draw per weight), then the
    product."""
    w = gg.softmax((q @ k.transpose(-2, -1)) * scale, -1)
    if p:
        w = F.dropout(w, p)
    return w @ v, w


@pytest.mark.parametrize("dtype", [gg.float64, gg.float32])
def test_sdpa_dropout_draws_the_stream_of_dropout_and_differentiates_as_it(dtype):
    arrays = [rand(2, 3, 4, 8, seed=1), rand(2, 3, 6, 8, seed=2), rand(2, 3, 6, 5, seed=3)]
    results = []
    for fused in (True, False):
        xs = [gg.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
        gg.manual_seed(11)
        out = (F.scaled_dot_product_attention(*xs, dropout_p=0.3) if fused
               else _composite(*xs, 0.3, 1 / math.sqrt(8))[0])
        grads = gg.autograd.grad((out ** 2).sum(), xs, create_graph=True)
        second = gg.autograd.grad(sum((g ** 2).sum() for g in grads), xs)
        results.append([out, *grads, *second])
    tol = 1e-12 if dtype == gg.float64 else 2e-4
    for a, b in zip(*results, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)
    dropped = results[0][0]
    assert not np.allclose(dropped.detach().numpy(), F.scaled_dot_product_attention(
        *[gg.tensor(a, dtype=dtype) for a in arrays]).numpy())  # the mask did something
    gg.manual_seed(11)
    again = F.scaled_dot_product_attention(*[gg.tensor(a, dtype=dtype) for a in arrays],
                                           dropout_p=0.3)
    np.testing.assert_array_equal(again.numpy(), dropped.detach().numpy())


def test_sdpa_dropout_keeps_a_bool_mask_and_p_one_gives_zeros():
    q = gg.tensor(rand(2, 4, 3), requires_grad=True)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    keep = [a for a in out.inputs if a.dtype == gg.bool]  # saved for backward: 1 byte each
    assert len(keep) == 1 and tuple(keep[0].shape) == (2, 4, 4)
    zero = F.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    assert not zero.detach().numpy().any()
    zero.sum().backward()
    assert not q.grad.numpy().any()
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        F.scaled_dot_product_attention(q, q, q, dropout_p=1.5)


MHA_CASES = [
    ("average", {}, {"average_attn_weights": True}),
    ("per_head_batch_first", {"batch_first": True}, {"average_attn_weights": False}),
    ("masks", {}, {"masks": True}),
    ("cross_kv", {"kdim": 5, "vdim": 5}, {"cross": True}),
]


@pytest.mark.parametrize("name,kw,call", MHA_CASES, ids=[c[0] for c in MHA_CASES])
def test_multihead_attention_weights_match_torch_to_second_order(name, kw, call):
    """need_weights=True through the fused op: the output, the weights, their first
    derivatives and the derivatives of the gradients' norm against PyTorch."""
    call = dict(call)
    e, h, n, lq, lk = 6, 3, 2, 4, 5
    g_mod, t_mod = twin_layers(lambda m: m.MultiheadAttention(e, h, **kw))
    lead = (lambda s: (n, s)) if kw.get("batch_first") else (lambda s: (s, n))
    x = rand(*lead(lq), e, seed=1)
    kv = rand(*lead(lk), kw.get("kdim", e), seed=2)
    masks = call.pop("masks", False)
    cross = call.pop("cross", False)
    rng = np.random.default_rng(5)
    attn = rng.random((lq, lq)) < 0.3 if masks else None
    if masks:
        attn[:, 0] = False
    pad = np.array([[False] * lq, [False] * (lq - 1) + [True]]) if masks else None
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        xs = [lib.tensor(x, requires_grad=True)]
        if cross:
            xs.append(lib.tensor(kv, requires_grad=True))
        q, k = xs[0], xs[-1]
        extra = {} if not masks else {"attn_mask": lib.tensor(attn),
                                      "key_padding_mask": lib.tensor(pad)}
        out, weights = mod(q, k, k, need_weights=True, **extra, **call)
        loss = (out * lib.tensor(rand(*out.shape, seed=3))).sum() + (
            weights * lib.tensor(rand(*weights.shape, seed=4))).sum() ** 2
        wrt = xs + [p for _, p in mod.named_parameters()]
        grads = lib.autograd.grad(loss, wrt, create_graph=True)
        # (out_proj.bias's gradient is a constant: no second derivative)
        second = lib.autograd.grad(sum((g * g).sum() for g in grads), wrt, allow_unused=True)
        results.append([out, weights, *grads, *second])
    for a, b in zip(*results, strict=True):
        assert (a is None) == (b is None)
        if a is not None:  # (atol: entries that are 0 in exact arithmetic, key's bias)
            close(a.detach(), b.detach(), atol=1e-9)


def test_multihead_attention_dropout_in_training_is_the_composite_with_dropout():
    """Training mode with dropout: out and weights (after dropout, as PyTorch returns
    them) equal the composite's under the same seed, with and without need_weights;
    eval mode drops nothing."""
    mod = gg.nn.MultiheadAttention(8, 2, dropout=0.4, batch_first=True).double()
    x = gg.tensor(rand(3, 5, 8, seed=1), requires_grad=True)
    e, h, hd = 8, 2, 4

    def reference():
        proj = F.linear(x, mod.in_proj_weight, mod.in_proj_bias)
        q, k, v = (t.reshape(3, 5, h, hd).transpose(1, 2) for t in proj.chunk(3, -1))
        out, w = _composite(q, k, v, 0.4, 1 / math.sqrt(hd))
        out = mod.out_proj(out.transpose(1, 2).reshape(3, 5, e))
        return out, w.mean(dim=1)

    gg.manual_seed(3)
    want_out, want_w = reference()
    for need_weights in (True, False):
        gg.manual_seed(3)
        out, w = mod(x, x, x, need_weights=need_weights)
        close(out.detach(), want_out.detach(), rtol=1e-12, atol=1e-12)
        if need_weights:
            close(w.detach(), want_w.detach(), rtol=1e-12, atol=1e-12)
        (gx,) = gg.autograd.grad((out ** 2).sum(), x)
        gg.manual_seed(3)
        (want_gx,) = gg.autograd.grad((reference()[0] ** 2).sum(), x)
        close(gx, want_gx, rtol=1e-12, atol=1e-12)
    mod.eval()
    out_eval, _ = mod(x, x, x)
    mod.dropout = 0.0
    close(out_eval.detach(), mod(x, x, x)[0].detach(), rtol=0, atol=0)


def test_multihead_attention_with_weights_exports_to_onnx(tmp_path):
    from test_onnx_export import _check

    class Weights(gg.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = gg.nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            out, w = self.attn(x, x, x, need_weights=True, average_attn_weights=False)
            return out.sum(-1, keepdim=True) * w.mean(dim=(1, 3)).unsqueeze(-1)

    gg.manual_seed(0)
    _check(Weights().eval(), [rand(2, 5, 8).astype(np.float32)], tmp_path)


def _ops_in_graph(out) -> dict:
    """How many nodes of each op the graph behind ``out`` holds."""
    counts, seen, stack = {}, set(), [out]
    while stack:
        node = stack.pop()
        if id(node) in seen or node.op is None:
            continue
        seen.add(id(node))
        counts[node.op.__name__] = counts.get(node.op.__name__, 0) + 1
        stack.extend(p for p in node.inputs if isinstance(p, gg.Tensor))
    return counts


@pytest.mark.parametrize("batch_first", [True, False])
def test_encoder_layer_records_the_fused_ops(batch_first):
    """A training-mode encoder layer (relu, no dropout) records one op per block: one
    in-projection GEMM, the attention op, one op per layer norm, the feed-forward's
    linear+relu; none of the composites' elementwise steps."""
    layer = gg.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=batch_first)
    x = gg.randn(3, 5, 8, requires_grad=True)
    counts = _ops_in_graph(layer(x))
    assert counts["Linear"] == 3 and counts["AddmmActivation"] == 1
    assert counts["ScaledDotProductAttention"] == 1 and counts["NativeLayerNorm"] == 2
    assert not {"Softmax", "Mean", "Rsqrt", "Relu", "Mul", "Where"} & set(counts)
    # the layer runs on rows: the input to rows, the projection to heads, the heads back
    # to rows, the rows to the output (no reshape around each linear map)
    assert counts["Reshape"] == 4


def test_encoder_layer_with_a_hooked_attention_calls_it_as_a_module():
    """The rows' path bypasses MultiheadAttention's __call__ only when it has no hooks:
    a hooked one sees its call (PyTorch's arguments) and changes the result."""
    layer = gg.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    x = gg.tensor(rand(3, 5, 8), dtype=gg.float32)
    plain = layer(x)
    seen = []

    def hook(module, args, kwargs, out):
        seen.append(tuple(a.shape for a in args))
        return out[0] * 2, out[1]
    layer.self_attn.register_forward_hook(hook, with_kwargs=True)
    hooked = layer(x)
    assert seen == [((3, 5, 8),) * 3]
    assert not np.allclose(hooked.detach().numpy(), plain.detach().numpy())


@pytest.mark.parametrize("where", ["linear1", "norm2", "dropout"])
def test_encoder_hooks_on_a_block_see_what_torch_passes_it(where):
    """A hook on any block of an encoder's layer sees PyTorch's (3-D) input: the stack
    then runs the layers as modules, not on rows, and gives the same output."""
    def make(m):
        return m.TransformerEncoder(m.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                              batch_first=True), 2,
                                    enable_nested_tensor=False)
    t_enc = make(torch.nn)
    g_enc = make(gg.nn)
    g_enc.load_state_dict({k: gg.tensor(v.detach().numpy())
                           for k, v in t_enc.state_dict().items()})
    seen, outs = {}, []
    for lib, enc in ((gg, g_enc), (torch, t_enc)):
        shapes = seen.setdefault(lib.__name__, [])
        getattr(enc.layers[1], where).register_forward_hook(
            lambda mod, args, out, shapes=shapes: shapes.append(tuple(args[0].shape)))
        outs.append(enc(lib.tensor(rand(3, 5, 8), dtype=lib.float32)))
    assert seen["graphgrad"] == seen["torch"] == [(3, 5, seen["torch"][0][-1])]
    close(outs[0], outs[1], 1e-5, 1e-5)


def test_encoder_stack_passes_rows_between_layers():
    enc = gg.nn.TransformerEncoder(gg.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 3,
                                   enable_nested_tensor=False)
    counts = _ops_in_graph(enc(gg.randn(5, 3, 8, requires_grad=True)))
    assert counts["Reshape"] == 2 + 2 * 3  # in and out; per layer the heads' two


@pytest.mark.parametrize("dtype", [gg.float64, gg.float32, gg.float16])
def test_dropout_is_one_op_keeping_a_bool_mask_with_the_exact_scale(dtype):
    x = gg.tensor(rand(4, 6, seed=2), dtype=dtype, requires_grad=True)
    gg.manual_seed(5)
    out = F.dropout(x, 0.3)
    keep = [a for a in out.inputs if a.dtype == gg.bool]
    assert out.op.__name__ == "NativeDropout" and len(keep) == 1
    scale = np.asarray(1 / 0.7, dtype=x.detach().numpy().dtype)  # 1/(1-p) in x's dtype
    want = x.detach().numpy() * keep[0].numpy() * scale
    np.testing.assert_array_equal(out.detach().numpy(), want)
    gg.manual_seed(5)  # the stream: one uniform draw per element, kept where >= p
    drawn = gg.rand(4, 6, dtype=dtype).numpy() >= 0.3
    np.testing.assert_array_equal(keep[0].numpy(), drawn)
    (gx,) = gg.autograd.grad(out.sum(), x)
    np.testing.assert_array_equal(gx.numpy(), keep[0].numpy() * scale)


def test_layer_norm_in_float16_computes_in_float32_as_torch():
    x = (rand(8, 300, seed=1) * 3 + 5).astype(np.float16)
    w = rand(300, seed=2).astype(np.float16)
    got = F.layer_norm(gg.tensor(x), (300,), gg.tensor(w)).numpy()
    want = torch.nn.functional.layer_norm(torch.tensor(x), (300,), torch.tensor(w)).numpy()
    exact = torch.nn.functional.layer_norm(torch.tensor(x).float(), (300,),
                                           torch.tensor(w).float()).numpy()
    assert got.dtype == np.float16
    # as close to the float32 result as PyTorch's float16 kernel (one rounding)
    assert np.abs(got - exact).max() <= np.abs(want - exact).max()


def test_attention_in_float16_computes_in_float32_as_torch():
    arrays = [rand(2, 3, 40, 8, seed=s).astype(np.float16) for s in (1, 2, 3)]
    got = F.scaled_dot_product_attention(*map(gg.tensor, arrays)).numpy()
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.tensor, arrays)).numpy()
    exact = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a).float() for a in arrays)).numpy()
    assert got.dtype == np.float16
    assert np.abs(got - exact).max() <= np.abs(want - exact).max()


@pytest.mark.parametrize("n,e,kept", [(6, 8, True), (20, 2, False)])
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_backward_reads_the_weights_kept_behind_the_output(monkeypatch, n, e, kept, p):
    """Weights no larger than the inputs are kept behind the output, and the plain
    backward computes none (the recomputation is a third of it at short sequences);
    larger ones are recomputed. Gradients as the composite's either way."""
    from graphgrad.ops import attention as ops_attention
    arrays = [rand(2, 3, n, e, seed=s) for s in (1, 2, 3)]
    calls = []
    compute = ops_attention._weights_t_array

    def counted(*a, **kw):
        calls.append(1)
        return compute(*a, **kw)
    monkeypatch.setattr(ops_attention, "_weights_t_array", counted)
    monkeypatch.setattr(ops_attention._ARRAYS, "weights_t", counted)
    grads = []
    for fused in (True, False):
        xs = [gg.tensor(a, requires_grad=True) for a in arrays]
        gg.manual_seed(3)
        out = (F.scaled_dot_product_attention(*xs, dropout_p=p) if fused
               else _composite(*xs, p, 1 / math.sqrt(e))[0])
        if fused:
            base = out.detach().numpy().base
            assert (base.size > out.numel()) is kept
            calls.clear()
        (out * gg.tensor(rand(2, 3, n, e, seed=4))).sum().backward()
        if fused:
            assert len(calls) == (0 if kept else 1)
        grads.append([x.grad.numpy() for x in xs])
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)



def test_inference_keeps_no_weights():
    """Under no_grad no backward can follow: the output is no larger than itself."""
    q = gg.tensor(rand(2, 3, 6, 8, seed=1))
    with gg.no_grad():
        out = F.scaled_dot_product_attention(q, q, q)
    base = out.numpy().base
    assert base is None or base.size == out.numel()
