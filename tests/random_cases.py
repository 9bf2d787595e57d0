"""Capture cases that draw random numbers or stop gradients, shared by ``test_fx.py``,
``test_jit_trace.py`` and ``test_jit_script.py``: dropout in training mode (as a function
and as a module), ``randn_like`` noise, ``detach()``; and ``check_random_capture``, the
checks every frontend must pass on them. Eager graphgrad is the oracle: a captured
random node draws from the default generator with eager's NumPy call, so after the same
``manual_seed`` the captured function must give eager's values and gradients exactly."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import graphgrad as gg
from graphgrad import nn
from graphgrad.nn import functional as F


def dropout_layer(x, w):
    h = gg.tanh(x @ w)
    return F.dropout(h, 0.5, training=True) * 2.0 + h


def noisy(x):
    return gg.tanh(x) * 3.0 + gg.randn_like(x) * 0.1


def stop_gradient(x):
    return x * (x * 2.0).detach() + x.sin()


class DropoutBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4, dtype=gg.float64)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        return self.drop(gg.relu(self.lin(x))) + x


def inputs_of(fn, seed: int = 0, rows: int = 6) -> tuple:
    """Float64 example inputs for one of the cases above."""
    rng = np.random.default_rng(seed)
    x = gg.tensor(rng.standard_normal((rows, 4)))
    if fn is dropout_layer:
        return (x, gg.tensor(rng.standard_normal((4, 4))))
    return (x,)


def _grads(fn: Callable, inputs: tuple, params: list, seed: int) -> tuple:
    """The output and the gradients of its sum (inputs, then parameters) after
    ``manual_seed(seed)``."""
    leaves = [x.detach().requires_grad_() for x in inputs]
    for p in params:
        p.grad = None
    gg.manual_seed(seed)
    out = fn(*leaves)
    out.sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in (*leaves, *params)]


def check_random_capture(captured: Callable, fn: Callable, inputs: tuple) -> None:
    """Two calls draw differently; the same seed gives eager's draws, values and gradients
    (which flow through the non-random parts: they are not all zero)."""
    params = list(fn.parameters()) if isinstance(fn, nn.Module) else []
    assert not np.array_equal(captured(*inputs).detach().numpy(),
                              captured(*inputs).detach().numpy())
    want, want_grads = _grads(fn, inputs, params, seed=11)
    got, got_grads = _grads(captured, inputs, params, seed=11)
    np.testing.assert_array_equal(got, want)
    again, _ = _grads(captured, inputs, params, seed=11)
    np.testing.assert_array_equal(again, got)
    for g, w in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert all(np.abs(g).sum() > 0 for g in got_grads)


def check_stop_gradient(captured: Callable) -> None:
    """``x * (2x).detach() + sin(x)``: gradient 2x + cos(x), where without the stop it
    would be 4x + cos(x)."""
    (x,) = inputs_of(stop_gradient)
    _, (want,) = _grads(stop_gradient, (x,), [], seed=0)
    _, (got,) = _grads(captured, (x,), [], seed=0)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got, 2 * x.numpy() + np.cos(x.numpy()), rtol=1e-12)
