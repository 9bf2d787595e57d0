"""Module hooks against PyTorch: forward pre- and post-hooks (with kwargs, always_call),
full backward hooks and backward pre-hooks (replacing gradients, None gradients,
no_grad, higher order) and their error messages."""


from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import close, copy_weights, rand

import graphgrad as gg
from graphgrad import nn


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
