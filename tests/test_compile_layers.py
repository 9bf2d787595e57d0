"""graphgrad's own layers under ``graphgrad.compile``: one graph per forward, no break
inside the library, guarded on ``training``; dropout's mask is a random node that draws
what eager draws."""

from __future__ import annotations

import numpy as np

import graphgrad as gg
from graphgrad import nn
from graphgrad.compiler import explain


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))


def test_eval_mode_model_is_one_graph():
    gg.manual_seed(0)
    m = _model().eval()
    x = gg.randn(5, 8)
    out = explain(m)(x)
    assert (out.graph_count, out.graph_break_count) == (1, 0), str(out)
    assert any("training" in g for g in out.out_guards), out.out_guards
    compiled = gg.compile(m)
    with gg.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), m(x).numpy(), rtol=1e-5, atol=1e-6)


def test_training_dropout_is_a_random_node_in_one_graph():
    gg.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.LayerNorm(16),
                      nn.Linear(16, 4))
    x = gg.randn(6, 8)
    out = explain(m)(x)
    assert (out.graph_count, out.graph_break_count) == (1, 0), str(out)
    assert sum(n.kind == "random" for n in out.graphs[0].nodes) == 1


def _losses(run, model, x, steps=20):
    gg.manual_seed(5)
    opt = gg.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = (run(x) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


def test_compiled_dropout_training_draws_what_eager_draws_and_switches_on_training():
    def make():
        gg.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4))
    gg.compiler.reset()   # (a graph made dynamic by other tests' shapes runs op by op)
    x = gg.randn(6, 8)
    eager, model = make(), make()
    compiled = gg.compile(model)
    np.testing.assert_allclose(_losses(compiled, model, x), _losses(eager, eager, x),
                               rtol=1e-5, atol=1e-7)
    assert compiled(x).grad_fn.name() == "CompiledFunctionBackward"
    model.eval()
    eager.eval()   # the guard on training: the eval graph has no draw
    with gg.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), eager(x).numpy(), rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_array_equal(compiled(x).numpy(), compiled(x).numpy())
