"""The peer-suite ops against PyTorch where the shared tables cannot reach: scatter_reduce
with prod/amax/amin (PyTorch has no forward mode for them, so their jvp is checked
against graphgrad's own vjp and torch's Jacobian), zeros and ties, the legacy
``scatter(reduce=...)`` that has no derivative, in-place scatter variants, and the
errors (type and wording) of every new op. Values, gradients and the tables' cases are
in op_cases.py and jvp_vmap_cases.py."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad import func as F
from helpers import close

REDUCTIONS = ("prod", "amax", "amin", "sum", "mean")
INDEX = np.array([[0, 1, 2, 0], [2, 0, 1, 1], [0, 0, 2, 1]])


def _pair(a, grad=True):
    return (gg.tensor(a, requires_grad=grad and a.dtype.kind == "f"),
            torch.tensor(a, requires_grad=grad and a.dtype.kind == "f"))


def _grads_to_second_order(fn, arrays, seed=0):
    """fn on both libraries: the value, first derivatives (with a random cotangent) and
    second derivatives (of the first derivatives' squared norm), compared."""
    rng = np.random.default_rng(seed)
    pairs = [_pair(a) for a in arrays]
    g_ins = [p[0] for p in pairs if p[0].requires_grad]
    t_ins = [p[1] for p in pairs if p[1].requires_grad]
    g_out, t_out = fn(gg, *[p[0] for p in pairs]), fn(torch, *[p[1] for p in pairs])
    close(g_out, t_out)
    w = rng.standard_normal(tuple(t_out.shape))
    g1 = gg.autograd.grad((g_out * gg.tensor(w)).sum(), g_ins, create_graph=True)
    t1 = torch.autograd.grad((t_out * torch.tensor(w)).sum(), t_ins, create_graph=True)
    for a, b in zip(g1, t1, strict=True):
        close(a, b)
    t_norm = sum((b * b).sum() for b in t1)
    g_norm = sum((a * a).sum() for a in g1)
    assert g_norm.requires_grad == t_norm.requires_grad
    if t_norm.requires_grad:
        g2 = gg.autograd.grad(g_norm, g_ins, allow_unused=True)
        t2 = torch.autograd.grad(t_norm, t_ins, allow_unused=True)
        for a, b in zip(g2, t2, strict=True):
            if b is None:
                assert a is None or not np.any(a.numpy())
            else:
                close(a, b)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_reduce_to_second_order(reduce, include_self, dim):
    rng = np.random.default_rng(1)
    base, src = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    index = INDEX if dim == 0 else INDEX % 4

    def fn(m, a, s):
        return m.scatter_reduce(a, dim, m.tensor(index), s, reduce, include_self=include_self)
    _grads_to_second_order(fn, (base, src))


@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_prod_with_zeros(include_self):
    """A single zero sent to a position gets the product of the others; two zeros make
    every factor's derivative 0; a zero in the input itself is left out exactly."""
    base = np.array([[0.0, 2.0, 3.0, -1.5], [1.5, 0.0, 2.0, 0.5], [2.0, 1.0, 0.0, 3.0]])
    src = np.array([[0.0, 1.5, 2.0, 0.0], [2.0, 0.0, 0.5, 0.0], [1.5, 3.0, -2.0, 2.0]])

    def fn(m, a, s):
        return m.scatter_reduce(a, 0, m.tensor(INDEX), s, "prod", include_self=include_self)
    pairs = [_pair(base), _pair(src)]
    g_out, t_out = fn(gg, *[p[0] for p in pairs]), fn(torch, *[p[1] for p in pairs])
    close(g_out, t_out)
    w = np.random.default_rng(2).standard_normal((3, 4))
    g1 = gg.autograd.grad((g_out * gg.tensor(w)).sum(), [p[0] for p in pairs])
    t1 = torch.autograd.grad((t_out * torch.tensor(w)).sum(), [p[1] for p in pairs])
    for a, b in zip(g1, t1, strict=True):
        close(a, b)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_ties_share_the_gradient(reduce):
    base = np.array([[1.0, 2.0, 1.0, 0.0]] * 3)
    src = np.array([[1.0, 2.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0], [1.0, 2.0, 0.0, 0.0]])
    pairs = [_pair(base), _pair(src)]
    outs = [m.scatter_reduce(a, 0, m.tensor(INDEX), s, reduce)
            for m, (a, s) in ((gg, (pairs[0][0], pairs[1][0])),
                              (torch, (pairs[0][1], pairs[1][1])))]
    close(*outs)
    g1 = gg.autograd.grad(outs[0].sum(), [p[0] for p in pairs])
    t1 = torch.autograd.grad(outs[1].sum(), [p[1] for p in pairs])
    for a, b in zip(g1, t1, strict=True):
        close(a, b)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["prod", "amax", "amin"])
def test_scatter_reduce_forward_mode_is_the_jacobian(reduce, include_self):
    """PyTorch has no forward mode for these reductions: graphgrad's jacfwd must equal
    torch's jacrev (its reverse mode), for both differentiable inputs."""
    rng = np.random.default_rng(3)
    base, src = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))

    def fn(m):
        return lambda a, s: m.scatter_reduce(a, 0, m.tensor(INDEX), s, reduce,
                                             include_self=include_self)
    fwd = F.jacfwd(fn(gg), argnums=(0, 1))(gg.tensor(base), gg.tensor(src))
    ref = torch.func.jacrev(fn(torch), argnums=(0, 1))(torch.tensor(base), torch.tensor(src))
    for a, b in zip(fwd, ref, strict=True):
        close(a, b)


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_scatter_reduce_vmap(reduce):
    rng = np.random.default_rng(4)
    base, src = rng.standard_normal((5, 3, 4)), rng.standard_normal((3, 4))
    index = np.stack([INDEX, INDEX[::-1]] * 2 + [INDEX])

    def fn(m):
        return lambda a, i, s: m.scatter_reduce(a, 1, i, s, reduce, include_self=False)
    out = F.vmap(fn(gg), in_dims=(0, 0, None))(gg.tensor(base), gg.tensor(index),
                                               gg.tensor(src))
    ref = torch.func.vmap(fn(torch), in_dims=(0, 0, None))(
        torch.tensor(base), torch.tensor(index), torch.tensor(src))
    close(out, ref)


def test_scatter_reduce_integer_mean_rounds_down():
    args = ([1, 2], [0, 0], [3, 4])
    for include_self in (True, False):
        g = gg.tensor(args[0]).scatter_reduce(0, gg.tensor(args[1]), gg.tensor(args[2]),
                                              "mean", include_self=include_self)
        t = torch.tensor(args[0]).scatter_reduce(0, torch.tensor(args[1]),
                                                 torch.tensor(args[2]), "mean",
                                                 include_self=include_self)
        assert g.tolist() == t.tolist() and g.dtype == gg.int64


def test_legacy_scatter_reduce_has_no_derivative():
    for m in (gg, torch):
        x = m.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=m.float64, requires_grad=True)
        y = x.scatter(0, m.tensor([[1, 0]]), 2.0, reduce="multiply")
        with pytest.raises(RuntimeError, match="derivative for aten::scatter is not implemented"):
            y.sum().backward()


def _raises_like_torch(call):
    """call(m) raises the same exception type with the same message in both libraries."""
    with pytest.raises(Exception) as t_err:
        call(torch)
    with pytest.raises(type(t_err.value), match=re.escape(str(t_err.value).split("\n")[0])):
        call(gg)


X = np.arange(12.0).reshape(3, 4)  # float64 in both libraries


def _ones(m, *shape):
    return m.ones(*shape, dtype=m.float64)

ERRORS = {
    "scatter_index_rank": lambda m: m.tensor(X).scatter(0, m.tensor([0, 1]), 1.0),
    "scatter_out_of_bounds": lambda m: m.tensor(X).scatter(0, m.tensor([[5, 0]]), 1.0),
    "scatter_src_dtype": lambda m: m.tensor(X).scatter(0, m.tensor([[1, 0]]),
                                                       m.tensor([[1.0, 2.0]], dtype=m.float32)),
    "scatter_bad_reduce": lambda m: m.tensor(X).scatter(0, m.tensor([[1]]), 1.0, reduce="max"),
    "scatter_reduce_bad_reduce": lambda m: m.tensor(X).scatter_reduce(
        0, m.tensor([[1]]), m.tensor([[1.0]], dtype=m.float64), "foo"),
    # PyTorch's forward takes 'max' (as amax), its backward refuses it
    "scatter_reduce_max_backward": lambda m: m.tensor(X, requires_grad=True).scatter_reduce(
        0, m.tensor([[1]]), m.tensor([[9.0]], dtype=m.float64), "max").sum().backward(),
    "scatter_dim": lambda m: m.tensor(X).scatter(2, m.tensor([[1]]), 1.0),
    "scatter_index_dtype": lambda m: m.tensor(X).scatter(0, m.tensor([[1.0]]), 1.0),
    "scatter_index_larger_than_src": lambda m: m.tensor(X).scatter(
        0, m.tensor([[0, 1, 2]]), m.ones(1, 2, dtype=m.float64)),
    "scatter_index_larger_than_self": lambda m: m.tensor(X).scatter(
        1, m.zeros(4, 2, dtype=m.int64), 1.0),
    "scatter_reduce_index_larger": lambda m: m.tensor(X).scatter_reduce(
        0, m.zeros(2, 5, dtype=m.int64), m.ones(2, 5, dtype=m.float64), "sum"),
    "shift_float": lambda m: m.tensor([1.0, 2.0]) << 1,
    "shift_float_scalar": lambda m: m.bitwise_right_shift(m.tensor([1, 2]), 1.5),
    "unfold_too_large": lambda m: m.tensor(X).unfold(1, 5, 1),
    "unfold_step": lambda m: m.tensor(X).unfold(1, 2, 0),
    "unfold_dim": lambda m: m.tensor(X).unfold(3, 1, 1),
    "unfold_0d": lambda m: m.tensor(2.0).unfold(0, 2, 1),
    "repeat_interleave_size": lambda m: m.repeat_interleave(m.tensor(X), m.tensor([1, 2]), 1),
    "repeat_interleave_negative": lambda m: m.repeat_interleave(m.tensor(X),
                                                                m.tensor([1, 2, -1]), 0),
    "repeat_interleave_negative_int": lambda m: m.repeat_interleave(m.tensor(X), -1),
    "repeat_interleave_output_size": lambda m: m.repeat_interleave(m.tensor(X), 2, 1,
                                                                   output_size=5),
    "repeat_interleave_output_size_tensor": lambda m: m.repeat_interleave(
        m.tensor(X), m.tensor([1, 2, 1]), 0, output_size=5),
    "repeat_interleave_rank": lambda m: m.repeat_interleave(m.tensor(X), m.tensor([[1, 2]]), 0),
    "repeat_interleave_float": lambda m: m.repeat_interleave(m.tensor(X), m.tensor([1.0]), 0),
    "repeat_interleave_0d_dim": lambda m: m.tensor(2.0).repeat_interleave(m.tensor([2]), 0),
    "repeat_interleave_0d_dim_int": lambda m: m.tensor(2.0).repeat_interleave(2, 0),
    "logcumsumexp_int": lambda m: m.logcumsumexp(m.tensor([1, 2]), 0),
    "logcumsumexp_dim": lambda m: m.logcumsumexp(m.tensor(X), 2),
    "axis_and_dim": lambda m: m.sum(m.tensor(X), dim=0, axis=0),
    "index_add_index_rank": lambda m: m.tensor(X).index_add(1, m.tensor([[0]]), _ones(m, 3, 1)),
    "index_add_index_dtype": lambda m: m.tensor(X).index_add(1, m.tensor([0.0]), _ones(m, 3, 1)),
    "index_add_count": lambda m: m.tensor(X).index_add(1, m.tensor([0, 1]), _ones(m, 3, 1)),
    "index_add_bounds": lambda m: m.tensor(X).index_add(1, m.tensor([7]), _ones(m, 3, 1)),
    "index_add_source_dtype": lambda m: m.tensor(X).index_add(1, m.tensor([1]),
                                                              m.ones(3, 1, dtype=m.float32)),
    "index_add_source_shape": lambda m: m.tensor(X).index_add(1, m.tensor([1]), _ones(m, 2, 1)),
    "index_copy_count": lambda m: m.tensor(X).index_copy(1, m.tensor([0, 1]), _ones(m, 3, 1)),
    "index_copy_bounds": lambda m: m.tensor(X).index_copy(1, m.tensor([7]), _ones(m, 3, 1)),
    "index_copy_index_dtype": lambda m: m.tensor(X).index_copy(1, m.tensor([1.0]),
                                                               _ones(m, 3, 1)),
    "index_copy_index_rank": lambda m: m.tensor(X).index_copy(1, m.tensor([[1]]),
                                                              _ones(m, 3, 1)),
    "index_copy_source_dtype": lambda m: m.tensor(X).index_copy(1, m.tensor([1]),
                                                                m.ones(3, 1, dtype=m.float32)),
    "index_fill_bounds": lambda m: m.tensor(X).index_fill(1, m.tensor([5]), 1.0),
    "index_fill_value_rank": lambda m: m.tensor(X).index_fill(1, m.tensor([1]),
                                                              m.tensor([1.0, 2.0])),
    "index_fill_index_dtype": lambda m: m.tensor(X).index_fill(1, m.tensor([1.0]), 1.0),
    "index_fill_index_rank": lambda m: m.tensor(X).index_fill(1, m.tensor([[1]]), 1.0),
}


@pytest.mark.parametrize("name", ERRORS)
def test_errors_match_torch(name):
    _raises_like_torch(ERRORS[name])


def test_scatter_value_and_src_forms():
    rng = np.random.default_rng(5)
    x, src = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    index = np.array([[2, 0, 1, 1], [0, 1, 0, 2]])
    forms = [lambda m: m.scatter(m.tensor(x), 0, m.tensor(index), m.tensor(src)),
             lambda m: m.tensor(x).scatter(0, m.tensor(index), 1.5),
             lambda m: m.tensor(x).scatter(0, m.tensor(index), value=-2.0),
             lambda m: m.tensor(x).scatter(0, m.tensor(index), m.tensor(src), reduce="add"),
             lambda m: m.tensor([[1, 2], [3, 4]]).scatter(1, m.tensor([[1], [0]]), 7)]
    for form in forms:
        g, t = form(gg), form(torch)
        close(g, t)
        assert str(g.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]


INPLACE = {
    "scatter_": lambda x, m: x.scatter_(1, m.tensor([[0, 2], [1, 3], [3, 0]]), x[:, :2] * 2),
    "scatter_value_": lambda x, m: x.scatter_(0, m.tensor([[2, 0, 1, 1]]), 0.5),
    "scatter_reduce_": lambda x, m: x.scatter_reduce_(0, m.tensor(INDEX), x * 1.5, "amax",
                                                      include_self=False),
    "index_add_": lambda x, m: x.index_add_(1, m.tensor([0, 3, 0]), m.ones(3, 3).double(),
                                            alpha=2),
    "index_copy_": lambda x, m: x.index_copy_(0, m.tensor([2, 0]), x[:2] + 1),
    "index_fill_": lambda x, m: x.index_fill_(1, m.tensor([1]), -1.0),
    "cumsum_": lambda x, m: x.cumsum_(1),
    "copysign_": lambda x, m: x.copysign_(-1.0),
}


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_scatter_family(name):
    """The write goes through the in-place machinery: the value, the gradient through
    the rebased tensor, the version counter, and PyTorch's error on a leaf."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3, 4))
    outs = []
    for m in (gg, torch):
        leaf = m.tensor(a, requires_grad=True)
        x = leaf * 1.0
        before = x._version
        y = INPLACE[name](x, m)
        assert y is x and x._version > before
        (x * x).sum().backward()
        outs.append((x.detach().numpy().copy(), leaf.grad.numpy().copy()))
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            INPLACE[name](m.tensor(a, requires_grad=True), m)
    close(outs[0][0], outs[1][0])
    close(outs[0][1], outs[1][1])


def test_shift_in_place_and_reflected():
    for op in ("__ilshift__", "__irshift__"):
        g, t = gg.tensor([1, 8, -16]), torch.tensor([1, 8, -16])
        assert getattr(g, op)(2) is g
        getattr(t, op)(2)
        assert g.tolist() == t.tolist()
    g, t = gg.tensor([1, 2, 3], dtype=gg.uint8), torch.tensor([1, 2, 3], dtype=torch.uint8)
    assert (g << 7).tolist() == (t << 7).tolist() and (g << 7).dtype == gg.uint8


def test_unfold_windows_and_gradient():
    """Overlapping windows: each element's gradient is the sum over the windows it is in."""
    a = np.random.default_rng(7).standard_normal((2, 7, 3))
    for size, step in ((3, 1), (2, 2), (7, 3), (0, 1)):
        _grads_to_second_order(lambda m, x, s=size, st=step: x.unfold(1, s, st) * x.unfold(
            1, s, st), (a,))
    close(gg.tensor(2.0).unfold(0, 1, 1), torch.tensor(2.0).unfold(0, 1, 1))


def test_repeat_interleave_counts_only_and_vmap_refusal():
    counts = [1, 0, 3, 2]
    assert gg.repeat_interleave(gg.tensor(counts)).tolist() == \
        torch.repeat_interleave(torch.tensor(counts)).tolist()
    with pytest.raises(RuntimeError, match="data-dependent output shape"):
        F.vmap(lambda x, r: x.repeat_interleave(r, dim=0))(gg.ones(2, 3), gg.tensor([[1] * 3] * 2))


def test_unfold_is_a_view():
    """Writes reach through: into the input (seen by the windows), into non-overlapping
    windows (seen by the input, with the gradient PyTorch gives); overlapping windows are
    read-only."""
    results = []
    for m in (gg, torch):
        x = m.arange(6.0, dtype=m.float64)
        windows = x.unfold(0, 3, 1)
        x[0] = 100.0
        assert windows[0, 0].item() == 100.0
        x.unfold(0, 2, 2).add_(1.0)
        leaf = m.arange(6.0, dtype=m.float64, requires_grad=True)
        y = leaf * 1.0
        y.unfold(0, 2, 3).mul_(m.tensor([2.0, 3.0], dtype=m.float64))
        (y * y).sum().backward()
        results.append((x, y, leaf.grad))
    for a, b in zip(*results, strict=True):
        close(a, b)
    with pytest.raises(RuntimeError, match="read-only"):
        gg.arange(6.0).unfold(0, 3, 1).add_(1.0)
