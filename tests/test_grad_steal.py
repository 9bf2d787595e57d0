"""The engine's first ``.grad`` of a leaf takes the gradient array the pass made, uncopied,
as PyTorch's AccumulateGrad steals it, and only when nothing else can reach that array:
``.grad`` never aliases a tensor the user (a seed, a hook, another leaf) still holds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad.autograd import engine


@pytest.fixture
def steals(monkeypatch):
    """The engine's steal decisions, in the order it made them."""
    seen: list[bool] = []
    real = engine._stealable

    def spy(pair):
        seen.append(real(pair))
        return seen[-1]
    monkeypatch.setattr(engine, "_stealable", spy)
    return seen


def _leaf(values):
    return gg.tensor(np.asarray(values, np.float32), requires_grad=True)


def test_a_fresh_gradient_becomes_grad_without_a_copy(steals):
    w = _leaf(np.ones((3, 4)))
    x = gg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    (x @ w).sum().backward()
    assert steals == [True]
    tw = torch.ones(3, 4, requires_grad=True)
    (torch.arange(6.).reshape(2, 3) @ tw).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())
    w.grad.add_(1.0)  # the stolen array is writeable and owned by .grad
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy() + 1)


def test_one_cotangent_for_two_leaves_is_copied(steals):
    a, b = _leaf([1, 2]), _leaf([3, 4])
    (a + b).sum().backward()  # Add's rule hands the same tensor to both inputs
    assert steals == [False, False]
    assert not np.shares_memory(a.grad.numpy(), b.grad.numpy())
    a.grad.mul_(5)
    np.testing.assert_array_equal(b.grad.numpy(), [1, 1])


def test_a_user_seed_is_never_grad(steals):
    x, z = _leaf([1, 2]), _leaf([1, 2])
    seed = gg.tensor(np.array([5, 6], np.float32))
    x.backward(seed)
    (z + 0).backward(seed)
    assert steals == [False, False]
    for t in (x, z):
        assert not np.shares_memory(t.grad.numpy(), seed.numpy())
    seed.mul_(0)
    np.testing.assert_array_equal(x.grad.numpy(), [5, 6])
    np.testing.assert_array_equal(z.grad.numpy(), [5, 6])


def test_a_gradient_a_hook_kept_is_copied(steals):
    w = _leaf([1, 2])
    kept = []
    w.register_hook(kept.append)
    (w * 2).sum().backward()
    assert steals == [False]
    assert not np.shares_memory(w.grad.numpy(), kept[0].numpy())


def test_a_retained_grad_and_a_leaf_grad_do_not_share(steals):
    v = _leaf([1, 2])
    u = v + 0
    u.retain_grad()
    (u * 3).sum().backward()  # Add passes u's gradient on to v unchanged
    assert not any(steals)
    assert not np.shares_memory(u.grad.numpy(), v.grad.numpy())


def test_a_view_of_the_gradient_blocks_the_steal(steals):
    w = _leaf(np.ones((2, 3)))
    views = []
    y = w * 2
    y.register_hook(lambda g: views.append(g.numpy()[0]))  # a NumPy view of y's gradient
    y.sum().backward()  # Mul's rule makes w's gradient afresh: stealable
    assert steals == [True]
    w2 = _leaf(np.ones((2, 3)))
    w2.register_hook(lambda g: views.append(g.numpy()[0]))  # a view of w2's own gradient
    (w2 * 2).sum().backward()
    assert steals == [True, False]
    assert not np.shares_memory(w2.grad.numpy(), views[-1])


def test_accumulation_into_an_existing_grad_is_in_place(steals):
    w = _leaf([1, 2])
    (w * 2).sum().backward()
    first = w.grad
    (w * 3).sum().backward()
    assert steals == [True]  # the second pass adds into the first .grad
    assert w.grad is first
    np.testing.assert_array_equal(w.grad.numpy(), [5, 5])


def test_create_graph_keeps_the_gradient_tensor(steals):
    x = _leaf([1.0, 2.0])
    with pytest.warns(UserWarning, match="reference cycle"):
        (x ** 3).sum().backward(create_graph=True)
    assert steals == []
    assert x.grad.requires_grad
    x.grad.sum().backward()
    np.testing.assert_allclose(x.grad.detach().numpy(), [3 + 6, 12 + 12])


def test_a_stolen_plain_leaf_gradient_is_grad_itself():
    """The tensor the pass made (a plain leaf nothing else holds) becomes ``.grad`` as
    it is, not a new leaf on its array; a later in-place step counts on it alone."""
    import weakref
    w = _leaf(np.ones((3, 4)))
    made: list = []

    def hook(g):
        new = g * 2
        made.append(weakref.ref(new))
        return new
    w.register_hook(hook)
    (gg.tensor(np.ones((2, 3), np.float32)) @ w).sum().backward()
    assert w.grad is made[0]()
    assert w.grad.grad_fn is None and not w.grad.requires_grad and w.grad._version == 0
    np.testing.assert_array_equal(w.grad.numpy(), np.full((3, 4), 4, np.float32))
    w.grad.mul_(0.5)
    assert w.grad._version == 1 and w._version == 0
