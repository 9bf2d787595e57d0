"""``nn.RNNCell``, ``nn.LSTMCell`` and ``nn.GRUCell`` against PyTorch: parameter names,
shapes and init bounds, batched and unbatched inputs with and without a state, values and
gradients after loading torch's state_dict, second order on a small case, a cell driven
step by step equals the matching layer, and the errors in PyTorch's wording."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import close, rand, twin_layers

import graphgrad as gg
from graphgrad import nn

CELLS = [
    ("rnn_tanh", lambda m: m.RNNCell(3, 4)),
    ("rnn_relu_nobias", lambda m: m.RNNCell(3, 4, False, "relu")),
    ("lstm", lambda m: m.LSTMCell(3, 4)),
    ("lstm_nobias", lambda m: m.LSTMCell(3, 2, bias=False)),
    ("gru", lambda m: m.GRUCell(3, 4)),
    ("gru_nobias", lambda m: m.GRUCell(3, 4, bias=False)),
]
IDS = [c[0] for c in CELLS]


def _state(lib, name, batch, hidden, seed):
    shape = (*batch, hidden)
    h = lib.tensor(rand(*shape, seed=seed), requires_grad=True)
    if "lstm" in name:
        return h, (h, lib.tensor(rand(*shape, seed=seed + 1), requires_grad=True))
    return h, h


@pytest.mark.parametrize("name,make", CELLS, ids=IDS)
@pytest.mark.parametrize("batch", [(2,), ()], ids=["batched", "unbatched"])
@pytest.mark.parametrize("with_state", [True, False], ids=["hx", "no_hx"])
def test_cells_match_torch(name, make, batch, with_state):
    g_mod, t_mod = twin_layers(make)
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    for (k, a), (_, b) in zip(g_mod.state_dict().items(), t_mod.state_dict().items(),
                              strict=True):
        assert tuple(a.shape) == tuple(b.shape), k
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        x = lib.tensor(rand(*batch, 3, seed=1), requires_grad=True)
        h, hx = _state(lib, name, batch, t_mod.hidden_size, 2) if with_state else (None, None)
        out = mod(x, hx)
        outs = list(out) if isinstance(out, tuple) else [out]
        loss = sum((o * lib.tensor(rand(*o.shape, seed=5 + i))).sum()
                   for i, o in enumerate(outs))
        loss.backward()
        grads = [x.grad] + ([h.grad] if with_state else [])
        results.append([*outs, *grads] + [p.grad for _, p in mod.named_parameters()])
    assert [tuple(r.shape) for r in results[0]] == [tuple(r.shape) for r in results[1]]
    for a, b in zip(*results, strict=True):
        close(a, b, 1e-9, 1e-11)


@pytest.mark.parametrize("name,make", [CELLS[0], CELLS[2], CELLS[4]], ids=IDS[0:6:2])
def test_cells_second_order(name, make):
    g_mod, t_mod = twin_layers(make)
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        x = lib.tensor(rand(2, 3, seed=3), requires_grad=True)
        _, hx = _state(lib, name, (2,), 4, 4)
        out = mod(x, hx)
        out = out[0] * out[1] if isinstance(out, tuple) else out
        (gx,) = lib.autograd.grad((out ** 2).sum(), x, create_graph=True)
        second = lib.autograd.grad((gx * lib.tensor(rand(2, 3, seed=6))).sum(),
                                   [x, mod.weight_hh])
        results.append([gx, *second])
    for a, b in zip(*results, strict=True):
        close(a, b, 1e-9, 1e-11)


@pytest.mark.parametrize("cell,layer", [("RNNCell", "RNN"), ("LSTMCell", "LSTM"),
                                        ("GRUCell", "GRU")])
def test_cell_steps_equal_the_layer(cell, layer):
    """The cell with the layer's l0 weights, run over the sequence, gives the layer's
    output: one step function serves both."""
    gg.manual_seed(0)
    lay = getattr(nn, layer)(3, 4).double()
    c = getattr(nn, cell)(3, 4).double()
    c.load_state_dict({k[:-3]: v for k, v in lay.state_dict().items()})
    x = gg.tensor(rand(5, 2, 3))
    out, _ = lay(x)
    state = None
    steps = []
    for t in range(5):
        state = c(x[t], state)
        steps.append(state[0] if isinstance(state, tuple) else state)
    close(gg.stack(steps), out, 1e-12, 1e-14)


def test_init_dtype_and_repr():
    gg.manual_seed(0)
    for make in (lambda m: m.RNNCell(3, 16), lambda m: m.LSTMCell(3, 16),
                 lambda m: m.GRUCell(3, 16, dtype=None)):
        g, t = make(nn), make(torch.nn)
        assert repr(g) == repr(t)
        vals = np.concatenate([p.detach().numpy().ravel() for p in g.parameters()])
        assert np.abs(vals).max() <= 0.25 and np.abs(vals).max() > 0.2  # U(-1/4, 1/4)
        assert all(p.dtype == gg.float32 for p in g.parameters())
    assert nn.LSTMCell(2, 3, dtype=gg.float64).weight_ih.dtype == gg.float64
    g, t = nn.RNNCell(3, 4, bias=False), torch.nn.RNNCell(3, 4, bias=False)
    assert g.bias_ih is None and t.bias_ih is None
    assert repr(nn.RNNCell(3, 4, False, "relu")) == repr(torch.nn.RNNCell(3, 4, False, "relu"))
    assert nn.GRUCell(3, 4)(gg.zeros(3, dtype=gg.float32)).dtype == gg.float32


def _bad_calls(lib, kind):
    z = lib.zeros

    def hx(*shape, second=None):
        if kind != "LSTMCell":
            return z(*shape)
        return (z(*shape), z(*(second or shape)))

    return [
        (z(2, 5), None),
        (z(3, 2, 3), None),
        (z(2, 3), hx(3, 4)),
        (z(2, 3), hx(2, 5)),
        (z(2, 3), hx(2, 4, second=(2, 5)) if kind == "LSTMCell" else z(2, 4, 1)),
        (z(3), hx(2, 4)),
        (z(2, 3), hx(4)),
        (z(3), z(4) if kind == "LSTMCell" else z(2, 2, 4)),
    ]


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
def test_errors_match_torch(kind):
    g, t = getattr(nn, kind)(3, 4), getattr(torch.nn, kind)(3, 4)
    for (gx, ghx), (tx, thx) in zip(_bad_calls(gg, kind), _bad_calls(torch, kind), strict=True):
        with pytest.raises(Exception) as want:
            t(tx, thx)
        with pytest.raises(type(want.value)) as got:
            g(gx, ghx)
        assert str(got.value) == str(want.value)


def test_unknown_nonlinearity_raises_at_call_as_torch():
    g, t = nn.RNNCell(3, 4, nonlinearity="x"), torch.nn.RNNCell(3, 4, nonlinearity="x")
    with pytest.raises(RuntimeError) as want:
        t(torch.zeros(3))
    with pytest.raises(RuntimeError) as got:
        g(gg.zeros(3))
    assert str(got.value) == str(want.value)
