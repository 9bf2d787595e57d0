"""``normal`` (four overloads), ``bernoulli``, ``multinomial`` and the Tensor methods
``normal_``, ``bernoulli_``, ``bernoulli``, ``multinomial`` against PyTorch: shapes,
dtypes, errors and what they do with inputs that require grad (zero gradients and
tangents, as torch); their distributions by statistical checks with fixed seeds and
bounds computed from the sample size; generators; vmap's ``randomness=`` flags; and
fresh draws from a ``jit.trace`` capture."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as tfwd

import graphgrad as gg
from graphgrad import func as F
from graphgrad.autograd import forward_ad as gfwd

CHI2_LIMIT = 40.0  # far above the 0.99999 quantile of chi2 with <= 9 degrees of freedom


def chi2(counts, probs) -> float:
    counts = np.asarray(counts, dtype=np.float64)
    expected = counts.sum() * np.asarray(probs) / np.sum(probs)
    keep = expected > 0
    assert counts[~keep].sum() == 0  # zero-probability categories are never drawn
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())


def both_raise(make):
    """``make(lib)`` raises the same exception type and message in both libraries."""
    with pytest.raises(Exception) as want:
        make(torch)
    with pytest.raises(type(want.value)) as got:
        make(gg)
    assert str(got.value) == str(want.value) or str(got.value).endswith(str(want.value))


# ---- normal ---------------------------------------------------------------------------


NORMAL_CALLS = [
    lambda lib: lib.normal(lib.zeros(3), lib.ones(2, 3)),
    lambda lib: lib.normal(lib.zeros(2, 1), lib.ones(3)),
    lambda lib: lib.normal(lib.zeros(3, dtype=lib.float64), lib.ones(3)),
    lambda lib: lib.normal(lib.zeros(3), lib.ones(3, dtype=lib.float64)),
    lambda lib: lib.normal(lib.zeros(3, dtype=lib.float64), 2.0),
    lambda lib: lib.normal(lib.zeros(3)),
    lambda lib: lib.normal(2.0, lib.ones(3, 2, dtype=lib.float64)),
    lambda lib: lib.normal(0.0, 1.0, (2, 3)),
    lambda lib: lib.normal(0.0, 1.0, size=(4,), dtype=lib.float64),
    lambda lib: lib.normal(0, 1, (2,)),
    lambda lib: lib.normal(mean=lib.zeros(3), std=lib.ones(3)),
    lambda lib: lib.normal(lib.zeros(()), lib.ones(3)),
]


@pytest.mark.parametrize("k", range(len(NORMAL_CALLS)))
def test_normal_shapes_and_dtypes(k):
    got, want = NORMAL_CALLS[k](gg), NORMAL_CALLS[k](torch)
    assert tuple(got.shape) == tuple(want.shape)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert got.requires_grad is want.requires_grad


@pytest.mark.parametrize("make", [
    lambda lib: lib.normal(lib.zeros(3), lib.ones(2)),
    lambda lib: lib.normal(lib.zeros(3), -1.0),
    lambda lib: lib.normal(0.0, -lib.ones(3)),
    lambda lib: lib.normal(lib.zeros(3), -lib.ones(3)),
    lambda lib: lib.normal(lib.zeros(1), lib.tensor([float("nan")])),
    lambda lib: lib.normal(0.0, -1.0, (2,)),
    lambda lib: lib.normal(0.0, float("nan"), (2,)),
    lambda lib: lib.normal(0.0, 1.0),
    lambda lib: lib.normal(0, 1),
    lambda lib: lib.normal(lib.zeros(2), lib.ones(2), (2,)),
    lambda lib: lib.normal(0.0, lib.ones(2), (2,)),
    lambda lib: lib.normal(lib.zeros(3, dtype=lib.int64), 1.0),
    lambda lib: lib.normal(0.0, 1.0, (2,), dtype=lib.int64),
    lambda lib: lib.ones(2).normal_(0, -1),
    lambda lib: lib.ones(2, dtype=lib.int64).normal_(),
])
def test_normal_errors(make):
    both_raise(make)


def test_normal_statistics_and_generator():
    gg.manual_seed(0)
    n = 200_000
    mean = gg.tensor([-1.0, 0.0, 3.0], dtype=gg.float64).expand(n, 3)
    std = gg.tensor([0.5, 1.0, 2.0], dtype=gg.float64)
    x = gg.normal(mean, std).numpy()
    bound = 6 * np.array([0.5, 1.0, 2.0]) / np.sqrt(n)  # six standard errors
    assert np.all(np.abs(x.mean(0) - [-1.0, 0.0, 3.0]) < bound)
    assert np.all(np.abs(x.std(0) / [0.5, 1.0, 2.0] - 1) < 6 / np.sqrt(2 * n))
    y = gg.normal(2.0, 3.0, (n,), dtype=gg.float64).numpy()
    assert abs(y.mean() - 2.0) < 6 * 3 / np.sqrt(n) and abs(y.std() / 3 - 1) < 6 / np.sqrt(2 * n)
    z = gg.empty(n, dtype=gg.float64).normal_(1.0, 0.5).numpy()
    assert abs(z.mean() - 1.0) < 6 * 0.5 / np.sqrt(n)
    a = gg.normal(gg.zeros(5), 1.0, generator=gg.Generator().manual_seed(3))
    b = gg.normal(gg.zeros(5), 1.0, generator=gg.Generator().manual_seed(3))
    assert a.tolist() == b.tolist()
    gg.manual_seed(4)
    c = gg.normal(0.0, 1.0, (5,))
    gg.manual_seed(4)
    assert c.tolist() == gg.normal(0.0, 1.0, (5,)).tolist() != a.tolist()
    assert gg.normal(gg.zeros(4), 0.0).tolist() == [0.0] * 4


def test_normal_gradients_are_zero_as_torch():
    results = []
    for lib in (gg, torch):
        m = lib.zeros(3, dtype=lib.float64, requires_grad=True)
        s = lib.ones(3, dtype=lib.float64, requires_grad=True)
        outs = [lib.normal(m, s), lib.normal(m, 2.0), lib.normal(0.0, s)]
        assert all(o.requires_grad and o.grad_fn is not None for o in outs)
        g1 = lib.autograd.grad(outs[0].sum(), [m, s], create_graph=True)
        g2 = lib.autograd.grad(outs[1].sum(), [m])
        g3 = lib.autograd.grad(outs[2].sum(), [s])
        assert not g1[0].requires_grad
        q = m * 1
        q.normal_()
        (g4,) = lib.autograd.grad(q.sum(), [m])
        leaf = lib.normal(0.0, 1.0, (2,), requires_grad=True)
        assert leaf.requires_grad and leaf.grad_fn is None and leaf.is_leaf
        results.append([t.tolist() for t in (*g1, *g2, *g3, g4)])
    assert results[0] == results[1]


def test_forward_ad_tangents_are_zero_as_torch():
    tangents = []
    for lib, fwd in ((gg, gfwd), (torch, tfwd)):
        with fwd.dual_level():
            p = fwd.make_dual(lib.full((3,), 0.5, dtype=lib.float64),
                              lib.ones(3, dtype=lib.float64))
            outs = [lib.normal(p, 1.0), lib.normal(p, p + 1), lib.bernoulli(p)]
            tangents.append([fwd.unpack_dual(o).tangent.tolist() for o in outs])
    assert tangents[0] == tangents[1]


# ---- bernoulli ------------------------------------------------------------------------


def test_bernoulli_values_dtypes_and_statistics():
    gg.manual_seed(1)
    n = 100_000
    p = gg.tensor([0.0, 0.1, 0.5, 0.9, 1.0], dtype=gg.float64).expand(n, 5)
    x = gg.bernoulli(p).numpy()
    assert set(np.unique(x)) <= {0.0, 1.0} and x.dtype == np.float64
    freq = x.mean(0)
    assert freq[0] == 0 and freq[-1] == 1
    se = np.sqrt(np.array([0.1, 0.5, 0.9]) * (1 - np.array([0.1, 0.5, 0.9])) / n)
    assert np.all(np.abs(freq[1:4] - [0.1, 0.5, 0.9]) < 6 * se)
    y = gg.bernoulli(gg.zeros(n), 0.25).numpy()
    assert abs(y.mean() - 0.25) < 6 * np.sqrt(0.25 * 0.75 / n)
    for make in (lambda lib: lib.bernoulli(lib.full((3,), 0.5)),
                 lambda lib: lib.bernoulli(lib.tensor([1, 0]), 0.5),
                 lambda lib: lib.tensor([True, False]).bernoulli(0.5),
                 lambda lib: lib.full((2, 3), 0.5, dtype=lib.float64).bernoulli(),
                 lambda lib: lib.zeros(4).bernoulli_(0.5),
                 lambda lib: lib.zeros(2, 3).bernoulli_(lib.full((3,), 0.5, dtype=lib.float64))):
        got, want = make(gg), make(torch)
        assert tuple(got.shape) == tuple(want.shape)
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    z = gg.zeros(n).bernoulli_(gg.tensor([0.0, 1.0]).repeat(n // 2))
    assert z.numpy()[::2].sum() == 0 and z.numpy()[1::2].sum() == n // 2


@pytest.mark.parametrize("make", [
    lambda lib: lib.bernoulli(lib.tensor([2.0])),
    lambda lib: lib.bernoulli(lib.tensor([-0.5, 0.5])),
    lambda lib: lib.bernoulli(lib.tensor([1, 0])),
    lambda lib: lib.bernoulli(lib.tensor([0.5]), 2.0),
    lambda lib: lib.bernoulli(lib.tensor([0.5]), p=lib.tensor([0.2])),
    lambda lib: lib.tensor([0.5]).bernoulli_(1.5),
    lambda lib: lib.tensor([0.5, 0.5]).bernoulli_(lib.tensor([0.2, 2.0])),
    lambda lib: lib.tensor([0.5, 0.5]).bernoulli_(lib.tensor([1, 0])),
])
def test_bernoulli_errors(make):
    both_raise(make)


def test_bernoulli_gradients_as_torch():
    for lib in (gg, torch):
        p = lib.full((3,), 0.5, dtype=lib.float64, requires_grad=True)
        out = lib.bernoulli(p)
        assert out.requires_grad
        (g,) = lib.autograd.grad(out.sum(), [p], create_graph=True)
        assert g.tolist() == [0.0, 0.0, 0.0] and not g.requires_grad
        fixed = lib.bernoulli(p, 0.3)
        assert fixed.requires_grad
        with pytest.raises(RuntimeError, match="derivative for aten::bernoulli is not "
                                               "implemented"):
            fixed.sum().backward()
        q = p * 1
        q.bernoulli_(0.5)
        q.sum().backward()
        assert p.grad.tolist() == [0.0, 0.0, 0.0]
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            p.bernoulli_(0.5)


# ---- multinomial ----------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda lib: lib.multinomial(lib.zeros(3), 1),
    lambda lib: lib.multinomial(lib.zeros(3), 1, True),
    lambda lib: lib.multinomial(lib.tensor([1.0, -1, 2]), 1),
    lambda lib: lib.multinomial(lib.tensor([1.0, -1, 2]), 1, True),
    lambda lib: lib.multinomial(lib.tensor([1.0, float("inf"), 2]), 1),
    lambda lib: lib.multinomial(lib.tensor([1.0, float("nan"), 2]), 1, True),
    lambda lib: lib.multinomial(lib.tensor([1.0, 1, 2]), 4),
    lambda lib: lib.multinomial(lib.tensor([1.0, 1, 2]), 0),
    lambda lib: lib.multinomial(lib.tensor([1.0, 1, 2]), -1, True),
    lambda lib: lib.multinomial(lib.tensor(1.0), 1),
    lambda lib: lib.multinomial(lib.ones(2, 2, 2), 1),
    lambda lib: lib.multinomial(lib.tensor([1, 2]), 1),
    lambda lib: lib.multinomial(lib.tensor([[1.0, 2], [0, 0]]), 1),
    lambda lib: lib.multinomial(lib.tensor([[1.0, 2], [0, -1]]), 1, True),
    lambda lib: lib.multinomial(lib.ones(2, 0), 2),
    lambda lib: lib.multinomial(lib.ones(3), 2.0),
    lambda lib: lib.multinomial(lib.ones(3), True),
])
def test_multinomial_errors(make):
    both_raise(make)


def test_multinomial_shapes_and_flags():
    for make in (lambda lib: lib.multinomial(lib.tensor([1.0, 0, 2]), 3),
                 lambda lib: lib.multinomial(lib.ones(2, 3, dtype=lib.float64), 2),
                 lambda lib: lib.multinomial(lib.ones(3), 5, True),
                 lambda lib: lib.multinomial(lib.ones(0, 3), 2),
                 lambda lib: lib.ones(3, requires_grad=True).multinomial(2, replacement=True),
                 lambda lib: lib.ones(4, 3).multinomial(7, True)):
        got, want = make(gg), make(torch)
        assert tuple(got.shape) == tuple(want.shape)
        assert got.dtype == gg.int64 and not got.requires_grad and got.grad_fn is None


def test_multinomial_with_replacement_distribution():
    gg.manual_seed(2)
    probs = np.array([[0.1, 0.0, 0.2, 0.3, 0.4], [5.0, 1.0, 1.0, 1.0, 0.0]])
    draws = gg.multinomial(gg.tensor(probs), 50_000, True).numpy()
    for row, p in zip(draws, probs, strict=True):
        assert chi2(np.bincount(row, minlength=5), p) < CHI2_LIMIT
    g = gg.Generator().manual_seed(5)
    a = gg.multinomial(gg.tensor(probs), 10, True, generator=g)
    b = gg.multinomial(gg.tensor(probs), 10, True, generator=gg.Generator().manual_seed(5))
    assert a.tolist() == b.tolist()


def test_multinomial_without_replacement():
    gg.manual_seed(3)
    p = np.array([0.5, 0.0, 0.25, 0.125, 0.125])
    rows = gg.multinomial(gg.tensor(p).expand(20_000, 5), 4).numpy()
    assert all(len(set(r)) == 4 for r in rows[:500])         # never an index twice
    assert (rows != 1).all()                                  # zero probability: never drawn
    assert chi2(np.bincount(rows[:, 0], minlength=5), p) < CHI2_LIMIT  # first draw ~ p
    # the second draw follows p with the first one removed: P(second = 0) in closed form
    second0 = sum(p[j] * p[0] / (1 - p[j]) for j in (2, 3, 4))
    n = rows.shape[0]
    assert abs((rows[:, 1] == 0).mean() - second0) < 6 * np.sqrt(second0 * (1 - second0) / n)
    full = gg.multinomial(gg.tensor([1.0, 0.0, 2.0]), 3).tolist()
    assert sorted(full[:2]) == [0, 2] and full[2] == 1  # zero weight last, as torch
    single = gg.multinomial(gg.tensor(p), 1)
    assert tuple(single.shape) == (1,)


# ---- vmap and capture -----------------------------------------------------------------


SAMPLERS = [
    lambda x: gg.normal(x, 1.0),
    lambda x: gg.bernoulli(x * 0 + 0.5),
    lambda x: gg.multinomial(x.abs() + 0.1, 2),
    lambda x: gg.multinomial(x.abs() + 0.1, 3, True),
]


@pytest.mark.parametrize("k", range(len(SAMPLERS)))
def test_vmap_randomness_flags(k):
    f = SAMPLERS[k]
    x = gg.tensor(np.random.default_rng(0).standard_normal((6, 4)))
    with pytest.raises(RuntimeError, match="randomness error mode"):
        F.vmap(f)(x)
    with pytest.raises(RuntimeError) as info:
        F.vmap(f, randomness="same")(x)
    assert str(info.value) == ("Vmap does not currently support same randomness with a "
                               "batched tensor input. Please file an issue with functorch")
    out = F.vmap(f, randomness="different")(x).numpy()
    assert out.shape[0] == 6 and len({r.tobytes() for r in out}) > 1
    same = F.vmap(lambda x: gg.normal(0.0, 1.0, (3,)) + x[:3] * 0, randomness="same")(x)
    assert np.all(same.numpy() == same.numpy()[0])


def test_vmap_different_normal_statistics():
    gg.manual_seed(6)
    means = gg.tensor([0.0, 10.0], dtype=gg.float64)
    out = F.vmap(lambda m: gg.normal(m.expand(20_000), 2.0), randomness="different")(means)
    assert np.all(np.abs(out.numpy().mean(1) - [0.0, 10.0]) < 6 * 2 / np.sqrt(20_000))


def test_jit_trace_draws_fresh_samples():
    def f(x):
        return x * 2 + gg.normal(gg.zeros_like(x), 0.5)

    x = gg.tensor(np.ones((3, 4)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = gg.jit.trace(f, (x,))
    assert traced(x).tolist() != traced(x).tolist()
    gg.manual_seed(9)
    got = traced(x).tolist()
    gg.manual_seed(9)
    assert got == f(x).tolist()
