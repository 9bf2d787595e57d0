"""The backward of slicing (chunk, split, unbind, basic indexing) in a plain eager pass
adds each piece's cotangent into one gradient buffer of the input in place, where the
vjp would build a zero array per piece; gradients must equal PyTorch's in every mix
(overlapping slices, other uses of the input, a gradient already there, hooks, views),
and a recorded pass (create_graph) still runs the vjp, so it differentiates again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad.ops.index import Getitem

PROGRAMS = {
    "chunk": lambda m, x: sum((p.sin() * (i + 1)).sum() for i, p in
                              enumerate(x.chunk(4, dim=-1))),
    "split_sizes_and_reuse": lambda m, x: (x.split([1, 3, 2], dim=0)[1].exp().sum()
                                           + (x * x).sum() + x.split([1, 3, 2])[2].sum()),
    "overlapping_slices": lambda m, x: ((x[1:, :3] * x[:-1, 2:5]).sum()
                                        + x[::2, ::3].tanh().sum()),
    "unbind_int_index_newaxis": lambda m, x: (sum(r.cos().sum() for r in x.unbind(1))
                                              + x[2, None, 1:].sum() * 3),
    "view_of_a_slice": lambda m, x: x[:, 1:5].reshape(-1)[3:9].pow(2).sum() + x.sum(),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_slice_gradients_match_torch(name):
    a = np.random.default_rng(0).standard_normal((6, 6))
    xg, xt = gg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    PROGRAMS[name](gg, xg).backward()
    PROGRAMS[name](torch, xt).backward()
    np.testing.assert_allclose(xg.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    # a second backward accumulates into .grad, a hook sees the whole gradient
    seen = []
    xg.register_hook(lambda g: seen.append(g.numpy().copy()))
    xt.register_hook(lambda g: None)
    PROGRAMS[name](gg, xg).backward()
    PROGRAMS[name](torch, xt).backward()
    np.testing.assert_allclose(xg.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(seen[0], xt.grad.numpy() / 2, rtol=1e-12, atol=1e-12)


def test_plain_backward_skips_the_slice_vjp_and_create_graph_keeps_it(monkeypatch):
    calls = []
    vjp = Getitem.vjp

    def counting(*args, **kw):
        calls.append(1)
        return vjp(*args, **kw)
    monkeypatch.setattr(Getitem, "vjp", staticmethod(counting))
    x = gg.randn(8, 12, dtype=gg.float64, requires_grad=True)
    sum(p.tanh().sum() for p in x.chunk(4, dim=1)).backward()
    assert calls == []
    (g,) = gg.autograd.grad(sum(p.tanh().sum() for p in x.chunk(4, dim=1)), x,
                            create_graph=True)
    assert len(calls) == 4
    (h,) = gg.autograd.grad(g.sum(), x)  # second order through the recorded slices
    xt = torch.tensor(x.detach().numpy(), requires_grad=True)
    (gt,) = torch.autograd.grad(sum(p.tanh().sum() for p in xt.chunk(4, dim=1)), xt,
                                create_graph=True)
    (ht,) = torch.autograd.grad(gt.sum(), xt)
    np.testing.assert_allclose(h.numpy(), ht.numpy(), rtol=1e-12)
