"""``graphgrad.nn.utils`` against PyTorch: gradient clipping (by norm and by value,
edge cases, training with clipping), parameters to a vector and back; and a CNN with
batch norm, clipping and hooks that trains like PyTorch's."""


from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import backward_both, close, copy_weights, rand, twin_models

import graphgrad as gg
from graphgrad import nn


# ---- nn.utils -----------------------------------------------------------------------------
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3, float("inf"), "inf"])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    g, t = twin_models()
    backward_both(g, t, scale=3.0)
    tn_g = nn.utils.clip_grad_norm_(g.parameters(), max_norm, norm_type)
    tn_t = torch.nn.utils.clip_grad_norm_(t.parameters(), max_norm, norm_type)
    assert isinstance(tn_g, gg.Tensor) and tn_g.ndim == 0
    close(tn_g, tn_t)
    for pg, pt in zip(g.parameters(), t.parameters(), strict=True):
        close(pg.grad, pt.grad)
    if max_norm == 1e6:  # not clipped: the coefficient is clamped to 1, grads unchanged
        assert float(tn_g) < max_norm


def test_clip_grad_norm_edge_cases_match_torch():
    # a single tensor, no gradients (norm 0 as a float32 scalar), parameters without grads
    p = nn.Parameter(gg.tensor([3.0, 4.0]))
    p.grad = gg.tensor([3.0, 4.0])
    tp = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    tp.grad = torch.tensor([3.0, 4.0])
    assert float(nn.utils.clip_grad_norm_(p, 1.0)) == 5.0
    torch.nn.utils.clip_grad_norm_(tp, 1.0)
    assert p.grad.dtype == gg.float32
    close(p.grad, tp.grad, 1e-6, 1e-7)
    empty = nn.utils.clip_grad_norm_([nn.Parameter(gg.ones(2))], 1.0)
    assert float(empty) == 0.0 and empty.dtype == gg.float32
    with pytest.warns(UserWarning, match="empty generator"):
        nn.utils.clip_grad_norm_((q for q in []), 1.0)
    # a non-finite norm: an error when asked for, else the gradients scale by it (nan)
    q = nn.Parameter(gg.ones(2))
    q.grad = gg.tensor([float("inf"), 1.0])
    tq = torch.nn.Parameter(torch.ones(2))
    tq.grad = torch.tensor([float("inf"), 1.0])
    for lib, param in ((nn.utils, q), (torch.nn.utils, tq)):
        with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
            lib.clip_grad_norm_(param, 1.0, error_if_nonfinite=True)
    nn.utils.clip_grad_norm_(q, 1.0)
    torch.nn.utils.clip_grad_norm_(tq, 1.0)
    close(q.grad, tq.grad)
    with pytest.warns(FutureWarning, match="clip_grad_norm_"):
        nn.utils.clip_grad_norm(q, 1.0)


def test_total_norm_and_clip_with_norm_split_as_torch():
    g, t = twin_models()
    backward_both(g, t, scale=2.0)
    grads_g = [p.grad for p in g.parameters()]
    grads_t = [p.grad for p in t.parameters()]
    n_g = nn.utils.get_total_norm(grads_g, 3.0)
    n_t = torch.nn.utils.get_total_norm(grads_t, 3.0)
    close(n_g, n_t)
    nn.utils.clip_grads_with_norm_(g.parameters(), 0.1, n_g)
    torch.nn.utils.clip_grads_with_norm_(t.parameters(), 0.1, n_t)
    for pg, pt in zip(g.parameters(), t.parameters(), strict=True):
        close(pg.grad, pt.grad)


def test_clip_grad_value_matches_torch():
    g, t = twin_models()
    backward_both(g, t, scale=3.0)
    assert nn.utils.clip_grad_value_(g.parameters(), 0.25) is None
    torch.nn.utils.clip_grad_value_(t.parameters(), 0.25)
    for pg, pt in zip(g.parameters(), t.parameters(), strict=True):
        close(pg.grad, pt.grad)
        assert float(pg.grad.abs().max()) <= 0.25


def test_clipped_training_follows_torch():
    """SGD with clipping for a few steps: the weights stay equal to PyTorch's."""
    g, t = twin_models(seed=3)
    opt_g = gg.optim.SGD(g.parameters(), lr=0.1)
    opt_t = torch.optim.SGD(t.parameters(), lr=0.1)
    for step in range(5):
        opt_g.zero_grad()
        opt_t.zero_grad()
        backward_both(g, t, scale=4.0, seed=step)
        nn.utils.clip_grad_norm_(g.parameters(), 1.0)
        torch.nn.utils.clip_grad_norm_(t.parameters(), 1.0)
        opt_g.step()
        opt_t.step()
    for pg, pt in zip(g.parameters(), t.parameters(), strict=True):
        close(pg, pt, 1e-9, 1e-11)


def test_parameters_to_vector_and_back():
    g, t = twin_models()
    vg = nn.utils.parameters_to_vector(g.parameters())
    vt = torch.nn.utils.parameters_to_vector(t.parameters())
    close(vg, vt)
    # differentiable: the gradient of a function of the vector reaches every parameter
    (vg * vg).sum().backward()
    for p in g.parameters():
        close(p.grad, 2 * p.detach().numpy())
    new = rand(vg.shape[0], seed=5)
    nn.utils.vector_to_parameters(gg.tensor(new), g.parameters())
    torch.nn.utils.vector_to_parameters(torch.tensor(new), t.parameters())
    for pg, pt in zip(g.parameters(), t.parameters(), strict=True):
        close(pg, pt)
        assert isinstance(pg, nn.Parameter) and pg.requires_grad
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        nn.utils.vector_to_parameters([1.0], g.parameters())


# ---- end to end ---------------------------------------------------------------------------
def test_cnn_with_batchnorm_clipping_and_hooks_trains_like_torch():
    """A small CNN (conv, batch norm, ReLU, adaptive pooling, dropout off, linear) trained
    for a few SGD steps with gradient clipping and a forward hook, in both libraries:
    weights, running statistics and losses stay equal."""
    def make(lib):
        return lib.nn.Sequential(lib.nn.Conv2d(1, 4, 3, padding=1), lib.nn.BatchNorm2d(4),
                                 lib.nn.ReLU(), lib.nn.AdaptiveAvgPool2d(2), lib.nn.Flatten(),
                                 lib.nn.Dropout(0.0), lib.nn.Linear(16, 3)).double()

    torch.manual_seed(0)
    t_mod, g_mod = make(torch), make(gg)
    copy_weights(g_mod, t_mod)
    seen = {"gg": 0, "torch": 0}
    g_mod[1].register_forward_hook(lambda m, a, o: seen.__setitem__("gg", seen["gg"] + 1))
    t_mod[1].register_forward_hook(lambda m, a, o: seen.__setitem__("torch", seen["torch"] + 1))
    opt_g = gg.optim.SGD(g_mod.parameters(), lr=0.2, momentum=0.9)
    opt_t = torch.optim.SGD(t_mod.parameters(), lr=0.2, momentum=0.9)
    for step in range(4):
        x = rand(6, 1, 5, 5, seed=step)
        y = np.random.default_rng(step).integers(0, 3, 6)
        losses = []
        for lib, mod, opt in ((gg, g_mod, opt_g), (torch, t_mod, opt_t)):
            opt.zero_grad()
            loss = lib.nn.functional.cross_entropy(mod(lib.tensor(x)), lib.tensor(y))
            loss.backward()
            lib.nn.utils.clip_grad_norm_(mod.parameters(), 0.5)
            opt.step()
            losses.append(float(loss))
        assert losses[0] == pytest.approx(losses[1], rel=1e-10)
    assert seen["gg"] == seen["torch"] == 4
    t_state = t_mod.state_dict()
    for k, v in g_mod.state_dict().items():
        close(v, t_state[k], 1e-9, 1e-11)
    g_mod.eval()
    t_mod.eval()
    x = rand(2, 1, 5, 5, seed=9)
    close(g_mod(gg.tensor(x)), t_mod(torch.tensor(x)), 1e-9, 1e-11)
