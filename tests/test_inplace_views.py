"""In-place ops on views made by reshape/view/flatten/unsqueeze, permute/transpose/t/.T
and indexing, inside a recorded graph, against PyTorch: the write reaches the base, and
gradients through the base, the view and the written values are PyTorch's (first and
second order). Views of views chain; expanded views refuse writes as PyTorch does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg

A = np.arange(1.0, 7.0).reshape(2, 3) / 4
W = np.arange(1.0, 7.0).reshape(3, 2) / 3
C = np.arange(1.0, 25.0).reshape(2, 3, 4) / 10


def t_view_mul(lib, a, w):
    b = a * 1
    v = b.t()
    v.mul_(w)
    return b, v


def reshape_view_add(lib, a, w):
    b = a * 1
    v = b.view(6)
    v.add_(w.reshape(6))
    return b, v * 2


def flatten_unsqueeze(lib, a, w):
    b = a * 2
    b.flatten().mul_(w.t().reshape(-1))
    b.unsqueeze(0).sub_(a)
    return (b,)


def transpose_setitem(lib, a, w):
    b = a * 1
    v = b.transpose(0, 1)
    v[1] = w[0]
    v[:, 0] *= w[:, 1]
    return b, v


def chain_of_views(lib, a, w):
    b = a * 1
    b.view(2, 3).T[1:3].mul_(w[1:])  # indexing a permute of a reshape
    b.reshape(3, 2)[0].add_(1.0)
    return (b,)


def unary_on_permute(lib, a, w):
    b = a.tanh() + 1  # (tanh's output is saved: writing into it would be an error)
    v = b.permute(1, 0)
    v.mul_(w)
    v.exp_()  # last: exp_ saves its output
    return b * w.t(), v


def view_not_requiring_grad(lib, a, w):
    """The base is a constant; the written values bring the gradient."""
    x = lib.zeros(3, 2, dtype=lib.float64)
    x.t().add_(a)
    x.view(-1).mul_(w.reshape(-1))
    return (x,)


def permute_3d(lib, c, w):
    b = c * 1
    v = b.permute(2, 0, 1)
    v.mul_(w.sum())
    b.movedim(0, 2)[..., 1].add_(w.sum())
    return b, v


def base_written_after_views(lib, a, w):
    """Views made before the base (or another view) changed see the change in their
    gradients too, as PyTorch regenerates their history."""
    b = a * 1
    v, row = b.t(), b[1]
    b.mul_(w.t())
    b.view(6)[:2].add_(w[0])
    return v, row * 3


CASES = [base_written_after_views, t_view_mul, reshape_view_add, flatten_unsqueeze,
         transpose_setitem, chain_of_views, unary_on_permute, view_not_requiring_grad,
         permute_3d]


def _run(fn, lib, create_graph=False):
    first = C if fn is permute_3d else A
    a = lib.tensor(first, requires_grad=True)
    w = lib.tensor(W, requires_grad=True)
    outs = fn(lib, a, w)
    loss = sum((o * o * o).sum() for o in outs)
    grads = lib.autograd.grad(loss, (a, w), create_graph=create_graph, allow_unused=True)
    values = [o.detach().numpy() for o in outs]
    if create_graph:  # a second derivative: the gradient of the gradients' squared norm
        total = sum((g * g).sum() for g in grads if g is not None)
        grads = lib.autograd.grad(total, (a, w), allow_unused=True)
    return values, [g.detach().numpy() if g is not None else None for g in grads]


@pytest.mark.parametrize("create_graph", [False, True], ids=["grad", "grad_of_grad"])
@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_inplace_on_views_matches_torch(fn, create_graph):
    g_values, g_grads = _run(fn, gg, create_graph)
    t_values, t_grads = _run(fn, torch, create_graph)
    for g, t in zip(g_values, t_values, strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-12, err_msg="values")
    for g, t in zip(g_grads, t_grads, strict=True):
        if t is None:
            assert g is None or not np.any(g)
        else:
            np.testing.assert_allclose(g, t, rtol=1e-10, atol=1e-12, err_msg="gradients")


def test_view_and_base_share_the_version_counter():
    for lib in (gg, torch):
        a = lib.tensor(A, requires_grad=True)
        b = a * 1
        v = b.t()
        v.mul_(2)
        b.view(6).add_(1)
        assert v._version == b._version == 2, lib.__name__
        assert v.tolist() == (b.detach().t()).tolist()


def test_expanded_view_refuses_writes():
    for lib in (gg, torch):
        b = lib.tensor(A, requires_grad=True) * 1
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor "
                                               "refers to a single memory location"):
            b.expand(4, 2, 3).mul_(2)


def test_leaf_view_refuses_writes():
    for lib in (gg, torch):
        a = lib.tensor(A, requires_grad=True)
        with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad "
                                               "is being used in an in-place operation"):
            a.t().mul_(2)


def test_writing_a_saved_output_through_a_view_is_detected():
    for lib in (gg, torch):
        a = lib.tensor(A, requires_grad=True)
        b = a.exp()  # exp saves its output for the backward pass
        b.t().mul_(2)
        with pytest.raises(RuntimeError, match="one of the variables needed for gradient "
                                               "computation has been modified by an inplace "
                                               "operation"):
            b.sum().backward()
