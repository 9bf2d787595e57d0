"""The optimizers beyond SGD/Adam (RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam,
...) against PyTorch step by step: same initial parameters, same data, parameters
equal after every step, also complex ones; a state_dict from PyTorch continues
identically; Adam's decoupled weight decay is AdamW."""


from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_same_parameters, optim_models, train_same_batches

import graphgrad as gg
from graphgrad import optim

STEPS = 6


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
    g_model, t_model = optim_models(dtype)
    g_opt = getattr(optim, cls)(g_model.parameters(), **kw)
    t_opt = getattr(torch.optim, cls)(t_model.parameters(), **kw, foreach=False)
    train_same_batches([(g_model, g_opt, gg), (t_model, t_opt, torch)], STEPS, dtype,
           check=lambda step: assert_same_parameters(g_model, t_model, tol))
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
    g_model, t_model = optim_models("float64")
    t_opt = getattr(torch.optim, cls)(t_model.parameters(), **kw, foreach=False)
    train_same_batches([(t_model, t_opt, torch)], 3, "float64", seed=11)
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
    train_same_batches([(g_model, g_opt, gg), (t_model, t_opt, torch)], 3, "float64", seed=12,
           check=lambda step: assert_same_parameters(g_model, t_model, 1e-12))
    # and graphgrad's own round trip: a fresh optimizer from the state_dict, same steps
    g_copy, _ = optim_models("float64")
    g_copy.load_state_dict(g_model.state_dict())
    g_opt2 = getattr(optim, cls)(g_copy.parameters(), **kw)
    g_opt2.load_state_dict(g_opt.state_dict())
    train_same_batches([(g_model, g_opt, gg), (g_copy, g_opt2, gg)], 2, "float64", seed=13)
    for a, b in zip(g_model.parameters(), g_copy.parameters(), strict=True):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())


def test_adam_decoupled_weight_decay_is_adamw():
    g_model, t_model = optim_models("float64")
    g_opt = optim.Adam(g_model.parameters(), lr=0.01, weight_decay=0.1,
                       decoupled_weight_decay=True)
    t_opt = torch.optim.AdamW(t_model.parameters(), lr=0.01, weight_decay=0.1, foreach=False)
    train_same_batches([(g_model, g_opt, gg), (t_model, t_opt, torch)], STEPS, "float64",
           check=lambda step: assert_same_parameters(g_model, t_model, 1e-12))
    adamw = optim.AdamW([gg.zeros(1, requires_grad=True)])
    sd = adamw.state_dict()
    sd["param_groups"][0]["decoupled_weight_decay"] = False
    adamw.load_state_dict(sd)  # as PyTorch: AdamW stays decoupled
    assert adamw.param_groups[0]["decoupled_weight_decay"] is True
