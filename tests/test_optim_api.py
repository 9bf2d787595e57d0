"""The Optimizer API against PyTorch: signatures and defaults, hyperparameter checks
in PyTorch's wording, implementation options, add_param_group, param_names,
zero_grad, lazily created state, closures, step hooks."""


from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from helpers import assert_same_parameters, optim_models, train_same_batches

import graphgrad as gg
from graphgrad import nn, optim


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
    g_model, t_model = optim_models("float64")
    g_opt = optim.AdamW(g_model.parameters(), lr=0.01, fused=True)
    t_opt = torch.optim.AdamW(t_model.parameters(), lr=0.01, fused=True)
    train_same_batches([(g_model, g_opt, gg), (t_model, t_opt, torch)], 3, "float64",
           check=lambda step: assert_same_parameters(g_model, t_model, 1e-12))
    assert g_opt.state_dict()["param_groups"] == t_opt.state_dict()["param_groups"]


# ---- the Optimizer API ---------------------------------------------------------------

def test_add_param_group_matches_torch():
    """A group added later gets the defaults, steps like PyTorch's, and the checks
    raise PyTorch's errors."""
    g_model, t_model = optim_models("float64")
    g_opt = optim.RMSprop(g_model[0].parameters(), lr=0.01, momentum=0.5, foreach=False)
    t_opt = torch.optim.RMSprop(t_model[0].parameters(), lr=0.01, momentum=0.5, foreach=False)
    train_same_batches([(g_model, g_opt, gg), (t_model, t_opt, torch)], 2, "float64")
    g_opt.add_param_group({"params": g_model[2].parameters(), "alpha": 0.9})
    t_opt.add_param_group({"params": t_model[2].parameters(), "alpha": 0.9})
    assert [{k: v for k, v in g.items() if k != "params"} for g in g_opt.param_groups] == \
        [{k: v for k, v in g.items() if k != "params"} for g in t_opt.param_groups]
    train_same_batches([(g_model, g_opt, gg), (t_model, t_opt, torch)], 4, "float64", seed=5,
           check=lambda step: assert_same_parameters(g_model, t_model, 1e-12))
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
