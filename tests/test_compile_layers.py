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


# ---- shape layers once the batch size is dynamic ---------------------------------------------
# After a recompile for a new batch size the batch dim is captured as dynamic (a Symbol's
# shape reports it as None). Flatten, Unflatten and (un)squeeze must stay in the graph, with
# the dynamic dim inferred (-1), and give eager's shapes at every later size, 0 and 1 too.

def _dynamic_cases() -> dict:
    return {
        "cnn": nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 2, 3, padding=1),
                             nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32, 3)),
        "flatten_all": lambda x: x.flatten() * 2,
        "unsqueeze_squeeze": lambda x: x.unsqueeze(1).squeeze(1) + 1,
    }


def test_shape_layers_stay_in_the_graph_with_a_dynamic_batch():
    gg.manual_seed(0)
    for name, f in _dynamic_cases().items():
        gg.compiler.reset()
        c = gg.compile(f)
        for n in (16, 8, 5, 1, 3) if name == "cnn" else (16, 8, 5, 1, 0, 3):
            x = gg.randn(n, 64)   # (max pooling an empty batch fails eagerly as well)
            got, want = c(x), f(x)
            assert got.shape == want.shape, (name, n)
            np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
        assert gg.compiler.counters["graph_breaks"] == 0, name
        assert gg.compiler.counters["recompiles"] >= 1, name   # the batch became dynamic


def test_squeeze_of_a_dynamic_dim_runs_eagerly_and_matches():
    # a dim known only at run time may be 1 there, where squeeze() removes it: the graph
    # must not decide without it (it breaks and runs squeeze eagerly)
    gg.compiler.reset()
    f = lambda x: (x * 2).squeeze() + 1   # noqa: E731
    c = gg.compile(f)
    for n in (16, 8, 1, 4):
        x = gg.randn(n, 1, 3)
        got, want = c(x), f(x)
        assert got.shape == want.shape, n
        np.testing.assert_array_equal(got.numpy(), want.numpy())
