"""The complex-step Hessian with every direction in one batched (vmapped) pass: equal to
the one-pass-per-direction loop and to AD Hessians, in float64."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import numdiff
from graphgrad.numdiff.complex_step import ComplexStepError, cs_hessian


@pytest.mark.parametrize("n", [1, 7, 40])
def test_batched_equals_loop_and_ad(n):
    rng = np.random.default_rng(n)
    a = gg.tensor(rng.standard_normal((n, n)) / np.sqrt(n))
    x = rng.standard_normal(n)

    def f(v):
        return ((a @ v).tanh() ** 2).sum() + (v.sin() * v.exp()).sum() + 0.5 * (v @ v)
    batched = cs_hessian(f, x)
    looped = cs_hessian(f, x, batched=False)
    ad = gg.func.hessian(f)(gg.tensor(x)).numpy()
    np.testing.assert_allclose(batched, looped, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(batched, ad, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(numdiff.hessian(f, x, method="complex_step"), batched)


def test_matrix_input_and_unused_input():
    x = np.arange(6.0).reshape(2, 3) / 5

    def f(m):
        return (m[0] * m[0]).sum() * m[0, 1]  # the second row never reaches the output
    h = cs_hessian(f, x)
    assert h.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(h, cs_hessian(f, x, batched=False), atol=1e-14)
    assert not h[1].any() and not h[:, :, 1].any()


def test_non_holomorphic_op_still_refused():
    with pytest.raises(ComplexStepError, match="Relu is not holomorphic"):
        cs_hessian(lambda v: v.relu().sum(), np.ones(3))


@pytest.mark.parametrize("real_side", ["left", "right", "neither"])
@pytest.mark.parametrize("shapes", [((40, 50), (50, 30)), ((3, 40, 50), (50, 30)),
                                    ((40, 50), (2, 50, 30)), ((1, 300), (300, 200)),
                                    ((200, 300), (300, 1))])
def test_complex_matmul_routes_equal_zgemm(real_side, shapes):
    """A complex product with one factor whose imaginary part is zero runs as real
    GEMMs on the other's real view; the values are zgemm's to rounding, for matmul and
    linear, batched or not."""
    from graphgrad.ops.linalg import complex_matmul
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shapes[0]) + 1j * rng.standard_normal(shapes[0])
    b = rng.standard_normal(shapes[1]) + 1j * rng.standard_normal(shapes[1])
    if real_side == "left":
        a = a.real + 0j
    elif real_side == "right":
        b = b.real + 0j
    want = np.matmul(a, b)
    np.testing.assert_allclose(complex_matmul(a, b), want, rtol=1e-13, atol=1e-13)
    got = (gg.tensor(a) @ gg.tensor(b)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    if len(shapes[1]) == 2:
        w = gg.tensor(np.ascontiguousarray(b.T))
        x2 = gg.tensor(a.reshape(-1, a.shape[-1]))
        got = gg.nn.functional.linear(x2, w).numpy()
        np.testing.assert_allclose(got, want.reshape(-1, want.shape[-1]), rtol=1e-13,
                                   atol=1e-13)


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("batched", [True, False])
def test_modules_with_weights(requires_grad, batched):
    """nn layers meet the complex points with real weights (F.linear on one example
    takes its composite route, whose dtype check leaves mixed operands to the mode);
    weights that require grad are constants of the step and get no gradient."""
    gg.manual_seed(0)
    m = gg.nn.Sequential(gg.nn.Linear(3, 8), gg.nn.Tanh(), gg.nn.Linear(8, 1)).double()
    for p in m.parameters():
        p.requires_grad_(requires_grad)
    x = np.random.default_rng(1).standard_normal(3)

    def f(v):
        return m(v).sum()
    ad = gg.func.hessian(f)(gg.tensor(x)).detach().numpy()
    np.testing.assert_allclose(cs_hessian(f, x, batched=batched), ad, rtol=1e-12, atol=1e-14)
    jac = gg.func.jacrev(m)(gg.tensor(x)).detach().numpy()
    np.testing.assert_allclose(numdiff.jacobian(m, x, method="complex_step"), jac,
                               rtol=1e-12, atol=1e-14)
    assert all(p.grad is None for p in m.parameters())


def test_linear_outside_the_step_still_refuses_mixed_dtypes():
    x = gg.tensor(np.ones(3, np.complex128))
    w, b = gg.ones(2, 3, dtype=gg.float64), gg.ones(2, dtype=gg.float64)
    with pytest.raises(RuntimeError, match="mat1 and mat2 must have the same dtype"):
        gg.nn.functional.linear(x, w, b)
