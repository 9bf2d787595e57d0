"""Loss functions against PyTorch: values and gradients for every reduction, the
training case of cross entropy as one op, edge cases (all targets ignored,
zero weights, saturated probabilities), the legacy size_average/reduce flags,
distances, and the error messages in PyTorch's wording."""


from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from helpers import ATOL, RTOL, close, rand

import graphgrad as gg
from graphgrad import nn
from graphgrad.nn import functional as F
from graphgrad.ops.nll import NllLoss


def _under_interpreter(fn):
    """Run ``fn`` with a pass-through interpreter on the dispatch stack, as under a
    tracer."""
    from graphgrad.tensor import Mode, dispatch, pop_mode, push_mode

    class PassThrough(Mode):
        def process(self, op, args, params):
            with self.lowered():
                return dispatch(op, args, params)
    interp = PassThrough()
    push_mode(interp)
    try:
        return fn()
    finally:
        pop_mode(interp)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cross_entropy_training_case_is_one_op(dtype):
    """Class indices, mean, nothing weighted or ignored: one CrossEntropy op (shown as
    PyTorch's NllLossBackward0), eagerly and under an interpreter, with the loss,
    gradient and Hessian-vector product of log_softmax then the general gather path of
    nll_loss and of PyTorch."""
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((6, 4)).astype(dtype)
    t = gg.tensor(rng.integers(0, 4, 6))
    v0 = rng.standard_normal((6, 4)).astype(dtype)
    v = gg.tensor(v0)

    def run(loss_fn):
        x = gg.tensor(x0, requires_grad=True)
        loss = loss_fn(x)
        (g,) = gg.autograd.grad(loss, x, create_graph=True)
        (hv,) = gg.autograd.grad((g * v).sum(), x)
        return loss, g, hv
    plain = run(lambda x: F.cross_entropy(x, t))
    traced = _under_interpreter(lambda: run(lambda x: F.cross_entropy(x, t)))
    general = run(lambda x: F.nll_loss(x.log_softmax(1), t, reduction="sum") / 6)  # a gather
    assert repr(plain[0].grad_fn).startswith("<NllLossBackward0")
    assert repr(traced[0].grad_fn).startswith("<NllLossBackward0")
    assert not repr(general[0].grad_fn).startswith("<NllLossBackward0")
    tol = 1e-6 if dtype == "float32" else 1e-14
    for other in (traced, general):
        for a, b in zip(plain, other, strict=True):
            assert a.dtype == b.dtype == getattr(gg, dtype)
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol,
                                       atol=tol)
    tx = torch.tensor(x0, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(tx, torch.tensor(t.numpy()))
    (tg,) = torch.autograd.grad(loss, tx, create_graph=True)
    (thv,) = torch.autograd.grad((tg * torch.tensor(v0)).sum(), tx)
    for a, b in zip(plain, (loss, tg, thv), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def test_nll_loss_training_case_errors():
    """The one-op path checks what the general path checks, with the same words."""
    logp = gg.tensor(np.log(np.full((3, 4), 0.25)), requires_grad=True)
    with pytest.raises(IndexError, match="Target 4 is out of bounds"):
        F.nll_loss(logp, gg.tensor([0, 4, 1]))
    with pytest.raises(IndexError, match="Target -2 is out of bounds"):
        F.nll_loss(logp, gg.tensor([0, -2, 1]))
    with pytest.raises(RuntimeError, match="integer dtype"):
        NllLoss.apply(logp, gg.tensor([0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match=r"target of shape \(3,\)"):
        NllLoss.apply(logp, gg.tensor([0, 1]))
    assert np.isnan(F.nll_loss(gg.zeros(0, 4), gg.zeros(0, dtype=gg.int64)).item())


LOSSES = [
    ("mse", lambda m: m.MSELoss(), "float"),
    ("mse_sum", lambda m: m.MSELoss(reduction="sum"), "float"),
    ("l1", lambda m: m.L1Loss(), "float"),
    ("huber", lambda m: m.HuberLoss(delta=0.5), "float"),
    ("cross_entropy", lambda m: m.CrossEntropyLoss(), "class"),
    ("cross_entropy_smooth", lambda m: m.CrossEntropyLoss(label_smoothing=0.1), "class"),
    ("cross_entropy_none", lambda m: m.CrossEntropyLoss(reduction="none"), "class"),
    ("nll", lambda m: m.NLLLoss(), "class"),
    ("bce_logits", lambda m: m.BCEWithLogitsLoss(), "binary"),
]


@pytest.mark.parametrize("name,make,kind", LOSSES, ids=[c[0] for c in LOSSES])
def test_loss_matches_torch(name, make, kind):
    x = rand(6, 4)
    if kind == "float":
        target = rand(6, 4, seed=3)
    elif kind == "class":
        target = np.array([0, 3, 1, 1, 2, 0])
    else:
        target = (rand(6, 4, seed=3) > 0).astype(np.float64)
    gx, tx = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    lg, lt = make(nn)(gx, gg.tensor(target)), make(torch.nn)(tx, torch.tensor(target))
    np.testing.assert_allclose(lg.detach().numpy(), lt.detach().numpy(), RTOL, ATOL)
    lg.sum().backward()
    lt.sum().backward()
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), RTOL, ATOL)


def _loss_and_grad(lib, fn, x0, rest):
    x = lib.tensor(x0, requires_grad=True)
    loss = fn(lib.nn.functional, x, *rest(lib))
    loss.backward()
    return loss.item(), x.grad.tolist()


@pytest.mark.parametrize("name", ["all_ignored", "all_ignored_smoothing", "zero_weights",
                                  "smooth_l1_beta0", "embedding_padding"])
def test_loss_edge_cases_match_torch(name):
    """All targets ignored: nan loss, zero gradient (zero class weights: nan gradient, as in
    PyTorch); smooth_l1 with beta 0 is L1; an embedding's padding row keeps its values
    and gets no gradient."""
    x0 = np.array([[1.0, 2.0], [3.0, 4.0], [0.5, -1.0]])
    cases = {
        "all_ignored": (lambda fn_, x, t: fn_.cross_entropy(x, t),
                        lambda m: (m.tensor([-100, -100, -100]),)),
        "all_ignored_smoothing": (lambda fn_, x, t: fn_.cross_entropy(x, t, label_smoothing=0.1),
                                  lambda m: (m.tensor([-100, -100, -100]),)),
        "zero_weights": (lambda fn_, x, t, w: fn_.cross_entropy(x, t, weight=w),
                         lambda m: (m.tensor([0, 1, 1]),
                                    m.tensor([0.0, 0.0], dtype=m.float64))),
        "smooth_l1_beta0": (lambda fn_, x, t: fn_.smooth_l1_loss(x, t, beta=0.0),
                            lambda m: (m.tensor(np.zeros((3, 2))),)),
        "embedding_padding": (lambda fn_, w, i: (fn_.embedding(i, w, padding_idx=0)
                                               * (w.detach() + 1)[i]).sum(),
                              lambda m: (m.tensor([0, 1, 0, 2]),)),
    }
    fn, rest = cases[name]
    with np.errstate(all="ignore"):
        got = _loss_and_grad(gg, fn, x0, rest)
    want = _loss_and_grad(torch, fn, x0, rest)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, equal_nan=True)


def test_loss_parameter_errors_use_torch_wording():
    for lib in (torch, gg):
        F = lib.nn.functional
        with pytest.raises(RuntimeError, match="does not support negative values for beta"):
            F.smooth_l1_loss(lib.ones(2), lib.zeros(2), beta=-1.0)
        with pytest.raises(RuntimeError, match="non-positive values for delta"):
            F.huber_loss(lib.ones(2), lib.zeros(2), delta=0.0)


def test_legacy_size_average_and_reduce_flags_set_the_reduction():
    """PyTorch still honours size_average/reduce (with a deprecation warning): sum or
    per-element losses, not a silently different mean."""
    import warnings
    outs = []
    for lib in (torch, gg):
        a, b = lib.tensor([1.0, 2.0, 3.0]), lib.zeros(3)
        logits, t = lib.tensor([[1.0, 2.0], [0.5, -1.0]]), lib.tensor([0, 1])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            vals = [lib.nn.MSELoss(size_average=False)(a, b),
                    lib.nn.functional.mse_loss(a, b, size_average=False),
                    lib.nn.L1Loss(reduce=False)(a, b),
                    lib.nn.CrossEntropyLoss(size_average=False)(logits, t),
                    lib.nn.functional.nll_loss(logits.log_softmax(1), t, reduce=False),
                    lib.nn.BCEWithLogitsLoss(size_average=False)(a, b),
                    lib.nn.SmoothL1Loss(size_average=False)(a, b)]
        outs.append(([np.asarray(v.tolist()) for v in vals],
                     sorted({str(w.message) for w in caught})))
    for got, want in zip(outs[1][0], outs[0][0], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert outs[0][1] == outs[1][1]


def test_binary_cross_entropy_at_saturated_probabilities_has_torch_gradients():
    """p exactly 0 or 1 (a float32 sigmoid of a large logit): PyTorch's finite gradient
    (p - t) / max(p (1 - p), 1e-12), not 0 * inf = nan; one BinaryCrossEntropy op."""
    outs = []
    for lib in (torch, gg):
        p = lib.tensor([0.0, 1.0, 0.5, 0.3], dtype=lib.float64, requires_grad=True)
        t = lib.tensor([1.0, 0.0, 1.0, 0.2], dtype=lib.float64)
        loss = lib.nn.functional.binary_cross_entropy(p, t)
        loss.backward()
        outs.append((loss.item(), p.grad.numpy()))
    np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-12)
    np.testing.assert_allclose(outs[1][1], outs[0][1], rtol=1e-12)


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "none", "mean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(reduction, log_target):
    logp = np.log(np.random.default_rng(0).dirichlet(np.ones(5), size=4))
    q = np.random.default_rng(1).dirichlet(np.ones(5), size=4)
    q[0, 1] = 0.0  # 0 log 0 = 0
    target = np.log(q + 1e-3) if log_target else q
    gi, ti = gg.tensor(logp, requires_grad=True), torch.tensor(logp, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out_g = nn.KLDivLoss(reduction=reduction, log_target=log_target)(gi, gg.tensor(target))
    assert any("'batchmean' divides only by the batch size" in str(w.message)
               for w in caught) == (reduction == "mean")
    out_t = torch.nn.KLDivLoss(reduction=reduction, log_target=log_target)(
        ti, torch.tensor(target))
    close(out_g, out_t)
    (out_g * gg.tensor(rand(*out_t.shape))).sum().backward()
    (out_t * torch.tensor(rand(*out_t.shape))).sum().backward()
    close(gi.grad, ti.grad)


# ---- more losses and distances ------------------------------------------------------------
def _signs(*shape, seed=0):
    return np.where(np.random.default_rng(seed).random(shape) < 0.5, -1.0, 1.0)


MORE_LOSSES = [
    # name, module factory, arrays (differentiable ones first), number differentiable
    ("margin_ranking", lambda m, r: m.MarginRankingLoss(0.3, reduction=r),
     lambda: [rand(6), rand(6, seed=1), _signs(6)], 2),
    ("hinge_embedding", lambda m, r: m.HingeEmbeddingLoss(0.8, reduction=r),
     lambda: [rand(4, 3), _signs(4, 3)], 1),
    ("soft_margin", lambda m, r: m.SoftMarginLoss(reduction=r),
     lambda: [rand(4, 3), _signs(4, 3)], 1),
    ("cosine_embedding", lambda m, r: m.CosineEmbeddingLoss(0.1, reduction=r),
     lambda: [rand(5, 4), rand(5, 4, seed=1), _signs(5)], 2),
    ("multilabel_soft_margin", lambda m, r: m.MultiLabelSoftMarginLoss(reduction=r),
     lambda: [rand(4, 3), (np.random.default_rng(2).random((4, 3)) < 0.5) * 1.0], 1),
    ("poisson_nll", lambda m, r: m.PoissonNLLLoss(reduction=r),
     lambda: [rand(4, 3), np.random.default_rng(3).poisson(2.0, (4, 3)) * 1.0], 1),
    ("poisson_nll_full_rate", lambda m, r: m.PoissonNLLLoss(False, True, reduction=r),
     lambda: [np.abs(rand(4, 3)) + 0.1, np.random.default_rng(3).poisson(2.0, (4, 3)) * 1.0],
     1),
    ("gaussian_nll", lambda m, r: m.GaussianNLLLoss(reduction=r),
     lambda: [rand(4, 3), np.abs(rand(4, 3, seed=2)) + 1e-7, rand(4, 3, seed=1)], 2),
    ("gaussian_nll_full_hetero", lambda m, r: m.GaussianNLLLoss(full=True, reduction=r),
     lambda: [rand(4, 3), np.abs(rand(4, 1, seed=2)) + 0.1, rand(4, 3, seed=1)], 2),
    ("triplet", lambda m, r: m.TripletMarginLoss(0.5, reduction=r),
     lambda: [rand(5, 4), rand(5, 4, seed=1), rand(5, 4, seed=2)], 3),
    ("triplet_swap_p1", lambda m, r: m.TripletMarginLoss(2.0, p=1, swap=True, reduction=r),
     lambda: [rand(5, 4), rand(5, 4, seed=1), rand(5, 4, seed=2)], 3),
]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name,make,arrays,n_diff", MORE_LOSSES, ids=[x[0] for x in MORE_LOSSES])
def test_more_losses_match_torch(name, make, arrays, n_diff, reduction):
    arrs = arrays()
    results = []
    for lib in (gg, torch):
        ts = [lib.tensor(a, requires_grad=i < n_diff) for i, a in enumerate(arrs)]
        if name.startswith("gaussian"):  # forward(input, target, var): var is the 2nd array
            ts = [ts[0], ts[2], ts[1]]
        out = make(lib.nn, reduction)(*ts)
        (out * lib.tensor(rand(*out.shape, seed=7))).sum().backward()
        results.append([out] + [t.grad for t in ts if t.requires_grad])
    for a, b in zip(*results, strict=True):
        close(a, b)


def test_pairwise_distance_and_loss_errors_match_torch():
    a, b = rand(4, 5), rand(4, 5, seed=1)
    for keepdim in (False, True):
        both_out = [lib.nn.PairwiseDistance(3.0, keepdim=keepdim)(lib.tensor(a), lib.tensor(b))
                    for lib in (gg, torch)]
        close(*both_out)
    close(F.pairwise_distance(gg.tensor(a), gg.tensor(a)),
          torch.nn.functional.pairwise_distance(torch.tensor(a), torch.tensor(a)))
    for lib in (gg, torch):
        with pytest.raises(ValueError, match="expected margin to be greater than 0"):
            lib.nn.TripletMarginLoss(margin=0)
        with pytest.raises(ValueError, match="var has negative entry/entries"):
            lib.nn.functional.gaussian_nll_loss(lib.ones(2), lib.ones(2), -lib.ones(2))
        with pytest.raises(ValueError, match="var is of incorrect size"):
            lib.nn.functional.gaussian_nll_loss(lib.ones(2, 3), lib.ones(2, 3), lib.ones(3, 2))


@pytest.mark.parametrize("kw, error, words", [
    ({"label_smoothing": 1.5}, RuntimeError, "label_smoothing must be between 0.0 and 1.0"),
    ({"reduction": "bad"}, ValueError, "bad is not a valid value for reduction"),
    ({"weight": 5}, RuntimeError, "weight tensor should be defined either for all 4 classes"),
    ({"target": [0, 4, 1]}, IndexError, "Target 4 is out of bounds"),
])
def test_cross_entropy_errors_use_torch_wording(kw, error, words):
    """The one-op path (class indices) refuses what PyTorch refuses, with its words."""
    for lib in (torch, gg):
        args = dict(kw)
        target = lib.tensor(args.pop("target", [0, 1, 2]))
        if "weight" in args:
            args["weight"] = lib.ones(args["weight"])
        with pytest.raises(error, match=words):
            lib.nn.functional.cross_entropy(lib.zeros(3, 4), target, **args)
