"""The optimizers beyond SGD/Adam (RMSprop, Adagrad, Adamax, NAdam, RAdam) and the
learning-rate schedulers, each against PyTorch step by step: same initial parameters,
same data, parameters (and learning rates, momenta) equal after every step; their
state_dict layouts; PyTorch's error messages; the Optimizer API (add_param_group,
zero_grad)."""

from __future__ import annotations


import warnings

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad import nn, optim
from graphgrad.optim import lr_scheduler

STEPS = 6


def _models(dtype: str, seed: int = 0):
    """A tanh MLP in PyTorch and the same one (copied weights) in graphgrad."""
    torch.manual_seed(seed)
    t_model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                                  torch.nn.Linear(7, 3)).to(getattr(torch, dtype))
    g_model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(getattr(gg, dtype))
    g_model.load_state_dict({k: gg.tensor(v.detach().numpy().copy())
                             for k, v in t_model.state_dict().items()})
    return g_model, t_model


def _train(pairs, steps: int, dtype: str, seed: int = 3, check=None):
    """Run (model, optimizer, module namespace) pairs on the same batches; ``check``
    is called after every step."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        x = rng.standard_normal((9, 5)).astype(dtype)
        y = rng.integers(0, 3, 9)
        for model, opt, m in pairs:
            opt.zero_grad()
            m.nn.functional.cross_entropy(model(m.tensor(x)), m.tensor(y)).backward()
            opt.step()
        if check is not None:
            check(step)


def _assert_same(g_model, t_model, tol):
    t = dict(t_model.named_parameters())
    for name, p in g_model.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), t[name].detach().numpy(), rtol=tol,
                                   atol=tol, err_msg=name)


OPTIMIZERS = [
    ("rmsprop", "RMSprop", dict(lr=0.01)),
    ("rmsprop_all", "RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1,
                                    momentum=0.8, centered=True)),
    ("rmsprop_centered", "RMSprop", dict(lr=0.005, centered=True)),
    ("rmsprop_momentum_max", "RMSprop", dict(lr=0.01, momentum=0.5, maximize=True)),
    ("adagrad", "Adagrad", dict(lr=0.1)),
    ("adagrad_all", "Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.01,
                                    initial_accumulator_value=0.3, eps=1e-6)),
    ("adagrad_max", "Adagrad", dict(lr=0.05, maximize=True)),
    ("adamax", "Adamax", dict(lr=0.01)),
    ("adamax_all", "Adamax", dict(lr=0.02, betas=(0.7, 0.95), eps=1e-5, weight_decay=0.1,
                                  maximize=True)),
    ("nadam", "NAdam", dict(lr=0.01)),
    ("nadam_all", "NAdam", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1,
                                momentum_decay=0.01)),
    ("nadam_decoupled", "NAdam", dict(lr=0.01, weight_decay=0.05,
                                      decoupled_weight_decay=True, maximize=True)),
    ("radam", "RAdam", dict(lr=0.01)),
    # beta2 = 0.9: rho_t passes 5 at step 6, so both branches run
    ("radam_rectified", "RAdam", dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.1)),
    ("radam_decoupled", "RAdam", dict(lr=0.01, betas=(0.3, 0.6), weight_decay=0.05,
                                      decoupled_weight_decay=True, maximize=True)),
    ("adadelta", "Adadelta", dict()),
    ("adadelta_all", "Adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1,
                                      maximize=True)),
    ("rprop", "Rprop", dict(lr=0.01)),
    ("rprop_all", "Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.06),
                                maximize=True)),
    ("adam_amsgrad_max", "Adam", dict(lr=0.01, amsgrad=True, maximize=True)),
    ("adam_beta1_small", "Adam", dict(lr=0.01, betas=(0.3, 0.999))),
    ("sgd_max", "SGD", dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
]


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-12), ("float32", 1e-6)])
@pytest.mark.parametrize("name,cls,kw", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_optimizer_steps_match_torch(name, cls, kw, dtype, tol):
    g_model, t_model = _models(dtype)
    g_opt = getattr(optim, cls)(g_model.parameters(), **kw)
    t_opt = getattr(torch.optim, cls)(t_model.parameters(), **kw, foreach=False)
    _train([(g_model, g_opt, gg), (t_model, t_opt, torch)], STEPS, dtype,
           check=lambda step: _assert_same(g_model, t_model, tol))
    for p in g_model.parameters():
        assert p.dtype == getattr(gg, dtype)
    # the state has PyTorch's keys, shapes and dtypes, and equal values
    t_state = t_opt.state_dict()["state"]
    for i, s in g_opt.state_dict()["state"].items():
        assert sorted(s) == sorted(t_state[i]), (i, sorted(s), sorted(t_state[i]))
        for key, value in s.items():
            want = t_state[i][key]
            assert tuple(value.shape) == tuple(want.shape), key
            assert str(value.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], key
            # momentum buffers of float32 RMSprop reach ~10: a float32 rounding there is
            # 1e-6, so the state is compared relative to its size
            scale = max(1.0, float(want.abs().max()))
            np.testing.assert_allclose(value.numpy(), want.numpy(), rtol=tol,
                                       atol=tol * scale, err_msg=key)


@pytest.mark.parametrize("cls,kw", [
    ("RMSprop", dict(momentum=0.9, centered=True, weight_decay=0.1)),
    ("Adagrad", dict(lr_decay=0.1, initial_accumulator_value=0.5)),
    ("Adamax", dict(weight_decay=0.1)),
    ("NAdam", dict(weight_decay=0.1)),
    ("RAdam", dict(betas=(0.5, 0.8), weight_decay=0.1, decoupled_weight_decay=True)),
    ("Adadelta", dict(weight_decay=0.1)),
    ("Rprop", dict(lr=0.1)),
])
def test_complex_parameters_update_like_torch(cls, kw):
    """Complex parameters are updated as PyTorch's view_as_real: real and imaginary
    parts are separate entries. The same complex gradients are given to both, with
    a non-contiguous (transposed) one among them."""
    def trajectory(mod, m):
        rng = np.random.default_rng(0)
        w = m.tensor(rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2)),
                     requires_grad=True)
        opt = getattr(mod, cls)([w], **kw)
        path = []
        for step in range(STEPS):
            grad = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
            w.grad = m.tensor(grad).T if step % 2 else m.tensor(grad.T.copy())
            opt.step()
            path.append(w.detach().numpy().copy())
        return np.array(path)
    np.testing.assert_allclose(trajectory(optim, gg), trajectory(torch.optim, torch),
                               rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cls,kw", [
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
    ("Adamax", dict(lr=0.01)),
    ("NAdam", dict(lr=0.01)),
    ("RAdam", dict(lr=0.01, betas=(0.8, 0.9))),
    ("Adadelta", dict(lr=0.5)),
    ("Rprop", dict(lr=0.02)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
])
def test_state_dict_from_torch_continues_identically(cls, kw):
    """PyTorch's optimizer state_dict, its tensors converted, loads into graphgrad's
    optimizer and training continues in step: the layouts are the same."""
    g_model, t_model = _models("float64")
    t_opt = getattr(torch.optim, cls)(t_model.parameters(), **kw, foreach=False)
    _train([(t_model, t_opt, torch)], 3, "float64", seed=11)
    g_model.load_state_dict({k: gg.tensor(v.detach().numpy().copy())
                             for k, v in t_model.state_dict().items()})
    sd = t_opt.state_dict()
    converted = {"state": {i: {k: gg.tensor(v.numpy().copy()) for k, v in s.items()}
                           for i, s in sd["state"].items()},
                 "param_groups": sd["param_groups"]}
    g_opt = getattr(optim, cls)(g_model.parameters(), **kw)
    g_opt.load_state_dict(converted)
    # PyTorch's own resume casts floating state to the parameters' dtype (NAdam's
    # float32 mu_product becomes float64), as graphgrad's load does
    t_opt.load_state_dict(sd)
    _train([(g_model, g_opt, gg), (t_model, t_opt, torch)], 3, "float64", seed=12,
           check=lambda step: _assert_same(g_model, t_model, 1e-12))
    # and graphgrad's own round trip: a fresh optimizer from the state_dict, same steps
    g_copy, _ = _models("float64")
    g_copy.load_state_dict(g_model.state_dict())
    g_opt2 = getattr(optim, cls)(g_copy.parameters(), **kw)
    g_opt2.load_state_dict(g_opt.state_dict())
    _train([(g_model, g_opt, gg), (g_copy, g_opt2, gg)], 2, "float64", seed=13)
    for a, b in zip(g_model.parameters(), g_copy.parameters(), strict=True):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())


@pytest.mark.parametrize("cls,kw,message", [
    ("RMSprop", dict(lr=-1.0), "Invalid learning rate: -1.0"),
    ("RMSprop", dict(alpha=-0.5), "Invalid alpha value: -0.5"),
    ("RMSprop", dict(momentum=-0.1), "Invalid momentum value: -0.1"),
    ("RMSprop", dict(eps=-1.0), "Invalid epsilon value: -1.0"),
    ("Adagrad", dict(lr_decay=-1.0), "Invalid lr_decay value: -1.0"),
    ("Adagrad", dict(initial_accumulator_value=-1.0),
     "Invalid initial_accumulator_value value: -1.0"),
    ("Adagrad", dict(weight_decay=-1.0), "Invalid weight_decay value: -1.0"),
    ("Adamax", dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0: 1.0"),
    ("NAdam", dict(momentum_decay=-1.0), "Invalid momentum_decay value: -1.0"),
    ("NAdam", dict(betas=(0.9, 1.5)), "Invalid beta parameter at index 1: 1.5"),
    ("RAdam", dict(eps=-1e-8), "Invalid epsilon value: -1e-08"),
    ("Adadelta", dict(rho=1.5), "Invalid rho value: 1.5"),
    ("Rprop", dict(etas=(0.5, 0.9)), "Invalid eta values: 0.5, 0.9"),
])
def test_invalid_hyperparameters_raise_torch_messages(cls, kw, message):
    for mod, m in ((optim, gg), (torch.optim, torch)):
        with pytest.raises(ValueError) as info:
            getattr(mod, cls)([m.zeros(2, requires_grad=True)], **kw)
        assert str(info.value) == message


ALL = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
       "Rprop", "LBFGS"]


@pytest.mark.parametrize("cls", ALL)
def test_signature_and_defaults_match_torch(cls):
    """PyTorch's parameter names, order, kinds and default values, and the same
    ``defaults`` (so parameter groups and state_dicts have the same keys)."""
    import inspect
    g_sig = inspect.signature(getattr(optim, cls).__init__).parameters
    t_sig = inspect.signature(getattr(torch.optim, cls).__init__).parameters
    assert [(n, p.kind) for n, p in g_sig.items()] == [(n, p.kind) for n, p in t_sig.items()]
    for name, param in g_sig.items():
        assert param.default == t_sig[name].default, name
    g = getattr(optim, cls)([gg.zeros(1, requires_grad=True)]).defaults
    t = getattr(torch.optim, cls)([torch.zeros(1, requires_grad=True)]).defaults
    assert g == t


def test_implementation_options_are_recorded_with_torch_checks():
    """foreach/fused/capturable choose PyTorch's kernels; graphgrad's one implementation
    gives the same steps, so they are recorded; PyTorch's conflicts raise its errors;
    differentiable=True is refused."""
    w = gg.zeros(2, requires_grad=True)
    opt = optim.Adam([w], foreach=True, capturable=True)
    assert opt.defaults["foreach"] and opt.param_groups[0]["capturable"]
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together."):
        optim.SGD([w], fused=True, foreach=True)
    with pytest.raises(RuntimeError, match="`fused` does not support `differentiable`"):
        optim.Adagrad([w], fused=True, differentiable=True)
    with pytest.raises(NotImplementedError, match="differentiable=True is not supported"):
        optim.NAdam([w], differentiable=True)
    g_model, t_model = _models("float64")
    g_opt = optim.AdamW(g_model.parameters(), lr=0.01, fused=True)
    t_opt = torch.optim.AdamW(t_model.parameters(), lr=0.01, fused=True)
    _train([(g_model, g_opt, gg), (t_model, t_opt, torch)], 3, "float64",
           check=lambda step: _assert_same(g_model, t_model, 1e-12))
    assert g_opt.state_dict()["param_groups"] == t_opt.state_dict()["param_groups"]


def test_adam_decoupled_weight_decay_is_adamw():
    g_model, t_model = _models("float64")
    g_opt = optim.Adam(g_model.parameters(), lr=0.01, weight_decay=0.1,
                       decoupled_weight_decay=True)
    t_opt = torch.optim.AdamW(t_model.parameters(), lr=0.01, weight_decay=0.1, foreach=False)
    _train([(g_model, g_opt, gg), (t_model, t_opt, torch)], STEPS, "float64",
           check=lambda step: _assert_same(g_model, t_model, 1e-12))
    adamw = optim.AdamW([gg.zeros(1, requires_grad=True)])
    sd = adamw.state_dict()
    sd["param_groups"][0]["decoupled_weight_decay"] = False
    adamw.load_state_dict(sd)  # as PyTorch: AdamW stays decoupled
    assert adamw.param_groups[0]["decoupled_weight_decay"] is True


# ---- learning-rate schedulers ------------------------------------------------------

def _optimizers(kind: str = "sgd"):
    """The same two-group optimizer in graphgrad and PyTorch."""
    def groups(m):
        return [{"params": [m.zeros(2, requires_grad=True)], "lr": 0.3},
                {"params": [m.zeros(3, requires_grad=True)]}]
    if kind == "sgd":
        return (optim.SGD(groups(gg), lr=0.1, momentum=0.9),
                torch.optim.SGD(groups(torch), lr=0.1, momentum=0.9))
    return optim.Adam(groups(gg), lr=0.01), torch.optim.Adam(groups(torch), lr=0.01)


def _group_values(opt):
    return [(g["lr"], g.get("momentum"), g.get("betas")) for g in opt.param_groups]


def _comparable(state: dict) -> dict:
    """A scheduler state_dict without the entries that cannot be compared across
    frameworks (callables, nested dicts are compared recursively)."""
    out = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out[k] = _comparable(v)
        elif isinstance(v, list):
            out[k] = [_comparable(x) if isinstance(x, dict) else x for x in v]
        elif not callable(v):
            out[k] = v
    return out


SCHEDULERS = [
    ("lambda", "sgd", lambda s, o: s.LambdaLR(o, [lambda e: 0.9 ** e, lambda e: 1 / (1 + e)])),
    ("multiplicative", "sgd", lambda s, o: s.MultiplicativeLR(o, lambda e: 0.95)),
    ("step", "sgd", lambda s, o: s.StepLR(o, step_size=3, gamma=0.5)),
    ("multistep", "sgd", lambda s, o: s.MultiStepLR(o, milestones=[2, 5, 5], gamma=0.3)),
    ("constant", "sgd", lambda s, o: s.ConstantLR(o, factor=0.25, total_iters=4)),
    ("linear", "sgd", lambda s, o: s.LinearLR(o, start_factor=0.1, end_factor=0.8,
                                              total_iters=7)),
    ("exponential", "adam", lambda s, o: s.ExponentialLR(o, gamma=0.9)),
    ("polynomial", "sgd", lambda s, o: s.PolynomialLR(o, total_iters=8, power=2.0)),
    ("cosine", "sgd", lambda s, o: s.CosineAnnealingLR(o, T_max=5, eta_min=0.01)),
    ("warm_restarts", "sgd", lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2,
                                                                        eta_min=1e-3)),
    ("warm_restarts_1", "adam", lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=4)),
    ("cyclic", "sgd", lambda s, o: s.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.2],
                                              step_size_up=3, step_size_down=2)),
    ("cyclic_tri2_adam", "adam", lambda s, o: s.CyclicLR(o, 1e-3, 1e-2, step_size_up=2,
                                                         mode="triangular2")),
    ("cyclic_exp_range", "sgd", lambda s, o: s.CyclicLR(o, 0.01, 0.1, step_size_up=4,
                                                        mode="exp_range", gamma=0.9)),
    ("onecycle_cos", "sgd", lambda s, o: s.OneCycleLR(o, max_lr=[0.5, 1.0], total_steps=16)),
    ("onecycle_linear_adam", "adam", lambda s, o: s.OneCycleLR(
        o, max_lr=0.01, epochs=4, steps_per_epoch=4, pct_start=0.25,
        anneal_strategy="linear", div_factor=10.0, final_div_factor=100.0)),
    ("onecycle_three_phase", "sgd", lambda s, o: s.OneCycleLR(
        o, max_lr=0.1, total_steps=16, three_phase=True, base_momentum=0.8,
        max_momentum=[0.9, 0.95])),
    ("onecycle_no_momentum", "adam", lambda s, o: s.OneCycleLR(o, max_lr=0.1, total_steps=16,
                                                                cycle_momentum=False)),
    ("sequential", "sgd", lambda s, o: s.SequentialLR(
        o, [s.LinearLR(o, start_factor=0.2, total_iters=3), s.ExponentialLR(o, gamma=0.8),
            s.CosineAnnealingLR(o, T_max=4)], milestones=[3, 8])),
    ("chained", "sgd", lambda s, o: s.ChainedScheduler(
        [s.ConstantLR(o, factor=0.5, total_iters=3), s.ExponentialLR(o, gamma=0.9)])),
    ("sequential_of_chained", "adam", lambda s, o: s.SequentialLR(
        o, [s.ChainedScheduler([s.LinearLR(o, start_factor=0.5, total_iters=4),
                                s.StepLR(o, 2, 0.7)]),
            s.PolynomialLR(o, total_iters=5)], milestones=[6])),
]


@pytest.mark.parametrize("name,kind,make", SCHEDULERS, ids=[s[0] for s in SCHEDULERS])
def test_scheduler_matches_torch_step_by_step(name, kind, make):
    """Rates (and cycled momenta) equal to PyTorch's after construction and after each
    of 15 steps, the state_dict has PyTorch's keys and values, and a scheduler loaded
    from it mid-run continues identically."""
    g_opt, t_opt = _optimizers(kind)
    gs, ts = make(lr_scheduler, g_opt), make(torch.optim.lr_scheduler, t_opt)
    assert _group_values(g_opt) == _group_values(t_opt)
    assert gs.get_last_lr() == ts.get_last_lr()
    for step in range(15):
        g_opt.step()
        t_opt.step()
        gs.step()
        ts.step()
        assert gs.get_last_lr() == ts.get_last_lr(), step
        assert _group_values(g_opt) == _group_values(t_opt), step
        if step == 6:
            g_state, t_state = gs.state_dict(), ts.state_dict()
            assert _comparable(g_state) == _comparable(t_state)
    # resume: a new optimizer and scheduler loaded from the mid-run checkpoint
    g_opt2, _ = _optimizers(kind)
    g_opt2.load_state_dict(g_opt.state_dict())
    gs2 = make(lr_scheduler, g_opt2)
    gs2.load_state_dict(gs.state_dict())
    g_opt2.load_state_dict(g_opt.state_dict())
    for _ in range(1 if name.startswith("onecycle") else 4):
        for opt, sched in ((g_opt, gs), (g_opt2, gs2)):
            opt.step()
            sched.step()
        assert gs2.get_last_lr() == gs.get_last_lr()
        assert _group_values(g_opt2) == _group_values(g_opt)


@pytest.mark.parametrize("kw,metrics", [
    (dict(patience=2), [5, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3, 3]),
    (dict(mode="max", factor=0.5, patience=1, threshold=0.1, threshold_mode="abs",
          cooldown=2, min_lr=[0.01, 0.02]), [1, 1.05, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2,
                                             1.2, 1.2, 1.2, 1.2, 1.2]),
    (dict(mode="min", factor=0.2, patience=0, threshold=0.5, eps=0.05), [10] * 12),
    (dict(mode="max", patience=1, threshold=0.01), [1, 2, 2.01, 2.03, 2.0, 1.0, 3, 3, 3]),
])
def test_reduce_lr_on_plateau_matches_torch(kw, metrics):
    g_opt, t_opt = _optimizers("sgd")
    gs = lr_scheduler.ReduceLROnPlateau(g_opt, **kw)
    ts = torch.optim.lr_scheduler.ReduceLROnPlateau(t_opt, **kw)
    for i, metric in enumerate(metrics):
        g_opt.step()
        t_opt.step()
        gs.step(gg.tensor(float(metric), dtype=gg.float64) if i % 2 else metric)
        ts.step(metric)
        assert gs.get_last_lr() == ts.get_last_lr(), i
        assert (gs.best, gs.num_bad_epochs, gs.cooldown_counter, gs.last_epoch) == \
            (ts.best, ts.num_bad_epochs, ts.cooldown_counter, ts.last_epoch)
    assert _comparable(gs.state_dict()) == _comparable(ts.state_dict())
    fresh = lr_scheduler.ReduceLROnPlateau(_optimizers("sgd")[0])
    fresh.load_state_dict(gs.state_dict())
    assert (fresh.mode, fresh.patience, fresh.best, fresh.min_lrs) == \
        (gs.mode, gs.patience, gs.best, gs.min_lrs)


@pytest.mark.parametrize("name,make", [
    ("step", lambda s, o: s.StepLR(o, 3, 0.5)),
    ("multistep", lambda s, o: s.MultiStepLR(o, [2, 4, 4], 0.5)),
    ("constant", lambda s, o: s.ConstantLR(o, 0.5, 3)),
    ("linear", lambda s, o: s.LinearLR(o, 0.2, 0.9, 5)),
    ("exponential", lambda s, o: s.ExponentialLR(o, 0.8)),
    ("polynomial", lambda s, o: s.PolynomialLR(o, 6, 1.5)),
    ("cosine", lambda s, o: s.CosineAnnealingLR(o, 6, 0.01)),
    ("warm_restarts", lambda s, o: s.CosineAnnealingWarmRestarts(o, 2, 3)),
    ("lambda", lambda s, o: s.LambdaLR(o, lambda e: 1 / (e + 1))),
])
def test_step_with_epoch_uses_the_closed_form_with_torch_warning(name, make):
    """``step(epoch)`` is deprecated: PyTorch's warning, then the closed form where the
    schedule has one; the warm restarts take fractional epochs."""
    g_opt, t_opt = _optimizers("sgd")
    gs, ts = make(lr_scheduler, g_opt), make(torch.optim.lr_scheduler, t_opt)
    epochs = [3, 1, 7, 7, 0, 12] if name != "warm_restarts" else [0.5, 2.25, 7, 9.5, 1]
    for epoch in epochs:
        g_opt.step()
        t_opt.step()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gs.step(epoch)
        # CosineAnnealingWarmRestarts has its own step, without the warning (as PyTorch)
        assert [str(w.message)[:40] for w in caught] == \
            ([] if name == "warm_restarts" else [lr_scheduler.EPOCH_DEPRECATION_WARNING[:40]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ts.step(epoch)
        np.testing.assert_allclose(gs.get_last_lr(), ts.get_last_lr(), rtol=1e-15)
        assert gs.last_epoch == ts.last_epoch


@pytest.mark.parametrize("make", [
    lambda s, o: s.ExponentialLR(o, gamma=0.5, last_epoch=3),
    lambda s, o: s.CosineAnnealingLR(o, T_max=10, last_epoch=3),
    lambda s, o: s.LinearLR(o, start_factor=0.5, total_iters=6, last_epoch=3),
    lambda s, o: s.StepLR(o, step_size=2, last_epoch=3),
    lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=3, last_epoch=3),
])
def test_resuming_with_last_epoch_matches_torch(make):
    g_opt, t_opt = _optimizers("sgd")
    for opt in (g_opt, t_opt):
        for g in opt.param_groups:
            g["initial_lr"] = 0.2
    gs, ts = make(lr_scheduler, g_opt), make(torch.optim.lr_scheduler, t_opt)
    for _ in range(5):
        assert gs.get_last_lr() == ts.get_last_lr()
        g_opt.step()
        t_opt.step()
        gs.step()
        ts.step()
    g_fresh, t_fresh = _optimizers("sgd")
    with pytest.raises(KeyError) as g_err:
        make(lr_scheduler, g_fresh)
    with pytest.raises(KeyError) as t_err:
        make(torch.optim.lr_scheduler, t_fresh)
    assert str(g_err.value) == str(t_err.value)


def test_scheduler_warnings_match_torch():
    """Stepping the scheduler before the optimizer, and calling get_lr() directly,
    warn as PyTorch does; the usual order does not."""
    g_opt, _ = _optimizers("sgd")
    sched = lr_scheduler.StepLR(g_opt, 2)
    with pytest.warns(UserWarning, match=r"Detected call of `lr_scheduler.step\(\)` before"):
        sched.step()
    with pytest.warns(UserWarning, match=r"please use `get_last_lr\(\)`"):
        sched.get_lr()
    g_opt, _ = _optimizers("sgd")
    sched = lr_scheduler.OneCycleLR(g_opt, 0.1, total_steps=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            g_opt.step()
            sched.step()
    with pytest.raises(ValueError, match="Tried to step 4 times. The specified number of "
                                         "total steps is 3"):
        g_opt.step()
        sched.step()


@pytest.mark.parametrize("make,message", [
    (lambda s, o: s.ReduceLROnPlateau(o, factor=1.0), "Factor should be < 1.0."),
    (lambda s, o: s.ReduceLROnPlateau(o, mode="up"), "mode up is unknown!"),
    (lambda s, o: s.ReduceLROnPlateau(o, threshold_mode="x"), "threshold mode x is unknown!"),
    (lambda s, o: s.ReduceLROnPlateau(o, min_lr=[0.1]), "expected 2 min_lrs, got 1"),
    (lambda s, o: s.LinearLR(o, start_factor=0), "Starting multiplicative factor expected"),
    (lambda s, o: s.LinearLR(o, end_factor=2), "Ending multiplicative factor expected"),
    (lambda s, o: s.ConstantLR(o, factor=2), "Constant multiplicative factor expected"),
    (lambda s, o: s.LambdaLR(o, [lambda e: 1]), "Expected 2 lr_lambdas, but got 1"),
    (lambda s, o: s.OneCycleLR(o, 0.1), "You must define either total_steps OR"),
    (lambda s, o: s.OneCycleLR(o, 0.1, total_steps=0), "Expected positive integer total_steps"),
    (lambda s, o: s.OneCycleLR(o, 0.1, 10, pct_start=1), "Expected float between 0 and 1"),
    (lambda s, o: s.OneCycleLR(o, 0.1, 10, anneal_strategy="x"), "anneal_strategy must be"),
    (lambda s, o: s.OneCycleLR(o, [0.1], 10), "max_lr must have the same length"),
    (lambda s, o: s.CyclicLR(o, 0.1, 1.0, mode="x"), "mode is invalid and scale_fn is None"),
    (lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=0), "Expected positive integer T_0"),
    (lambda s, o: s.CosineAnnealingWarmRestarts(o, 2, T_mult=0), "Expected integer T_mult"),
    (lambda s, o: s.SequentialLR(o, [], []), "SequentialLR expects at least one scheduler"),
    (lambda s, o: s.SequentialLR(o, [s.StepLR(o, 2)], [1]), "Sequential Schedulers expects"),
    (lambda s, o: s.SequentialLR(o, [s.ReduceLROnPlateau(o)], []),
     "does not support `ReduceLROnPlateau`"),
    (lambda s, o: s.ChainedScheduler([]), "to be chained, but got no scheduler"),
])
def test_scheduler_errors_match_torch(make, message):
    g_opt, t_opt = _optimizers("sgd")
    with pytest.raises(ValueError) as g_err:
        make(lr_scheduler, g_opt)
    with pytest.raises(ValueError) as t_err:
        make(torch.optim.lr_scheduler, t_opt)
    assert message in str(t_err.value)
    assert str(g_err.value) == str(t_err.value)


def test_cycle_momentum_needs_a_momentum():
    for mod, m in ((optim, gg), (torch.optim, torch)):
        opt = mod.Adagrad([m.zeros(1, requires_grad=True)])
        with pytest.raises(ValueError, match="optimizer must support momentum or beta1"):
            mod.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=5)
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        lr_scheduler.StepLR([], 2)


def test_onecycle_trains_a_model_like_torch():
    """OneCycleLR driving Adam's lr and beta1 over a real training run."""
    g_model, t_model = _models("float64")
    g_opt = optim.Adam(g_model.parameters(), lr=0.01)
    t_opt = torch.optim.Adam(t_model.parameters(), lr=0.01, foreach=False)
    gs = lr_scheduler.OneCycleLR(g_opt, max_lr=0.05, total_steps=8)
    ts = torch.optim.lr_scheduler.OneCycleLR(t_opt, max_lr=0.05, total_steps=8)

    def check(step):
        gs.step()
        ts.step()
        _assert_same(g_model, t_model, 1e-12)
    _train([(g_model, g_opt, gg), (t_model, t_opt, torch)], 7, "float64", check=check)


class _Warmup:
    """A callable object: its attributes are what a scheduler's state_dict saves."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def __call__(self, epoch: float) -> float:
        return min(1.0, (epoch + 1) / self.epochs)


def test_callable_objects_are_saved_by_their_dict_as_torch():
    """LambdaLR/MultiplicativeLR save a callable object's __dict__ (functions: None),
    CyclicLR its custom scale_fn's; loading restores them into the new objects."""
    g_opt, t_opt = _optimizers("sgd")
    makers = [lambda s, o, w: s.LambdaLR(o, [w, lambda e: 1.0]),
              lambda s, o, w: s.CyclicLR(o, 0.01, 0.1, step_size_up=2, scale_fn=w)]
    for make in makers:
        gs = make(lr_scheduler, g_opt, _Warmup(4))
        ts = make(torch.optim.lr_scheduler, t_opt, _Warmup(4))
        g_state, t_state = gs.state_dict(), ts.state_dict()
        assert _comparable(g_state) == _comparable(t_state)
        assert {"epochs": 4} in (g_state.get("lr_lambdas") or [g_state["_scale_fn_custom"]])
        g_state = {**g_state}
        other = make(lr_scheduler, g_opt, _Warmup(9))
        other.load_state_dict(g_state)
        fn = other.lr_lambdas[0] if hasattr(other, "lr_lambdas") else other._scale_fn_custom
        assert fn.epochs == 4
        assert "lr_lambdas" in g_state or "_scale_fn_custom" in g_state  # left as it was


# ---- the Optimizer API ---------------------------------------------------------------

def test_add_param_group_matches_torch():
    """A group added later gets the defaults, steps like PyTorch's, and the checks
    raise PyTorch's errors."""
    g_model, t_model = _models("float64")
    g_opt = optim.RMSprop(g_model[0].parameters(), lr=0.01, momentum=0.5, foreach=False)
    t_opt = torch.optim.RMSprop(t_model[0].parameters(), lr=0.01, momentum=0.5, foreach=False)
    _train([(g_model, g_opt, gg), (t_model, t_opt, torch)], 2, "float64")
    g_opt.add_param_group({"params": g_model[2].parameters(), "alpha": 0.9})
    t_opt.add_param_group({"params": t_model[2].parameters(), "alpha": 0.9})
    assert [{k: v for k, v in g.items() if k != "params"} for g in g_opt.param_groups] == \
        [{k: v for k, v in g.items() if k != "params"} for g in t_opt.param_groups]
    _train([(g_model, g_opt, gg), (t_model, t_opt, torch)], 4, "float64", seed=5,
           check=lambda step: _assert_same(g_model, t_model, 1e-12))
    assert g_opt.state_dict()["param_groups"][1]["params"] == [2, 3]
    w = gg.zeros(2, requires_grad=True)
    cases = [
        (["not a dict"], TypeError, "param_group must be a dict, but got <class 'list'>"),
        ({"params": {w}}, TypeError, "optimizer parameters need to be organized in ordered "
                                     "collections"),
        ({"params": [w, 1.0]}, TypeError, "optimizer can only optimize Tensors, but one of "
                                          "the params is float"),
        ({"params": [w * 2]}, ValueError, "can't optimize a non-leaf Tensor"),
        ({"params": [g_model[0].weight]}, ValueError, "some parameters appear in more than "
                                                      "one parameter group"),
        ({"params": [("w", w)]}, ValueError, "all optimizer param groups should be "
                                             "with/without names"),
    ]
    for group, error, message in cases:
        with pytest.raises(error) as info:
            g_opt.add_param_group(group)
        assert str(info.value).startswith(message)
    with pytest.warns(UserWarning, match="duplicate parameters"):
        g_opt.add_param_group({"params": [w, w]})
    with pytest.raises(ValueError, match="parameter group didn't specify a value of required "
                                         "optimization parameter lr"):
        optim.Optimizer([w], {"lr": optim.optimizer.required})


def test_named_parameters_are_kept_as_param_names():
    model = nn.Linear(2, 3)
    opt = optim.NAdam(model.named_parameters(), lr=0.01)
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    assert opt.param_groups[0]["params"] == list(model.parameters())
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["weight", "bias"]
    with pytest.raises(ValueError, match="Some param names are missing"):
        optim.SGD([("w", gg.zeros(1, requires_grad=True)), gg.zeros(1, requires_grad=True)])


def test_zero_grad_without_set_to_none_zeroes_in_place_and_detaches():
    """As PyTorch: the gradient tensor stays the same object (holders see the zeros),
    loses its graph (it was made with create_graph=True) and its version is bumped."""
    for mod, m in ((optim, gg), (torch.optim, torch)):
        p = m.tensor([1.0, 2.0], requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_graph's reference-cycle warning
            (p * p * p).sum().backward(create_graph=True)
        grad = p.grad
        assert grad.requires_grad
        version = grad._version
        opt = mod.Adagrad([p])
        opt.zero_grad(set_to_none=False)
        assert p.grad is grad and grad.tolist() == [0.0, 0.0]
        assert not grad.requires_grad and grad.grad_fn is None
        assert grad._version > version
        opt.zero_grad()
        assert p.grad is None


def test_state_of_parameters_without_gradients_is_not_created():
    a, b = gg.ones(2, requires_grad=True), gg.ones(2, requires_grad=True)
    opt = optim.RAdam([a, b], lr=0.1)
    (a * 3).sum().backward()
    opt.step()
    assert a in opt.state and b not in opt.state
    assert b.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("cls", ["RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam",
                                 "RAdam", "Rprop"])
def test_closure_is_evaluated_with_grad_and_its_loss_returned(cls):
    for mod, m in ((optim, gg), (torch.optim, torch)):
        p = m.tensor([1.0, -2.0], dtype=m.float64, requires_grad=True)
        opt = getattr(mod, cls)([p], lr=0.1)

        def closure(p=p, opt=opt):
            opt.zero_grad()
            loss = (p ** 2).sum()
            loss.backward()
            return loss
        losses = [float(opt.step(closure)) for _ in range(3)]
        if m is gg:
            g_losses, g_p = losses, p.tolist()
    np.testing.assert_allclose(g_losses, losses, rtol=1e-14)
    np.testing.assert_allclose(g_p, p.tolist(), rtol=1e-14)


SCHEDULER_NAMES = [n for n in lr_scheduler.__all__ if n[0] != "_" and n[0].isupper()
                   and n != "EPOCH_DEPRECATION_WARNING"]


@pytest.mark.parametrize("name", SCHEDULER_NAMES)
def test_scheduler_signatures_match_torch(name):
    import inspect
    ours, theirs = getattr(lr_scheduler, name), getattr(torch.optim.lr_scheduler, name)
    for method in ("__init__", "step", "get_lr", "get_last_lr", "state_dict",
                   "load_state_dict"):
        mine = inspect.signature(getattr(ours, method)).parameters
        want = inspect.signature(getattr(theirs, method)).parameters
        assert [(n, p.kind, p.default) for n, p in mine.items()] == \
            [(n, p.kind, p.default) for n, p in want.items()], method


def test_a_user_scheduler_subclassing_the_base_works_as_in_torch():
    """The documented way to write a schedule: subclass LRScheduler, define get_lr."""
    def make(mod, opt):
        class Halving(mod.LRScheduler):
            def get_lr(self):
                if self.last_epoch == 0:
                    return [g["lr"] for g in self.optimizer.param_groups]
                return [g["lr"] / 2 for g in self.optimizer.param_groups]
        return Halving(opt)
    g_opt, t_opt = _optimizers("sgd")
    gs, ts = make(lr_scheduler, g_opt), make(torch.optim.lr_scheduler, t_opt)
    for _ in range(4):
        g_opt.step()
        t_opt.step()
        gs.step()
        ts.step()
        assert gs.get_last_lr() == ts.get_last_lr()
    assert issubclass(lr_scheduler._LRScheduler, lr_scheduler.LRScheduler)


def test_step_hooks_run_as_in_torch():
    """Pre hooks see (optimizer, args, kwargs), args starting with the optimizer, and may
    replace them; post hooks run after the update; handles remove them; a malformed
    pre-hook result raises."""
    results = []
    for mod, m in ((optim, gg), (torch.optim, torch)):
        p = m.tensor([1.0, 2.0], dtype=m.float64, requires_grad=True)
        opt = mod.RMSprop([p], lr=0.1)
        calls = []

        def closure(p=p, opt=opt):
            opt.zero_grad()
            loss = (p * p).sum()
            loss.backward()
            return loss

        def pre(o, args, kwargs, opt=opt, calls=calls, closure=closure):
            calls.append(("pre", o is opt, args == (opt,), dict(kwargs)))
            return (o, closure), {}

        def post(o, args, kwargs, p=p, calls=calls, closure=closure):
            calls.append(("post", args[1:] == (closure,), p.tolist()))
        handles = [opt.register_step_pre_hook(pre), opt.register_step_post_hook(post)]
        loss = opt.step()  # the pre hook supplies the closure
        assert float(loss) == 5.0
        for handle in handles:
            handle.remove()
        opt.step(closure)
        opt.register_step_pre_hook(lambda o, a, k: "bad")
        with pytest.raises(RuntimeError, match="must return None or a tuple of"):
            opt.step(closure)
        results.append((calls, p.tolist()))
    (g_calls, g_p), (t_calls, t_p) = results
    assert g_calls == t_calls and len(g_calls) == 2
    np.testing.assert_allclose(g_p, t_p, rtol=1e-14)
