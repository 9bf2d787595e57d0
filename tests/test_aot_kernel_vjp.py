"""Kernel vjps in the compiled backward (``kernel_vjp``, ops/fused.py): graph
differentiation for AOT (``passes.grad(kernels=True)``) puts an op's backward kernel in
the backward graph as one opaque node (cross entropy, attention, recurrent layers),
while ``passes.grad`` without it keeps the differentiable composite rules. Gradients
equal eager's bit for bit and PyTorch's; ``create_graph=True`` through the compiled
function falls back to the op-by-op graph; a retained graph's second backward and a
freed graph's error are unchanged. Also: the cross-entropy kernels' row blocks give
the bits of the whole-array computation."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
import graphgrad.nn.functional as F
from graphgrad import nn
from graphgrad.compiler import segments
from graphgrad.dynamo import CompiledFunction
from graphgrad.graph import Interpreter
from graphgrad.graph.printer import python_code
from graphgrad.ops import cross_entropy as ce
from graphgrad.passes import grad as graph_grad

torch = pytest.importorskip("torch")


def _compiled_ops(cf) -> list:
    """The compiled forward+backward ops a CompiledFunction built (one per grad mask)."""
    return [op for op in segments(cf)[0].compiled.__globals__["_train"].built.values()
            if op is not None]


def _backward_ops(cf) -> list[str]:
    (op,) = _compiled_ops(cf)
    return [n.op.__name__ for n in op.backward_graph.nodes if n.kind == "call"]


_CE_CASES = [
    {},
    {"reduction": "sum"},
    {"reduction": "none"},
    {"ignore_index": 2},
    {"label_smoothing": 0.2},
    {"weight": True, "ignore_index": 1, "label_smoothing": 0.1},
]


@pytest.mark.parametrize("kw", _CE_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_cross_entropy_backward_is_its_kernel_and_equals_eager_and_torch(kw, dtype):
    rng = np.random.default_rng(0)
    xa = rng.standard_normal((37, 11)).astype(dtype)
    ya = rng.integers(0, 11, 37)
    wa = rng.random(11).astype(dtype) if kw.get("weight") else None
    kw = {k: v for k, v in kw.items() if k != "weight"}
    y = gg.tensor(ya)
    w = None if wa is None else gg.tensor(wa)

    def f(x):
        return F.cross_entropy(x, y, w, **kw).sum()

    cf = CompiledFunction(f, backend="default", share=False)
    x = gg.tensor(xa, requires_grad=True)
    loss = cf(x)
    loss.backward()
    ops = _backward_ops(cf)
    assert "CrossEntropyBackward" in ops and "Softmax" not in ops and "OneHot" not in ops
    xe = gg.tensor(xa, requires_grad=True)
    want = f(xe)
    want.backward()
    assert loss.detach().numpy().tobytes() == want.detach().numpy().tobytes()
    assert x.grad.numpy().tobytes() == xe.grad.numpy().tobytes()   # the same kernel
    tx = torch.from_numpy(xa.copy()).requires_grad_()
    tw = None if wa is None else torch.from_numpy(wa)
    tl = torch.nn.functional.cross_entropy(tx, torch.from_numpy(ya), tw, **kw).sum()
    tl.backward()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(loss.item(), tl.item(), rtol=tol)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)


def _captured(fn, *args):
    cf = CompiledFunction(fn, backend="eager", share=False)
    cf(*args)
    return cf.graphs[0]


def test_graph_grad_keeps_composite_rules_unless_asked_for_kernels():
    """``passes.grad`` builds gradients that may be differentiated again: the composite
    rule (a softmax), second derivatives equal PyTorch's; with ``kernels=True`` one
    CrossEntropyBackward node, the same first derivative."""
    rng = np.random.default_rng(1)
    xa, ya = rng.standard_normal((6, 5)), rng.integers(0, 5, 6)
    y = gg.tensor(ya)

    def f(x, y):
        return F.cross_entropy(x, y)

    firsts = []
    for kernels in (False, True):
        g = _captured(f, gg.tensor(xa), y)
        (dx,) = graph_grad(g, list(g.outputs), [g.inputs[0]], kernels=kernels)
        ops = {n.op.__name__ for n in g.nodes if n.kind == "call"}
        assert ("CrossEntropyBackward" in ops) == kernels
        assert ("Softmax" in ops) != kernels
        g.set_outputs([dx])
        firsts.append(Interpreter(g).run(gg.tensor(xa), y)[0].numpy())
    # differentiate the composite gradient again: d(sum(dx))/dx
    (ddx,) = graph_grad(g := _captured(f, gg.tensor(xa), y),
                        graph_grad(g, list(g.outputs), [g.inputs[0]]), [g.inputs[0]])
    g.set_outputs([ddx])
    second = Interpreter(g).run(gg.tensor(xa), y)[0].numpy()
    tx = torch.tensor(xa, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.nn.functional.cross_entropy(tx, torch.from_numpy(ya)),
                                [tx], create_graph=True)
    (th,) = torch.autograd.grad(tg.sum(), [tx])
    np.testing.assert_allclose(second, th.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(firsts[0], firsts[1], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(firsts[0], tg.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_create_graph_through_compiled_cross_entropy_falls_back_and_is_exact():
    rng = np.random.default_rng(2)
    xa, ya = rng.standard_normal((8, 6)), rng.integers(0, 6, 8)
    y = gg.tensor(ya)

    def f(x):
        return F.cross_entropy(x, y, label_smoothing=0.1)

    cf = CompiledFunction(f, backend="default", share=False)
    x = gg.tensor(xa, requires_grad=True)
    (gx,) = gg.autograd.grad(cf(x), [x], create_graph=True)
    (hx,) = gg.autograd.grad((gx * gx).sum(), [x])
    tx = torch.tensor(xa, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.nn.functional.cross_entropy(
        tx, torch.from_numpy(ya), label_smoothing=0.1), [tx], create_graph=True)
    (th,) = torch.autograd.grad((tg * tg).sum(), [tx])
    np.testing.assert_allclose(gx.detach().numpy(), tg.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(hx.numpy(), th.numpy(), rtol=1e-9, atol=1e-12)
    assert _backward_ops(cf) == ["CrossEntropyBackward"]   # the plain backward's graph


def test_retained_and_freed_compiled_cross_entropy_backward():
    rng = np.random.default_rng(3)
    y = gg.tensor(rng.integers(0, 7, 9))
    cf = CompiledFunction(lambda x: F.cross_entropy(x, y), backend="default", share=False)
    x = gg.tensor(rng.standard_normal((9, 7)).astype(np.float32), requires_grad=True)
    out = cf(x)
    out.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    out.backward()
    np.testing.assert_array_equal(x.grad.numpy(), first + first)
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        out.backward()


def test_compiled_attention_backward_is_its_kernel_and_equals_eager():
    gg.manual_seed(0)
    q, k, v = (gg.randn(2, 3, 5, 4, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).tanh().sum()

    cf = CompiledFunction(f, backend="default", share=False)
    cf(q, k, v).backward()
    got = [t.grad.numpy().copy() for t in (q, k, v)]
    assert "ScaledDotProductAttentionBackward" in _backward_ops(cf)
    for t in (q, k, v):
        t.grad = None
    f(q, k, v).backward()
    for a, t in zip(got, (q, k, v), strict=True):
        np.testing.assert_allclose(a, t.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_compiled_recurrent_backward_is_its_kernel_and_equals_eager(kind):
    gg.manual_seed(0)
    model = getattr(nn, kind)(3, 5)
    x = gg.randn(6, 2, 3)

    def f(x):
        return model(x)[0].sum()

    cf = CompiledFunction(f, backend="default", share=False)
    cf(x).backward()
    got = [p.grad.numpy().copy() for p in model.parameters()]
    assert f"{ {'LSTM': 'Lstm', 'GRU': 'Gru', 'RNN': 'Rnn'}[kind]}LayerBackward" \
        in _backward_ops(cf)
    model.zero_grad()
    f(x).backward()
    for a, p in zip(got, model.parameters(), strict=True):
        np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", [lambda x: F.gelu(x, approximate="tanh"),
                                lambda x: F.layer_norm(x, (8,)),
                                lambda x: F.log_softmax(x, -1) * 2])
def test_gelu_layer_norm_log_softmax_keep_their_fused_composite_backward(fn):
    """Their kernels measured slower than the fused composite in a compiled backward:
    no kernel op in the backward graph."""
    cf = CompiledFunction(fn, backend="default", share=False)
    cf(gg.randn(4, 8, requires_grad=True)).sum().backward()
    assert not [n for n in _backward_ops(cf) if n.endswith("Backward")]


def _whole_array_forward(x, t, reduction):
    """The cross-entropy forward on whole arrays (the formulation before row blocks)."""
    s = x - np.maximum.reduce(x, axis=1, keepdims=True, initial=-np.inf)
    picked = s[np.arange(len(t)), t]
    np.exp(s, out=s)
    loss = np.log(np.add.reduce(s, axis=1)) - picked
    if reduction == "none":
        return loss
    total = np.add.reduce(loss)
    return np.asarray(total if reduction == "sum" else total / x.dtype.type(len(t)), x.dtype)


def _whole_array_gradient(x, t):
    buf = np.subtract(x, np.maximum.reduce(x, axis=1, keepdims=True, initial=-np.inf))
    np.exp(buf, out=buf)
    scale = np.full(len(t), x.dtype.type(1) / x.dtype.type(len(t)), x.dtype)
    coef = scale[:, None] / np.add.reduce(buf, axis=1, keepdims=True)
    buf *= coef
    buf[np.arange(len(t)), t] -= scale
    return buf


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 17])
@pytest.mark.parametrize("shape", [(1, 5), (13, 9), (40, 33)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_row_blocks_give_the_whole_arrays_bits(monkeypatch, block, shape, dtype):
    monkeypatch.setattr(ce, "_BLOCK", block)
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    t = rng.integers(0, shape[1], shape[0])
    for reduction in ("mean", "sum", "none"):
        got = ce.CrossEntropy.forward(x, t, reduction=reduction)
        assert got.tobytes() == _whole_array_forward(x, t, reduction).tobytes()
    got = ce._gradient(np.asarray(1.0, dtype), x, t, None, -100, "mean", 0.0)
    assert got.tobytes() == _whole_array_gradient(x, t).tobytes()


def test_backward_graph_with_kernel_nodes_prints_runs_tabulates_and_draws():
    """The new node kinds in every view: the printed program runs and equals the
    interpreter, the table and the DOT name the kernel op, the graph verifies."""
    rng = np.random.default_rng(4)
    xa, ya = rng.standard_normal((5, 4)), rng.integers(0, 4, 5)
    q = gg.randn(1, 2, 3, 4)
    cases = [(lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1),
              (gg.tensor(xa, requires_grad=True), gg.tensor(ya)), "CrossEntropyBackward"),
             (lambda q: F.scaled_dot_product_attention(q, q, q).sum(),
              (q.requires_grad_(),), "ScaledDotProductAttentionBackward")]
    for fn, args, kernel in cases:
        cf = CompiledFunction(fn, backend="default", share=False)
        cf(*args).backward()
        (op,) = _compiled_ops(cf)
        for graph in (op.partition.backward, op.backward_graph):
            graph.verify()
            assert f"{kernel}(" in graph.code and kernel in graph.tabular()
            assert kernel in graph.to_dot()
        bwd = op.partition.backward
        feeds = [gg.tensor(np.asarray(rng.standard_normal(p.spec.shape)).astype(p.spec.dtype))
                 if p.spec.dtype.kind == "f" else a
                 for p, a in zip(bwd.inputs, (*args, *[None] * len(bwd.inputs)),
                                 strict=False)]
        printed = python_code(bwd).fn(*feeds)
        for a, b in zip(printed, Interpreter(bwd).run(*feeds), strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
