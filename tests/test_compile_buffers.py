"""In-place writes under ``graphgrad.compile`` are functionalized, as Dynamo/AOTAutograd
do: BatchNorm's running statistics in training mode are new values the graph returns and
the compiled function writes back, so the forward is one graph; a changed input that the
function returns is the caller's tensor itself."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import nn
from graphgrad.compiler import explain


def _bn_model(kind: str) -> nn.Module:
    gg.manual_seed(0)
    if kind == "1d":
        return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(36, 4))


def _detached(ts) -> list:
    return [t.detach().numpy().copy() for t in ts]


@pytest.mark.parametrize("kind", ["1d", "2d"])
def test_batchnorm_training_is_one_graph_with_its_buffer_updates(kind):
    m = _bn_model(kind).train()
    x = gg.randn(6, 8) if kind == "1d" else gg.randn(6, 3, 5, 5)
    out = explain(m)(x)
    assert (out.graph_count, out.graph_break_count) == (1, 0), str(out)
    assert any("training == True" in g for g in out.out_guards), out.out_guards
    # the graph returns the new running_mean, running_var and num_batches_tracked
    assert len(out.graphs[0].outputs) == 4


@pytest.mark.parametrize("kind", ["1d", "2d"])
def test_compiled_batchnorm_training_equals_eager_over_steps(kind):
    gg.compiler.reset()
    eager = _bn_model(kind)
    model = copy.deepcopy(eager)
    compiled = gg.compile(model)
    opts = [gg.optim.SGD(m.parameters(), lr=0.1) for m in (eager, model)]
    gg.manual_seed(3)
    for _ in range(4):
        x = gg.randn(6, 8) if kind == "1d" else gg.randn(6, 3, 5, 5)
        results = []
        for run, m, opt in ((eager, eager, opts[0]), (compiled, model, opts[1])):
            opt.zero_grad()
            y = run(x)
            (y * y).sum().backward()
            results.append((_detached([y]), _detached(m.buffers()),
                            _detached(p.grad for p in m.parameters())))
            opt.step()
        for a, b in zip(*results, strict=True):
            for u, v in zip(a, b, strict=True):
                np.testing.assert_allclose(v, u, rtol=1e-5, atol=1e-6)
    assert int(model[1].num_batches_tracked) == 4
    # the guard on ``training``: eval mode uses the running statistics, and writes none
    eager.eval(), model.eval()
    before = _detached(model.buffers())
    x = gg.randn(6, 8) if kind == "1d" else gg.randn(6, 3, 5, 5)
    with gg.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), eager(x).numpy(), rtol=1e-5, atol=1e-6)
    for u, v in zip(before, _detached(model.buffers()), strict=True):
        np.testing.assert_array_equal(u, v)


def test_changed_input_is_written_back_and_returned_as_itself():
    def f(x, b):
        b.add_(1)
        b.mul_(x.sum())
        return x * 2, b
    compiled = gg.compile(f)
    x, b = gg.ones(3), gg.zeros(3)
    out = explain(f)(x, gg.zeros(3))
    assert (out.graph_count, out.graph_break_count) == (1, 0), str(out)
    y, r = compiled(x, b)
    assert r is b
    np.testing.assert_array_equal(b.numpy(), [3.0, 3.0, 3.0])
    compiled(x, b)
    np.testing.assert_array_equal(b.numpy(), [12.0, 12.0, 12.0])
    np.testing.assert_array_equal(y.numpy(), [2.0, 2.0, 2.0])


def test_in_place_on_an_input_that_requires_grad_still_runs_for_real():
    def f(w):
        w.add_(1)
        return w
    w = gg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        gg.compile(f)(w)


def test_in_place_on_an_input_with_a_view_runs_for_real():
    def f(b):
        v = b[:2]
        b.add_(1)
        return v * 1
    b = gg.zeros(3)
    out = gg.compile(f)(b)
    np.testing.assert_array_equal(out.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(b.numpy(), [1.0, 1.0, 1.0])


@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_cross_entropy_reads_no_target_value_and_compiles_to_one_graph(ignore_index):
    torch = pytest.importorskip("torch")
    gg.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5))

    def step(x, y):
        return gg.nn.functional.cross_entropy(model(x), y, ignore_index=ignore_index)
    x = gg.randn(6, 8)
    y = gg.tensor([0, 2, 4, -100, 2, 1] if ignore_index == -100 else [0, 2, 4, 3, 2, 1])
    out = explain(step)(x, y)
    assert (out.graph_count, out.graph_break_count) == (1, 0), str(out)
    calls = [getattr(n.op, "__name__", None) for n in out.graphs[0].nodes if n.kind == "call"]
    assert calls[-1] == "CrossEntropy", calls
    for ys in (y, gg.full((6,), ignore_index)):   # some rows ignored; all of them
        logits = model(x).detach().requires_grad_()
        loss = gg.nn.functional.cross_entropy(logits, ys, ignore_index=ignore_index)
        loss.backward()
        t_logits = torch.tensor(logits.detach().numpy(), requires_grad=True)
        t_loss = torch.nn.functional.cross_entropy(t_logits, torch.tensor(ys.numpy()),
                                                   ignore_index=ignore_index)
        t_loss.backward()
        np.testing.assert_allclose(loss.item(), t_loss.item(), rtol=1e-5, equal_nan=True)
        np.testing.assert_allclose(logits.grad.numpy(), t_logits.grad.numpy(), rtol=1e-5,
                                   atol=1e-7)
        compiled = gg.compile(step)(x, ys)
        np.testing.assert_allclose(compiled.item(), step(x, ys).item(), rtol=1e-6,
                                   equal_nan=True)
    # vmap over examples of the batch rules (targets batched, one ignored in each)
    logp = gg.randn(3, 4, 5).log_softmax(dim=-1)
    tg = gg.tensor([[0, 1, ignore_index, 3], [ignore_index, 4, 4, 0], [1, 1, 2, 2]])
    tg = gg.where(tg == 2, ignore_index, tg) if ignore_index == 2 else tg
    got = gg.func.vmap(lambda a, b: gg.nn.functional.nll_loss(a, b, ignore_index=ignore_index))(
        logp, tg)
    want = [torch.nn.functional.nll_loss(torch.tensor(a), torch.tensor(b),
                                         ignore_index=ignore_index).item()
            for a, b in zip(logp.numpy(), tg.numpy(), strict=True)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
    with pytest.raises(IndexError, match="out of bounds"):
        gg.nn.functional.cross_entropy(gg.randn(2, 5), gg.tensor([0, 7]))


@pytest.mark.parametrize("cls, tname, shape", [("BatchNorm1d", "BatchNorm1d", (8, 3)),
                                               ("BatchNorm2d", "BatchNorm2d", (4, 3, 5, 5))])
def test_batchnorm_cumulative_average_is_one_graph(cls, tname, shape):
    """momentum=None (the cumulative moving average, factor 1 / (batches + 1)) captures in
    one graph: the factor is computed in it from num_batches_tracked, no float() break.
    Over several steps the compiled module equals eager bit for bit and PyTorch's
    running statistics to float32 rounding."""
    torch = pytest.importorskip("torch")
    report = explain(getattr(nn, cls)(3, momentum=None), gg.randn(*shape))
    assert (report.graph_count, report.graph_break_count) == (1, 0)
    eager, compiled_mod = getattr(nn, cls)(3, momentum=None), getattr(nn, cls)(3, momentum=None)
    ref = getattr(torch.nn, tname)(3, momentum=None)
    run = gg.compile(compiled_mod)
    rng = np.random.default_rng(0)
    for step in range(5):
        x = (rng.standard_normal(shape) * (step + 1) + step).astype(np.float32)
        got, want = run(gg.tensor(x)), eager(gg.tensor(x))
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
        ref(torch.tensor(x))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        mine, theirs = getattr(compiled_mod, name).numpy(), getattr(eager, name).numpy()
        np.testing.assert_array_equal(mine, theirs)
        np.testing.assert_allclose(mine, getattr(ref, name).numpy(), rtol=1e-6, atol=1e-6)
    assert int(compiled_mod.num_batches_tracked) == 5
