"""func.laplacian and func.linear_operator: the three methods (collapsed Taylor mode,
Taylor mode, nested reverse mode) against traces of func.hessian on MLPs, float64."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import func, nn

DT = gg.float64
METHODS = ("collapsed", "taylor", "reverse")


def _mlp(d, act, out=1, width=8, seed=0):
    gg.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, width), act(), nn.Linear(width, width), act(),
                         nn.Linear(width, out)).to(DT)


def _hessians(net, x):
    """Per point and per output: (B, out, d, d), by func.hessian (reverse over reverse)."""
    def single(p):
        return net(p.unsqueeze(0))[0]
    return func.vmap(func.hessian(single))(x).detach().numpy()


@pytest.mark.parametrize("act", [nn.Tanh, nn.Sigmoid, nn.Softplus])
@pytest.mark.parametrize("d", [2, 16, 128])
def test_laplacian_matches_hessian_trace(act, d):
    net = _mlp(d, act)
    x = gg.randn(3, d, dtype=DT)
    want = np.trace(_hessians(net, x), axis1=-2, axis2=-1)  # (B, 1)
    for method in METHODS:
        got = func.laplacian(net, method=method)(x)
        assert tuple(got.shape) == (3, 1)
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-10, atol=1e-12,
                                   err_msg=method)


def test_vector_valued_and_single_point():
    net = _mlp(4, nn.Tanh, out=3)
    x = gg.randn(4, dtype=DT)
    want = np.trace(_hessians(net, x.unsqueeze(0))[0], axis1=-2, axis2=-1)
    for method in METHODS:
        got = func.laplacian(lambda p: net(p.unsqueeze(0))[0], method=method)(x)
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-10, err_msg=method)


def test_plain_function_closed_form():
    # f = sum sin(x_i) * x_0^2: Laplacian = -sum sin(x_i) x_0^2 + 4 x_0 cos(x_0) + 2 sin-sum
    x = gg.tensor([0.3, -0.7, 1.1], dtype=DT)

    def f(p):
        return p.sin().sum() * p[0] * p[0]
    a = x.numpy()
    s = np.sin(a).sum()
    want = -s * a[0] ** 2 + 4 * a[0] * np.cos(a[0]) + 2 * s
    for method in METHODS:
        assert abs(float(func.laplacian(f, method=method)(x)) - want) < 1e-12


@pytest.mark.parametrize("kind", ["diagonal", "full"])
def test_linear_operator(kind):
    d = 5
    net = _mlp(d, nn.Softplus, out=2)
    x = gg.randn(3, d, dtype=DT)
    rng = np.random.default_rng(1)
    if kind == "diagonal":
        c = rng.standard_normal(d)
        cm = np.diag(c)
    else:
        c = rng.standard_normal((d, d))  # not symmetric, indefinite: only sym(c) counts
        cm = c
    want = np.einsum("ij,bkij->bk", cm, _hessians(net, x))
    for method in METHODS:
        got = func.linear_operator(net, c, method=method)(x)
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-10, atol=1e-12,
                                   err_msg=method)


def test_gradient_of_the_laplacian_wrt_parameters_agrees():
    """A PINN trains on the Laplacian: its parameter gradient is the same by each method."""
    net = _mlp(3, nn.Tanh)
    x = gg.randn(5, 3, dtype=DT)
    grads = []
    for method in METHODS:
        loss = (func.laplacian(net, method=method)(x) ** 2).mean()
        params = list(net.parameters())
        got = gg.autograd.grad(loss, params, allow_unused=True)
        # the last bias does not reach the Laplacian: no gradient by every method
        assert got[-1] is None
        grads.append([g.numpy() for g in got[:-1]])
    for other in grads[1:]:
        for a, b in zip(grads[0], other, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_bad_method_and_coefficients():
    with pytest.raises(ValueError, match="method must be one of"):
        func.laplacian(gg.sin, method="fast")
    with pytest.raises(ValueError, match="coefficients must be"):
        func.linear_operator(gg.sin, np.ones((2, 3)))


@pytest.mark.parametrize("method", METHODS)
def test_laplacian_under_vmap_of_a_single_point_function(method):
    def f(p):
        return (p.sin() * p.tanh()).sum() * p[0]
    xs = gg.randn(4, 3, dtype=DT)
    batched = func.vmap(func.laplacian(f, method=method))(xs).detach().numpy()
    each = [float(func.laplacian(f, method=method)(xs[i])) for i in range(4)]
    hess = func.vmap(func.hessian(f))(xs).numpy()
    np.testing.assert_allclose(batched, each, rtol=1e-13)
    np.testing.assert_allclose(batched, np.trace(hess, axis1=-2, axis2=-1), rtol=1e-11)


def test_gradient_agrees_when_a_first_order_term_is_first_needed_under_no_grad():
    """Collapsed mode computes an op's first-order coefficients only when a later op
    needs them. Here a no_grad block needs them first; the later use under grad mode
    must still differentiate them w.r.t. the parameters (they record as when made)."""
    gg.manual_seed(3)
    lin1, lin2 = nn.Linear(3, 6).to(DT), nn.Linear(6, 1).to(DT)
    x = gg.randn(4, 3, dtype=DT)

    def f(p):
        h = lin1(p).tanh()
        with gg.no_grad():
            (h * h).sum()  # a two-input op: reads h's first-order terms
        return lin2(h).tanh()
    grads = []
    for method in ("collapsed", "reverse"):
        loss = (func.laplacian(f, method=method)(x) ** 2).sum()
        grads.append([g.numpy() for g in gg.autograd.grad(loss, list(lin1.parameters()))])
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_collapsed_first_order_terms_are_the_directional_derivatives():
    """The level's first-order coefficients of the output (computed on request) are
    J v_r, by func.jacrev."""
    from graphgrad.func.taylor_collapsed import CollapsedLevel
    net = _mlp(3, nn.Tanh, out=2)
    x = gg.randn(5, 3, dtype=DT)
    dirs = gg.randn(4, 1, 3, dtype=DT)
    level = CollapsedLevel(gg.ones(4, dtype=DT))
    x0 = x.view_as(x)
    level.seed(x0, dirs)
    with level:
        out = net(x0)
        first = level.terms(out)[0]
    jac = func.vmap(func.jacrev(lambda p: net(p.unsqueeze(0))[0]))(x).detach().numpy()
    want = np.einsum("bod,rd->rbo", jac, dirs.numpy()[:, 0])
    np.testing.assert_allclose(first.detach().numpy(), want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ["laplacian", "diagonal", "full"])
def test_collapsed_without_gradients_equals_with(kind):
    """Under no_grad collapsed mode sums the squared first-order terms in NumPy, not
    through graphgrad ops: the same values as the recorded path and func.hessian."""
    d = 6
    net = _mlp(d, nn.Tanh, out=2)
    x = gg.randn(4, d, dtype=DT)
    rng = np.random.default_rng(2)
    c = {"laplacian": np.eye(d), "diagonal": rng.standard_normal(d),
         "full": rng.standard_normal((d, d))}[kind]
    op = (func.laplacian(net) if kind == "laplacian" else func.linear_operator(net, c))
    with gg.no_grad():
        fast = op(x)
    recorded = op(x)
    assert recorded.requires_grad and not fast.requires_grad
    cm = np.diag(c) if c.ndim == 1 else c
    want = np.einsum("ij,bkij->bk", cm, _hessians(net, x))
    np.testing.assert_allclose(fast.numpy(), recorded.detach().numpy(), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(fast.numpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("block", [1, 3, 1000])
def test_fused_activation_and_linear_blocks(monkeypatch, block):
    """Without gradients, a Linear after an activation multiplies J X_1 a block of
    directions at a time straight into its GEMM: equal to the recorded path for any
    block size (one direction, a ragged last block, all at once)."""
    from graphgrad.func import taylor_collapsed
    d, width, batch = 7, 5, 4
    monkeypatch.setattr(taylor_collapsed, "_BLOCK_BYTES", block * batch * width * 8)
    used = []
    fused = taylor_collapsed._fused_linear
    def counted(*args):
        got = fused(*args)
        used.append(got is not None)
        return got
    monkeypatch.setattr(taylor_collapsed, "_fused_linear", counted)
    net = _mlp(d, nn.Tanh, out=3, width=width)
    x = gg.randn(batch, d, dtype=DT)
    with gg.no_grad():
        fast = func.laplacian(net)(x).numpy()
    assert any(used)  # the fused path ran (the Linear between two activations)
    recorded = func.laplacian(net)(x).detach().numpy()
    np.testing.assert_allclose(fast, recorded, rtol=1e-13, atol=1e-14)
    want = np.trace(_hessians(net, x), axis1=-2, axis2=-1)
    np.testing.assert_allclose(fast, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("grad", [True, False])
def test_collapsed_through_a_cast(grad):
    """x is float64, the network float32: the cast's coefficients take its new dtype
    (the next Linear refuses mixed dtypes), and the value is the float64 one to float32
    accuracy."""
    gg.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    x = gg.randn(4, 3, dtype=DT)
    with gg.set_grad_enabled(grad):
        got = func.laplacian(lambda p: net(p.float()))(x)
    assert got.dtype == gg.float32
    want = func.laplacian(lambda p: net.to(DT)(p), method="reverse")(x)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-4,
                               atol=1e-6)
