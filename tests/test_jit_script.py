"""Tests for ``graphgrad.jit.script`` (source -> graph IR): the lecture's three functions,
the capture corpus (outputs and gradients against eager on fresh inputs) and the generic
graph run for inputs of any rank. Eager graphgrad is the oracle (itself tested against
PyTorch elsewhere). Control flow, compile-time errors and loop exits have their own files."""

from __future__ import annotations

import numpy as np
import pytest
from capture_corpus import CORPUS
from jit_script_helpers import (
    _check_against_eager,
    _ops,
    _script_error,
)
from lecture_cases import branch, external, shape_dependent

import graphgrad as gg
import graphgrad.nn.functional as F
from graphgrad.graph import Interpreter, python_code
from graphgrad.jit import ScriptFunction, script

# ---- the lecture's three functions ---------------------------------------------------------

def test_branch_is_a_cond_node_with_both_branches():
    s = script(branch)
    assert isinstance(s, ScriptFunction)
    conds = [n for n in s.ir.nodes if n.kind == "cond"]
    assert len(conds) == 1
    assert _ops(conds[0].subgraphs["then"]) == {"Add"}
    assert _ops(conds[0].subgraphs["else"]) == {"Sub"}
    assert "Lt" in _ops(s.ir)
    code = s.code
    assert "def cond_then" in code and "def cond_else" in code
    assert "graphgrad.add(x, 1)" in code and "graphgrad.sub(x, 1)" in code
    table = s.tabular()
    assert "cond.then" in table and "cond.else" in table and "Add" in table and "Sub" in table
    dot = s.to_dot()
    assert "Add" in dot and "Sub" in dot and "cluster" in dot


@pytest.mark.parametrize("value", [-3.0, -0.5, 0.0, 0.25, 2.0])
def test_branch_right_on_both_sides_with_gradients(value):
    s = script(branch)
    x = gg.tensor(value, dtype=gg.float64, requires_grad=True)
    y = s(x)
    assert y.item() == branch(gg.tensor(value, dtype=gg.float64)).item()
    y.backward()
    assert x.grad.item() == 1.0
    # the same graph, run by the IR interpreter and as its printed Python
    (z,) = Interpreter(s.ir).run(gg.tensor(value, dtype=gg.float64))
    (w,) = python_code(s.ir).fn(gg.tensor(value, dtype=gg.float64))
    assert z.item() == w.item() == y.item()


def test_branch_is_one_graph_for_every_input():
    s = script(branch)
    graph = s.ir
    for value in (-1.0, 1.0, -2.0):
        s(gg.tensor(value))
    assert s.ir is graph  # no re-tracing: one graph holds both paths


def test_shape_dependent_is_a_compile_time_error_at_the_unpacking_line():
    text = _script_error(shape_dependent, "n, m = x.shape")
    assert "rank of 'x' is not known at compile time" in text
    assert "    n, m = x.shape\n    ~~~~ <--- HERE" in text


def test_external_call_is_a_compile_time_error_naming_it():
    text = _script_error(external, "np.random.rand()")
    assert text.lstrip().startswith("Python builtin <bound method RandomState.rand")
    assert "is currently not supported in graphgrad.jit.script" in text
    assert "    return x + np.random.rand()\n               ~~~~~~~~~~~~~~ <--- HERE" in text


# ---- the capture corpus ------------------------------------------------------------------

@pytest.mark.parametrize("case", [c for c in CORPUS if c.script_ok], ids=repr)
def test_corpus_matches_eager(case):
    scripted = script(case.fn)
    params = list(case.fn.parameters()) if isinstance(case.fn, gg.nn.Module) else []
    rng = np.random.default_rng(7)
    for _ in range(2):  # fresh inputs each time, none of them seen at compile time
        _check_against_eager(case.fn, scripted, case.make_inputs(rng), params)


def test_generic_graph_is_run_for_rank_free_functions_only():
    by_name = {c.name: c for c in CORPUS}
    affine = script(by_name["affine"].fn)
    assert affine._generic.rank_bound is None
    g = affine.ir
    affine(*by_name["affine"].make_inputs(np.random.default_rng(0)))
    assert affine.ir is g
    # softmax(dim=-1) needs the rank: recorded as a call made when the graph runs, so the
    # one graph compiled from source serves every rank (TorchScript compiles it once)
    soft = script(by_name["softmax_rows"].fn)
    assert soft._generic.rank_bound is None
    g = soft.ir
    assert [n.kind for n in g.nodes] == ["placeholder", "call_function", "output"]
    assert not any("specialized" in h for h in g.header)
    for shape in ((3, 5), (2, 4, 6), (7,)):
        y = gg.tensor(np.random.default_rng(len(shape)).standard_normal(shape))
        np.testing.assert_allclose(soft(y).numpy(), gg.softmax(y, dim=-1).numpy(),
                                   rtol=1e-12)
        assert soft.ir is g and soft.graph_for(y) is g


# jit.script runs one generic graph for inputs of unknown rank: calls whose ops are all
# rank_free are op nodes; calls that read the rank are recorded as calls made when the
# graph runs (call_function/call_method nodes), right for every rank.

def _free_abs(x):
    return gg.abs(x)


def _free_acos(x):
    return gg.acos(x.tanh() * 0.5)


def _free_add(x):
    return gg.add(x, x)


def _free_asin(x):
    return gg.asin(x.tanh() * 0.5)


def _free_atan(x):
    return gg.atan(x)


def _free_atan2(x):
    return gg.atan2(x, x + 2.0)


def _free_ceil(x):
    return gg.ceil(x)


def _free_clamp(x):
    return gg.clamp(x, -0.5, 0.5)


def _free_clip(x):
    return gg.clip(x, -0.5, 0.5)


def _free_clone(x):
    return x.clone()


def _free_cos(x):
    return gg.cos(x)


def _free_cosh(x):
    return gg.cosh(x)


def _free_detach(x):
    return x.detach()


def _free_div(x):
    return gg.div(x, 2.0)


def _free_elu(x):
    return F.elu(x)


def _free_eq(x):
    return gg.eq(x, 0.0)


def _free_erf(x):
    return gg.erf(x)


def _free_exp(x):
    return gg.exp(x)


def _free_expm1(x):
    return gg.expm1(x)


def _free_floor(x):
    return gg.floor(x)


def _free_fmod(x):
    return gg.fmod(x, 0.7)


def _free_ge(x):
    return gg.ge(x, 0.0)


def _free_gelu(x):
    return F.gelu(x)


def _free_gt(x):
    return gg.gt(x, 0.0)


def _free_isfinite(x):
    return gg.isfinite(x)


def _free_isinf(x):
    return gg.isinf(x)


def _free_isnan(x):
    return gg.isnan(x)


def _free_le(x):
    return gg.le(x, 0.0)


def _free_leaky_relu(x):
    return F.leaky_relu(x)


def _free_log(x):
    return gg.log(x.abs() + 1.0)


def _free_log1p(x):
    return gg.log1p(x)


def _free_logical_and(x):
    return gg.logical_and(x > 0, x < 1)


def _free_logical_not(x):
    return gg.logical_not(x > 0)


def _free_logical_or(x):
    return gg.logical_or(x > 0, x < -1)


def _free_logical_xor(x):
    return gg.logical_xor(x > 0, x < 1)


def _free_lt(x):
    return gg.lt(x, 0.0)


def _free_maximum(x):
    return gg.maximum(x, x * 0.5)


def _free_minimum(x):
    return gg.minimum(x, x * 0.5)


def _free_mul(x):
    return gg.mul(x, 2.0)


def _free_ne(x):
    return gg.ne(x, 0.0)


def _free_neg(x):
    return gg.neg(x)


def _free_pow(x):
    return gg.pow(x, 2.0)


def _free_reciprocal(x):
    return gg.reciprocal(x.abs() + 1.0)


def _free_relu(x):
    return gg.relu(x)


def _free_remainder(x):
    return gg.remainder(x, 0.7)


def _free_round(x):
    return gg.round(x)


def _free_rsqrt(x):
    return gg.rsqrt(x.abs() + 1.0)


def _free_sigmoid(x):
    return gg.sigmoid(x)


def _free_sign(x):
    return gg.sign(x)


def _free_silu(x):
    return F.silu(x)


def _free_sin(x):
    return gg.sin(x)


def _free_sinh(x):
    return gg.sinh(x)


def _free_softplus(x):
    return F.softplus(x)


def _free_sqrt(x):
    return gg.sqrt(x.abs() + 1.0)


def _free_square(x):
    return gg.square(x)


def _free_sub(x):
    return gg.sub(x, 1.0)


def _free_tan(x):
    return gg.tan(x)


def _free_tanh(x):
    return gg.tanh(x)


def _free_true_divide(x):
    return gg.true_divide(x, 2.0)


def _free_trunc(x):
    return gg.trunc(x)


def _free_where(x):
    return gg.where(x > 0, x, -x)


def _bound_cat(x):
    return gg.cat([x, x], dim=-1)


def _bound_flatten(x):
    return x.flatten()


def _bound_layer_norm(x):
    return F.layer_norm(x, (3,))


def _bound_mean_dim(x):
    return x.mean(dim=0)


def _bound_numel(x):
    return x * x.numel()


def _bound_softmax(x):
    return gg.softmax(x, dim=-1)


def _bound_sum_dim(x):
    return x.sum(dim=-1)


def _bound_transpose(x):
    return x.transpose(0, -1)


_RANK_FREE_CALLS = {n[len('_free_'):]: f for n, f in list(globals().items())
                    if n.startswith('_free_')}
_RANK_BOUND_CALLS = {n[len('_bound_'):]: f for n, f in list(globals().items())
                     if n.startswith('_bound_')}

@pytest.mark.parametrize("name", sorted(_RANK_FREE_CALLS))
def test_rank_free_calls_run_one_generic_graph(name):
    call = _RANK_FREE_CALLS[name]
    scripted = script(call)
    assert scripted._generic.rank_bound is None, name
    for shape in ((3,), (2, 3), (2, 1, 3)):
        x = gg.tensor(np.random.default_rng(len(shape)).standard_normal(shape))
        np.testing.assert_allclose(scripted(x).numpy(), call(x).numpy(), rtol=1e-12)
    assert scripted.ir is scripted._generic.graph


@pytest.mark.parametrize("name", sorted(_RANK_BOUND_CALLS))
def test_calls_that_read_the_rank_run_when_the_graph_runs(name):
    call = _RANK_BOUND_CALLS[name]
    scripted = script(call)
    assert scripted._generic.rank_bound is None, name
    kinds = [n.kind for n in scripted.ir.nodes]
    if name == "numel":   # a Python int: the product of the run-time shape
        assert "shape" in kinds, kinds
    else:
        assert "call_function" in kinds or "call_method" in kinds, kinds
    for shape in ((2, 3), (2, 1, 3)):
        x = gg.tensor(np.random.default_rng(len(shape)).standard_normal(shape))
        np.testing.assert_allclose(scripted(x).numpy(), call(x).numpy(), rtol=1e-12)
    assert scripted.ir is scripted._generic.graph


@pytest.mark.parametrize("module", ["ReLU", "Tanh", "Sigmoid", "GELU", "SiLU",
                                    "Softplus", "Identity", "LeakyReLU", "ELU"])
def test_rank_free_modules_run_one_generic_graph(module):
    m = getattr(gg.nn, module)()
    scripted = script(m)
    assert scripted._generic.rank_bound is None
    for shape in ((3,), (4, 3), (2, 4, 3)):
        x = gg.tensor(np.random.default_rng(len(shape)).standard_normal(shape))
        np.testing.assert_allclose(scripted(x).detach().numpy(), m(x).detach().numpy(),
                                   rtol=1e-12)
