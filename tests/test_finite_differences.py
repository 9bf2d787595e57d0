"""Every differentiable case of ``op_cases.py`` against float64 central finite
differences, with no PyTorch: the dot-product test ``<u, J^T v> = <J u, v>`` along random
directions ``u`` (inputs) and ``v`` (outputs), where ``J^T v`` is graphgrad's backward
pass and ``J u`` a central difference of the forward values. The second-order test does
the same one level up: the directional derivative of ``x -> <grad_x <f(x), v>, w>``
(graphgrad's first-order gradient, evaluated as plain values) against graphgrad's
double backward.

The finite-difference helper sees only NumPy functions of NumPy arrays: it imports
nothing from autograd, and the forward values it differentiates come from tensors that
do not require grad, read with ``.detach().numpy()``.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from op_cases import CASES

import graphgrad as gg

_RANDOM = os.environ.get("GG_OP_RANDOM") == "1"
_N = int(os.environ.get("GG_OP_EXAMPLES", "4"))
# reproducible runs skip shrinking: the examples are small already, and the known-bug
# (xfail) cases would otherwise shrink on every run
SETTINGS = settings(max_examples=_N, deadline=None, derandomize=not _RANDOM,
                    database=None if not _RANDOM else settings.default.database,
                    phases=list(Phase) if _RANDOM else [Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
SEEDS = st.integers(0, 2**32 - 1)
RTOL = 1e-6  # relative to the sum of the magnitudes of the terms in each inner product
# The second-order test differentiates a computed gradient, whose rounding follows the size
# of the terms it cancels rather than its own size (x / |x| over one element: a gradient
# of 1e-16, differenced over a step of 1e-6): an absolute floor for it.
ATOL_SECOND = 1e-9

FD_CASES = [c for c in CASES if c.grad and c.fd]
FD2_CASES = [c for c in FD_CASES if c.grad2]


def params(cases):
    return [pytest.param(c, id=c.name, marks=[pytest.mark.xfail(reason=c.xfail)] if c.xfail
                         else []) for c in cases]


# ---- the finite-difference oracle: NumPy only ----------------------------------------------


def central_difference(f, xs, us, eps):
    """``J u`` of ``f`` (a list of arrays -> a list of arrays) at ``xs`` along ``us``:
    ``(f(x + eps u) - f(x - eps u)) / (2 eps)``; and an estimate of each element's error:
    how far the same difference with twice the step is off (the O(eps^2) truncation
    grows fourfold with the step, the rounding halves), plus a few ulps of the values over
    the step."""
    ulp = np.finfo(np.float64).eps

    def difference(h):
        plus = f([x + h * u for x, u in zip(xs, us, strict=True)])
        minus = f([x - h * u for x, u in zip(xs, us, strict=True)])
        return ([(p - m) / (2 * h) for p, m in zip(plus, minus, strict=True)],
                [ulp * (np.abs(p) + np.abs(m)) / (2 * h) for p, m in zip(plus, minus,
                                                                       strict=True)])
    ju, rounding = difference(eps)
    ju_2, _ = difference(2 * eps)
    error = [2 * np.abs(a - b) + 8 * r for a, b, r in zip(ju, ju_2, rounding, strict=True)]
    return ju, error


def inner(a_list, b_list) -> tuple[float, float]:
    """sum_i <a_i, b_i>, and the sum of the magnitudes of its terms (the scale an error
    is measured against)."""
    value = sum(float(np.sum(a * b)) for a, b in zip(a_list, b_list, strict=True))
    scale = sum(float(np.sum(np.abs(a * b))) for a, b in zip(a_list, b_list, strict=True))
    return value, scale


def assert_dot_product_test(lhs, rhs, noise=0.0, rtol=RTOL):
    """``lhs`` and ``rhs`` are (value, scale) pairs from ``inner``; ``noise`` bounds the
    error of the finite-difference side."""
    (a, sa), (b, sb) = lhs, rhs
    assert abs(a - b) <= rtol * (sa + sb) + noise + 1e-13, \
        f"<u, J^T v> = {a!r} but <J u, v> = {b!r} (difference {abs(a - b):.3g})"


# ---- the case as functions of its differentiable inputs ------------------------------------


def diff_positions(example) -> list[int]:
    return [i for i, a in enumerate(example.arrays)
            if np.asarray(a).dtype.kind == "f" and i not in example.nograd]


def _tensors(example, values: dict, requires_grad: bool):
    """The example's inputs as graphgrad tensors, with ``values`` replacing the
    differentiable arrays."""
    out = []
    for i, a in enumerate(example.arrays):
        if i in values:
            out.append(gg.tensor(values[i], requires_grad=requires_grad))
        else:
            out.append(gg.tensor(np.asarray(a)))
    return out


def _outputs(case, inputs, example) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = case.gg_fn(*inputs, **example.static)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o for o in outs if o.dtype.is_floating_point]


def forward_values(case, example):
    """The case as a NumPy function of its differentiable inputs (no graph recorded)."""
    pos = diff_positions(example)

    def f(xs):
        inputs = _tensors(example, dict(zip(pos, xs, strict=True)), requires_grad=False)
        return [np.asarray(o.detach().numpy(), dtype=np.float64)
                for o in _outputs(case, inputs, example)]
    return f


def _projection(outs, weights):
    total = None
    for o, w in zip(outs, weights, strict=True):
        if o.requires_grad:
            term = (o * gg.tensor(w)).sum()
            total = term if total is None else total + term
    return total


def _grads(scalar, wrt, **kw) -> list[np.ndarray]:
    """graphgrad's gradients of ``scalar`` as arrays (zeros where there is none)."""
    if scalar is None or not scalar.requires_grad:
        return [np.zeros(tuple(x.shape)) for x in wrt]
    gs = gg.autograd.grad(scalar, wrt, allow_unused=True, **kw)
    return [np.zeros(tuple(x.shape)) if g is None else g for g, x in zip(gs, wrt, strict=True)]


def _arrays(gs) -> list[np.ndarray]:
    return [g if isinstance(g, np.ndarray) else np.asarray(g.detach().numpy()) for g in gs]


def _base(example) -> list[np.ndarray]:
    return [np.asarray(example.arrays[i], dtype=np.float64) for i in diff_positions(example)]


# ---- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", params(FD_CASES))
@SETTINGS
@given(data=st.data())
def test_vjp_matches_finite_differences(case, data):
    """<u, J^T v> (graphgrad's backward) = <J u, v> (central differences)."""
    example = data.draw(case.inputs)
    rng = np.random.default_rng(data.draw(SEEDS))
    xs = _base(example)
    f = forward_values(case, example)
    us = [rng.standard_normal(x.shape) for x in xs]
    vs = [rng.standard_normal(y.shape) for y in f(xs)]

    inputs = _tensors(example, dict(zip(diff_positions(example), xs, strict=True)), True)
    wrt = [inputs[i] for i in diff_positions(example)]
    jtv = _arrays(_grads(_projection(_outputs(case, inputs, example), vs), wrt))
    ju, noise = central_difference(f, xs, us, case.fd_eps)
    noise_v, _ = inner(noise, [np.abs(v) for v in vs])
    assert_dot_product_test(inner(us, jtv), inner(ju, vs), noise_v)


@pytest.mark.parametrize("case", params(FD2_CASES))
@SETTINGS
@given(data=st.data())
def test_second_derivative_matches_finite_differences(case, data):
    """With h(x) = <grad_x <f(x), v>, w>: <u, grad h> (graphgrad's double backward) equals
    the central difference of h along u (h evaluated by first-order backward passes)."""
    example = data.draw(case.inputs)
    rng = np.random.default_rng(data.draw(SEEDS))
    pos = diff_positions(example)
    xs = _base(example)
    vs = [rng.standard_normal(y.shape) for y in forward_values(case, example)(xs)]
    ws = [rng.standard_normal(x.shape) for x in xs]

    def h(values, create_graph=False):
        inputs = _tensors(example, dict(zip(pos, values, strict=True)), True)
        wrt = [inputs[i] for i in pos]
        grads = _grads(_projection(_outputs(case, inputs, example), vs), wrt,
                       create_graph=create_graph)
        total = None
        for g, w in zip(grads, ws, strict=True):
            if not isinstance(g, np.ndarray):
                term = (g * gg.tensor(w)).sum()
                total = term if total is None else total + term
        return total, wrt

    def h_values(values):
        total, _ = h(values)
        return [np.zeros(()) if total is None else np.asarray(total.detach().numpy())]

    us = [rng.standard_normal(x.shape) for x in xs]
    total, wrt = h(xs, create_graph=True)
    grad_h = _arrays(_grads(total, wrt))
    dh, noise = central_difference(h_values, xs, us, case.fd_eps)
    assert_dot_product_test(inner(us, grad_h), inner(dh, [np.ones(())]),
                            float(noise[0]) + ATOL_SECOND)
