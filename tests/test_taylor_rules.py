"""Taylor rules from the op registry: every op class in ``graphgrad.ops.REGISTRY`` either
has a ``taylor`` rule, checked here on the op's cases in ``op_cases.py`` against nested
reverse mode in float64 (directional derivatives to order 4, every differentiable input
moving along a random direction), or is listed below with the reason it has none, and
jet then raises its "has no Taylor rule" error naming it. Ops that are not
differentiable (comparisons, argmax, integer results) give a zero series.

PyTorch's nested autograd is a second oracle where it differentiates the case twice.

An op registered later without a rule and without an entry here shows as an xfail that
names it (say, an op from a branch merged after this test): the suite stays green, the
gap stays visible, and the fix is a ``taylor`` method beside the op's jvp.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from op_cases import CASES

import graphgrad as gg
from graphgrad.func.jet import jet_coefficients
from graphgrad.func.pytree import tree_flatten
from graphgrad.ops import REGISTRY

ORDER = 4
SETTINGS = settings(max_examples=2, deadline=None, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# Differentiable ops with no Taylor rule: op name -> why. Empty today; an entry makes
# the op's cases expect jet's "has no Taylor rule" error.
NO_TAYLOR_RULE: dict[str, str] = {}

# Cases whose function jet cannot run for a reason other than a missing rule:
# case name -> the error jet raises.
JET_REFUSES: dict[str, str] = {}

# Cases where PyTorch's nested autograd is wrong or imprecise: only graphgrad's compared
TORCH_NESTED_WRONG = {
    "logcumsumexp": "nan from the third derivative of a one-element slice on",
    "logcumsumexp_method": "nan from the third derivative of a one-element slice on",
    "cumprod_gradient": "its double backward divides by the input: 1e-6 off near zeros",
    "cumprod_gradient_zeros": "its double backward divides by the input: 1e-6 off near zeros",
}
def _rule_missing(op_name: str) -> bool:
    cls = REGISTRY.get(op_name)
    return cls is not None and cls.differentiable and getattr(cls, "taylor", None) is None


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_op_has_a_rule_or_a_reason(name):
    if not _rule_missing(name):
        assert name not in NO_TAYLOR_RULE, f"{name} has a Taylor rule: drop it from the list"
        return
    if name not in NO_TAYLOR_RULE:
        pytest.xfail(f"{name} has no Taylor rule and no entry in NO_TAYLOR_RULE: add a "
                     f"`taylor` method beside its jvp in {REGISTRY[name].__module__}")
    assert NO_TAYLOR_RULE[name]


def _float(a) -> bool:
    return np.asarray(a).dtype.kind == "f"


def _leaves(out, lib=gg) -> list:
    flat, _ = tree_flatten(out)
    return [o for o in flat if isinstance(o, lib.Tensor) and o.dtype.is_floating_point]


def _nested(fn, xs, moving, vs, ws, lib=gg) -> list[float]:
    """[d^k/dt^k sum_i <w_i, out_i(x + t v)> at t = 0, k = 0..ORDER] by nested grad in
    ``lib`` (graphgrad or torch)."""
    t = lib.zeros((), dtype=lib.float64, requires_grad=True)
    args = [x + t * v if m else x for x, m, v in zip(xs, moving, vs, strict=True)]
    cur = sum(((o * w).sum() for o, w in zip(_leaves(fn(*args), lib), ws, strict=True)),
              lib.zeros((), dtype=lib.float64))
    values = [float(cur)]
    for _ in range(ORDER):
        g = None
        if cur.requires_grad:
            (g,) = lib.autograd.grad(cur, t, create_graph=True, allow_unused=True)
        cur = g if g is not None else lib.zeros((), dtype=lib.float64)
        values.append(float(cur))
    return values


def _jet(fn, xs, moving, vs, ws) -> list[float]:
    coefficients = tuple([v] + [None] * (ORDER - 1) if m else None
                         for m, v in zip(moving, vs, strict=True))
    out, terms = jet_coefficients(fn, tuple(xs), coefficients, ORDER)
    flat, _ = tree_flatten(out)
    floats = [i for i, o in enumerate(flat) if isinstance(o, gg.Tensor)
              and o.dtype.is_floating_point]
    values = [sum(float((flat[i] * w).sum()) for i, w in zip(floats, ws, strict=True))]
    for k in range(ORDER):
        values.append(math.factorial(k + 1) * sum(
            0.0 if terms[i][k] is None else float((terms[i][k] * w).sum())
            for i, w in zip(floats, ws, strict=True)))
    return values


def _missing_rule_named(message: str) -> str | None:
    for name in REGISTRY:
        if f"the op {name} has no Taylor rule" in message:
            return name
    return None


JET_CASES = [c for c in CASES if c.grad]


@pytest.mark.parametrize("case", JET_CASES, ids=[c.name for c in JET_CASES])
@SETTINGS
@given(data=st.data())
def test_taylor_rule_matches_nested_reverse_mode(case, data):
    example = data.draw(case.inputs)
    rng = np.random.default_rng(len(case.name))
    xs = [gg.tensor(np.asarray(a)) for a in example.arrays]
    moving = [_float(a) and i not in example.nograd for i, a in enumerate(example.arrays)]
    vs = [gg.tensor(rng.standard_normal(np.shape(a))) if m else None
          for a, m in zip(example.arrays, moving, strict=True)]

    def fn(*args):
        return case.gg_fn(*args, **example.static)
    ws = [gg.tensor(rng.standard_normal(tuple(o.shape))) for o in _leaves(fn(*xs))]
    if case.name in JET_REFUSES:
        with pytest.raises(NotImplementedError, match=JET_REFUSES[case.name]):
            _jet(fn, xs, moving, vs, ws)
        return
    try:
        got = _jet(fn, xs, moving, vs, ws)
    except NotImplementedError as e:
        name = _missing_rule_named(str(e))
        if name is None:
            raise
        if name in NO_TAYLOR_RULE:
            return  # the listed op raised, naming itself
        pytest.xfail(f"{name} has no Taylor rule (case {case.name}): add one")
    want = _nested(fn, xs, moving, vs, ws)
    if not case.grad2:  # a kink or a masked singularity: only first order is defined
        got, want = got[:2], want[:2]
    # the case's own tolerance where it is looser (float32 casts), times 10 for order 4
    rtol, atol = max(1e-7, 10 * case.rtol), max(1e-8, 10 * case.atol)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol,
                               err_msg=f"case {case.name}: jet vs nested reverse mode")
    if case.torch_grad and case.grad2 and not case.xfail and \
            case.name not in TORCH_NESTED_WRONG:
        def torch_fn(*args):
            return case.torch_fn(*args, **example.static)

        def to_torch(t):
            return None if t is None else torch.tensor(t.numpy())
        want_torch = _nested(torch_fn, [to_torch(x) for x in xs], moving,
                             [to_torch(v) for v in vs], [to_torch(w) for w in ws], torch)
        # (from order 1: the order-0 sum may overflow differently at huge values)
        np.testing.assert_allclose(got[1:], want_torch[1:], rtol=rtol, atol=atol,
                                   err_msg=f"case {case.name}: jet vs PyTorch's nested "
                                           f"autograd")


def test_inplace_write_under_taylor_mode():
    """``out[i] = v`` in a jet: the written tensor takes the new series. (A write after a
    view of the tensor was taken is refused: the level keeps the view alive. The gradient of
    a coefficient through such a write raises the saved-version error where a rule has
    multiplied by the written value, as PyTorch's would: rules read ``out``.)"""
    rng = np.random.default_rng(0)
    x, v, w = (gg.tensor(rng.standard_normal(4)) for _ in range(3))

    def inplace(a):
        out = (a * w).sin()
        out[1:3] = (a[1:3] * w[0]).exp()
        return out

    def functional(a):
        out = (a * w).sin()
        return gg.cat([out[:1], (a[1:3] * w[0]).exp(), out[3:]])
    got = gg.func.taylor_derivatives(inplace, x, v, 3)
    want = gg.func.taylor_derivatives(functional, x, v, 3)
    for g, h in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), h.numpy(), rtol=1e-12)


def test_inplace_write_into_a_view_is_refused():
    def f(a):
        out = a * 1.0
        out[0:2].mul_(2.0)
        return out
    with pytest.raises(NotImplementedError, match="on a view"):
        gg.func.taylor_derivatives(f, gg.tensor([1.0, 2.0, 3.0]), gg.ones(3), 2)


@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_prod_series_equals_the_products_spelled_out(include_self):
    """reduce='prod' (no op case: PyTorch has no forward AD for it) against the same
    products written with Mul, including two zero sources meeting at one position (where
    the product is 0 to first order but not to second)."""
    rng = np.random.default_rng(7)
    a0, s0 = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    s0[:, 3] = 0.0
    index = np.array([[0, 1, 2, 0], [2, 2, 1, 0]])
    seeds = (gg.tensor(rng.standard_normal((3, 4))), gg.tensor(rng.standard_normal((2, 4))))

    def op(a, s):
        return a.scatter_reduce(0, gg.tensor(index), s, reduce="prod",
                                include_self=include_self)

    def spelled(a, s):
        cols = []
        for j in range(4):
            col = []
            for p in range(3):
                arrived = [k for k in range(2) if index[k, j] == p]
                v = a[p, j] if include_self or not arrived else gg.ones((), dtype=gg.float64)
                for k in arrived:
                    v = v * s[k, j]
                col.append(v)
            cols.append(gg.stack(col))
        return gg.stack(cols, dim=1)
    got, want = ([t.numpy() for t in gg.func.jet(f, (gg.tensor(a0), gg.tensor(s0)),
                                                 ([seeds[0]] * 3, [seeds[1]] * 3))[1]]
                 for f in (op, spelled))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_extremum_matches_nested_reverse_mode(reduce):
    rng = np.random.default_rng(8)
    index = gg.tensor(np.array([[0, 1, 2, 0], [2, 2, 1, 0]]))
    xs = [gg.tensor(rng.standard_normal((3, 4))), gg.tensor(rng.standard_normal((2, 4)))]
    vs = [gg.tensor(rng.standard_normal((3, 4))), gg.tensor(rng.standard_normal((2, 4)))]
    ws = [gg.tensor(rng.standard_normal((3, 4)))]
    for include_self in (True, False):
        def fn(a, s, include_self=include_self):
            return a.scatter_reduce(0, index, s, reduce=reduce, include_self=include_self)
        np.testing.assert_allclose(_jet(fn, xs, [True, True], vs, ws),
                                   _nested(fn, xs, [True, True], vs, ws), rtol=1e-10)
