"""Derivative graphs that share under create_graph=True (autograd/sharing.py): node
counts of nested derivatives against the target, values equal to plain graph extension,
and the table never confusing two different computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad.autograd.sharing import is_sharing_enabled, set_sharing
from graphgrad.tensor.toposort import toposort


def _kth(f, k, x0=0.37):
    x = gg.tensor(x0, dtype=gg.float64, requires_grad=True)
    y = f(x)
    for _ in range(k):
        (y,) = gg.autograd.grad(y, x, create_graph=True)
    return len(toposort([y])), float(y)


@pytest.fixture
def plain():
    """Run the body with sharing off, then restore it."""
    prev = set_sharing(False)
    yield
    set_sharing(prev)


def _both(f, ks):
    shared = [_kth(f, k) for k in ks]
    prev = set_sharing(False)
    try:
        unshared = [_kth(f, k) for k in ks]
    finally:
        set_sharing(prev)
    return shared, unshared


def test_tanh_tenth_derivative_within_target():
    ks = list(range(1, 11))
    shared, unshared = _both(lambda x: x.tanh(), ks)
    counts = [n for n, _ in shared]
    assert counts[-1] <= 4200, counts  # the target (21,228 without sharing)
    assert unshared[-1][0] > 5 * counts[-1]
    for (n, v), (m, w) in zip(shared, unshared, strict=True):
        assert n <= m
        np.testing.assert_allclose(v, w, rtol=1e-12)


def test_tanh_growth_to_order_12_and_values_against_torch():
    counts, values = zip(*[_kth(lambda x: x.tanh(), k) for k in range(1, 13)])
    # sharing leaves at most a doubling per order (plain extension: ~2.9 at k = 12)
    ratios = [b / a for a, b in zip(counts[3:], counts[4:])]
    assert max(ratios) <= 2.1, counts
    x = torch.tensor(0.37, dtype=torch.float64, requires_grad=True)
    y = torch.tanh(x)
    for k in range(12):
        (y,) = torch.autograd.grad(y, x, create_graph=True)
        np.testing.assert_allclose(values[k], float(y), rtol=1e-11)


def test_sin_exp_shares_too():
    shared, unshared = _both(lambda x: x.sin() * x.exp(), [6, 10])
    assert shared[1][0] * 10 < unshared[1][0]
    for (_, v), (_, w) in zip(shared, unshared, strict=True):
        np.testing.assert_allclose(v, w, rtol=1e-12)


def test_hessian_by_nested_grads_unchanged():
    """Many passes over one graph with the table alive: still the right numbers."""
    rng = np.random.default_rng(0)
    a0 = rng.standard_normal(4)
    x = gg.tensor(a0, requires_grad=True)
    y = (x.sin() * x.roll(1, 0) + x.tanh() ** 2).sum()
    (g,) = gg.autograd.grad(y, x, create_graph=True)
    rows = [gg.autograd.grad(g[i], x, retain_graph=True)[0].numpy() for i in range(4)]
    t = torch.tensor(a0, requires_grad=True)
    want = torch.autograd.functional.hessian(
        lambda z: (z.sin() * z.roll(1, 0) + z.tanh() ** 2).sum(), t)
    np.testing.assert_allclose(np.stack(rows), want.numpy(), rtol=1e-12, atol=1e-14)


def test_sharing_switch(plain):
    assert not is_sharing_enabled()
    n_plain, _ = _kth(lambda x: x.tanh(), 6)
    set_sharing(True)
    n_shared, _ = _kth(lambda x: x.tanh(), 6)
    assert n_shared < n_plain
