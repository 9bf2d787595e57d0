"""The optimizers beyond SGD/Adam (RMSprop, Adagrad, Adamax, NAdam, RAdam) and the
learning-rate schedulers, each against PyTorch step by step: same initial parameters,
same data, parameters (and learning rates, momenta) equal after every step; their
state_dict layouts; PyTorch's error messages; the Optimizer API (add_param_group,
zero_grad)."""

from __future__ import annotations


import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad import nn, optim

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
])
def test_complex_parameters_update_like_torch(cls, kw):
    """Complex parameters are updated as PyTorch's view_as_real: real and imaginary
    parts are separate entries."""
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
        np.testing.assert_allclose(gw.detach().numpy(), tw.detach().numpy(), rtol=1e-12,
                                   atol=1e-14)


@pytest.mark.parametrize("cls,kw", [
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
    ("Adamax", dict(lr=0.01)),
    ("NAdam", dict(lr=0.01)),
    ("RAdam", dict(lr=0.01, betas=(0.8, 0.9))),
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
])
def test_invalid_hyperparameters_raise_torch_messages(cls, kw, message):
    for mod, m in ((optim, gg), (torch.optim, torch)):
        with pytest.raises(ValueError) as info:
            getattr(mod, cls)([m.zeros(2, requires_grad=True)], **kw)
        assert str(info.value) == message


@pytest.mark.parametrize("cls", ["RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"])
def test_defaults_match_torch(cls):
    g = getattr(optim, cls)([gg.zeros(1, requires_grad=True)]).defaults
    t = getattr(torch.optim, cls)([torch.zeros(1, requires_grad=True)]).defaults
    for key, value in g.items():
        assert t[key] == value, key
    assert set(t) - set(g) <= {"foreach", "capturable", "differentiable", "fused"}
