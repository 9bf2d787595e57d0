"""What made compiled training of the LSTM and Transformer benchmark models slower than
eager, pinned: the cotangents of a value read in slices are one op (``Stack`` or ``Cat``:
passes/window_cotangents.py) where graph differentiation made a zero array per
slice and their sum (attention's q, k, v; an LSTM's last step), and the compiled
attention backward reads the weights its forward kept behind the output instead of
recomputing them. Compiled training of both models equals eager's over several steps;
the second step neither recaptures nor rebuilds the compiled backward."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import nn
from graphgrad.compiler import segments
from graphgrad.dynamo import CompiledFunction
from graphgrad.dynamo.stats import counters
from graphgrad.graph import Interpreter
from graphgrad.ops import attention
from graphgrad.passes import grad as graph_grad

torch = pytest.importorskip("torch")


def _grad_graph_ops(fn, x: np.ndarray):
    """(op names of the gradient nodes, the gradient) of ``fn`` at ``x`` by
    ``passes.grad`` on its captured graph."""
    cf = CompiledFunction(fn, backend="eager", share=False)
    cf(gg.tensor(x))
    g = cf.graphs[0]
    before = set(g.nodes)
    (dx,) = graph_grad(g, list(g.outputs), [g.inputs[0]])
    ops = [n.op.__name__ for n in g.nodes if n not in before and n.kind == "call"]
    g.set_outputs([dx])
    return ops, Interpreter(g).run(gg.tensor(x))[0].numpy()


_SLICES = [   # (reads of x (3, 4, 5), the op their cotangents become)
    (lambda x: x[0] * 1.5 + x[1] * x[1] + x[2].exp(), "Stack"),   # (unbind, attention's qkv)
    (lambda x: x[:, :1].sin() + x[:, 1:3].sum(1, keepdim=True) * x[:, 3:], "Cat"),
    (lambda x: x[..., 1:3] * 2.0, "Cat"),
    (lambda x: x[:, -1].tanh(), "Cat"),                           # (an LSTM's last step)
    (lambda x: x[0] + x[2], "Cat"),                               # (a gap of zeros)
    (lambda x: x[:, 0:3] * x[:, 1:4], "IndexPut"),                # overlapping: the vjps
    (lambda x: x[0:2, 1:3] * 3.0, "IndexPut"),                    # a block over two dims
]


@pytest.mark.parametrize("case", range(len(_SLICES)))
def test_slices_cotangents_are_one_op_and_equal_torchs(case):
    fn, joined = _SLICES[case]
    x = np.random.default_rng(case).standard_normal((3, 4, 5))

    def f(t):
        return fn(t).sum()

    ops, got = _grad_graph_ops(f, x)
    assert joined in ops
    if joined != "IndexPut":
        assert "IndexPut" not in ops
    tx = torch.tensor(x, requires_grad=True)
    f(tx).backward()
    np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-12, atol=1e-14)


def _backward_nodes(cf) -> list:
    (op,) = [op for op in segments(cf)[0].compiled.__globals__["_train"].built.values()
             if op is not None]
    return [n for n in op.backward_graph.nodes if n.kind == "call"]


def _encoder(dropout: float) -> nn.Module:
    gg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=dropout,
                                       batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(16 * 6, 3))


def test_compiled_attention_backward_stacks_qkv_and_reads_the_kept_weights(monkeypatch):
    model = _encoder(0.0)
    x = gg.randn(4, 6, 16)
    cf = CompiledFunction(lambda x: model(x).square().sum(), backend="default", share=False)
    cf(x)   # built
    calls = []
    weights_t = attention._ARRAYS.weights_t

    def counted(*args, **kw):
        calls.append(1)
        return weights_t(*args, **kw)

    monkeypatch.setattr(attention._ARRAYS, "weights_t", counted)
    cf(x).backward()
    assert calls == []   # (the forward computes them on its own path)
    nodes = _backward_nodes(cf)
    names = [n.op.__name__ for n in nodes]
    assert "IndexPut" not in names
    sdpa = [n for n in nodes if n.op.__name__ == "ScaledDotProductAttentionBackward"]
    assert len(sdpa) == 2 and all(n.params["weights_behind"] for n in sdpa)
    # the Stack of q, k, v's slices of its flat result is that result reshaped
    # (passes/simplify.py; test_compile_stack_layout.py)
    assert "Stack" not in names
    assert all([u.op.__name__ for u in nodes if s in u.inputs] == ["Reshape"] for s in sdpa)
    with gg.no_grad():   # a forward without gradients keeps none: the backward recomputes
        out = attention.ScaledDotProductAttention.forward(*(np.ones((1, 2, 3, 4),
                                                                    np.float32),) * 3,
                                                          scale=0.5, is_causal=False)
    assert out.base is None or out.base.size == out.size


def test_attention_backward_with_weights_behind_equals_recomputing_them():
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((2, 3, 5, 4)).astype(np.float32) for _ in range(4))
    kw = {"scale": 0.5, "is_causal": True, "float_mask_grad": False}
    bwd = attention.ScaledDotProductAttentionBackward.forward
    out = attention.ScaledDotProductAttention.forward(q, k, v, scale=0.5, is_causal=True)
    assert out.base is not None and out.base.size > out.size   # the weights are behind
    kept = bwd(g, q, k, v, out, weights_behind=True, **kw)
    again = bwd(g, q, k, v, out.copy(), weights_behind=True, **kw)   # none behind a copy
    assert kept.tobytes() == bwd(g, q, k, v, **kw).tobytes()
    assert again.tobytes() == kept.tobytes()


def _lstm() -> nn.Module:
    gg.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(8, 16, batch_first=True)
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.head(out[:, -1])
    return Net()


def test_compiled_lstm_backward_joins_the_last_steps_cotangent_to_zeros():
    model = _lstm()
    cf = CompiledFunction(lambda x: model(x).square().sum(), backend="default", share=False)
    cf(gg.randn(4, 7, 8)).backward()
    names = [n.op.__name__ for n in _backward_nodes(cf)]
    assert "LstmLayerBackward" in names and "Cat" in names and "IndexPut" not in names


def _train(make, compiled: bool, x, y, steps=4):
    model = make()
    run = gg.compile(model) if compiled else model
    opt = gg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for k in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(run(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if compiled and k == 0:
            seen = dict(counters)
    if compiled:   # steps 2.. are cache hits: no capture, no recompile
        assert counters["frames"] == seen["frames"]
        assert counters["recompiles"] == seen.get("recompiles", 0)
    return np.array(losses), [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("kind", ["lstm", "transformer"])
def test_compiled_training_equals_eager(kind):
    gg.manual_seed(1)
    make = _lstm if kind == "lstm" else (lambda: _encoder(0.0))
    x = gg.randn(5, 7, 8) if kind == "lstm" else gg.randn(5, 6, 16)
    y = gg.randint(0, 3, (5,))
    want_losses, want_w = _train(make, False, x, y)
    got_losses, got_w = _train(make, True, x, y)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(got_w, want_w, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
