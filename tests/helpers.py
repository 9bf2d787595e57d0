"""Helpers shared by several test files: graphgrad against PyTorch on the same data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad import nn

RTOL, ATOL = 1e-10, 1e-12


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def to_numpy(t):
    """A tensor of either library (or anything array-like) as a NumPy array."""
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


def close(a, b, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol, atol)


def gg_and_torch(a):
    """The array ``a`` as a graphgrad and as a torch tensor."""
    return gg.tensor(a), torch.tensor(a)


def copy_weights(gg_mod: nn.Module, t_mod: torch.nn.Module) -> None:
    """Make gg_mod's parameters and buffers equal to t_mod's (same state_dict names)."""
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


def optim_models(dtype: str, seed: int = 0):
    """A tanh MLP in PyTorch and the same one (copied weights) in graphgrad."""
    torch.manual_seed(seed)
    t_model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                                  torch.nn.Linear(7, 3)).to(getattr(torch, dtype))
    g_model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(getattr(gg, dtype))
    g_model.load_state_dict({k: gg.tensor(v.detach().numpy().copy())
                             for k, v in t_model.state_dict().items()})
    return g_model, t_model


def train_same_batches(pairs, steps: int, dtype: str, seed: int = 3, check=None):
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


def assert_same_parameters(g_model, t_model, tol):
    t = dict(t_model.named_parameters())
    for name, p in g_model.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), t[name].detach().numpy(), rtol=tol,
                                   atol=tol, err_msg=name)


def raises_as_torch(call, error=RuntimeError):
    """``call(lib)`` raises ``error`` with the same message in torch and graphgrad."""
    messages = []
    for lib in (torch, gg):
        with pytest.raises(error) as info:
            call(lib)
        messages.append(str(info.value))
    assert messages[1] == messages[0]
