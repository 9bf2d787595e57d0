"""The compiled backward (``graphgrad.backends.aot``): a compiled model trains with its
forward and backward both compiled, equal to eager; the backward saves only what the
partition chose; ``create_graph=True`` falls back to the op-by-op graph."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import nn
from graphgrad.backends import fused as fused_mod
from graphgrad.backends.aot import partition
from graphgrad.compiler import segments
from graphgrad.dynamo import CompiledFunction


def _mlp() -> nn.Module:
    gg.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 5))


def _train(model, run, steps=50):
    gg.manual_seed(1)
    x, y = gg.randn(32, 20), gg.randint(0, 5, (32,))
    opt = gg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(run(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses), [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("numba", [True, False])
def test_compiled_training_equals_eager(numba, monkeypatch, tmp_path):
    if numba and not fused_mod.fused_numba.numba_available():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(fused_mod.config, "numba", numba)
    monkeypatch.setenv("GRAPHGRAD_KERNEL_CACHE", str(tmp_path))
    eager = _mlp()
    want_losses, want_w = _train(eager, eager)
    model = _mlp()
    compiled = gg.compile(model)
    got_losses, got_w = _train(model, compiled)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(got_w, want_w, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    out = compiled(gg.randn(32, 20))   # (a dynamic-shape recompile runs op by op)
    assert out.grad_fn.name() == "CompiledFunctionBackward"


def test_partition_saves_only_what_backward_reads():
    def f(x, w):
        h = (x @ w).relu()
        return (h * h).sum()

    cf = CompiledFunction(f, backend="eager", share=False)
    cf(gg.randn(4, 3), gg.randn(3, 5))
    part = partition(cf.graphs[0], [1])   # only w's gradient
    fwd_outputs = part.forward.outputs
    assert len(fwd_outputs) == 1 + len(part.saved)
    # x is saved (w's gradient reads it), the relu's output too; w itself is not
    assert "x" in part.saved and "w" not in part.saved
    # every saved value is read by some backward node
    by_name = {p.name: p for p in part.backward.inputs}
    users = part.backward.users()
    assert all(users[by_name[s]] for s in part.saved)


def test_compiled_gradients_and_create_graph_fallback():
    def f(x, w):
        return ((x @ w).tanh() * 2 + x.sum()).exp().mean()

    x = gg.randn(3, 4, requires_grad=True)
    w = gg.randn(4, 2, requires_grad=True)
    cf = CompiledFunction(f, backend="default", share=False)
    got = gg.autograd.grad(cf(x, w), [x, w])
    want = gg.autograd.grad(f(x, w), [x, w])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert type(segments(cf)[0].compiled.__globals__["_train"]).__name__ == "AotProgram"
    # second order through the compiled function: the op-by-op graph runs again
    (gx,) = gg.autograd.grad(cf(x, w), [x], create_graph=True)
    (ggx,) = gg.autograd.grad(gx.sum(), [x])
    (ex,) = gg.autograd.grad(f(x, w), [x], create_graph=True)
    (eex,) = gg.autograd.grad(ex.sum(), [x])
    np.testing.assert_allclose(ggx.numpy(), eex.numpy(), rtol=1e-4, atol=1e-5)


def _cnn() -> nn.Module:
    gg.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 3))


def _step(run, model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(run(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def test_compiled_cnn_training_equals_eager_and_peaks_lower():
    gg.manual_seed(1)
    x, y = gg.randn(8, 1, 8, 8), gg.randint(0, 3, (8,))
    eager, model = _cnn(), _cnn()
    compiled = gg.compile(model)
    opt_e = gg.optim.SGD(eager.parameters(), lr=0.05)
    opt_c = gg.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(50):
        want = _step(eager, eager, opt_e, x, y)
        got = _step(compiled, model, opt_c, x, y)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(model.parameters(), eager.parameters(), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4,
                                   atol=1e-5)
    assert compiled(x).grad_fn.name() == "CompiledFunctionBackward"
    peaks = []
    for run, m, opt in ((eager, eager, opt_e), (compiled, model, opt_c)):
        tracemalloc.start()
        _step(run, m, opt, x, y)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    # a compiled training step holds about what eager does; eager's backward releases each
    # node's saved values as it leaves them (engine), which the compiled backward's one
    # function does not yet do: it may hold up to a quarter more here (8 x 8 inputs)
    assert peaks[1] <= 1.25 * peaks[0], peaks


def test_compiled_mlp_training_step_peak_memory_at_most_eager():
    gg.manual_seed(1)
    x, y = gg.randn(64, 20), gg.randint(0, 5, (64,))
    eager, model = _mlp(), _mlp()
    compiled = gg.compile(model)
    peaks = []
    for run, m in ((eager, eager), (compiled, model)):
        opt = gg.optim.SGD(m.parameters(), lr=0.05)
        _step(run, m, opt, x, y)   # warm: the compiled program exists before measuring
        tracemalloc.start()
        _step(run, m, opt, x, y)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] <= peaks[0], peaks


def test_elementwise_values_are_recomputed_in_the_backward_not_saved():
    def f(x, w):
        h = x @ w
        y = (h * 1.5 + 0.5).relu() * h - 0.25
        return (y / (h * h + 1.0)).abs().sum()

    cf = CompiledFunction(f, backend="eager", share=False)
    cf(gg.randn(8, 4), gg.randn(4, 6))
    part = partition(cf.graphs[0], [0, 1])
    # only the matmul's result and the inputs cross over; the elementwise chain between
    # the matmul and the sum is recomputed inside the backward's fused kernels
    assert sorted(part.saved) == ["matmul", "w", "x"]
    x = gg.randn(8, 4, requires_grad=True)
    w = gg.randn(4, 6, requires_grad=True)
    got = gg.autograd.grad(CompiledFunction(f, backend="default", share=False)(x, w), [x, w])
    want = gg.autograd.grad(f(x, w), [x, w])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
