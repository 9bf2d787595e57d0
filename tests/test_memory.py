"""Memory: a backward pass without ``retain_graph`` releases what the graph saved, while
the output tensor is still alive, and a training loop does not grow."""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import numpy as np

import graphgrad as gg


def _leaves():
    gg.manual_seed(0)
    x = gg.randn(50, 40, requires_grad=True)
    w = gg.randn(50, 40, requires_grad=True)
    return x, w


def test_saved_intermediate_released_after_backward():
    x, w = _leaves()
    h = x.exp()
    arr_ref = weakref.ref(h._array)
    loss = (h * w).sum()
    del h
    gc.collect()
    assert arr_ref() is not None  # the graph holds it until backward
    loss.backward()
    gc.collect()
    assert arr_ref() is None
    assert loss.item() != 0  # loss is still alive (and readable)
    assert x.grad is not None and w.grad is not None


def test_saved_intermediate_kept_with_retain_graph():
    x, w = _leaves()
    h = x.exp()
    arr_ref = weakref.ref(h._array)
    loss = (h * w).sum()
    del h
    loss.backward(retain_graph=True)
    gc.collect()
    assert arr_ref() is not None
    loss.backward()  # the retained graph runs again, and then it is released
    gc.collect()
    assert arr_ref() is None
    np.testing.assert_allclose(w.grad.numpy(), 2 * x.detach().exp().numpy(), rtol=1e-6)


def test_every_intermediate_of_a_chain_is_released():
    x, w = _leaves()
    refs = []
    h = x
    for _ in range(10):
        h = (h * w).tanh()
        refs.append(weakref.ref(h._array))
    loss = h.sum()
    del h
    loss.backward()
    gc.collect()
    assert [r() is None for r in refs] == [True] * len(refs)


def test_autograd_grad_releases_too():
    x, w = _leaves()
    h = x.sin()
    arr_ref = weakref.ref(h._array)
    loss = (h * h * w).sum()
    del h
    gg.autograd.grad(loss, [x, w])
    gc.collect()
    assert arr_ref() is None


def test_autograd_grad_with_create_graph_keeps_graph():
    x, w = _leaves()
    h = x.sin()
    arr_ref = weakref.ref(h._array)
    loss = (h * h * w).sum()
    del h
    (gx,) = gg.autograd.grad(loss, x, create_graph=True)
    gc.collect()
    assert arr_ref() is not None  # create_graph implies retain_graph
    (gx * gx).sum().backward()
    assert x.grad is not None


def test_user_held_intermediate_stays_valid():
    # freeing must not touch tensors the user still holds: their values stay readable
    x, w = _leaves()
    h = x.exp()
    expected = h.detach().numpy().copy()
    loss = (h * w).sum()
    loss.backward()
    np.testing.assert_array_equal(h.detach().numpy(), expected)
    assert h.shape == (50, 40) and h.requires_grad


def test_leaves_and_their_grads_are_not_freed():
    x, w = _leaves()
    loss = (x.exp() * w).sum()
    loss.backward()
    x_before = x.detach().numpy().copy()
    gc.collect()
    np.testing.assert_array_equal(x.detach().numpy(), x_before)
    np.testing.assert_allclose(w.grad.numpy(), x.detach().exp().numpy(), rtol=1e-6)


def test_dropped_graph_is_collected_without_backward():
    x, w = _leaves()
    h = (x * w).exp()
    arr_ref = weakref.ref(h._array)
    loss = h.sum()
    del h, loss
    gc.collect()
    assert arr_ref() is None


# ---- a training loop does not grow -----------------------------------------------------


def _mlp_step(params, inputs, targets, lr=0.05):
    W1, b1, W2, b2 = params
    h = (inputs @ W1 + b1).tanh()
    out = h @ W2 + b2
    loss = ((out - targets) ** 2).sum() / targets.shape[0]
    for p in params:
        p.grad = None
    loss.backward()
    with gg.no_grad():
        for p in params:
            p -= lr * p.grad
    return loss.item()


def test_training_loop_memory_does_not_grow():
    gg.manual_seed(0)
    X = gg.randn(32, 8)
    Y = (X[:, :2] * 2.0).sin()
    params = [(gg.randn(8, 16) * 0.3).requires_grad_(), gg.zeros(16, requires_grad=True),
              (gg.randn(16, 2) * 0.3).requires_grad_(), gg.zeros(2, requires_grad=True)]
    losses = []
    tracemalloc.start()
    try:
        for step in range(1, 1001):
            losses.append(_mlp_step(params, X, Y))
            if step == 100:
                gc.collect()
                at_100 = tracemalloc.get_traced_memory()[0]
            elif step == 1000:
                gc.collect()
                at_1000 = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # the loop itself keeps 900 more floats in `losses` (~30 kB as Python objects)
    slack = 64 * 1024
    assert at_1000 - at_100 < slack, f"grew by {at_1000 - at_100} bytes"
    assert losses[-1] < 0.5 * losses[0]  # and it did learn
    for p in params:
        assert p.is_leaf and p.requires_grad
