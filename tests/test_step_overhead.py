"""The training step's fixed costs cut for issue 17 ("graphgrad.compile that pays"):
each shortcut must decide as before and give the values it gave. Nothing here reads a
clock: the tests check what the code decided (which kernel layout ran, which release
path the engine took, which hooks ran) and the values, against torch where it has them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg
import graphgrad.nn.functional as F
from graphgrad import nn, optim
from graphgrad.autograd import engine
from graphgrad.backends import fused as fused_mod
from graphgrad.backends.fused import lower
from graphgrad.compiler import reset, segments
from graphgrad.dynamo import CompiledFunction
from graphgrad.passes import Fused


def _kernel(cf):
    run = segments(cf)[0].compiled
    (k,) = [lower(n.params["kernel"]) for n in run.fused_graph.nodes
            if n.kind == "call" and n.op is Fused]
    return k


def _special(shape) -> np.ndarray:
    """float32 values with NaN, infinities, -0.0 and 0.0 among random ones."""
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    a.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40]
    return a


def test_fused_kernel_layouts_give_the_reference_values_bit_for_bit(lowering):
    """The contiguous fast path and the general one (a transposed input, a broadcast
    scalar) give the group's reference values, NaN, infinities and signed zeros
    included; with Numba each layout got its own kernel."""
    def fn(x, y):
        return (x * 2.0 - y).relu() * y
    x, y = gg.tensor(_special((16, 8))), gg.tensor(_special((16, 8))[::-1].copy())
    cf = CompiledFunction(fn, backend="default", share=False)
    with gg.no_grad():
        cf(x, y)
    k = _kernel(cf)
    xa, ya = x.numpy(), y.numpy()
    cases = {"ff": (xa, ya), "fb": (xa, np.asfortranarray(ya)),
             "fs": (xa, np.broadcast_to(np.float32(-0.0), xa.shape))}
    with np.errstate(invalid="ignore"):
        for layout, args in cases.items():
            got, want = k(*args), k.program.run(args)
            np.testing.assert_array_equal(got, want)
            assert (np.signbit(got) == np.signbit(want)).all()
            assert "".join(fused_mod._code(a, k._shape) for a in args) == layout
            if lowering == "numba":
                assert layout in k._numba
    if lowering == "numba":   # the contiguous layout's kernel is called straight away
        assert k._flat is k._numba["ff"]


def _mlp(width: int):
    gg.manual_seed(0)
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 3))


@pytest.mark.parametrize("compiled", [False, True])
def test_release_as_the_pass_goes_only_for_large_results(monkeypatch, compiled):
    """A large weight (never released) under small activations is released in one
    sweep after the pass; large activations are released node by node. The gradients
    are eager's either way."""
    released = []
    real = engine._release
    monkeypatch.setattr(engine, "_release",
                        lambda node, *a, **k: (released.append(node), real(node, *a, **k)))
    for batch, incremental in ((2, False), (256, True)):
        model = _mlp(512)   # the middle weight: 512 x 512 float32 = 1 MiB
        reset()   # (each batch size its own static graph: no dynamic-shape recompile)
        x, y = gg.randn(batch, 8), gg.randint(0, 3, (batch,))
        run = gg.compile(model) if compiled else model
        released.clear()
        F.cross_entropy(run(x), y).backward()
        # (compiled, the activations live inside the one node: never node by node)
        assert bool(released) == (incremental and not compiled)
        ref = _mlp(512)
        F.cross_entropy(ref(x), y).backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,tshape,reduction", [
    ((5,), (), "mean"), ((4, 5), (4,), "sum"), ((3, 5, 2), (3, 2), "none"),
    ((3, 5, 2, 2), (3, 2, 2), "mean")])
def test_cross_entropy_of_every_rank_matches_torch(shape, tshape, reduction):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    t = rng.integers(0, 5, tshape)
    xg, xt = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    got = F.cross_entropy(xg, gg.tensor(t), reduction=reduction)
    want = torch.nn.functional.cross_entropy(xt, torch.tensor(t), reduction=reduction)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5)
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(xg.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_optimizer_step_hooks_and_grad_mode():
    """Hooks still run around the step; the step runs without grad and restores the
    caller's mode, also when the update raises."""
    p = nn.Parameter(gg.ones(3))
    opt = optim.SGD([p], lr=0.5)
    p.grad = gg.ones(3)
    modes = []
    opt.register_step_pre_hook(lambda o, a, k: modes.append(("pre", gg.is_grad_enabled())))
    opt.register_step_post_hook(lambda o, a, k: modes.append(("post", gg.is_grad_enabled())))
    opt.step()
    assert modes == [("pre", True), ("post", True)]
    np.testing.assert_array_equal(p.detach().numpy(), np.full(3, 0.5, np.float32))
    q = nn.Parameter(gg.ones(2))
    q._array.flags.writeable = False
    q.grad = gg.ones(2)
    bad = optim.SGD([q], lr=0.1)
    with pytest.raises(RuntimeError, match="read-only"):
        bad.step()
    assert gg.is_grad_enabled()
