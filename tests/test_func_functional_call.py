"""``graphgrad.func.functional_call`` and ``stack_module_state`` against ``torch.func``:
values, restoring the module (after an error too), tied weights, strict keys, the errors
in PyTorch's wording, and the two tutorial patterns: per-sample gradients
(``vmap(grad(loss), in_dims=(None, None, 0, 0))``) and model ensembling (``vmap`` over
stacked states through a base model)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.func as TF
from helpers import close, copy_weights

import graphgrad as gg
from graphgrad import func as F
from graphgrad import nn


def twin(mod_gg, mod_t):
    """mod_gg in float64 with mod_t's weights (mod_t made float64 too)."""
    mod_t.double()
    mod_gg.double()
    copy_weights(mod_gg, mod_t)
    return mod_gg, mod_t


def mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.Tanh(), lib.nn.Linear(5, 2))


def state_of(mod_t, lib, seed=1):
    """New values (random, float64) for every parameter of mod_t, in lib's tensors."""
    rng = np.random.default_rng(seed)
    arrays = {k: rng.standard_normal(tuple(v.shape)) for k, v in mod_t.named_parameters()}
    return {k: lib.tensor(a) for k, a in arrays.items()}


def test_call_with_other_parameters_and_restore():
    g, t = twin(mlp(gg), mlp(torch))
    x = np.random.default_rng(0).standard_normal((4, 3))
    pg, pt = state_of(t, gg), state_of(t, torch)
    before = {k: v for k, v in g.named_parameters()}
    close(F.functional_call(g, pg, gg.tensor(x)), TF.functional_call(t, pt, torch.tensor(x)))
    close(F.functional_call(g, pg, (gg.tensor(x),)), TF.functional_call(t, pt, (torch.tensor(x),)))
    assert all(v is before[k] for k, v in g.named_parameters())
    close(g(gg.tensor(x)), t(torch.tensor(x)))


def test_tuple_of_dicts_kwargs_and_partial_dicts():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
            self.register_buffer("b", torch.zeros(2, dtype=torch.float64))

        def forward(self, x, *, k=1.0):
            return self.w * x * k + self.b

    class ScaleG(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(gg.ones(2, dtype=gg.float64))
            self.register_buffer("b", gg.zeros(2, dtype=gg.float64))

        def forward(self, x, *, k=1.0):
            return self.w * x * k + self.b

    x = np.array([1.0, -2.0])
    for lib, mod in ((gg, ScaleG()), (torch, Scale())):
        out = F.functional_call if lib is gg else TF.functional_call
        r1 = out(mod, ({"w": lib.tensor([2.0, 3.0])}, {"b": lib.tensor([1.0, 1.0])}),
                 (lib.tensor(x),), {"k": 2.0})
        r2 = out(mod, {"b": lib.tensor([5.0, 5.0])}, lib.tensor(x))  # w stays the module's
        if lib is gg:
            g1, g2 = r1, r2
        else:
            close(g1, r1)
            close(g2, r2)


def test_errors_match_torch():
    g, t = twin(nn.Linear(2, 2), torch.nn.Linear(2, 2))
    x = np.zeros(2)

    def both(dicts_of, **kw):
        errs = []
        for lib, mod, fc in ((gg, g, F.functional_call), (torch, t, TF.functional_call)):
            with pytest.raises(Exception) as info:
                fc(mod, dicts_of(lib), lib.tensor(x), **kw)
            errs.append(info.value)
        assert type(errs[0]) is type(errs[1])
        assert str(errs[0]) == str(errs[1])

    both(lambda lib: {"weight": lib.zeros(2, 2), "foo": lib.zeros(1)}, strict=True)
    both(lambda lib: {"weight": lib.zeros(2, 2)}, strict=True)
    both(lambda lib: [{"weight": lib.zeros(2, 2)}, {"weight": lib.zeros(2, 2)}])
    both(lambda lib: 3)
    both(lambda lib: [{"weight": lib.zeros(2, 2)}, 3])
    both(lambda lib: {"weight": 3})
    both(lambda lib: {"sub.weight": lib.zeros(1)})
    assert all(isinstance(p, nn.Parameter) for p in g.parameters())


def test_restores_after_an_exception_in_forward():
    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(gg.ones(2))

        def forward(self, x):
            raise ValueError("boom")

    m = Boom()
    w = m.w
    with pytest.raises(ValueError, match="boom"):
        F.functional_call(m, {"w": gg.zeros(2), "extra": gg.zeros(1)}, gg.zeros(2))
    assert m.w is w and not hasattr(m, "extra")


def test_tied_weights():
    def tied(lib):
        m = lib.nn.Sequential(lib.nn.Linear(2, 2, bias=False), lib.nn.Linear(2, 2, bias=False))
        m[1].weight = m[0].weight
        return m.double()

    g, t = tied(gg), tied(torch)
    copy_weights(g, t)
    assert g[1].weight is g[0].weight
    x = np.array([1.0, 2.0])
    w = np.array([[1.0, 2.0], [3.0, 4.0]])
    for tie in (True, False):
        close(F.functional_call(g, {"0.weight": gg.tensor(w)}, gg.tensor(x), tie_weights=tie),
              TF.functional_call(t, {"0.weight": torch.tensor(w)}, torch.tensor(x),
                                 tie_weights=tie))
    errs = []
    for lib, mod, fc in ((gg, g, F.functional_call), (torch, t, TF.functional_call)):
        with pytest.raises(ValueError) as info:
            fc(mod, {"0.weight": lib.tensor(w), "1.weight": lib.tensor(w + 1)}, lib.tensor(x))
        errs.append(str(info.value))
    assert errs[0] == errs[1]


def test_per_sample_gradients_tutorial():
    g, t = twin(mlp(gg), mlp(torch))
    rng = np.random.default_rng(2)
    data, targets = rng.standard_normal((6, 3)), rng.standard_normal((6, 2))

    def loss_of(lib, fc, model):
        def compute_loss(params, buffers, sample, target):
            batch, tgt = sample.unsqueeze(0), target.unsqueeze(0)
            pred = fc(model, (params, buffers), (batch,))
            return lib.nn.functional.mse_loss(pred, tgt)
        return compute_loss

    pg = {k: v.detach() for k, v in g.named_parameters()}
    pt = {k: v.detach() for k, v in t.named_parameters()}
    got = F.vmap(F.grad(loss_of(gg, F.functional_call, g)), in_dims=(None, None, 0, 0))(
        pg, {}, gg.tensor(data), gg.tensor(targets))
    want = TF.vmap(TF.grad(loss_of(torch, TF.functional_call, t)), in_dims=(None, None, 0, 0))(
        pt, {}, torch.tensor(data), torch.tensor(targets))
    assert set(got) == set(want)
    for k in want:
        assert tuple(got[k].shape) == (6, *pt[k].shape)
        close(got[k], want[k])


def test_jacrev_and_second_order_through_functional_call():
    g, t = twin(mlp(gg), mlp(torch))
    x = np.random.default_rng(3).standard_normal(3)
    pg, pt = state_of(t, gg, 4), state_of(t, torch, 4)
    jg = F.jacrev(lambda p: F.functional_call(g, p, gg.tensor(x)))(pg)
    jt = TF.jacrev(lambda p: TF.functional_call(t, p, torch.tensor(x)))(pt)
    for k in jt:
        close(jg[k], jt[k])
    hg = F.hessian(lambda w: F.functional_call(g, {**pg, "0.weight": w}, gg.tensor(x)).sum())(
        pg["0.weight"])
    ht = TF.hessian(lambda w: TF.functional_call(t, {**pt, "0.weight": w},
                                                 torch.tensor(x)).sum())(pt["0.weight"])
    close(hg, ht)


def test_model_ensembling_tutorial():
    torch.manual_seed(0)
    models_t = [mlp(torch).double() for _ in range(4)]
    models_g = []
    for mt in models_t:
        mg = mlp(gg).double()
        copy_weights(mg, mt)
        models_g.append(mg)
    params_g, buffers_g = F.stack_module_state(models_g)
    params_t, buffers_t = TF.stack_module_state(models_t)
    for k in params_t:
        close(params_g[k], params_t[k])
        assert params_g[k].requires_grad and params_g[k].grad_fn is None
    assert buffers_g == {} and buffers_t == {}
    base = copy.deepcopy(models_g[0])  # graphgrad has no meta device: a copy serves as base
    x = np.random.default_rng(5).standard_normal((7, 3))

    def call_g(params, buffers, xb):
        return F.functional_call(base, (params, buffers), (xb,))

    def call_t(params, buffers, xb):
        return TF.functional_call(models_t[0], (params, buffers), (xb,))

    got = F.vmap(call_g, in_dims=(0, 0, None))(params_g, buffers_g, gg.tensor(x))
    want = TF.vmap(call_t, in_dims=(0, 0, None))(params_t, buffers_t, torch.tensor(x))
    assert tuple(got.shape) == (4, 7, 2)
    close(got, want)
    # minibatches differ per model
    xs = np.random.default_rng(6).standard_normal((4, 7, 3))
    close(F.vmap(call_g)(params_g, buffers_g, gg.tensor(xs)),
          TF.vmap(call_t)(params_t, buffers_t, torch.tensor(xs)))
    # the stacked leaves train: gradients reach them through vmap
    got.sum().backward()
    want.sum().backward()
    for k in params_t:
        close(params_g[k].grad, params_t[k].grad)


def test_stack_module_state_buffers_and_errors():
    bn_g = [nn.BatchNorm1d(3) for _ in range(2)]
    bn_t = [torch.nn.BatchNorm1d(3) for _ in range(2)]
    pg, bg = F.stack_module_state(bn_g)
    pt, bt = TF.stack_module_state(bn_t)
    assert list(bg) == list(bt) and list(pg) == list(pt)
    for k in bt:
        close(bg[k], bt[k])
        assert bg[k].requires_grad is bt[k].requires_grad
    cases = [lambda lib: [],
             lambda lib: [lib.nn.Linear(2, 2), lib.nn.Linear(2, 2).eval()],
             lambda lib: [lib.nn.Linear(2, 2), lib.nn.Tanh()]]
    for case in cases:
        errs = []
        for lib, fn in ((gg, F.stack_module_state), (torch, TF.stack_module_state)):
            with pytest.raises(RuntimeError) as info:
                fn(case(lib))
            errs.append(str(info.value))
        assert errs[0] == errs[1]
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    b.weight.requires_grad_(False)
    with pytest.raises(RuntimeError, match="Expected weight from each model to have the same "
                                           r"\.requires_grad"):
        F.stack_module_state([a, b])
