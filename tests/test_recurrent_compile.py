"""nn.RNN / nn.LSTM / nn.GRU under ``graphgrad.compile``: a model using them is captured
as one graph with no break, each layer and direction one sequence op in it, and the
compiled forward and backward equal eager."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import compiler, nn

CONFIGS = [
    ("LSTM", {}),
    ("LSTM", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("GRU", {}),
    ("GRU", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("RNN", {"nonlinearity": "relu", "batch_first": True}),
    ("RNN", {"num_layers": 2, "bidirectional": True}),
]
LAYER_OP = {"LSTM": "LstmLayer", "GRU": "GruLayer", "RNN": "RnnLayer"}


class Net(nn.Module):
    def __init__(self, kind: str, **kw):
        super().__init__()
        self.rnn = getattr(nn, kind)(3, 5, **kw)
        self.head = nn.Linear(5 * (2 if kw.get("bidirectional") else 1), 2)

    def forward(self, x):
        out, state = self.rnn(x)
        h = state[0] if isinstance(state, tuple) else state
        return self.head(out).sum() + (h * h).sum()


def _net(kind, kw):
    gg.manual_seed(0)
    return Net(kind, **kw)


@pytest.mark.parametrize("kind,kw", CONFIGS)
def test_one_graph_no_break_one_op_per_layer(kind, kw):
    x = gg.randn(4, 6, 3)
    e = compiler.explain(_net(kind, kw))(x)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
    layers = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    assert e.ops_per_graph[0].count(LAYER_OP[kind]) == layers, e.ops_per_graph


@pytest.mark.parametrize("kind,kw", CONFIGS)
def test_compiled_forward_and_backward_equal_eager(kind, kw):
    model = _net(kind, kw)
    compiled = gg.compile(model)
    x = gg.randn(4, 6, 3)
    for _ in range(2):  # the second call runs the cached graph
        model.zero_grad()
        want = model(x)
        want.backward()
        grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
        model.zero_grad()
        got = compiled(x)
        got.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5, atol=1e-6)
        for n, p in model.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), grads[n], rtol=1e-4, atol=1e-6,
                                       err_msg=n)


def test_compiled_lstm_with_given_state_and_its_final_state():
    gg.manual_seed(0)
    lstm = nn.LSTM(3, 4, num_layers=2)
    h0, c0 = gg.randn(2, 2, 4), gg.randn(2, 2, 4)
    x = gg.randn(5, 2, 3)

    def f(x, h0, c0):
        out, (h, c) = lstm(x, (h0, c0))
        return out, h, c

    e = compiler.explain(f)(x, h0, c0)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)
    for got, want in zip(gg.compile(f)(x, h0, c0), f(x, h0, c0), strict=True):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_a_replaced_parameter_is_used_at_the_next_call():
    """The modules read their flat weight list at each call (PyTorch's ``_flat_weights``
    follows a replaced parameter the same way)."""
    gg.manual_seed(0)
    gru = nn.GRU(3, 4)
    x = gg.randn(2, 1, 3)
    before = gru(x)[0].detach().numpy()
    gru.weight_hh_l0 = nn.Parameter(gg.zeros(12, 4))
    assert gru._flat_weights[1] is gru.weight_hh_l0
    after = gru(x)[0].detach().numpy()
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, gru(x)[0].detach().numpy())
