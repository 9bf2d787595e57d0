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
    assert peaks[1] <= peaks[0], peaks   # a compiled training step holds no more than eager


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


def test_saved_input_changed_in_place_before_backward_raises_pytorchs_error():
    """The compiled backward reads w saved (x's gradient): a write into w between the
    forward and the backward is refused with PyTorch's message, as in eager mode."""
    def f(x, w):
        return (x @ w).tanh().sum()

    cf = CompiledFunction(f, backend="default", share=False)
    x = gg.randn(3, 4, requires_grad=True)
    w = gg.randn(4, 2, requires_grad=True)
    out = cf(x, w)
    assert out.grad_fn.name() == "CompiledFunctionBackward"
    with gg.no_grad():
        w.mul_(2)
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient "
                       "computation has been modified by an inplace operation: "
                       r"\[graphgrad.FloatTensor \[4, 2\]\] is at version 1; expected version 0"):
        out.backward()
    out = cf(x, w)   # a fresh forward reads the new w: its backward runs
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), gg.autograd.grad(f(x, w), [x])[0].numpy(),
                               rtol=1e-5, atol=1e-6)


def test_control_flow_graph_gets_a_compiled_backward():
    """A graph with cond and while_loop nodes (the static API's) is split like any other:
    passes.grad differentiates them (a cond of the branches' gradients, a while_grad),
    the array programs run those nodes through the IR's interpreter; values and
    gradients equal PyTorch's eager Python control flow on both branches."""
    torch = pytest.importorskip("torch")
    import graphgrad.static as tf
    from graphgrad.backends import default

    wv = np.array([0.5, -1.0, 2.0])
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, (3,), name="x")
        w = tf.constant(wv)
        r = tf.cond(tf.reduce_sum(x * w) > 0, lambda: tf.reduce_sum(tf.exp(x) * w),
                    lambda: tf.reduce_sum(x * x * w))
        v = tf.while_loop(lambda v: tf.reduce_sum(v * v) < 50.0,
                          lambda v: v * 1.5 + tf.sin(v) * w, [x])
        loss = r + tf.reduce_sum(v)
    ir = g.ir
    ir.set_outputs([loss._node])
    fn = default(ir, [gg.zeros(3, dtype=gg.float64)])

    def reference(xv):
        t = torch.tensor(xv, requires_grad=True)
        tw = torch.tensor(wv)
        r = (t.exp() * tw).sum() if (t * tw).sum() > 0 else (t * t * tw).sum()
        v = t
        while (v * v).sum() < 50.0:
            v = v * 1.5 + v.sin() * tw
        out = r + v.sum()
        out.backward()
        return out.item(), t.grad.numpy()

    for xv in ([1.0, 2.0, 0.5], [-1.0, -2.0, 0.3]):
        xt = gg.tensor(np.array(xv), requires_grad=True)
        (got,) = fn(xt)
        assert got.grad_fn.name() == "CompiledFunctionBackward"
        got.backward()
        want, want_grad = reference(np.array(xv))
        np.testing.assert_allclose(got.item(), want, rtol=1e-12)
        np.testing.assert_allclose(xt.grad.numpy(), want_grad, rtol=1e-10)
    (compiled,) = [c for c in fn.__globals__["_train"].built.values()]
    kinds = {n.kind for n in compiled.backward_graph.nodes}
    assert "while_grad" in kinds and "cond" in kinds


def test_saved_values_go_at_the_first_backward_and_come_back_for_a_retained_graph():
    """The compiled op releases its saved values at its backward (a loop's previous loss
    holds no activations); a second backward of a retained graph runs the forward again
    for them, one of a freed graph raises PyTorch's error."""
    def f(x, w):
        return (x @ w).sin().exp().sum()

    cf = CompiledFunction(f, backend="default", share=False)
    x = gg.randn(3, 4, requires_grad=True)
    w = gg.randn(4, 2, requires_grad=True)
    out = cf(x, w)
    out.backward(retain_graph=True)
    (params,) = [n for n in [out] if n.params]
    assert params.params["run"].values is None
    first = x.grad.numpy().copy()
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-6)
    want = gg.autograd.grad(f(x, w), [x])[0].numpy()
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        out.backward()


def test_training_loop_keeping_the_last_loss_peaks_no_higher_than_eager():
    """A loop that keeps the previous step's loss while the next forward runs (the usual
    ``loss = ...`` rebinding): the compiled step's saved values went at its backward, so
    its peak stays at most eager's."""
    gg.manual_seed(1)
    x, y = gg.randn(256, 20), gg.randint(0, 5, (256,))
    peaks = {}
    for name in ("eager", "compiled"):
        model = nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 128), nn.Tanh(),
                              nn.Linear(128, 5))
        run = gg.compile(model) if name == "compiled" else model
        opt = gg.optim.SGD(model.parameters(), lr=0.05)
        for i in range(4):
            if i == 2:
                tracemalloc.start()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(run(x), y)
            loss.backward()
            opt.step()
        peaks[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del loss
    assert peaks["compiled"] <= peaks["eager"], peaks


def test_two_output_graph_refuses_a_saved_input_changed_in_place():
    """With two outputs the compiled backward is an autograd.Function: its saved inputs
    go through ctx.save_for_backward, whose check raises PyTorch's error too."""
    def f(x, w):
        h = x @ w
        return h.tanh(), h.sum()

    cf = CompiledFunction(f, backend="default", share=False)
    x = gg.randn(3, 4, requires_grad=True)
    w = gg.randn(4, 2, requires_grad=True)
    a, b = cf(x, w)
    with gg.no_grad():
        w.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (a.sum() + b).backward()
    a, b = cf(x, w)
    (a.sum() + b).backward()
    a2, b2 = f(x, w)
    np.testing.assert_allclose(x.grad.numpy(), gg.autograd.grad(a2.sum() + b2, [x])[0].numpy(),
                               rtol=1e-5, atol=1e-6)
