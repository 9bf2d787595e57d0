"""The layers on the library kernels (ops/convolution, pooling, recurrent, attention)
against PyTorch: recurrent layers loading torch's state_dicts with first and second
derivatives, packed sequences, multi-head attention on the fused op, max pooling's
NaN and -inf windows, and the conv errors in PyTorch's words. The ops themselves are
swept by the op tables (op_cases.py, jvp_vmap_cases.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from torch.nn.utils import rnn as torch_rnn

import graphgrad as gg
from graphgrad.nn.utils import rnn as gg_rnn
from helpers import raises_as_torch


def _twins(kind: str, **kw):
    if kind == "RNN_relu":
        kind, kw = "RNN", dict(kw, nonlinearity="relu")
    torch.manual_seed(0)
    t_mod = getattr(torch.nn, kind)(3, 4, **kw).double()
    g_mod = getattr(gg.nn, kind)(3, 4, **kw).double()
    g_mod.load_state_dict({k: gg.tensor(v.detach().numpy())
                           for k, v in t_mod.state_dict().items()})
    return g_mod, t_mod


def _close(a, b, rtol=1e-8):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=1e-11)


def _first_state(kind, state):
    return state[0] if kind == "LSTM" else state


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN", "RNN_relu"])
@pytest.mark.parametrize("kw", [{}, {"num_layers": 2, "bidirectional": True,
                                     "batch_first": True}, {"bias": False}])
def test_recurrent_layers_match_torch_to_second_order(kind, kw):
    g_mod, t_mod = _twins(kind, **kw)
    x = np.random.default_rng(1).standard_normal((3, 5, 3))
    xg, xt = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (og, sg), (ot, st) = g_mod(xg), t_mod(xt)
    _close(og, ot, 1e-10)
    _close(_first_state(kind, sg), _first_state(kind, st), 1e-10)
    lg = (og ** 2).sum() + (_first_state(kind, sg) ** 3).sum()
    lt = (ot ** 2).sum() + (_first_state(kind, st) ** 3).sum()
    if kind == "LSTM":  # the cell state's gradient path as well
        lg, lt = lg + (sg[1] ** 3).sum(), lt + (st[1] ** 3).sum()
    gx, = gg.autograd.grad(lg, xg, create_graph=True)
    tx, = torch.autograd.grad(lt, xt, create_graph=True)
    _close(gx, tx)
    params = dict(g_mod.named_parameters())
    names = list(params)
    g2 = gg.autograd.grad((gx ** 2).sum(), [params[n] for n in names])
    t2 = torch.autograd.grad((tx ** 2).sum(), [dict(t_mod.named_parameters())[n]
                                               for n in names])
    for n, a, b in zip(names, g2, t2, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-7, atol=1e-10, err_msg=n)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN", "RNN_relu"])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_packed_sequences_through_recurrent_layers(kind, enforce_sorted):
    g_mod, t_mod = _twins(kind, num_layers=2, bidirectional=True)
    x = np.random.default_rng(2).standard_normal((5, 3, 3))
    lengths = [5, 3, 2] if enforce_sorted else [2, 5, 3]
    xg, xt = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    pg = gg_rnn.pack_padded_sequence(xg, lengths, enforce_sorted=enforce_sorted)
    pt = torch_rnn.pack_padded_sequence(xt, lengths, enforce_sorted=enforce_sorted)
    _close(pg.data, pt.data, 0)
    assert pg.batch_sizes.tolist() == pt.batch_sizes.tolist()
    (og, sg), (ot, st) = g_mod(pg), t_mod(pt)
    assert isinstance(og, gg_rnn.PackedSequence)
    _close(og.data, ot.data, 1e-10)
    _close(_first_state(kind, sg), _first_state(kind, st), 1e-10)
    padded_g, len_g = gg_rnn.pad_packed_sequence(og, batch_first=True, total_length=6)
    padded_t, len_t = torch_rnn.pad_packed_sequence(ot, batch_first=True, total_length=6)
    _close(padded_g, padded_t, 1e-10)
    assert len_g.tolist() == len_t.tolist()
    ((padded_g ** 2).sum() + _first_state(kind, sg).sum()).backward()
    ((padded_t ** 2).sum() + _first_state(kind, st).sum()).backward()
    _close(xg.grad, xt.grad)


def test_pack_sequence_and_its_errors():
    seqs = [np.arange(n * 2.0).reshape(n, 2) for n in (3, 1, 2)]
    pg = gg_rnn.pack_sequence([gg.tensor(s) for s in seqs], enforce_sorted=False)
    pt = torch_rnn.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    _close(pg.data, pt.data, 0)
    assert pg.unsorted_indices.tolist() == pt.unsorted_indices.tolist()
    for a, b in zip(gg_rnn.unpack_sequence(pg), torch_rnn.unpack_sequence(pt), strict=True):
        _close(a, b, 0)
    raises_as_torch(lambda lib: (gg_rnn if lib is gg else torch_rnn).pack_padded_sequence(
        lib.zeros(3, 2), [1, 3]))
    raises_as_torch(lambda lib: (gg_rnn if lib is gg else torch_rnn).pack_padded_sequence(
        lib.zeros(3, 2), [0, 3], enforce_sorted=False))


@pytest.mark.parametrize("masks", ["none", "attn", "padding", "both"])
def test_multihead_attention_on_the_fused_op_matches_torch(masks):
    torch.manual_seed(0)
    t_mod = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
    g_mod = gg.nn.MultiheadAttention(8, 2, batch_first=True).double()
    g_mod.load_state_dict({k: gg.tensor(v.detach().numpy())
                           for k, v in t_mod.state_dict().items()})
    x = np.random.default_rng(3).standard_normal((2, 5, 8))
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)
    pad = np.array([[False] * 5, [False] * 3 + [True] * 2])
    kw_g, kw_t = {}, {}
    if masks in ("attn", "both"):
        kw_g["attn_mask"], kw_t["attn_mask"] = gg.tensor(causal), torch.tensor(causal)
    if masks in ("padding", "both"):
        kw_g["key_padding_mask"], kw_t["key_padding_mask"] = gg.tensor(pad), torch.tensor(pad)
    xg, xt = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    og = g_mod(xg, xg, xg, need_weights=False, **kw_g)[0]
    ot = t_mod(xt, xt, xt, need_weights=False, **kw_t)[0]
    _close(og, ot, 1e-10)
    (og ** 2).sum().backward()
    (ot ** 2).sum().backward()
    _close(xg.grad, xt.grad)
    _close(g_mod.in_proj_weight.grad, t_mod.in_proj_weight.grad)


def test_max_pool_indices_with_nan_and_all_minus_inf_windows():
    x = np.random.default_rng(4).standard_normal((1, 2, 5, 6))
    x[0, 0, 1, 2] = x[0, 0, 0, 1] = np.nan
    x[0, 1, :2, :2] = -np.inf
    for kw in ({"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
               {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True,
                "dilation": 2}):
        vg, ig = gg.nn.functional.max_pool2d(gg.tensor(x), return_indices=True, **kw)
        vt, it = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **kw)
        np.testing.assert_array_equal(vg.numpy(), vt.numpy())
        np.testing.assert_array_equal(ig.numpy(), it.numpy())


@pytest.mark.parametrize("call", [
    lambda lib: lib.nn.functional.conv2d(lib.zeros(1, 4, 5, 5), lib.zeros(6, 3, 3, 3),
                                         groups=2),
    lambda lib: lib.nn.functional.conv2d(lib.zeros(1, 2, 5, 5), lib.zeros(3, 2, 3, 3),
                                         padding=-1),
    lambda lib: lib.nn.functional.conv2d(lib.zeros(1, 2, 2, 2), lib.zeros(3, 2, 3, 3)),
    lambda lib: lib.nn.functional.conv1d(lib.zeros(1, 2, 5), lib.zeros(3, 2, 3), stride=0),
    lambda lib: lib.nn.functional.conv_transpose2d(lib.zeros(1, 2, 1, 1),
                                                   lib.zeros(2, 3, 1, 1), padding=1),
    lambda lib: lib.nn.functional.conv_transpose2d(lib.zeros(1, 2, 3, 3),
                                                   lib.zeros(2, 3, 3, 3), stride=2,
                                                   output_padding=2),
])
def test_convolution_errors_as_torch(call):
    raises_as_torch(call)


def test_conv_padding_modes_and_same_with_an_even_kernel():
    x = np.random.default_rng(5).standard_normal((2, 2, 6, 5))
    for mode in ("zeros", "reflect", "replicate", "circular"):
        torch.manual_seed(0)
        t_mod = torch.nn.Conv2d(2, 3, (2, 3), padding="same", padding_mode=mode).double()
        g_mod = gg.nn.Conv2d(2, 3, (2, 3), padding="same", padding_mode=mode).double()
        g_mod.load_state_dict({k: gg.tensor(v.detach().numpy())
                               for k, v in t_mod.state_dict().items()})
        xg, xt = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        og, ot = g_mod(xg), t_mod(xt)
        _close(og, ot, 1e-10)
        (og ** 2).sum().backward()
        (ot ** 2).sum().backward()
        _close(xg.grad, xt.grad)
        _close(g_mod.weight.grad, t_mod.weight.grad)


@pytest.mark.parametrize("transposed", [False, True])
def test_convolution_in_chunks_of_examples_matches_torch(monkeypatch, transposed):
    """Large inputs run in chunks of examples (bounded column buffers): a tiny budget
    forces one example per chunk; values and both gradients stay torch's."""
    conv_ops = sys.modules["graphgrad.ops.conv_kernels"]
    monkeypatch.setattr(conv_ops, "_COLUMNS_BYTES", 200)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 4, 7, 6))
    w = rng.standard_normal((4, 3, 3, 2) if transposed else (6, 2, 3, 2))
    name = "conv_transpose2d" if transposed else "conv2d"
    xg, wg = gg.tensor(x, requires_grad=True), gg.tensor(w, requires_grad=True)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    og = getattr(gg.nn.functional, name)(xg, wg, stride=2, padding=1, groups=2)
    ot = getattr(torch.nn.functional, name)(xt, wt, stride=2, padding=1, groups=2)
    _close(og, ot, 1e-10)
    (og ** 2).sum().backward()
    (ot ** 2).sum().backward()
    _close(xg.grad, xt.grad)
    _close(wg.grad, wt.grad)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_adaptive_pooling_matches_torch_with_nan_inf_and_uneven_windows(nd):
    """Windows that overlap, windows longer than the input (output larger), None sizes;
    a NaN and an inf stay in their own windows; indices as PyTorch's kernel picks them."""
    rng = np.random.default_rng(nd)
    for shape, out in [((2, 3, 7, 5, 6), (3, 2, 4)), ((3, 5, 9, 4), (5, 4, 6)),
                       ((2, 2, 6, 4, 3), (3, None, 1)), ((2, 2, 3, 2, 2), (5, 3, 3))]:
        shape, out = shape[:len(shape) - 3 + nd], out[:nd]
        x = rng.standard_normal(shape)
        x[(..., *([0] * nd))] = np.nan
        x[(..., *([-1] * nd))] = np.inf
        for kind in ("avg", "max"):
            kw = dict(return_indices=True) if kind == "max" else {}
            got = getattr(gg.nn.functional, f"adaptive_{kind}_pool{nd}d")(gg.tensor(x), out, **kw)
            want = getattr(torch.nn.functional, f"adaptive_{kind}_pool{nd}d")(
                torch.tensor(x), out, **kw)
            if kind == "max":
                assert got[1].tolist() == want[1].tolist()
                got, want = got[0], want[0]
            np.testing.assert_allclose(got.numpy(), want.numpy(), equal_nan=True)
    for kind in ("avg", "max"):  # PyTorch's wording for the wrong rank
        name = f"adaptive_{kind}_pool{nd}d"
        raises_as_torch(lambda m, name=name: getattr(m.nn.functional, name)(
            m.zeros(2, 2, 2, 2, 2, 2), 2))
