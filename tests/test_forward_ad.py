"""``graphgrad.autograd.forward_ad`` (dual tensors) against
``torch.autograd.forward_ad`` and ``torch.func``: make_dual/unpack_dual, the errors in
PyTorch's wording, levels (tangents die with their level; levels nest, which PyTorch's
raw API does not allow, so nesting is checked against torch.func), forward-over-reverse
and reverse-over-forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as tfwad
import torch.func as TF
from hypothesis import given, settings
from hypothesis import strategies as st

import graphgrad as gg
import graphgrad.autograd.forward_ad as fwad
from graphgrad.ops import Op

SETTINGS = settings(max_examples=15, deadline=None)


def both(*arrays):
    return [gg.tensor(np.asarray(a)) for a in arrays], [torch.tensor(np.asarray(a))
                                                        for a in arrays]


def close(g, t, rtol=1e-10, atol=1e-12):
    assert g is not None and t is not None, (g, t)
    assert tuple(g.shape) == tuple(t.shape), (g.shape, t.shape)
    assert str(g.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=atol)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# functions written once for both frameworks (they use only methods and operators)
FNS = {
    "sin_times_exp": lambda x: x.sin() * x.exp(),
    "softmax_like": lambda x: x.exp() / x.exp().sum(),
    "rational": lambda x: (x ** 2 + 1).reciprocal() * x.tanh(),
    "matmul_chain": lambda x: (x.reshape(2, 3) @ x.reshape(3, 2)).sigmoid().sum(0),
    "reductions": lambda x: x.abs().sqrt().cumsum(0) + x.amax() * x.mean(),
    "indexing": lambda x: x[1:4] * x[[0, 0, 5]] + x.flip(0)[:3],
}


# ---- make_dual / unpack_dual ---------------------------------------------------------


@pytest.mark.parametrize("name", FNS)
def test_dual_numbers_match_torch(name):
    fn = FNS[name]
    (x, v), (xt, vt) = both(rand(6, seed=1), rand(6, seed=2))
    with fwad.dual_level():
        out = fn(fwad.make_dual(x, v))
        primal, tangent = fwad.unpack_dual(out)
    with tfwad.dual_level():
        outt = fn(tfwad.make_dual(xt, vt))
        primalt, tangentt = tfwad.unpack_dual(outt)
    close(primal, primalt)
    close(tangent, tangentt)
    close(tangent, TF.jvp(fn, (xt,), (vt,))[1])


@SETTINGS
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=3), seed=st.integers(0, 999))
def test_dual_numbers_any_shape(shape, seed):
    rng = np.random.default_rng(seed)
    (x, v, w), (xt, vt, wt) = both(*(rng.standard_normal(shape) for _ in range(3)))

    def fn(a, b):
        return (a * b).tanh() + a.exp() / (1 + b * b) - (a - b).sum()

    with fwad.dual_level():
        t = fwad.unpack_dual(fn(fwad.make_dual(x, v), fwad.make_dual(w, w))).tangent
    with tfwad.dual_level():
        tt = tfwad.unpack_dual(fn(tfwad.make_dual(xt, vt), tfwad.make_dual(wt, wt))).tangent
    close(t, tt)


def test_unpack_dual_fields_and_identity():
    (x, v), _ = both(rand(3), rand(3, seed=1))
    with fwad.dual_level():
        d = fwad.make_dual(x, v)
        res = fwad.unpack_dual(d)
        assert isinstance(res, fwad.UnpackedDualTensor) and isinstance(res, tuple)
        assert res.tangent is v  # like torch: the tangent is the given tensor
        close(res.primal, torch.tensor(x.numpy()))
        assert fwad.unpack_dual(res.primal).tangent is None  # the primal is a plain view
        np.testing.assert_array_equal(d.numpy(), x.numpy())
    xt, vt = torch.tensor(x.numpy()), torch.tensor(v.numpy())
    with tfwad.dual_level():
        rest = tfwad.unpack_dual(tfwad.make_dual(xt, vt))
        assert rest.tangent is vt and tfwad.unpack_dual(rest.primal).tangent is None


def test_tangent_of_a_view():
    (x, v), (xt, vt) = both(rand(3, 4), rand(3, 4, seed=1))
    with fwad.dual_level():
        d = fwad.make_dual(x, v)
        t = fwad.unpack_dual(d[1:, ::2].T).tangent
    with tfwad.dual_level():
        tt = tfwad.unpack_dual(tfwad.make_dual(xt, vt)[1:, ::2].T).tangent
    close(t, tt)


def test_tensor_not_depending_on_dual_has_no_tangent():
    (x, v, y), _ = both(rand(3), rand(3), rand(3))
    with fwad.dual_level():
        d = fwad.make_dual(x, v)
        assert fwad.unpack_dual(y * 2).tangent is None
        assert fwad.unpack_dual(d.detach()).tangent is None
        assert fwad.unpack_dual(d > 0).tangent is None  # comparisons are not differentiable
        assert fwad.unpack_dual(d.argmax()).tangent is None
        assert fwad.unpack_dual(3.0).tangent is None


def test_integer_operands_inside_a_level():
    (x, v), (xt, vt) = both(rand(3), rand(3, seed=1))
    i, it = gg.arange(3), torch.arange(3)
    with fwad.dual_level():
        d = fwad.make_dual(x, v)
        t = fwad.unpack_dual(d * i + d[i.flip(0)] + 2).tangent
    with tfwad.dual_level():
        dt = tfwad.make_dual(xt, vt)
        tt = tfwad.unpack_dual(dt * it + dt[it.flip(0)] + 2).tangent
    close(t, tt)


def test_forward_ad_ignores_no_grad():
    (x, v), (xt, vt) = both(rand(3), rand(3, seed=1))
    with fwad.dual_level(), gg.no_grad():
        t = fwad.unpack_dual(fwad.make_dual(x, v).exp()).tangent
    with tfwad.dual_level(), torch.no_grad():
        tt = tfwad.unpack_dual(tfwad.make_dual(xt, vt).exp()).tangent
    close(t, tt)


# ---- errors --------------------------------------------------------------------------


def test_tangent_shape_mismatch_error():
    msg = (r"Trying to set a forward gradient that has a different size than that of the "
           r"original Tensor, this is not supported. Tensor is of size \[3\] while the given "
           r"forward gradient is of size \[4\].")
    with tfwad.dual_level(), pytest.raises(RuntimeError, match=msg):
        tfwad.make_dual(torch.zeros(3), torch.zeros(4))
    with fwad.dual_level(), pytest.raises(RuntimeError, match=msg):
        fwad.make_dual(gg.zeros(3), gg.zeros(4))


@pytest.mark.parametrize("which", ["primal", "tangent"])
def test_non_float_primal_or_tangent_error(which):
    msg = (rf"Expected {which} to be floating point or complex, but got: "
           rf"(torch|graphgrad)\.int64")
    for mod, lib in [(tfwad, torch), (fwad, gg)]:
        ints, floats = lib.arange(3), lib.zeros(3)
        args = (ints, floats) if which == "primal" else (floats, ints)
        with mod.dual_level(), pytest.raises(ValueError, match=msg):
            mod.make_dual(*args)


def test_make_dual_outside_a_level_error():
    msg = (r"Trying to create a dual Tensor for forward AD but no level exists, make sure to "
           r"enter_dual_level\(\) first.")
    with pytest.raises(RuntimeError, match=msg):
        tfwad.make_dual(torch.zeros(3), torch.zeros(3))
    with pytest.raises(RuntimeError, match=msg):
        fwad.make_dual(gg.zeros(3), gg.zeros(3))
    level = fwad.enter_dual_level()
    fwad.exit_dual_level(level=level)
    with pytest.raises(RuntimeError, match=msg):  # an exited level cannot be used either
        fwad.make_dual(gg.zeros(3), gg.zeros(3), level=level)


def test_exit_level_that_is_not_the_last_error():
    outer = fwad.enter_dual_level()
    inner = fwad.enter_dual_level()
    try:
        with pytest.raises(RuntimeError, match="Trying to exit a forward AD level that was not "
                                               "the last one that was created. This is not "
                                               "supported."):
            fwad.exit_dual_level(level=outer)
    finally:
        fwad.exit_dual_level(level=inner)
        fwad.exit_dual_level(level=outer)
    assert fwad.active_levels() == []


def test_missing_forward_rule_error():
    class _NoJvp(Op):  # the leading underscore keeps it out of the registry
        @staticmethod
        def forward(a):
            return a * 2

        @staticmethod
        def vjp(g, out, a):
            return (g * 2,)

    x = gg.ones(3)
    np.testing.assert_array_equal(_NoJvp.apply(x).numpy(), [2.0, 2.0, 2.0])
    with fwad.dual_level(), pytest.raises(NotImplementedError,
                                          match="Trying to use forward AD with _NoJvp that does "
                                                "not support it because it has not been "
                                                "implemented yet."):
        _NoJvp.apply(fwad.make_dual(x, gg.ones(3)))


def test_make_dual_of_a_dual_at_the_same_level_error():
    msg = ("Making a dual Tensor based on a Tensor that already has a forward gradient at the "
           "same level")
    with tfwad.dual_level(), pytest.raises(RuntimeError, match=msg):
        tfwad.make_dual(tfwad.make_dual(torch.zeros(3), torch.ones(3)), torch.ones(3))
    with fwad.dual_level(), pytest.raises(RuntimeError, match=msg):
        fwad.make_dual(fwad.make_dual(gg.zeros(3), gg.ones(3)), gg.ones(3))


# ---- levels --------------------------------------------------------------------------


def test_unpack_outside_a_level_gives_no_tangent():
    x, xt = gg.ones(3), torch.ones(3)
    p, t = fwad.unpack_dual(x)
    pt, tt = tfwad.unpack_dual(xt)
    assert p is x and t is None
    assert pt is xt and tt is None


def test_tangents_are_dropped_when_the_level_exits():
    (x, v), (xt, vt) = both(rand(3), rand(3, seed=1))
    with fwad.dual_level() as level:
        d = fwad.make_dual(x, v)
        out = d.sin()
        assert fwad.unpack_dual(out).tangent is not None
    with tfwad.dual_level():
        outt = tfwad.make_dual(xt, vt).sin()
    assert tfwad.unpack_dual(outt).tangent is None
    assert fwad.unpack_dual(out).tangent is None
    assert fwad.unpack_dual(out, level=level).tangent is None
    assert fwad.unpack_dual(d, level=level).tangent is None
    close(out, outt)  # the primal survives
    # a new level does not see the old tangents
    with fwad.dual_level():
        assert fwad.unpack_dual(out).tangent is None
        assert fwad.unpack_dual(d * 2).tangent is None


def test_enter_and_exit_by_hand():
    level = fwad.enter_dual_level()
    try:
        d = fwad.make_dual(gg.ones(2), gg.full((2,), 3.0))
        np.testing.assert_array_equal(fwad.unpack_dual(d * d).tangent.numpy(), [6.0, 6.0])
    finally:
        fwad.exit_dual_level(level=level)
    assert fwad.unpack_dual(d).tangent is None
    with fwad.dual_level() as lvl:
        assert isinstance(lvl, fwad.JVPLevel) and fwad.active_levels()[-1] is lvl
    assert fwad.active_levels() == []


def test_nested_levels_give_second_derivatives():
    """u^T H v from two levels, checked against torch.func.hessian."""
    (x, u, v), (xt, ut, vt) = both(rand(4), rand(4, seed=1), rand(4, seed=2))

    def f(a):
        return (a.sin() * a.exp()).sum() + (a[:2] * a[2:]).prod()

    with fwad.dual_level() as outer:
        d1 = fwad.make_dual(x, v, level=outer)
        with fwad.dual_level() as inner:
            d2 = fwad.make_dual(d1, u, level=inner)
            out = f(d2)
            first_u = fwad.unpack_dual(out, level=inner).tangent
            # the inner tangent does not leak to the outer level and vice versa
            first_v = fwad.unpack_dual(out, level=outer).tangent
        second = fwad.unpack_dual(first_u, level=outer).tangent
    H = TF.hessian(f)(xt)
    g = TF.grad(f)(xt)
    close(first_u, g @ ut)
    close(first_v, g @ vt)
    close(second, ut @ H @ vt)


def test_three_nested_levels_give_third_derivatives():
    x = gg.tensor(0.4, dtype=gg.float64)
    one = gg.tensor(1.0, dtype=gg.float64)
    levels = [fwad.enter_dual_level() for _ in range(3)]
    try:
        d = x
        for lvl in levels:
            d = fwad.make_dual(d, one, level=lvl)
        t = (d.sin() * d * d).exp()  # f(x) = exp(x^2 sin x)
        for lvl in reversed(levels):
            t = fwad.unpack_dual(t, level=lvl).tangent
    finally:
        for lvl in reversed(levels):
            fwad.exit_dual_level(level=lvl)
    f = lambda a: (a.sin() * a * a).exp()  # noqa: E731
    close(t, TF.grad(TF.grad(TF.grad(f)))(torch.tensor(0.4, dtype=torch.float64)))


def test_jvp_of_jvp_through_func():
    (x, u, v), (xt, ut, vt) = both(rand(3), rand(3, seed=1), rand(3, seed=2))
    f = lambda a: (a.tanh() ** 3).sum() * a.norm()  # noqa: E731
    gfn = lambda a: gg.func.jvp(f, (a,), (u,))[1]  # noqa: E731
    tfn = lambda a: TF.jvp(f, (a,), (ut,))[1]  # noqa: E731
    close(gg.func.jvp(gfn, (x,), (v,))[1], TF.jvp(tfn, (xt,), (vt,))[1])
    with fwad.dual_level():  # a raw level around func.jvp
        t = fwad.unpack_dual(gfn(fwad.make_dual(x, v))).tangent
    close(t, TF.jvp(tfn, (xt,), (vt,))[1])


# ---- forward-over-reverse and reverse-over-forward -----------------------------------


def hvp_fn(a):
    return (a.sin() * a.exp()).sum() * a.sum()


def test_forward_over_reverse_gives_hvp():
    """A backward pass inside a level propagates tangents: the gradient's tangent is H v."""
    (x, v), (xt, vt) = both(rand(3), rand(3, seed=1))
    xg = gg.tensor(x.numpy(), requires_grad=True)
    with fwad.dual_level():
        d = fwad.make_dual(xg, v)
        (g_x,) = gg.autograd.grad(hvp_fn(d), xg)
        (g_d,) = gg.autograd.grad(hvp_fn(d), d)
        hv_x, hv_d = fwad.unpack_dual(g_x).tangent, fwad.unpack_dual(g_d).tangent
    xtg = xt.clone().requires_grad_(True)
    with tfwad.dual_level():
        dt = tfwad.make_dual(xtg, vt)
        (g_xt,) = torch.autograd.grad(hvp_fn(dt), xtg)
        hv_t = tfwad.unpack_dual(g_xt).tangent
    close(hv_t, TF.hessian(hvp_fn)(xt) @ vt)
    close(hv_x, hv_t)
    close(hv_d, hv_t)
    close(g_x, TF.grad(hvp_fn)(xt))


def test_backward_inside_a_level():
    (x, v), (xt, vt) = both(rand(3), rand(3, seed=1))
    xg = gg.tensor(x.numpy(), requires_grad=True)
    with fwad.dual_level():
        hvp_fn(fwad.make_dual(xg, v)).backward()
    xtg = xt.clone().requires_grad_(True)
    with tfwad.dual_level():
        hvp_fn(tfwad.make_dual(xtg, vt)).backward()
    close(xg.grad, xtg.grad)


def test_reverse_over_forward():
    """Backward through a tangent: d(J v)/dx = H v, d(J v)/dv = J."""
    (x0, v0), _ = both(rand(3), rand(3, seed=1))
    x, v = gg.tensor(x0.numpy(), requires_grad=True), gg.tensor(v0.numpy(), requires_grad=True)
    xt = torch.tensor(x0.numpy(), requires_grad=True)
    vt = torch.tensor(v0.numpy(), requires_grad=True)
    with fwad.dual_level():
        t = fwad.unpack_dual(hvp_fn(fwad.make_dual(x, v))).tangent
    with tfwad.dual_level():
        tt = tfwad.unpack_dual(hvp_fn(tfwad.make_dual(xt, vt))).tangent
    assert t.requires_grad
    close(t, tt)
    gx, gv = gg.autograd.grad(t, (x, v))
    gxt, gvt = torch.autograd.grad(tt, (xt, vt))
    close(gx, gxt)
    close(gv, gvt)
    # the primal output's graph reaches the input through make_dual as well
    with fwad.dual_level():
        (g,) = gg.autograd.grad(fwad.unpack_dual(hvp_fn(fwad.make_dual(x, v))).primal, x)
    close(g, TF.grad(hvp_fn)(xt.detach()))


# ---- in-place ops on dual tensors ----------------------------------------------------

INPLACE = {
    "mul_": lambda lib, d: d.clone().mul_(2),
    "add_into_plain": lambda lib, d: lib.zeros(3, dtype=lib.float64).add_(d),
    "setitem_into_plain": lambda lib, d: _setitem(lib.zeros(3, dtype=lib.float64), d),
    "sin_then_exp_": lambda lib, d: d.sin().exp_(),
}


def _setitem(y, d):
    y[0] = d[1] * 2
    return y


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_ops_update_the_tangent(name):
    (x, v), (xt, vt) = both(rand(3), rand(3, seed=1))
    with fwad.dual_level():
        t = fwad.unpack_dual(INPLACE[name](gg, fwad.make_dual(x, v))).tangent
    with tfwad.dual_level():
        tt = tfwad.unpack_dual(INPLACE[name](torch, tfwad.make_dual(xt, vt))).tangent
    close(t, tt)


# ---- tangents through in-place ops and writes through views --------------------------

def _inplace_and_view_writes(x):
    b = x * 1
    b.mul_(x)
    b[1] = b[0] * 3
    v = b[1:]
    v.add_(x[0])  # a write through a view changes the base's tangent too
    return (b.sin() ** 2).sum()


@pytest.mark.parametrize("transform", ["jvp", "jacfwd_grad", "hessian", "jacrev_grad"])
def test_tangents_through_inplace_and_views(transform):
    from graphgrad import func as F
    (x,), (xt,) = both(rand(4, seed=7))
    build = {
        "jvp": lambda mod: (lambda a: mod.jvp(_inplace_and_view_writes, (a,), (a.cos(),))[1]),
        "jacfwd_grad": lambda mod: mod.jacfwd(mod.grad(_inplace_and_view_writes)),
        "hessian": lambda mod: mod.hessian(_inplace_and_view_writes),
        "jacrev_grad": lambda mod: mod.jacrev(mod.grad(_inplace_and_view_writes)),
    }[transform]
    close(build(F)(x), build(TF)(xt))
