"""graphgrad.optim's SGD, Adam, AdamW and LBFGS against PyTorch step by step: same
float64 (and float32) model and data, copied weights, parameters equal to rounding;
a CNN's training steps; complex parameters; param groups; LBFGS on Rosenbrock;
optimizer state_dict round trips. Other optimizers: test_optim_adaptive.py; the
Optimizer API: test_optim_api.py; schedulers: test_lr_scheduler.py."""


from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad import nn, optim

STEPS = 5


def _pair(seed: int = 0):
    torch.manual_seed(seed)
    t_model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(),
                                  torch.nn.Linear(6, 3)).double()
    g_model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    g_model.load_state_dict({k: gg.tensor(v.detach().numpy().copy())
                             for k, v in t_model.state_dict().items()})
    return g_model, t_model


def _data(step: int):
    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((8, 4)), rng.integers(0, 3, 8)


def _assert_same(g_model, t_model, tol=1e-6):
    t = dict(t_model.named_parameters())
    for name, p in g_model.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), t[name].detach().numpy(), rtol=tol,
                                   atol=tol, err_msg=name)


OPTIMIZERS = [
    ("sgd", "SGD", dict(lr=0.1)),
    ("sgd_momentum", "SGD", dict(lr=0.1, momentum=0.9)),
    ("sgd_dampening_wd", "SGD", dict(lr=0.1, momentum=0.8, dampening=0.3, weight_decay=0.01)),
    ("sgd_nesterov", "SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    ("sgd_maximize", "SGD", dict(lr=0.05, momentum=0.5, maximize=True)),
    ("sgd_plain_maximize", "SGD", dict(lr=0.05, maximize=True)),
    ("adam", "Adam", dict(lr=0.01)),
    ("adam_wd_betas", "Adam", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adam_amsgrad", "Adam", dict(lr=0.01, amsgrad=True)),
    ("adamw", "AdamW", dict(lr=0.01)),
    ("adamw_amsgrad", "AdamW", dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
]


@pytest.mark.parametrize("name,cls,kw", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_optimizer_steps_match_torch(name, cls, kw):
    g_model, t_model = _pair()
    g_opt = getattr(optim, cls)(g_model.parameters(), **kw)
    t_opt = getattr(torch.optim, cls)(t_model.parameters(), **kw, foreach=False)
    for step in range(STEPS):
        x, y = _data(step)
        for model, opt, m, mod in ((g_model, g_opt, gg, nn), (t_model, t_opt, torch, torch.nn)):
            opt.zero_grad()
            loss = mod.functional.cross_entropy(model(m.tensor(x)), m.tensor(y))
            loss.backward()
            opt.step()
        _assert_same(g_model, t_model, tol=1e-12)


def _pair32(seed: int = 1):
    """The training configuration: float32, a ReLU MLP, batches of 16."""
    torch.manual_seed(seed)
    t_model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(),
                                  torch.nn.Linear(16, 4))
    g_model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    g_model.load_state_dict({k: gg.tensor(v.detach().numpy().copy())
                             for k, v in t_model.state_dict().items()})
    return g_model, t_model


@pytest.mark.parametrize("name,cls,kw", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_optimizer_steps_match_torch_float32(name, cls, kw):
    """The issue's acceptance: float32 parameters equal to 1e-6 after 5 steps."""
    g_model, t_model = _pair32()
    g_opt = getattr(optim, cls)(g_model.parameters(), **kw)
    t_opt = getattr(torch.optim, cls)(t_model.parameters(), **kw, foreach=False)
    rng = np.random.default_rng(7)
    for _ in range(STEPS):
        x = rng.standard_normal((16, 6)).astype(np.float32)
        y = rng.integers(0, 4, 16)
        for model, opt, m, mod in ((g_model, g_opt, gg, nn), (t_model, t_opt, torch, torch.nn)):
            opt.zero_grad()
            mod.functional.cross_entropy(model(m.tensor(x)), m.tensor(y)).backward()
            opt.step()
    for p in g_model.parameters():
        assert p.dtype == gg.float32
    _assert_same(g_model, t_model, tol=1e-6)


@pytest.mark.parametrize("cls,kw", [("SGD", dict(lr=0.1, momentum=0.9)), ("SGD", dict(lr=0.1)),
                                    ("Adam", {}), ("AdamW", dict(amsgrad=True))])
def test_step_bumps_versions_so_saved_parameters_are_checked(cls, kw):
    """The step writes the buffers in place: a graph that saved a parameter before the
    step refuses to backward afterwards, with PyTorch's error, as with ``p.add_``."""
    w = gg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    opt = getattr(optim, cls)([w], **kw)
    (w * w).sum().backward()
    stale = (w * w).sum()  # saves w at version 0
    opt.step()
    assert w._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        stale.backward()
    state = opt.state[w]
    for key, value in state.items():
        if key != "step":
            assert value._version >= (0 if cls == "SGD" else 1), key


def test_step_on_a_read_only_parameter_raises():
    p = gg.tensor([1.0], requires_grad=True)
    view = p.detach().expand(3)  # zero-stride, read-only memory
    view.grad = gg.ones(3)
    with pytest.raises(RuntimeError, match="read-only"):
        optim.SGD([view], lr=0.1).step()


def test_plain_sgd_subclass_keeps_its_own_update():
    """Plain SGD updates a group in one loop; a subclass's own ``_update`` still runs."""
    seen = []

    class Logged(optim.SGD):
        def _update(self, p, group):
            seen.append(p)
            super()._update(p, group)
    w = gg.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    Logged([w], lr=0.5).step()
    assert seen == [w]
    np.testing.assert_array_equal(w.detach().numpy(), [0.0, 0.0])


def _digits_cnn(m):
    """The ``graphgrad train --model cnn`` network, spelled in ``m.nn``."""
    return m.nn.Sequential(
        m.nn.Unflatten(1, (1, 8, 8)),
        m.nn.Conv2d(1, 4, 3, padding=1), m.nn.ReLU(), m.nn.MaxPool2d(2),
        m.nn.Conv2d(4, 6, 3, padding=1), m.nn.GELU(), m.nn.MaxPool2d(2),
        m.nn.Flatten(), m.nn.LayerNorm(24), m.nn.Dropout(0.0), m.nn.Linear(24, 10)).double()


@pytest.mark.parametrize("cls,kw", [("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
                                    ("AdamW", dict(lr=0.01))])
def test_cnn_training_steps_match_torch(cls, kw):
    """Conv2d, MaxPool2d, GELU, LayerNorm, Flatten and the losses trained for 5 steps
    with copied weights: the parameters stay equal to PyTorch's."""
    torch.manual_seed(0)
    t_model = _digits_cnn(torch)
    g_model = _digits_cnn(gg)
    g_model.load_state_dict({k: gg.tensor(v.detach().numpy().copy())
                             for k, v in t_model.state_dict().items()})
    g_opt = getattr(optim, cls)(g_model.parameters(), **kw)
    t_opt = getattr(torch.optim, cls)(t_model.parameters(), **kw, foreach=False)
    rng = np.random.default_rng(5)
    for _ in range(STEPS):
        x = rng.uniform(0, 1, (8, 64))
        y = rng.integers(0, 10, 8)
        target = rng.standard_normal((8, 10))
        for model, opt, m in ((g_model, g_opt, gg), (t_model, t_opt, torch)):
            opt.zero_grad()
            out = model(m.tensor(x))
            loss = (m.nn.functional.cross_entropy(out, m.tensor(y), label_smoothing=0.1)
                    + 0.1 * m.nn.MSELoss()(out, m.tensor(target)))
            loss.backward()
            opt.step()
        _assert_same(g_model, t_model, tol=1e-10)


@pytest.mark.parametrize("cls,kw", [("Adam", {}), ("AdamW", dict(amsgrad=True, weight_decay=0.1)),
                                    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01))])
def test_complex_parameters_update_like_torch(cls, kw):
    """Complex parameters, given the same gradients: Adam treats the real and imaginary
    parts as separate entries (PyTorch's view_as_real), SGD is elementwise."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))
    gw, tw = gg.tensor(w0.copy(), requires_grad=True), torch.tensor(w0.copy(), requires_grad=True)
    g_opt = getattr(optim, cls)([gw], **kw)
    t_opt = getattr(torch.optim, cls)([tw], **kw, foreach=False)
    for _ in range(STEPS):
        grad = rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))
        gw.grad, tw.grad = gg.tensor(grad.copy()), torch.tensor(grad.copy())
        g_opt.step()
        t_opt.step()
    np.testing.assert_allclose(gw.detach().numpy(), tw.detach().numpy(), rtol=1e-13,
                               atol=1e-15)


def test_param_groups_and_defaults():
    g_model, t_model = _pair()
    groups = lambda m: [{"params": m[0].parameters(), "lr": 0.5},  # noqa: E731
                        {"params": m[2].parameters()}]
    g_opt = optim.SGD(groups(g_model), lr=0.1, momentum=0.9)
    t_opt = torch.optim.SGD(groups(t_model), lr=0.1, momentum=0.9)
    assert [g["lr"] for g in g_opt.param_groups] == [0.5, 0.1]
    for model, opt, m in ((g_model, g_opt, gg), (t_model, t_opt, torch)):
        for step in range(3):
            x, y = _data(step)
            opt.zero_grad()
            (model(m.tensor(x)) ** 2).mean().backward()
            opt.step()
    _assert_same(g_model, t_model, 1e-12)
    assert optim.SGD([gg.zeros(1, requires_grad=True)]).defaults["lr"] == \
        torch.optim.SGD([torch.zeros(1, requires_grad=True)]).defaults["lr"]
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        optim.SGD(g_model.parameters(), lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.Adam([])


def test_zero_grad_set_to_none_and_closure():
    p = gg.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.5)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss
    loss = opt.step(closure)
    assert loss.item() == 5.0 and p.tolist() == [0.0, 0.0]
    opt.zero_grad(set_to_none=False)
    assert p.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert p.grad is None


def test_adam_state_dict_round_trip_continues_identically():
    g1, t_model = _pair()
    g2, _ = _pair()
    opt1 = optim.Adam(g1.parameters(), lr=0.01, amsgrad=True)
    opt2 = optim.Adam(g2.parameters(), lr=0.01, amsgrad=True)

    def run(model, opt, steps):
        for step in steps:
            x, y = _data(step)
            opt.zero_grad()
            nn.functional.cross_entropy(model(gg.tensor(x)), gg.tensor(y)).backward()
            opt.step()
    run(g1, opt1, range(3))
    g2.load_state_dict(g1.state_dict())
    sd = opt1.state_dict()
    assert sorted(sd["state"][0]) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
    assert sd["param_groups"][0]["params"] == [0, 1, 2, 3]
    opt2.load_state_dict(sd)
    run(g1, opt1, range(3, 5))
    run(g2, opt2, range(3, 5))
    for a, b in zip(g1.parameters(), g2.parameters(), strict=True):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())


def _rosenbrock(m, xy):
    return (1 - xy[0]) ** 2 + 100 * (xy[1] - xy[0] ** 2) ** 2


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_lbfgs_rosenbrock_matches_torch(line_search):
    """Same iterates, evaluation counts and stopping as PyTorch. PyTorch's ``add_(x,
    alpha=a)`` kernel rounds once where graphgrad rounds ``a * x`` and the sum apart: the
    ill-conditioned valley amplifies those last-bit differences over ~100 iterations, so
    the paths agree to 1e-6 rather than to rounding."""
    results = {}
    for name, m, opt_mod in (("gg", gg, optim), ("torch", torch, torch.optim)):
        xy = m.tensor([-1.2, 1.0], dtype=m.float64, requires_grad=True)
        opt = opt_mod.LBFGS([xy], lr=1 if line_search else 0.1, max_iter=25,
                            history_size=10, line_search_fn=line_search)
        path = []

        def closure(opt=opt, xy=xy, m=m):
            opt.zero_grad()
            loss = _rosenbrock(m, xy)
            loss.backward()
            return loss
        for _ in range(4):
            opt.step(closure)
            path.append(xy.detach().numpy().copy())
        results[name] = (np.array(path), opt.state[opt.param_groups[0]["params"][0]])
    np.testing.assert_allclose(results["gg"][0], results["torch"][0], rtol=1e-6, atol=1e-9)
    assert results["gg"][1]["func_evals"] == results["torch"][1]["func_evals"]
    assert results["gg"][1]["n_iter"] == results["torch"][1]["n_iter"]


def test_lbfgs_strong_wolfe_reaches_the_rosenbrock_minimum():
    xy = gg.tensor([-1.2, 1.0], dtype=gg.float64, requires_grad=True)
    opt = optim.LBFGS([xy], max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-15,
                      line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = _rosenbrock(gg, xy)
        loss.backward()
        return loss
    opt.step(closure)
    np.testing.assert_allclose(xy.detach().numpy(), [1.0, 1.0], atol=1e-8)
    assert opt.state[xy]["n_iter"] < 60


def test_lbfgs_fits_a_network_like_torch():
    g_model, t_model = _pair()
    x, y = _data(0)
    for model, m, opt_mod, mod in ((g_model, gg, optim, nn), (t_model, torch, torch.optim,
                                                                torch.nn)):
        opt = opt_mod.LBFGS(model.parameters(), max_iter=15, line_search_fn="strong_wolfe")

        def closure(model=model, opt=opt, m=m, mod=mod):
            opt.zero_grad()
            loss = mod.functional.cross_entropy(model(m.tensor(x)), m.tensor(y))
            loss.backward()
            return loss
        for _ in range(2):
            opt.step(closure)
    _assert_same(g_model, t_model, 1e-7)
