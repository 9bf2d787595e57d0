"""graphgrad.nn against PyTorch, part two: nn.utils (gradient clipping, parameter
vectors), batch and group normalisation (running statistics, train/eval, second
derivatives), module hooks, parameter containers, and the smaller layers and functions
(Dropout2d, AdaptiveAvgPool2d, cosine_similarity, kl_div)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad import nn
from graphgrad.nn import functional as F

RTOL, ATOL = 1e-10, 1e-12


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def close(a, b, rtol=RTOL, atol=ATOL):
    a = a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)
    b = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol, atol)


def copy_weights(gg_mod, t_mod) -> None:
    state = {k: gg.tensor(v.detach().numpy().copy()) for k, v in t_mod.state_dict().items()}
    gg_mod.load_state_dict(state)


def twin_models(seed=0):
    """A graphgrad and a torch MLP with equal float64 weights."""
    torch.manual_seed(seed)
    t = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(),
                            torch.nn.Linear(5, 3)).double()
    g = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)).double()
    copy_weights(g, t)
    return g, t


def backward_both(g, t, scale=1.0, seed=0):
    x = rand(6, 4, seed=seed) * scale
    (g(gg.tensor(x)) ** 2).sum().backward()
    (t(torch.tensor(x)) ** 2).sum().backward()


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


# ---- batch and group normalisation --------------------------------------------------------
def random_affine(t_mod, seed=7):
    """Non-trivial weight and bias, so a wrong broadcast would show."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in t_mod.parameters():
            p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape))))


def twin_layers(make):
    """``make(torch.nn)`` and ``make(graphgrad.nn)`` in float64 with equal random affine
    parameters; they print the same."""
    t_mod, g_mod = make(torch.nn).double(), make(nn).double()
    random_affine(t_mod)
    copy_weights(g_mod, t_mod)
    assert repr(g_mod) == repr(t_mod)
    return g_mod, t_mod


def step_both(g_mod, t_mod, x, seed=1, grad_rtol=RTOL):
    """One forward and backward of sum(out * r); compares everything that came out."""
    gx = gg.tensor(x, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    out_g, out_t = g_mod(gx), t_mod(tx)
    close(out_g, out_t)
    r = rand(*out_t.shape, seed=seed)
    (out_g * gg.tensor(r)).sum().backward()
    (out_t * torch.tensor(r)).sum().backward()
    close(gx.grad, tx.grad, grad_rtol)
    t_params = dict(t_mod.named_parameters())
    for name, p in g_mod.named_parameters():
        close(p.grad, t_params[name].grad)
    t_buffers = dict(t_mod.named_buffers())
    assert set(t_buffers) == {k for k, _ in g_mod.named_buffers()}
    for name, b in g_mod.named_buffers():
        close(b, t_buffers[name])
        assert b.dtype.name.replace("graphgrad.", "") == str(t_buffers[name].dtype)[6:]


BATCHNORMS = [
    ("bn1d", lambda m: m.BatchNorm1d(3), (8, 3)),
    ("bn1d_3d", lambda m: m.BatchNorm1d(3), (4, 3, 5)),
    ("bn2d", lambda m: m.BatchNorm2d(2), (3, 2, 4, 5)),
    ("bn2d_momentum", lambda m: m.BatchNorm2d(2, momentum=0.3, eps=1e-3), (2, 2, 3, 3)),
    ("bn2d_cumulative", lambda m: m.BatchNorm2d(2, momentum=None), (2, 2, 3, 3)),
    ("bn1d_no_affine", lambda m: m.BatchNorm1d(3, affine=False), (5, 3)),
    ("bn1d_no_bias", lambda m: m.BatchNorm1d(3, bias=False), (5, 3)),
    ("bn2d_untracked", lambda m: m.BatchNorm2d(2, track_running_stats=False), (2, 2, 3, 3)),
    ("bn3d", lambda m: m.BatchNorm3d(2), (2, 2, 3, 2, 2)),
    ("in1d", lambda m: m.InstanceNorm1d(3), (2, 3, 5)),
    ("in2d_affine_tracked", lambda m: m.InstanceNorm2d(2, affine=True,
                                                       track_running_stats=True), (3, 2, 3, 3)),
    ("in2d_unbatched", lambda m: m.InstanceNorm2d(2, momentum=0.3, track_running_stats=True),
     (2, 3, 3)),
]


@pytest.mark.parametrize("name,make,shape", BATCHNORMS, ids=[b[0] for b in BATCHNORMS])
def test_batchnorm_train_then_eval_matches_torch(name, make, shape):
    g_mod, t_mod = twin_layers(make)
    for step in range(3):  # the running statistics move the same way, step by step
        step_both(g_mod, t_mod, rand(*shape, seed=step) * 2 + 1, seed=step)
        g_mod.zero_grad()
        t_mod.zero_grad()
    g_mod.eval()
    t_mod.eval()
    step_both(g_mod, t_mod, rand(*shape, seed=10))


def test_batchnorm_second_derivatives_match_torch():
    """d/dx and d/dweight of |d out/dx|^2: batch norm is made of differentiable ops."""
    g_mod, t_mod = twin_layers(lambda m: m.BatchNorm2d(2))
    x = rand(3, 2, 2, 3, seed=4)
    r = rand(3, 2, 2, 3, seed=5)
    gx, tx = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (dg,) = gg.autograd.grad((g_mod(gx) * gg.tensor(r)).sum(), gx, create_graph=True)
    (dt,) = torch.autograd.grad((t_mod(tx) * torch.tensor(r)).sum(), tx, create_graph=True)
    close(dg, dt)
    hg = gg.autograd.grad((dg ** 2).sum(), [gx, g_mod.weight])
    ht = torch.autograd.grad((dt ** 2).sum(), [tx, t_mod.weight])
    for a, b in zip(hg, ht, strict=True):
        close(a, b, 1e-9, 1e-11)


def test_functional_batch_norm_matches_torch():
    x = rand(6, 3, 2)
    w, b = rand(3, seed=1), rand(3, seed=2)
    rm_g, rv_g = gg.zeros(3, dtype=gg.float64), gg.ones(3, dtype=gg.float64)
    rm_t, rv_t = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    out_g = F.batch_norm(gg.tensor(x), rm_g, rv_g, gg.tensor(w), gg.tensor(b), True, 0.2)
    out_t = torch.nn.functional.batch_norm(torch.tensor(x), rm_t, rv_t, torch.tensor(w),
                                           torch.tensor(b), True, 0.2)
    close(out_g, out_t)
    close(rm_g, rm_t)
    close(rv_g, rv_t)
    # eval with the running statistics; training with none (batch statistics only)
    close(F.batch_norm(gg.tensor(x), rm_g, rv_g),
          torch.nn.functional.batch_norm(torch.tensor(x), rm_t, rv_t))
    close(F.batch_norm(gg.tensor(x), None, None, training=True),
          torch.nn.functional.batch_norm(torch.tensor(x), None, None, training=True))


def test_batchnorm_errors_use_torch_wording():
    with pytest.raises(RuntimeError, match="running_mean must be defined in evaluation mode"):
        F.batch_norm(gg.randn(4, 3), None, None, training=False)
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when "
                       r"training, got input size graphgrad.Size\(\[1, 3\]\)"):
        nn.BatchNorm1d(3)(gg.randn(1, 3))
    with pytest.raises(RuntimeError, match="running_mean should contain 3 elements not 4"):
        F.batch_norm(gg.randn(2, 3), gg.zeros(4), gg.ones(4), training=True)
    with pytest.raises(RuntimeError, match="weight should contain 3 elements not 4"):
        F.batch_norm(gg.randn(2, 3), gg.zeros(3), gg.ones(3), gg.ones(4), training=True)
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(gg.randn(2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        nn.BatchNorm2d(3)(gg.randn(2, 3, 4))
    nn.BatchNorm1d(3).eval()(gg.randn(1, 3))  # eval: one sample is fine


def test_batchnorm_state_dict_and_reset_as_torch():
    t_mod, g_mod = torch.nn.BatchNorm2d(2), nn.BatchNorm2d(2)
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    g_mod(gg.randn(3, 2, 2, 2))
    assert int(g_mod.num_batches_tracked) == 1
    g_mod.reset_running_stats()
    close(g_mod.running_mean, np.zeros(2))
    close(g_mod.running_var, np.ones(2))
    assert int(g_mod.num_batches_tracked) == 0
    # a model with batch norm trains in float32 with float32 statistics
    assert g_mod.running_mean.dtype == gg.float32


GROUPNORMS = [
    ("gn", lambda m: m.GroupNorm(2, 4), (3, 4, 5)),
    ("gn_2d", lambda m: m.GroupNorm(3, 6, eps=1e-3), (2, 6, 2, 3)),
    ("gn_instance", lambda m: m.GroupNorm(4, 4), (2, 4, 3, 3)),
    ("gn_layer", lambda m: m.GroupNorm(1, 4, affine=False), (2, 4, 3)),
    ("gn_no_bias", lambda m: m.GroupNorm(2, 4, bias=False), (2, 4, 3)),
]


@pytest.mark.parametrize("name,make,shape", GROUPNORMS, ids=[b[0] for b in GROUPNORMS])
def test_groupnorm_matches_torch(name, make, shape):
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))


def test_groupnorm_errors_use_torch_wording():
    with pytest.raises(ValueError, match=r"num_channels \(4\) must be divisible by "
                       r"num_groups \(3\)"):
        nn.GroupNorm(3, 4)
    with pytest.raises(RuntimeError, match=r"Expected number of channels in input to be "
                       r"divisible by num_groups, but got input of shape \[2, 5, 4\] and "
                       r"num_groups=2"):
        F.group_norm(gg.randn(2, 5, 4), 2)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        F.group_norm(gg.randn(1, 2), 2)


# ---- smaller layers and functions ---------------------------------------------------------
@pytest.mark.parametrize("in_shape,out_size", [((2, 3, 8, 6), (4, 3)), ((2, 3, 7, 5), 3),
                                                ((1, 2, 5, 9), (None, 4)), ((3, 6, 6), 1),
                                                ((1, 1, 4, 4), (5, 3))])
def test_adaptive_avg_pool2d_matches_torch(in_shape, out_size):
    step_both(nn.AdaptiveAvgPool2d(out_size), torch.nn.AdaptiveAvgPool2d(out_size),
              rand(*in_shape))
    assert repr(nn.AdaptiveAvgPool2d(out_size)) == repr(torch.nn.AdaptiveAvgPool2d(out_size))


@pytest.mark.parametrize("s1,s2,dim", [((4, 5), (4, 5), 1), ((3, 4, 2), (3, 4, 2), -1),
                                       ((4, 5), (1, 5), 1), ((5,), (5,), 0)])
def test_cosine_similarity_matches_torch(s1, s2, dim):
    a, b = rand(*s1, seed=1), rand(*s2, seed=2)
    ga, gb = gg.tensor(a, requires_grad=True), gg.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out_g, out_t = nn.CosineSimilarity(dim)(ga, gb), torch.nn.CosineSimilarity(dim)(ta, tb)
    close(out_g, out_t)
    (out_g ** 2).sum().backward()
    (out_t ** 2).sum().backward()
    close(ga.grad, ta.grad)
    close(gb.grad, tb.grad)
    # a zero vector: the norm is clamped at eps, the similarity 0 (no nan)
    z = np.zeros(s1)
    close(F.cosine_similarity(gg.tensor(z), gb, dim),
          torch.nn.functional.cosine_similarity(torch.tensor(z), tb, dim))


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


def test_dropout2d_zeroes_whole_channels():
    gg.manual_seed(0)
    x = gg.ones(8, 16, 3, 3)
    out = nn.Dropout2d(0.5)(x).numpy()
    per_channel = out.reshape(8, 16, 9)
    assert set(np.unique(out)) <= {0.0, 2.0}
    assert (per_channel.min(axis=2) == per_channel.max(axis=2)).all()  # whole planes
    assert 0.25 < (per_channel[:, :, 0] == 0).mean() < 0.75
    m = nn.Dropout2d(0.5).eval()
    assert m(x) is x
    assert repr(m) == repr(torch.nn.Dropout2d(0.5))
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
        F.dropout2d(gg.ones(2, 3, 4))
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        F.dropout2d(x, 1.5)


# ---- module hooks -------------------------------------------------------------------------
class TwoInputs:
    """A module of two tensor inputs and a non-tensor one, in both libraries."""

    @staticmethod
    def make(lib):
        class M(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = lib.nn.Linear(3, 3).double()

            def forward(self, a, b, scale=1.0):
                return self.fc(a) * b * scale, (a * b).sum(dim=1)

        return M()


def test_forward_pre_and_forward_hooks_follow_torch_semantics():
    log = {"gg": [], "torch": []}

    def run(lib, key):
        m = lib.nn.Linear(3, 2).double()
        calls = log[key]
        h1 = m.register_forward_pre_hook(lambda mod, args: calls.append("pre") or
                                         (args[0] * 2,))
        h2 = m.register_forward_pre_hook(lambda mod, args, kw: calls.append("pre_kw") or None,
                                         with_kwargs=True, prepend=True)
        h3 = m.register_forward_hook(lambda mod, args, out: calls.append("post") or out + 1)
        h4 = m.register_forward_hook(lambda mod, args, kw, out: calls.append("post_kw")
                                     or None, with_kwargs=True)
        x = lib.tensor(rand(4, 3)) if lib is gg else torch.tensor(rand(4, 3))
        with lib.no_grad():
            w = m.weight.detach().numpy().copy()
            b = m.bias.detach().numpy().copy()
        out = m(x)
        close(out, rand(4, 3) * 2 @ w.T + b + 1)  # the pre-hook's input, the hook's output
        for h in (h1, h2, h3, h4):
            h.remove()
        h1.remove()  # a second remove does nothing
        close(m(x), rand(4, 3) @ w.T + b)

    run(gg, "gg")
    run(torch, "torch")
    assert log["gg"] == log["torch"] == ["pre_kw", "pre", "post", "post_kw"]


def test_forward_pre_hook_with_kwargs_can_replace_args_and_kwargs():
    m = nn.Module()
    m.forward = lambda x, scale=1.0: x * scale
    m.register_forward_pre_hook(lambda mod, args, kw: ((args[0] + 1,), {"scale": 3.0}),
                                with_kwargs=True)
    assert float(m(gg.tensor(1.0), scale=2.0)) == 6.0
    bad = nn.Identity()
    bad.register_forward_pre_hook(lambda mod, args, kw: args, with_kwargs=True)
    with pytest.raises(RuntimeError, match=r"forward pre-hook must return None or a tuple of "
                       r"\(new_args, new_kwargs\), but got"):
        bad(gg.tensor(1.0))


def test_always_call_forward_hook_runs_when_forward_raises():
    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    seen = []
    m = Boom()
    m.register_forward_hook(lambda mod, args, out: seen.append(("always", out)),
                            always_call=True)
    m.register_forward_hook(lambda mod, args, out: seen.append("normal"))
    with pytest.raises(ValueError, match="boom"):
        m(gg.tensor(1.0))
    assert seen == [("always", None)]


def test_module_without_hooks_takes_the_plain_path():
    m = nn.Linear(2, 2)
    assert m._hooks is None and "_hooks" not in m.__dict__
    m.register_forward_hook(lambda *a: None).remove()
    assert m._hooks is not None and nn.Linear(2, 2)._hooks is None


def backward_hook_log(lib, make, inputs, grad_seed=3, replace=None, pre_replace=None):
    """Register a full backward (pre-)hook on ``make(lib)``, run forward and backward, and
    return what the hooks saw and the gradients that reached the inputs."""
    torch.manual_seed(0)
    m = make(torch)
    if lib is gg:  # the same weights
        m, t_mod = make(gg), m
        copy_weights(m, t_mod)
    seen = {}

    def hook(mod, grad_input, grad_output):
        seen["grad_input"] = [None if g is None else g.detach().numpy().copy()
                              for g in grad_input]
        seen["grad_output"] = [None if g is None else g.detach().numpy().copy()
                               for g in grad_output]
        if replace is not None:
            return tuple(None if g is None else g * replace for g in grad_input)
        return None

    def pre_hook(mod, grad_output):
        seen["pre"] = len(grad_output)
        if pre_replace is not None:
            return tuple(None if g is None else g * pre_replace for g in grad_output)
        return None

    m.register_full_backward_hook(hook)
    m.register_full_backward_pre_hook(pre_hook)
    xs = [lib.tensor(a, requires_grad=rg) for a, rg in inputs]
    # leaves feed the module through one op each, so "the gradient that reached the
    # input" is measured after the hook has had its say
    feed = [x * 1.0 for x in xs]
    out = m(*feed)
    outs = out if isinstance(out, tuple) else (out,)
    total = sum((o * lib.tensor(rand(*o.shape, seed=grad_seed + i))).sum()
                for i, o in enumerate(outs))
    total.backward()
    seen["x_grads"] = [None if x.grad is None else x.grad.numpy().copy() for x in xs]
    seen["param_grads"] = [p.grad.numpy().copy() for p in m.parameters()]
    return seen


def assert_same_log(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if k == "pre":
            assert a[k] == b[k]
            continue
        assert len(a[k]) == len(b[k]), k
        for x, y in zip(a[k], b[k], strict=True):
            assert (x is None) == (y is None), k
            if x is not None:
                close(x, y)


@pytest.mark.parametrize("replace,pre_replace", [(None, None), (3.0, None), (None, 0.5),
                                                 (2.0, -1.0)])
def test_full_backward_hooks_match_torch_linear(replace, pre_replace):
    make = lambda lib: lib.nn.Linear(3, 2).double()  # noqa: E731
    inputs = [(rand(4, 3), True)]
    assert_same_log(backward_hook_log(gg, make, inputs, replace=replace,
                                      pre_replace=pre_replace),
                    backward_hook_log(torch, make, inputs, replace=replace,
                                      pre_replace=pre_replace))


@pytest.mark.parametrize("grads", [(True, True), (True, False), (False, True)])
def test_full_backward_hooks_match_torch_two_inputs_two_outputs(grads):
    inputs = [(rand(4, 3, seed=1), grads[0]), (rand(4, 3, seed=2), grads[1])]
    assert_same_log(backward_hook_log(gg, TwoInputs.make, inputs, replace=2.0),
                    backward_hook_log(torch, TwoInputs.make, inputs, replace=2.0))


def test_full_backward_hook_without_input_grads_fires_on_outputs():
    make = lambda lib: lib.nn.Linear(3, 2).double()  # noqa: E731
    inputs = [(rand(4, 3), False)]
    with pytest.warns(UserWarning, match="no inputs require gradients"):
        g = backward_hook_log(gg, make, inputs)
    with pytest.warns(UserWarning, match="no inputs require gradients"):
        t = backward_hook_log(torch, make, inputs)
    assert_same_log(g, t)
    assert g["grad_input"] == [None]
    m = nn.Linear(3, 2)
    m.register_full_backward_hook(lambda mod, gi, go: (gg.ones(4, 3),))
    with pytest.warns(UserWarning), pytest.raises(
            RuntimeError, match="should always return None or None for all gradients"):
        m(gg.randn(4, 3)).sum().backward()


def test_backward_hook_errors_use_torch_wording():
    m = nn.Linear(3, 2)
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="Backward hook returned an invalid number of "
                       "grad_input, got 2, but expected 1"):
        m(gg.randn(4, 3, requires_grad=True)).sum().backward()
    m = nn.Linear(3, 2)
    m.register_full_backward_pre_hook(lambda mod, go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match="Backward pre hook returned an invalid number of "
                       "grad_output, got 2, but expected 1"):
        m(gg.randn(4, 3, requires_grad=True)).sum().backward()


def test_backward_hooks_sit_out_no_grad_and_keep_higher_order_gradients():
    m = nn.Linear(3, 1).double()
    calls = []
    m.register_full_backward_hook(lambda mod, gi, go: calls.append(1))
    with gg.no_grad():
        m(gg.randn(2, 3, dtype=gg.float64))
    assert not calls
    # a hook that only observes leaves first and second derivatives as they were
    x = gg.tensor(rand(2, 3), requires_grad=True)
    (g,) = gg.autograd.grad((m(x) ** 3).sum(), x, create_graph=True)
    (h,) = gg.autograd.grad(g.sum(), x)
    m2 = nn.Linear(3, 1).double()
    m2.load_state_dict(m.state_dict())
    x2 = gg.tensor(rand(2, 3), requires_grad=True)
    (g2,) = gg.autograd.grad((m2(x2) ** 3).sum(), x2, create_graph=True)
    (h2,) = gg.autograd.grad(g2.sum(), x2)
    close(g, g2)
    close(h, h2)
    assert calls


# ---- parameter containers, Sequential editing, get_parameter, half ------------------------
def both(fn):
    """``fn(lib)`` for graphgrad and torch; the reprs must agree (up to the name)."""
    g, t = fn(gg), fn(torch)
    assert repr(g).replace("graphgrad.", "") == repr(t).replace("torch.", ""), (g, t)
    return g, t


def test_parameter_list_matches_torch():
    def make(lib):
        pl = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(3, 4)), lib.zeros(2), "x"])
        pl.append(lib.ones(1))
        pl += [lib.nn.Parameter(lib.zeros(2, 2))]
        return pl

    g, t = both(make)
    assert len(g) == len(t) == 5
    assert isinstance(g[1], nn.Parameter) and g[1].requires_grad and g[2] == "x"
    assert [n for n, _ in g.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert list(g.state_dict()) == list(t.state_dict())
    assert g[-1] is g[4] and len(g[1:4]) == 3 and isinstance(g[1:4], nn.ParameterList)
    g[0] = gg.full((2,), 5.0)
    assert isinstance(g[0], nn.Parameter) and g.get_parameter("0") is g[0]
    for lib, pl in ((gg, g), (torch, t)):
        with pytest.raises(IndexError, match="index 5 is out of range"):
            pl[5]
        with pytest.raises(TypeError, match="ParameterList.extend should be called with an "
                           "iterable, but got"):
            pl.extend(lib.ones(2))
        with pytest.raises(RuntimeError, match="ParameterList should not be called."):
            pl(1)
    both(lambda lib: lib.nn.ParameterList())


def test_parameter_list_parameters_train():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = nn.ParameterList([nn.Parameter(gg.ones(2)) for _ in range(3)])

        def forward(self, x):
            for w in self.ws:
                x = x * w
            return x.sum()

    m = M()
    opt = gg.optim.SGD(m.parameters(), lr=0.5)
    m(gg.tensor([1.0, 2.0])).backward()
    opt.step()
    for w in m.ws:
        close(w, [0.5, 0.0])


def test_parameter_dict_matches_torch():
    def make(lib):
        pd = lib.nn.ParameterDict({"b": lib.ones(2), "a": lib.nn.Parameter(lib.zeros(3))})
        pd["c"] = lib.ones(2, 2, dtype=lib.float64)
        pd.update([("d", lib.zeros(1))])
        pd.setdefault("e", lib.ones(4))
        return pd

    g, t = both(make)
    assert list(g) == list(t) == ["a", "b", "c", "d", "e"]  # a dict is taken sorted
    assert list(g.keys()) == list(t.keys())
    assert [n for n, _ in g.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert "a" in g and "z" not in g and g.get("z", 3) == 3
    assert isinstance(g["c"], nn.Parameter)
    for pd in (g, t):
        assert pd.pop("a").shape[0] == 3
        assert pd.popitem()[0] == "e"
    assert list(g) == list(t) == ["b", "c", "d"]
    g2, t2 = g | make(gg), t | make(torch)
    assert list(g2) == list(t2)
    for pd in (g, t):
        with pytest.raises(AttributeError, match="'ParameterDict' object has no attribute 'zz'"):
            pd["zz"]
        with pytest.raises(TypeError, match="cannot be used as a key as it is not a string "
                           r"\(type is 'int'\)"):
            pd[1]
        with pytest.raises(ValueError, match="ParameterDict update sequence element #0 has "
                           "length 3; 2 is required"):
            pd.update([("a", 1, 2)])
    g.clear()
    assert len(g) == 0 and not list(g.parameters())


def test_sequential_editing_matches_torch():
    def layers(lib):
        return [lib.nn.Linear(2, 2), lib.nn.ReLU(), lib.nn.Tanh(), lib.nn.Identity()]

    def edit(lib):
        a, b, c, d = layers(lib)
        s = lib.nn.Sequential(a, b)
        s.insert(1, c).insert(-1, d).insert(4, lib.nn.Sigmoid())
        s.extend([lib.nn.ReLU()])
        s.pop(0)
        s = s + lib.nn.Sequential(lib.nn.Tanh())
        s += lib.nn.Sequential(lib.nn.ReLU())
        return s

    g, t = both(edit)
    assert [k for k, _ in g.named_children()] == [k for k, _ in t.named_children()]
    both(lambda lib: lib.nn.Sequential(lib.nn.ReLU(), lib.nn.Tanh()) * 2)
    both(lambda lib: 2 * lib.nn.Sequential(lib.nn.ReLU()))
    s = nn.Sequential(nn.ReLU())
    s *= 3
    assert len(s) == 3 and s[0] is s[2]
    for lib in (gg, torch):
        seq = lib.nn.Sequential(lib.nn.ReLU())
        with pytest.raises(IndexError, match="Index out of range: 3"):
            seq.insert(3, lib.nn.ReLU())
        with pytest.raises(ValueError, match="add operator supports only objects of "
                           "Sequential class"):
            seq + [lib.nn.ReLU()]
        with pytest.raises(ValueError, match="Non-positive multiplication factor 0"):
            seq * 0
        with pytest.raises(AssertionError, match="module should be of type"):
            seq.insert(0, 3)


def test_module_list_pop_add_match_torch():
    def edit(lib):
        ml = lib.nn.ModuleList([lib.nn.ReLU(), lib.nn.Tanh(), lib.nn.Sigmoid()])
        ml.pop(1)
        ml += [lib.nn.Identity()]
        return ml + lib.nn.ModuleList([lib.nn.ReLU()])

    both(edit)
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable, "
                       "but got int"):
        nn.ModuleList().extend(3)


def test_get_parameter_buffer_submodule_match_torch():
    def make(lib):
        return lib.nn.Sequential(lib.nn.Linear(2, 2, bias=False), lib.nn.BatchNorm1d(2))

    g, t = both(make)
    assert g.get_parameter("0.weight") is g[0].weight
    assert g.get_buffer("1.running_mean") is g[1].running_mean
    assert g.get_submodule("1") is g[1] and g.get_submodule("") is g
    for m in (g, t):
        for call, target, msg in [(m.get_parameter, "0.foo", "Linear has no attribute `foo`"),
                                  (m.get_parameter, "2.weight",
                                   "Sequential has no attribute `2`"),
                                  (m.get_parameter, "0.in_features",
                                   "`in_features` is not an nn.Parameter"),
                                  (m.get_parameter, "0.bias", "`bias` is not an nn.Parameter"),
                                  (m.get_submodule, "0.weight", "`weight` is not an nn.Module"),
                                  (m.get_buffer, "1.weight", "`weight` is not a buffer")]:
            with pytest.raises(AttributeError, match=msg):
                call(target)


def test_half_casts_floating_parameters_and_buffers():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).half()
    assert {p.dtype for p in m.parameters()} == {gg.float16}
    assert m[1].running_mean.dtype == gg.float16
    assert m[1].num_batches_tracked.dtype == gg.int64  # integers stay
    assert m(gg.randn(4, 3).half()).dtype == gg.float16


def test_backward_hook_none_grad_input_stops_the_gradient_and_namedtuples_survive():
    from collections import namedtuple
    Pair = namedtuple("Pair", "a b")

    def run(lib):
        class M(lib.nn.Module):
            def forward(self, x):
                return Pair(x * 2, x * 3)

        m = M()
        m.register_full_backward_hook(lambda mod, gi, go: (None,))
        x = lib.tensor(rand(3), requires_grad=True)
        out = m(x * 1.0)
        assert type(out) is Pair
        (out.a + out.b).sum().backward()
        return x.grad

    g, t = run(gg), run(torch)
    # PyTorch drops the gradient (x.grad stays None); a graphgrad tensor hook cannot
    # drop one, so zeros flow on: the same values, a different "no gradient"
    assert t is None
    close(g, np.zeros(3))


# ---- more activations, RMSNorm, attention, Conv1d -----------------------------------------
ACTIVATIONS = [
    ("relu6", lambda m: m.ReLU6(), 4.0),
    ("hardtanh", lambda m: m.Hardtanh(-2.0, 3.0), 3.0),
    ("hardsigmoid", lambda m: m.Hardsigmoid(), 4.0),
    ("hardswish", lambda m: m.Hardswish(), 4.0),
    ("mish", lambda m: m.Mish(), 2.0),
    ("selu", lambda m: m.SELU(), 2.0),
    ("celu", lambda m: m.CELU(0.7), 2.0),
    ("softsign", lambda m: m.Softsign(), 2.0),
    ("tanhshrink", lambda m: m.Tanhshrink(), 2.0),
    ("glu", lambda m: m.GLU(1), 1.0),
    ("softmin", lambda m: m.Softmin(1), 1.0),
    ("prelu", lambda m: m.PReLU(), 1.0),
    ("prelu_channels", lambda m: m.PReLU(4, init=0.1), 1.0),
]


# PyTorch's backward formulas of these use float32 constants even for float64 (1/6 in
# hardsigmoid's, 1/alpha in celu's): their gradients agree with graphgrad's exact ones
# to float32 precision only
FLOAT32_CONSTANT_GRADS = {"hardsigmoid", "celu"}


@pytest.mark.parametrize("name,make,spread", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_more_activations_match_torch(name, make, spread):
    g_mod, t_mod = twin_layers(make)
    x = rand(3, 4, 5) * spread
    rtol = 1e-6 if name in FLOAT32_CONSTANT_GRADS else RTOL
    step_both(g_mod, t_mod, x, grad_rtol=rtol)
    # second derivatives (of the smooth pieces; the clip points are never hit)
    gx, tx = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (dg,) = gg.autograd.grad((g_mod(gx) ** 2).sum(), gx, create_graph=True)
    (dt,) = torch.autograd.grad((t_mod(tx) ** 2).sum(), tx, create_graph=True)
    close(dg, dt, rtol)
    (hg,) = gg.autograd.grad(dg.sum(), gx)
    if name == "hardsigmoid":  # PyTorch has no double backward for it: 2 y'^2 by hand
        close(hg, np.where(np.abs(x) < 3, 2 / 36, 0.0))
    else:
        close(hg, torch.autograd.grad(dt.sum(), tx)[0], max(rtol, 1e-9), 1e-11)


def test_clip_points_have_torch_gradients():
    x = np.array([-3.0, -1.0, 0.0, 3.0, 6.0])
    for fn in ("relu6", "hardtanh", "hardsigmoid", "hardswish"):
        gx, tx = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        getattr(F, fn)(gx).sum().backward()
        getattr(torch.nn.functional, fn)(tx).sum().backward()
        close(gx.grad, tx.grad, 1e-6 if fn in FLOAT32_CONSTANT_GRADS else RTOL)


def test_more_activation_errors_use_torch_wording():
    for lib in (gg, torch):
        with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension "
                           "1 is size 3"):
            lib.nn.functional.glu(lib.ones(2, 3), 1)
        with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel "
                           "size. Found parameter numbers = 2 and channel size = 3."):
            lib.nn.functional.prelu(lib.ones(2, 3), lib.ones(2))
        with pytest.raises(AssertionError, match=r"max_val \(1.0\) must be greater than "
                           r"min_val \(2.0\)"):
            lib.nn.Hardtanh(2.0, 1.0)
        with pytest.raises(RuntimeError, match="alpha cannot be 0 for CELU"):
            lib.nn.functional.celu(lib.ones(2), 0.0)


@pytest.mark.parametrize("shape,norm_shape,kw", [((3, 4), 4, {}),
                                                 ((2, 3, 4), (3, 4), {"eps": 1e-3}),
                                                 ((2, 5), [5], {"elementwise_affine": False})])
def test_rmsnorm_matches_torch(shape, norm_shape, kw):
    g_mod, t_mod = twin_layers(lambda m: m.RMSNorm(norm_shape, **kw))
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    step_both(g_mod, t_mod, rand(*shape))
    for lib in (gg, torch):
        with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[4\], expected input "
                           r"with shape \[\*4\], but got input of size\[2, 3\]"):
            lib.nn.functional.rms_norm(lib.ones(2, 3), [4])


SDPA = [
    ("plain", {}, (2, 3, 4, 8), (2, 3, 6, 8)),
    ("causal", {"is_causal": True}, (2, 2, 5, 4), (2, 2, 5, 4)),
    ("causal_rect", {"is_causal": True}, (1, 2, 3, 4), (1, 2, 6, 4)),
    ("scale", {"scale": 0.3}, (2, 4, 4), (2, 7, 4)),
    ("bool_mask", {"mask": "bool"}, (2, 3, 4, 8), (2, 3, 6, 8)),
    ("float_mask", {"mask": "float"}, (2, 3, 4, 8), (2, 3, 6, 8)),
    ("gqa", {"enable_gqa": True}, (2, 4, 3, 8), (2, 2, 5, 8)),
]


@pytest.mark.parametrize("name,kw,q_shape,kv_shape", SDPA, ids=[s[0] for s in SDPA])
def test_scaled_dot_product_attention_matches_torch(name, kw, q_shape, kv_shape):
    kw = dict(kw)
    arrays = [rand(*q_shape, seed=1), rand(*kv_shape, seed=2), rand(*kv_shape, seed=3)]
    mask = kw.pop("mask", None)
    mask_arr = None
    if mask == "bool":
        mask_arr = np.random.default_rng(4).random((q_shape[-2], kv_shape[-2])) > 0.3
        mask_arr[:, 0] = True  # no row fully masked
    elif mask == "float":
        mask_arr = rand(q_shape[-2], kv_shape[-2], seed=4)
    results = []
    for lib in (gg, torch):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        m = None if mask_arr is None else lib.tensor(mask_arr)
        out = lib.nn.functional.scaled_dot_product_attention(*ts, attn_mask=m, **kw)
        (out * lib.tensor(rand(*out.shape, seed=5))).sum().backward()
        results.append([out] + [t.grad for t in ts])
    for a, b in zip(*results, strict=True):
        close(a, b)
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal=True"):
        F.scaled_dot_product_attention(gg.ones(1, 2, 2), gg.ones(1, 2, 2), gg.ones(1, 2, 2),
                                       attn_mask=gg.ones(2, 2), is_causal=True)


CONV1D = [
    ("conv1d", lambda m: m.Conv1d(2, 4, 3), (2, 2, 9)),
    ("conv1d_all", lambda m: m.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2,
                                      bias=False), (2, 4, 11)),
    ("conv1d_same", lambda m: m.Conv1d(3, 2, 5, padding="same"), (1, 3, 7)),
    ("conv1d_unbatched", lambda m: m.Conv1d(2, 3, 2), (2, 6)),
]


@pytest.mark.parametrize("name,make,shape", CONV1D, ids=[c[0] for c in CONV1D])
def test_conv1d_matches_torch(name, make, shape):
    torch.manual_seed(0)
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))


def test_conv1d_init_and_errors_as_torch():
    gg.manual_seed(0)
    m = nn.Conv1d(4, 3, 5)
    bound = 1 / np.sqrt(4 * 5)
    assert np.abs(m.weight.detach().numpy()).max() <= bound
    assert np.abs(m.bias.detach().numpy()).max() <= bound
    for lib in (gg, torch):
        with pytest.raises(RuntimeError, match=r"Given groups=1, weight of size \[4, 2, 3\], "
                           r"expected input\[2, 3, 8\] to have 2 channels, but got 3 channels "
                           r"instead"):
            lib.nn.functional.conv1d(lib.ones(2, 3, 8), lib.ones(4, 2, 3))


# ---- MultiheadAttention -------------------------------------------------------------------
def _mha_masks(kind, n, h, lq, lk):
    """(attn_mask, key_padding_mask) numpy arrays for a case; no row is fully blocked."""
    rng = np.random.default_rng(9)
    if kind == "bool":
        m = rng.random((lq, lk)) < 0.3
        m[:, 0] = False
        pad = np.zeros((n, lk), bool)
        pad[:, -1] = True
        return m, pad
    if kind == "float3d":
        return rng.standard_normal((n * h, lq, lk)), None
    if kind == "float_pad":
        return None, rng.standard_normal((n, lk))
    if kind == "causal":
        return np.triu(np.ones((lq, lk), bool), 1), None
    return None, None


MHA = [
    ("self", {}, {}, "none"),
    ("batch_first", {"batch_first": True}, {}, "none"),
    ("kdim_vdim", {"kdim": 5, "vdim": 3}, {}, "none"),
    ("no_bias", {"bias": False}, {}, "none"),
    ("bool_masks", {}, {}, "bool"),
    ("float_mask_3d", {"batch_first": True}, {"average_attn_weights": False}, "float3d"),
    ("float_padding", {}, {}, "float_pad"),
    ("causal", {}, {"is_causal": True}, "causal"),
    ("no_weights", {}, {"need_weights": False}, "bool"),
]


@pytest.mark.parametrize("name,kw,call_kw,masks", MHA, ids=[m[0] for m in MHA])
def test_multihead_attention_matches_torch(name, kw, call_kw, masks):
    e, h, n, lq, lk = 6, 3, 2, 4, 5
    g_mod, t_mod = twin_layers(lambda m: m.MultiheadAttention(e, h, **kw))
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    kdim, vdim = kw.get("kdim", e), kw.get("vdim", e)
    lead = (lambda size: (n, size)) if kw.get("batch_first") else (lambda size: (size, n))
    arrays = [rand(*lead(lq), e, seed=1), rand(*lead(lk), kdim, seed=2),
              rand(*lead(lk), vdim, seed=3)]
    attn_mask, pad_mask = _mha_masks(masks, n, h, lq, lk)
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        xs = [lib.tensor(a, requires_grad=True) for a in arrays]
        am = None if attn_mask is None else lib.tensor(attn_mask)
        pm = None if pad_mask is None else lib.tensor(pad_mask)
        out, weights = mod(*xs, key_padding_mask=pm, attn_mask=am, **call_kw)
        loss = (out * lib.tensor(rand(*out.shape, seed=4))).sum()
        if weights is not None:
            loss = loss + (weights * lib.tensor(rand(*weights.shape, seed=5))).sum()
        loss.backward()
        results.append([out, weights] + [x.grad for x in xs]
                       + [p.grad for _, p in mod.named_parameters()])
    for a, b in zip(*results, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            close(a, b)


def test_multihead_attention_unbatched_and_errors_match_torch():
    g_mod, t_mod = twin_layers(lambda m: m.MultiheadAttention(4, 2))
    x = rand(3, 4)
    out_g, w_g = g_mod(*(gg.tensor(x),) * 3)
    out_t, w_t = t_mod(*(torch.tensor(x),) * 3)
    close(out_g, out_t)
    close(w_g, w_t)
    for lib in (gg, torch):
        with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
            lib.nn.MultiheadAttention(5, 2)
        with pytest.raises(ValueError, match="embed_dim and num_heads must be greater than 0"):
            lib.nn.MultiheadAttention(0, 2)
        m = lib.nn.MultiheadAttention(4, 2)
        with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
            m(*(lib.ones(3, 1, 4),) * 3, is_causal=True)


# ---- Transformer encoder ------------------------------------------------------------------
ENCODERS = [
    ("post_norm", lambda m: m.TransformerEncoderLayer(8, 2, 16, 0.0), {}),
    ("pre_norm_gelu_batch_first", lambda m: m.TransformerEncoderLayer(
        8, 4, 12, 0.0, activation="gelu", batch_first=True, norm_first=True), {}),
    ("masks", lambda m: m.TransformerEncoderLayer(8, 2, 16, 0.0), {"masks": True}),
    ("encoder", lambda m: m.TransformerEncoder(m.TransformerEncoderLayer(8, 2, 16, 0.0), 2,
                                               norm=m.LayerNorm(8),
                                               enable_nested_tensor=False), {}),
]


@pytest.mark.parametrize("name,make,kw", ENCODERS, ids=[e[0] for e in ENCODERS])
def test_transformer_encoder_matches_torch(name, make, kw):
    g_mod, t_mod = twin_layers(make)
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    x = rand(5, 3, 8)
    call = {}
    if kw.get("masks"):
        pad = np.zeros((3, 5), bool)
        pad[0, -2:] = True
        call = {"src_mask": np.triu(np.full((5, 5), -np.inf), 1), "src_key_padding_mask": pad}
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        xt = lib.tensor(x, requires_grad=True)
        out = mod(xt, **{k: lib.tensor(v) for k, v in call.items()})
        (out * lib.tensor(rand(*out.shape, seed=2))).sum().backward()
        results.append([out, xt.grad] + [p.grad for _, p in mod.named_parameters()])
    for a, b in zip(*results, strict=True):
        close(a, b, 1e-9, 1e-11)


def test_module_list_repr_groups_repeats_as_torch():
    both(lambda lib: lib.nn.ModuleList([lib.nn.Linear(2, 2), lib.nn.Linear(2, 2),
                                        lib.nn.ReLU(), lib.nn.Linear(2, 2)]))
    both(lambda lib: lib.nn.ModuleList())
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")


# ---- recurrent layers ---------------------------------------------------------------------
RNNS = [
    ("lstm", lambda m: m.LSTM(3, 4), (5, 2, 3), False),
    ("lstm_stack_bi", lambda m: m.LSTM(3, 4, 2, bidirectional=True), (4, 2, 3), True),
    ("lstm_batch_first", lambda m: m.LSTM(3, 4, batch_first=True, bias=False), (2, 5, 3),
     True),
    ("lstm_unbatched", lambda m: m.LSTM(3, 4, 2), (5, 3), True),
    ("gru", lambda m: m.GRU(3, 4, 2), (5, 2, 3), True),
    ("gru_bi_batch_first", lambda m: m.GRU(3, 2, bidirectional=True, batch_first=True),
     (2, 4, 3), False),
    ("rnn_tanh", lambda m: m.RNN(3, 4, 2), (5, 2, 3), True),
    ("rnn_relu_positional", lambda m: m.RNN(3, 4, 1, "relu", False), (5, 2, 3), False),
]


@pytest.mark.parametrize("name,make,shape,with_state", RNNS, ids=[r[0] for r in RNNS])
def test_recurrent_layers_match_torch(name, make, shape, with_state):
    g_mod, t_mod = twin_layers(make)
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    layers = t_mod.num_layers * (2 if t_mod.bidirectional else 1)
    batch = () if len(shape) == 2 else (shape[0] if t_mod.batch_first else shape[1],)
    state_shape = (layers, *batch, t_mod.hidden_size)
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        x = lib.tensor(rand(*shape), requires_grad=True)
        hx = None
        if with_state:
            h0 = lib.tensor(rand(*state_shape, seed=6), requires_grad=True)
            hx = (h0, lib.tensor(rand(*state_shape, seed=7))) if "lstm" in name else h0
        out, state = mod(x, hx)
        finals = list(state) if isinstance(state, tuple) else [state]
        loss = (out * lib.tensor(rand(*out.shape, seed=8))).sum()
        for i, f in enumerate(finals):
            loss = loss + (f * lib.tensor(rand(*f.shape, seed=9 + i))).sum()
        loss.backward()
        grads = [x.grad] + ([h0.grad] if with_state else [])
        results.append([out, *finals, *grads] + [p.grad for _, p in mod.named_parameters()])
    for a, b in zip(*results, strict=True):
        close(a, b, 1e-9, 1e-11)


def test_recurrent_errors_and_init_as_torch():
    gg.manual_seed(0)
    m = nn.LSTM(3, 16)
    assert max(float(p.detach().abs().max()) for p in m.parameters()) <= 0.25  # 1/sqrt(16)
    for lib in (gg, torch):
        with pytest.raises(ValueError, match="LSTM: Expected input to be 2D or 3D, got 4D "
                           "instead"):
            lib.nn.LSTM(3, 4)(lib.ones(2, 3, 4, 5))
        with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 3, 4\), got "
                           r"\[1, 2, 4\]"):
            lib.nn.LSTM(3, 4)(lib.ones(2, 3, 3), (lib.zeros(1, 2, 4), lib.zeros(1, 3, 4)))
        with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 3, 4\), got "
                           r"\[1, 2, 4\]"):
            lib.nn.GRU(3, 4)(lib.ones(2, 3, 3), lib.zeros(1, 2, 4))
        with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to "
                           "input_size. Expected 3, got 5"):
            lib.nn.GRU(3, 4)(lib.ones(2, 3, 5))
        with pytest.raises(ValueError, match="Unknown nonlinearity 'x'"):
            lib.nn.RNN(3, 4, nonlinearity="x")


def test_recurrent_dropout_between_layers_only_in_training():
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(3, 4, dropout=0.5)
    gg.manual_seed(0)
    m = nn.LSTM(3, 4, 2, dropout=0.5)
    x = gg.tensor(rand(5, 2, 3))
    a, b = m(x)[0], m(x)[0]
    assert not np.allclose(a.detach().numpy(), b.detach().numpy())  # a fresh mask each call
    m.eval()
    close(m(x)[0], m(x)[0])


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_matches_torch(batch_first, padding_side):
    arrays = [rand(3, 2, seed=1), rand(5, 2, seed=2), rand(1, 2, seed=3)]
    results = []
    for lib in (gg, torch):
        seqs = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = lib.nn.utils.rnn.pad_sequence(seqs, batch_first, -1.5, padding_side)
        (out * lib.tensor(rand(*out.shape, seed=4))).sum().backward()
        results.append([out] + [s.grad for s in seqs])
    for a, b in zip(*results, strict=True):
        close(a, b)
    if padding_side == "right":
        back = nn.utils.rnn.unpad_sequence(results[0][0], [3, 5, 1], batch_first)
        for a, b in zip(back, arrays, strict=True):
            close(a, b)


def test_pad_sequence_errors_use_torch_wording():
    for lib in (gg, torch):
        pad = lib.nn.utils.rnn.pad_sequence
        with pytest.raises(RuntimeError, match="received an empty list of sequences"):
            pad([])
        with pytest.raises(RuntimeError, match="Expected padding_side to be one of left or "
                           "right, but got up."):
            pad([lib.ones(2)], padding_side="up")


POOLS = [
    ("maxpool1d", lambda m: m.MaxPool1d(2), (2, 3, 9)),
    ("maxpool1d_all", lambda m: m.MaxPool1d(3, 2, 1, 2), (2, 3, 11)),
    ("maxpool1d_ceil_unbatched", lambda m: m.MaxPool1d(2, ceil_mode=True), (3, 7)),
    ("avgpool1d", lambda m: m.AvgPool1d(3, 2, 1), (2, 3, 10)),
    ("avgpool1d_unbatched", lambda m: m.AvgPool1d(2), (3, 8)),
    ("adaptive_avg1d", lambda m: m.AdaptiveAvgPool1d(3), (2, 3, 10)),
    ("adaptive_max2d", lambda m: m.AdaptiveMaxPool2d((3, 2)), (2, 3, 7, 5)),
    ("adaptive_max2d_none_unbatched", lambda m: m.AdaptiveMaxPool2d((None, 4)), (3, 5, 9)),
]


@pytest.mark.parametrize("name,make,shape", POOLS, ids=[p[0] for p in POOLS])
def test_more_pooling_matches_torch(name, make, shape):
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))


INTERPOLATE = [
    ("nearest_x2", (2, 3, 4, 5), {"scale_factor": 2}),
    ("nearest_size", (1, 2, 5, 7), {"size": (8, 3)}),
    ("nearest_1.5", (1, 2, 5, 6), {"scale_factor": 1.5}),
    ("nearest_1d", (2, 3, 7), {"size": 10}),
    ("bilinear_up", (2, 2, 4, 5), {"scale_factor": 2, "mode": "bilinear"}),
    ("bilinear_down_size", (1, 2, 9, 7), {"size": (4, 5), "mode": "bilinear"}),
    ("bilinear_align", (1, 2, 4, 5), {"size": (7, 9), "mode": "bilinear",
                                      "align_corners": True}),
    ("bilinear_recompute", (1, 1, 5, 5), {"scale_factor": 1.7, "mode": "bilinear",
                                          "recompute_scale_factor": True}),
    ("linear", (2, 3, 6), {"scale_factor": 2.5, "mode": "linear"}),
    ("linear_align", (2, 3, 6), {"size": 4, "mode": "linear", "align_corners": True}),
]


@pytest.mark.parametrize("name,shape,kw", INTERPOLATE, ids=[i[0] for i in INTERPOLATE])
def test_interpolate_matches_torch(name, shape, kw):
    x = rand(*shape)
    results = []
    for lib in (gg, torch):
        xt = lib.tensor(x, requires_grad=True)
        out = lib.nn.functional.interpolate(xt, **kw)
        (out * lib.tensor(rand(*out.shape, seed=2))).sum().backward()
        results.append([out, xt.grad])
    for a, b in zip(*results, strict=True):
        close(a, b)
    if "recompute_scale_factor" not in kw:
        g_mod, t_mod = twin_layers(lambda m: m.Upsample(**kw))
        step_both(g_mod, t_mod, x)


def test_interpolate_errors_use_torch_wording():
    for lib in (gg, torch):
        f = lib.nn.functional.interpolate
        with pytest.raises(ValueError, match="align_corners option can only be set with the "
                           "interpolating modes"):
            f(lib.ones(1, 1, 2, 2), scale_factor=2, align_corners=True)
        with pytest.raises(ValueError, match="only one of size or scale_factor should be "
                           "defined"):
            f(lib.ones(1, 1, 2, 2), size=3, scale_factor=2)
        with pytest.raises(ValueError, match="either size or scale_factor should be defined"):
            f(lib.ones(1, 1, 2, 2))


CONV_T = [
    ("convT", lambda m: m.ConvTranspose2d(3, 2, 3), (2, 3, 4, 4)),
    ("convT_stride_pad_outpad", lambda m: m.ConvTranspose2d(2, 3, 3, stride=2, padding=1,
                                                            output_padding=1), (1, 2, 4, 5)),
    ("convT_groups_dilation", lambda m: m.ConvTranspose2d(4, 6, (2, 3), groups=2, dilation=2,
                                                          bias=False), (2, 4, 3, 3)),
    ("convT_unbatched", lambda m: m.ConvTranspose2d(2, 2, 2, stride=2), (2, 3, 3)),
]


@pytest.mark.parametrize("name,make,shape", CONV_T, ids=[c[0] for c in CONV_T])
def test_conv_transpose2d_matches_torch(name, make, shape):
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))
    # second derivatives through the transposed convolution, in the weight too
    x = rand(*shape, seed=3)
    gx, tx = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (dg,) = gg.autograd.grad((g_mod(gx) ** 3).sum(), gx, create_graph=True)
    (dt,) = torch.autograd.grad((t_mod(tx) ** 3).sum(), tx, create_graph=True)
    close(dg, dt, 1e-9, 1e-11)
    close(gg.autograd.grad(dg.sum(), g_mod.weight)[0],
          torch.autograd.grad(dt.sum(), t_mod.weight)[0], 1e-9, 1e-11)


def test_conv_transpose2d_and_fold_under_no_grad_and_errors():
    m = nn.ConvTranspose2d(4, 2, 3, stride=2)
    with gg.no_grad():
        y = m(gg.randn(1, 4, 3, 3))
        assert tuple(y.shape) == (1, 2, 7, 7) and not y.requires_grad
        assert tuple(F.fold(gg.randn(1, 4, 9), (4, 4), 2).shape) == (1, 1, 4, 4)
    for lib in (gg, torch):
        with pytest.raises(RuntimeError, match=r"Given transposed=1, weight of size \[4, 2, 3, "
                           r"3\], expected input\[1, 3, 4, 4\] to have 4 channels, but got 3 "
                           r"channels instead"):
            lib.nn.functional.conv_transpose2d(lib.ones(1, 3, 4, 4), lib.ones(4, 2, 3, 3))
        with pytest.raises(RuntimeError, match="output padding must be smaller than either "
                           "stride or dilation"):
            lib.nn.ConvTranspose2d(4, 2, 3, output_padding=1)(lib.ones(1, 4, 3, 3))


def test_instance_norm_errors_use_torch_wording():
    for lib in (gg, torch):
        with pytest.raises(ValueError, match="Expected more than 1 spatial element when "
                           "training, got input size"):
            lib.nn.functional.instance_norm(lib.ones(2, 3, 1))
        with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
            lib.nn.InstanceNorm2d(3)(lib.ones(2, 3))
        with pytest.raises(ValueError, match="expected input's size at dim=1 to match "
                           r"num_features \(4\), but got: 3."):
            lib.nn.InstanceNorm1d(4, affine=True)(lib.ones(2, 3, 5))
        with pytest.warns(UserWarning, match="does not match num_features"):
            lib.nn.InstanceNorm1d(4)(lib.randn(2, 3, 5))
        with pytest.raises(ValueError, match=r"expected 5D input \(got 4D input\)"):
            lib.nn.BatchNorm3d(3)(lib.ones(2, 3, 2, 2))


# ---- more losses and distances ------------------------------------------------------------
def _signs(*shape, seed=0):
    return np.where(np.random.default_rng(seed).random(shape) < 0.5, -1.0, 1.0)


LOSSES = [
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
@pytest.mark.parametrize("name,make,arrays,n_diff", LOSSES, ids=[x[0] for x in LOSSES])
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


# ---- padding, pixel shuffle, fold modules, bilinear, thresholds ---------------------------
SMALL_LAYERS = [
    ("zeropad2d", lambda m: m.ZeroPad2d((1, 2, 0, 1)), (2, 3, 4, 4)),
    ("constpad1d", lambda m: m.ConstantPad1d(2, 3.5), (2, 3, 4)),
    ("reflect2d", lambda m: m.ReflectionPad2d((2, 1, 1, 2)), (2, 3, 4, 5)),
    ("reflect1d_unbatched", lambda m: m.ReflectionPad1d(2), (3, 5)),
    ("replicate2d", lambda m: m.ReplicationPad2d(2), (1, 2, 3, 3)),
    ("replicate1d", lambda m: m.ReplicationPad1d((3, 1)), (2, 2, 4)),
    ("pixel_shuffle", lambda m: m.PixelShuffle(2), (2, 8, 3, 4)),
    ("pixel_unshuffle", lambda m: m.PixelUnshuffle(3), (1, 2, 6, 9)),
    ("unfold", lambda m: m.Unfold(2, stride=2), (2, 3, 4, 6)),
    ("fold", lambda m: m.Fold((4, 5), 2), (2, 8, 12)),
    ("threshold", lambda m: m.Threshold(0.1, 20.0), (3, 4)),
    ("hardshrink", lambda m: m.Hardshrink(), (3, 4)),
    ("softshrink", lambda m: m.Softshrink(0.3), (3, 4)),
]


@pytest.mark.parametrize("name,make,shape", SMALL_LAYERS, ids=[x[0] for x in SMALL_LAYERS])
def test_small_layers_match_torch(name, make, shape):
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_match_torch(mode):
    for shape, pads in [((2, 3, 5), (1, 2)), ((3, 5), (3, 1)), ((2, 3, 4, 5), (2, 1, 3, 0)),
                        ((2, 3, 4, 5), (-1, 2, 1, -1))]:
        x = rand(*shape)
        results = []
        for lib in (gg, torch):
            xt = lib.tensor(x, requires_grad=True)
            out = lib.nn.functional.pad(xt, pads, mode)
            (out * lib.tensor(rand(*out.shape, seed=2))).sum().backward()
            results.append([out, xt.grad])
        for a, b in zip(*results, strict=True):
            close(a, b)
    for lib in (gg, torch):
        f = lib.nn.functional.pad
        with pytest.raises(RuntimeError, match="Padding size should be less than the "
                           "corresponding input dimension"):
            f(lib.ones(1, 1, 3, 3), (3, 3, 0, 0), "reflect")
        with pytest.raises(NotImplementedError, match="Unrecognised padding mode foo"):
            f(lib.ones(1, 1, 3, 3), (1, 1), "foo")
        with pytest.raises(RuntimeError, match="Padding length must be divisible by 2"):
            f(lib.ones(1, 1, 3, 3), (1, 1, 1))


def test_bilinear_matches_torch():
    for bias in (True, False):
        g_mod, t_mod = twin_layers(lambda m, bias=bias: m.Bilinear(3, 4, 5, bias=bias))
        a, b = rand(6, 3), rand(6, 4, seed=1)
        results = []
        for lib, mod in ((gg, g_mod), (torch, t_mod)):
            xa, xb = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
            out = mod(xa, xb)
            (out * lib.tensor(rand(6, 5, seed=2))).sum().backward()
            results.append([out, xa.grad, xb.grad] + [p.grad for p in mod.parameters()])
        for x, y in zip(*results, strict=True):
            close(x, y)


def test_pixel_shuffle_and_dropout1d_errors_and_masks():
    for lib in (gg, torch):
        with pytest.raises(RuntimeError, match=r"input.size\(-3\)=3 is not divisible by 4"):
            lib.nn.functional.pixel_shuffle(lib.ones(1, 3, 2, 2), 2)
        with pytest.raises(RuntimeError, match=r"expects width to be divisible by "
                           r"downscale_factor, but input.size\(-1\)=3 is not divisible by 2"):
            lib.nn.functional.pixel_unshuffle(lib.ones(1, 1, 4, 3), 2)
        with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input, but "
                           "received a 4D input"):
            lib.nn.functional.dropout1d(lib.ones(2, 3, 4, 5))
    gg.manual_seed(1)
    out = nn.Dropout1d(0.5)(gg.ones(8, 16, 5)).numpy()
    assert (out.min(axis=2) == out.max(axis=2)).all() and set(np.unique(out)) == {0.0, 2.0}


DECODERS = [
    ("decoder_layer", lambda m: m.TransformerDecoderLayer(8, 2, 16, 0.0), {}),
    ("decoder_layer_pre_norm_gelu", lambda m: m.TransformerDecoderLayer(
        8, 4, 12, 0.0, activation="gelu", norm_first=True), {"masks": True}),
    ("decoder", lambda m: m.TransformerDecoder(m.TransformerDecoderLayer(8, 2, 16, 0.0), 2,
                                               norm=m.LayerNorm(8)), {"masks": True}),
]


@pytest.mark.parametrize("name,make,kw", DECODERS, ids=[d[0] for d in DECODERS])
def test_transformer_decoder_matches_torch(name, make, kw):
    g_mod, t_mod = twin_layers(make)
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    tgt, mem = rand(4, 3, 8), rand(6, 3, 8, seed=1)
    call = {}
    if kw.get("masks"):
        pad = np.zeros((3, 6), bool)
        pad[1, -2:] = True
        call = {"tgt_mask": np.triu(np.full((4, 4), -np.inf), 1),
                "memory_key_padding_mask": pad}
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        xt, xm = lib.tensor(tgt, requires_grad=True), lib.tensor(mem, requires_grad=True)
        out = mod(xt, xm, **{k: lib.tensor(v) for k, v in call.items()})
        (out * lib.tensor(rand(*out.shape, seed=2))).sum().backward()
        results.append([out, xt.grad, xm.grad] + [p.grad for _, p in mod.named_parameters()])
    for a, b in zip(*results, strict=True):
        close(a, b, 1e-9, 1e-11)


def test_transformer_matches_torch():
    torch.manual_seed(0)
    t_mod = torch.nn.Transformer(8, 2, 2, 1, 16, 0.0, batch_first=True).double()
    g_mod = nn.Transformer(8, 2, 2, 1, 16, 0.0, batch_first=True).double()
    copy_weights(g_mod, t_mod)
    assert repr(g_mod) == repr(t_mod)
    src, tgt = rand(3, 5, 8), rand(3, 4, 8, seed=1)
    results = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        xs, xt = lib.tensor(src, requires_grad=True), lib.tensor(tgt, requires_grad=True)
        mask = lib.nn.Transformer.generate_square_subsequent_mask(4, dtype=lib.float64)
        out = mod(xs, xt, tgt_mask=mask, tgt_is_causal=True)
        (out * lib.tensor(rand(*out.shape, seed=2))).sum().backward()
        results.append([out, xs.grad, xt.grad] + [p.grad for _, p in mod.named_parameters()])
    for a, b in zip(*results, strict=True):
        close(a, b, 1e-9, 1e-11)
    # every matrix re-initialised with xavier_uniform_ (bound sqrt(6 / (fan_in + fan_out)))
    gg.manual_seed(0)
    w = nn.Transformer(8, 2, 1, 1, 16).encoder.layers[0].linear1.weight
    assert float(w.detach().abs().max()) <= np.sqrt(6 / (8 + 16))
    for lib in (gg, torch):
        m = lib.nn.Transformer(8, 2, 1, 1, 16)
        with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
            m(lib.ones(5, 2, 8), lib.ones(4, 3, 8))
        with pytest.raises(RuntimeError, match="the feature number of src and tgt must be "
                           "equal to d_model"):
            m(lib.ones(5, 2, 8), lib.ones(4, 2, 6))


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


@pytest.mark.parametrize("fn,kw", [("hardtanh", {}), ("relu6", {}), ("hardsigmoid", {}),
                                   ("hardswish", {}), ("mish", {}), ("selu", {}),
                                   ("celu", {"alpha": 0.7}),
                                   ("threshold", {"threshold": 0.1, "value": 2.0})])
def test_inplace_activations_backward_after_an_op_match_torch(fn, kw):
    """inplace=True on a non-leaf: the backward still sees the value before the write."""
    x = rand(3, 4) * 3
    results = []
    for lib in (gg, torch):
        xt = lib.tensor(x, requires_grad=True)
        h = xt * 1.5
        out = getattr(lib.nn.functional, fn)(h, inplace=True, **kw)
        assert out is h
        (out * lib.tensor(rand(3, 4, seed=1))).sum().backward()
        results.append([out, xt.grad])
    rtol = 1e-6 if fn in FLOAT32_CONSTANT_GRADS else RTOL
    close(results[0][0], results[1][0])
    close(results[0][1], results[1][1], rtol)
