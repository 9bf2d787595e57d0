"""The learning-rate schedulers against PyTorch step by step (learning rates and
momenta after every step), ReduceLROnPlateau, stepping with an epoch, resuming,
warnings and errors in PyTorch's wording, state_dicts with callables, signatures,
user subclasses of the base class."""


from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from helpers import assert_same_parameters, optim_models, train_same_batches

import graphgrad as gg
from graphgrad import optim
from graphgrad.optim import lr_scheduler

BASIC_SCHEDULERS = [
    ("step", lambda s, o: s.StepLR(o, step_size=3, gamma=0.5)),
    ("cosine", lambda s, o: s.CosineAnnealingLR(o, T_max=5, eta_min=0.01)),
    ("lambda", lambda s, o: s.LambdaLR(o, lambda e: 1 / (1 + e))),
    ("multistep", lambda s, o: s.MultiStepLR(o, milestones=[2, 5, 5], gamma=0.3)),
    ("exponential", lambda s, o: s.ExponentialLR(o, gamma=0.9)),
]


@pytest.mark.parametrize("name,make", BASIC_SCHEDULERS, ids=[s[0] for s in BASIC_SCHEDULERS])
def test_scheduler_matches_torch(name, make):
    g_opt = optim.SGD([gg.zeros(1, requires_grad=True)], lr=0.2)
    t_opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.2)
    gs, ts = make(lr_scheduler, g_opt), make(torch.optim.lr_scheduler, t_opt)
    g_lrs, t_lrs = [], []
    for _ in range(14):  # past T_max: the cosine goes back up, as PyTorch's does
        g_opt.step()
        t_opt.step()
        gs.step()
        ts.step()
        g_lrs.append(gs.get_last_lr()[0])
        t_lrs.append(ts.get_last_lr()[0])
    np.testing.assert_allclose(g_lrs, t_lrs, rtol=1e-13, atol=1e-15)
    assert g_opt.param_groups[0]["lr"] == g_lrs[-1]


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
    g_model, t_model = optim_models("float64")
    g_opt = optim.Adam(g_model.parameters(), lr=0.01)
    t_opt = torch.optim.Adam(t_model.parameters(), lr=0.01, foreach=False)
    gs = lr_scheduler.OneCycleLR(g_opt, max_lr=0.05, total_steps=8)
    ts = torch.optim.lr_scheduler.OneCycleLR(t_opt, max_lr=0.05, total_steps=8)

    def check(step):
        gs.step()
        ts.step()
        assert_same_parameters(g_model, t_model, 1e-12)
    train_same_batches([(g_model, g_opt, gg), (t_model, t_opt, torch)], 7, "float64", check=check)


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
