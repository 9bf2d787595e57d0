"""Recurrent layers against PyTorch: RNN, LSTM and GRU (with and without initial state,
dropout between layers, init, errors) and pad_sequence."""


from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import close, rand, twin_layers

import graphgrad as gg
from graphgrad import nn

# ---- recurrent layers ---------------------------------------------------------------------
RNNS = [
    ("lstm", lambda m: m.LSTM(3, 4), (5, 2, 3), False),
    ("lstm_stack_bi", lambda m: m.LSTM(3, 4, 2, bidirectional=True), (4, 2, 3), True),
    ("lstm_batch_first", lambda m: m.LSTM(3, 4, batch_first=True, bias=False), (2, 5, 3),
     True),
    ("lstm_unbatched", lambda m: m.LSTM(3, 4, 2), (5, 3), True),
    ("gru", lambda m: m.GRU(3, 4, 2), (5, 2, 3), True),
    ("gru_bi_batch_first", lambda m: m.GRU(3, 2, bidirectional=True, batch_first=True),
     (2, 4, 3), False),
    ("rnn_tanh", lambda m: m.RNN(3, 4, 2), (5, 2, 3), True),
    ("rnn_relu_positional", lambda m: m.RNN(3, 4, 1, "relu", False), (5, 2, 3), False),
]


@pytest.mark.parametrize("name,make,shape,with_state", RNNS, ids=[r[0] for r in RNNS])
def test_recurrent_layers_match_torch(name, make, shape, with_state):
    g_mod, t_mod = twin_layers(make)
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    layers = t_mod.num_layers * (2 if t_mod.bidirectional else 1)
    batch = () if len(shape) == 2 else (shape[0] if t_mod.batch_first else shape[1],)
    state_shape = (layers, *batch, t_mod.hidden_size)
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        x = lib.tensor(rand(*shape), requires_grad=True)
        hx = None
        if with_state:
            h0 = lib.tensor(rand(*state_shape, seed=6), requires_grad=True)
            hx = (h0, lib.tensor(rand(*state_shape, seed=7))) if "lstm" in name else h0
        out, state = mod(x, hx)
        finals = list(state) if isinstance(state, tuple) else [state]
        loss = (out * lib.tensor(rand(*out.shape, seed=8))).sum()
        for i, f in enumerate(finals):
            loss = loss + (f * lib.tensor(rand(*f.shape, seed=9 + i))).sum()
        loss.backward()
        grads = [x.grad] + ([h0.grad] if with_state else [])
        results.append([out, *finals, *grads] + [p.grad for _, p in mod.named_parameters()])
    for a, b in zip(*results, strict=True):
        close(a, b, 1e-9, 1e-11)


def test_recurrent_errors_and_init_as_torch():
    gg.manual_seed(0)
    m = nn.LSTM(3, 16)
    assert max(float(p.detach().abs().max()) for p in m.parameters()) <= 0.25  # 1/sqrt(16)
    for lib in (gg, torch):
        with pytest.raises(ValueError, match="LSTM: Expected input to be 2D or 3D, got 4D "
                           "instead"):
            lib.nn.LSTM(3, 4)(lib.ones(2, 3, 4, 5))
        with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 3, 4\), got "
                           r"\[1, 2, 4\]"):
            lib.nn.LSTM(3, 4)(lib.ones(2, 3, 3), (lib.zeros(1, 2, 4), lib.zeros(1, 3, 4)))
        with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 3, 4\), got "
                           r"\[1, 2, 4\]"):
            lib.nn.GRU(3, 4)(lib.ones(2, 3, 3), lib.zeros(1, 2, 4))
        with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to "
                           "input_size. Expected 3, got 5"):
            lib.nn.GRU(3, 4)(lib.ones(2, 3, 5))
        with pytest.raises(ValueError, match="Unknown nonlinearity 'x'"):
            lib.nn.RNN(3, 4, nonlinearity="x")


def test_recurrent_dropout_between_layers_only_in_training():
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(3, 4, dropout=0.5)
    gg.manual_seed(0)
    m = nn.LSTM(3, 4, 2, dropout=0.5)
    x = gg.tensor(rand(5, 2, 3), dtype=gg.float32)  # the layer's dtype, as PyTorch requires
    a, b = m(x)[0], m(x)[0]
    assert not np.allclose(a.detach().numpy(), b.detach().numpy())  # a fresh mask each call
    m.eval()
    close(m(x)[0], m(x)[0])


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_matches_torch(batch_first, padding_side):
    arrays = [rand(3, 2, seed=1), rand(5, 2, seed=2), rand(1, 2, seed=3)]
    results = []
    for lib in (gg, torch):
        seqs = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = lib.nn.utils.rnn.pad_sequence(seqs, batch_first, -1.5, padding_side)
        (out * lib.tensor(rand(*out.shape, seed=4))).sum().backward()
        results.append([out] + [s.grad for s in seqs])
    for a, b in zip(*results, strict=True):
        close(a, b)
    if padding_side == "right":
        back = nn.utils.rnn.unpad_sequence(results[0][0], [3, 5, 1], batch_first)
        for a, b in zip(back, arrays, strict=True):
            close(a, b)


def test_pad_sequence_errors_use_torch_wording():
    for lib in (gg, torch):
        pad = lib.nn.utils.rnn.pad_sequence
        with pytest.raises(RuntimeError, match="received an empty list of sequences"):
            pad([])
        with pytest.raises(RuntimeError, match="Expected padding_side to be one of left or "
                           "right, but got up."):
            pad([lib.ones(2)], padding_side="up")
