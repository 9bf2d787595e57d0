"""What a plain backward pass keeps alive: each node is released as the pass leaves it
(as PyTorch frees a node's saved tensors once its backward ran), a value nobody holds
and no rule reads goes then too, and cotangents only the engine holds are added into
in place. Memory is counted by tracemalloc (NumPy reports its arrays to it), never by
time; gradients are checked against PyTorch."""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest
import torch

import graphgrad as gg

N = 50_000  # float64: 400 kB per array


def _chain(m, x, depth: int):
    h = x * 1.5
    for i in range(depth):
        h = h.sin() if i % 2 else h * 0.9 + 0.1
    return h


def test_a_long_chain_is_released_as_the_pass_goes():
    x = gg.tensor(np.random.default_rng(0).standard_normal(N), requires_grad=True)
    probe = {}

    def hook(g):
        probe["live"] = tracemalloc.get_traced_memory()[0]
    tracemalloc.start()  # counts what is made from here on: x is not
    try:
        first = x * 1.5
        first.register_hook(hook)
        h = first
        for i in range(12):
            h = h.sin() if i % 2 else h * 0.9 + 0.1
        loss = h.sum()
        del h
        loss.backward()
    finally:
        tracemalloc.stop()
    # when the pass reaches the chain's first node, the 18 values made after it are
    # gone (the engine used to hold them to the end): left are about its own value
    # and a gradient or two
    held = probe["live"] / (8 * N)
    assert held < 4, held


def test_values_the_user_holds_keep_their_data():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 9, 9))
    w = rng.standard_normal((4, 3, 3, 3))
    x, wt = gg.tensor(a, requires_grad=True), gg.tensor(w, requires_grad=True)
    y = gg.nn.functional.conv2d(x, wt)
    z = y.relu()
    (z * z).sum().backward()
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw)
    tz = ty.relu()
    (tz * tz).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(z.detach().numpy(), tz.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(wt.grad.numpy(), tw.grad.numpy(), rtol=1e-10)


def test_cotangents_added_in_place_are_never_shared():
    """x + x gives one cotangent object for both inputs, x * x two fresh ones; the sums
    into them in place must not leak into each other."""
    a = np.random.default_rng(2).standard_normal(7)

    def f(m, x):
        s = x + x
        p = x * x
        q = s * p + s.exp() + p.sin() + x
        return (q * q).sum()

    for m in (gg, torch):
        t = m.tensor(a, requires_grad=True)
        f(m, t).backward()
        if m is gg:
            got = t.grad.numpy()
        else:
            want = t.grad.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_conv_transpose_step_holds_about_what_pytorch_does(monkeypatch):
    """conv_transpose2d, squared, mean, backward: its peak is the output, the mean's
    gradient and mul's two cotangents (PyTorch's too) and one example's columns, not
    the forward's values on top (the engine held 6 outputs and more)."""
    conv_ops = sys.modules["graphgrad.ops.conv_kernels"]
    monkeypatch.setattr(conv_ops, "_COLUMNS_BYTES", 1)  # one example per chunk
    rng = np.random.default_rng(3)
    x = gg.tensor(rng.standard_normal((8, 8, 20, 20)).astype(np.float32), requires_grad=True)
    w = gg.tensor(rng.standard_normal((8, 16, 5, 5)).astype(np.float32) * 0.05,
                  requires_grad=True)
    tracemalloc.start()
    try:
        out = gg.nn.functional.conv_transpose2d(x, w, stride=2)
        (out * out).mean().backward()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    nbytes = out.detach().numpy().nbytes
    assert peak < 4.6 * nbytes, peak / nbytes


@pytest.mark.parametrize("options", [{}, {"label_smoothing": 0.1, "reduction": "sum"},
                                     {"label_smoothing": 0.1, "weighted": True}])
def test_cross_entropy_step_holds_two_logits_sized_arrays(options):
    """A language model's head: logits (tokens, vocabulary) from a matmul, cross entropy,
    backward. The loss keeps only the logits (not their log-softmax too) and its gradient
    is one buffer, so at most the logits and one array of their size are alive at once,
    in the forward and in the backward (log_softmax then nll_loss held four: the logits,
    the log-probabilities and two gradients). Gradients checked against PyTorch."""
    rng = np.random.default_rng(4)
    a0, w0 = rng.standard_normal((2000, 8)), rng.standard_normal((8, 300))
    t0 = rng.integers(0, 300, 2000)
    a, w = gg.tensor(a0, requires_grad=True), gg.tensor(w0, requires_grad=True)
    target = gg.tensor(t0)
    options = dict(options)
    if options.pop("weighted", False):
        options["weight"] = rng.uniform(0.2, 2.0, 300)
    ours = {k: gg.tensor(v) if k == "weight" else v for k, v in options.items()}
    theirs = {k: torch.tensor(v) if k == "weight" else v for k, v in options.items()}
    tracemalloc.start()
    try:
        gg.nn.functional.cross_entropy(a @ w, target, **ours).backward()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    logits_bytes = 2000 * 300 * 8
    assert peak < 2.3 * logits_bytes, peak / logits_bytes
    ta, tw = torch.tensor(a0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    torch.nn.functional.cross_entropy(ta @ tw, torch.tensor(t0), **theirs).backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_a_failed_pass_releases_what_it_visited_for_large_and_small_values():
    """As PyTorch: the nodes visited before the failure are released, so a second try
    meets them freed; the same whether the pass released as it went (large values) or
    sweeps at the end (small ones)."""
    for n in (2, N):
        a = gg.tensor(np.arange(1.0, n + 1), requires_grad=True)
        b = gg.tensor(np.arange(1.0, n + 1), requires_grad=True)
        y = b.exp()
        y.add_(1)
        loss = y.sum() + (a * 3 * 2).sum() + (a * a).sum()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward(inputs=[a, b])
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            gg.autograd.grad(loss, [a, b])
