"""Tests for ``graphgrad.jit.script`` (source -> graph IR): the lecture's three functions,
the capture corpus (outputs and gradients against eager on fresh inputs), control flow
(nested if/else, elif chains, while on tensors, for-range, early returns, inlined
helpers; break, continue and return in loops), printing/drawing, and compile-time errors
with the user's line and a ``~~~~`` pointer. Eager graphgrad is the oracle (itself tested
against PyTorch elsewhere); loop exits are also checked against ``torch.jit.script``."""

from __future__ import annotations

import importlib
import inspect
import linecache
import math
import sys
import warnings

import numpy as np
import pytest

import graphgrad as gg
import graphgrad.nn.functional as F
from graphgrad.graph import Interpreter, python_code
from graphgrad.jit import ScriptError, ScriptFunction, script
from capture_corpus import CORPUS
from lecture_cases import branch, external, shape_dependent
from random_cases import (DropoutBlock, check_random_capture, check_stop_gradient,
                          dropout_layer, inputs_of, noisy, stop_gradient)


def _line_of(fn, text: str) -> int:
    """The file line of the first line of ``fn``'s source that contains ``text``."""
    lines, first = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if text in line:
            return first + k
    raise AssertionError(f"{text!r} not in the source of {fn.__name__}")


def _script_error(fn, line_text: str) -> str:
    """Scripting ``fn`` fails at the line containing ``line_text``: the message."""
    with pytest.raises(ScriptError) as info:
        script(fn)
    line = _line_of(fn, line_text)
    assert info.value.lineno == line
    assert f'  File "{inspect.getsourcefile(fn)}", line {line}' in str(info.value)
    return str(info.value)


def _t(*values, shape=None):
    a = np.asarray(values, dtype=np.float64)
    return gg.tensor(a.reshape(shape) if shape else a, dtype=gg.float64)


def _leaves(out):
    return list(out) if isinstance(out, tuple) else [out]


def _check_against_eager(fn, scripted, inputs, params=()):
    """Same outputs and the same gradients (inputs and module parameters) as eager."""
    eager_in = [x.detach().requires_grad_() for x in inputs]
    script_in = [x.detach().requires_grad_() for x in inputs]
    for p in params:  # the corpus modules are shared: other tests leave gradients behind
        p.grad = None
    expected = _leaves(fn(*eager_in))
    eager_pgrads = []
    if expected and any(isinstance(e, gg.Tensor) and e.requires_grad for e in expected):
        sum((e * (k + 1)).sum() for k, e in enumerate(expected)).backward()
        eager_pgrads = [None if p.grad is None else p.grad.numpy().copy() for p in params]
    for p in params:
        p.grad = None
    got = _leaves(scripted(*script_in))
    assert len(got) == len(expected)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(np.asarray(g.detach().numpy()), np.asarray(e.detach().numpy()),
                                   rtol=1e-10, atol=1e-12)
    if eager_pgrads or any(x.grad is not None for x in eager_in):
        sum((g * (k + 1)).sum() for k, g in enumerate(got)).backward()
        for a, b in zip(eager_in, script_in, strict=True):
            if a.grad is None:
                assert b.grad is None or not np.any(b.grad.numpy())
            else:
                np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-10,
                                           atol=1e-12)
        for p, eg in zip(params, eager_pgrads, strict=True):
            assert (p.grad is None) == (eg is None)
            if eg is not None:
                np.testing.assert_allclose(p.grad.numpy(), eg, rtol=1e-10, atol=1e-12)
        for p in params:
            p.grad = None


def _all_nodes(graph):
    todo, out = [graph], []
    while todo:
        g = todo.pop()
        for n in g.nodes:
            out.append(n)
            todo.extend(n.subgraphs.values())
    return out


def _ops(graph) -> set:
    return {n.op.__name__ for n in graph.nodes if n.kind == "call"}


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


# ---- control flow programs -----------------------------------------------------------------

def _helper(a):
    if a.sum() > 0:
        return a * 2
    return a - 1


def nested(x, y):
    if x.sum() > 0:
        if y.sum() > 0:
            z = x * y
        else:
            z = x - y
    else:
        z = x + y
    return z * 2


def elif_chain(x):
    s = x.sum()
    if s < -1:
        out = x * 0.5
    elif s < 0:
        out = gg.tanh(x)
    elif s < 1:
        out = x ** 2
    else:
        out = -x
    return out


def halve_until_small(x):
    i = 0
    while x.abs().sum() > 0.1:
        x = x * 0.5
        i = i + 1
    return x, i


def power_series(x, n: int):
    acc = x
    for i in range(n):
        acc = acc * x + i
    return acc


def weighted_rows(x):
    acc = x.sum() * 0
    for i in range(x.shape[0]):
        acc = acc + x[i] * (i + 1)
    return acc


def early_returns(x):
    if x.sum() > 2:
        return x * 3
    y = x + 1
    if y.sum() < 0:
        return y * y
    return gg.sigmoid(y)


def calls_helper(x):
    return _helper(x) + _helper(-x) * gg.nn.functional.relu(x)


def if_expression(x):
    return x * 2 if x.mean() > 0 else x * -3


def bool_ops(x, y):
    if x.sum() > 0 and y.sum() > 0:
        return x + y
    if not x.sum() > 0 or y.mean() < -0.5:
        return x - y
    return x * y


def tuple_values(x, y):
    a, b = y, x
    p = (a + 1, b * 2)
    if x.sum() > 0:
        p = (p[1], p[0])
    return p


def loop_with_branch(x):
    k = 0
    while k < 4:
        if x.sum() > 0:
            x = x - 1.5
        else:
            x = x * -0.5 + 0.25
        k = k + 1
    return x


PROGRAMS = [(nested, 2), (elif_chain, 1), (early_returns, 1), (calls_helper, 1),
            (if_expression, 1), (bool_ops, 2), (tuple_values, 2), (loop_with_branch, 1)]


@pytest.mark.parametrize("fn,nargs", PROGRAMS, ids=lambda v: getattr(v, "__name__", ""))
def test_control_flow_programs_match_eager(fn, nargs):
    s = script(fn)
    rng = np.random.default_rng(3)
    for k in range(8):  # scales from -3.5 to 3.5: every branch is taken by some input
        shape = (3,) if k % 2 else (2, 3)
        inputs = [gg.tensor(rng.standard_normal(shape) * (k - 3.5) + 0.1 * j)
                  for j in range(nargs)]
        _check_against_eager(fn, s, inputs)


def test_nested_if_is_a_cond_inside_a_cond():
    s = script(nested)
    outer = [n for n in s.ir.nodes if n.kind == "cond"]
    assert len(outer) == 1
    inner = [n for n in outer[0].subgraphs["then"].nodes if n.kind == "cond"]
    assert len(inner) == 1
    assert _ops(inner[0].subgraphs["then"]) == {"Mul"}
    assert _ops(inner[0].subgraphs["else"]) == {"Sub"}
    assert _ops(outer[0].subgraphs["else"]) == {"Add"}


def test_elif_chain_holds_every_branch():
    s = script(elif_chain)
    ops = {n.op.__name__ for n in _all_nodes(s.ir) if n.kind == "call"}
    assert {"Mul", "Tanh", "Pow", "Neg"} <= ops
    assert sum(n.kind == "cond" for n in _all_nodes(s.ir)) == 3


def test_early_returns_are_single_exit():
    s = script(early_returns)
    assert [n.kind for n in s.ir.nodes].count("cond") == 1
    assert s.ir.output_node.inputs[0].kind == "item"
    code = s.code
    assert "graphgrad.sigmoid(" in code
    assert sorted(line.split("(")[0] for line in code.splitlines() if "def " in line and
                  "cond" in line) == ["def _cond_else", "def _cond_then", "def cond_else",
                                      "def cond_then"]


def test_while_on_a_tensor_is_a_while_loop():
    s = script(halve_until_small)
    loops = [n for n in s.ir.nodes if n.kind == "while_loop"]
    assert len(loops) == 1
    assert "def while_loop_body" in s.code and "def while_loop_cond" in s.code
    for scale in (0.01, 1.0, 40.0):
        x = _t(1.0, -2.0, 0.5) * scale
        xs = x.detach().requires_grad_()
        out, count = s(xs)
        ref, ref_count = halve_until_small(x)
        np.testing.assert_allclose(out.detach().numpy(), ref.numpy())
        assert int(count.item()) == ref_count
        out.sum().backward()
        np.testing.assert_allclose(xs.grad.numpy(), np.full(3, 0.5 ** ref_count))


def test_for_range_with_an_int_argument():
    s = script(power_series)
    assert any(n.kind == "while_loop" for n in s.ir.nodes)
    assert s.ir.inputs[1].spec.dtype == np.int64
    for n in (0, 1, 4):
        x = _t(0.5, -1.5, 2.0)
        _check_against_eager(lambda t, n=n: power_series(t, n), lambda t, n=n: s(t, n), [x])


def test_for_range_over_a_run_time_size():
    s = script(weighted_rows)
    for rows in (1, 3, 5):
        x = gg.tensor(np.random.default_rng(rows).standard_normal((rows, 2)))
        _check_against_eager(weighted_rows, s, [x])


def test_if_on_python_values_is_resolved_at_compile_time():
    def scaled(x, scale=2.0):  # unannotated with a default: a compile-time constant
        if scale > 1:  # a compile-time constant: only the taken branch is compiled
            y = x * scale
        else:
            y = x / scale
        for k in (1, 2):  # a tuple: the loop unrolls
            y = y + k
        return y

    s = script(scaled)
    assert not any(n.kind in ("cond", "while_loop") for n in _all_nodes(s.ir))
    assert "Div" not in _ops(s.ir)
    np.testing.assert_allclose(s(_t(1.0, 2.0)).numpy(), [5.0, 7.0])
    with pytest.raises(RuntimeError, match="compiled as the constant 2.0"):
        s(_t(1.0), scale=0.5)

    def annotated(x, scale: float):  # an annotated scalar is an input: the if is a cond
        if scale > 1:
            return x * scale
        return x / scale

    a = script(annotated)
    assert [n.kind for n in a.ir.nodes].count("cond") == 1
    assert a(_t(3.0), 2.0).item() == 6.0 and a(_t(3.0), 0.5).item() == 6.0


def test_decorator_and_annotations():
    @script
    def clipped(x, limit: float, steps: int):
        y = x
        for _ in range(steps):
            y = gg.where(y > limit, y * 0.5, y)
        return y

    assert isinstance(clipped, ScriptFunction)
    assert clipped.__name__ == "clipped"
    assert "limit: float" in clipped.schema and "steps: int" in clipped.schema
    x = _t(0.5, 3.0, 9.0)
    np.testing.assert_allclose(clipped(x, 1.0, 3).numpy(), [0.5, 0.75, 1.125])
    with pytest.raises(RuntimeError, match="Expected a value of type 'Tensor'"):
        clipped(1.0, 1.0, 3)


def test_module_parameters_are_graph_inputs_read_at_call_time():
    lin = gg.nn.Linear(3, 2, dtype=gg.float64)

    class Gate(gg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            h = self.lin(x)
            if h.sum() > 0:
                return gg.tanh(h)
            return h * 0.5

    m = Gate()
    s = script(m)
    assert [p.name for p in s.ir.inputs] == ["x", "lin_weight", "lin_bias"]
    x = _t(1.0, -2.0, 0.5, 3.0, 0.0, -1.0, shape=(2, 3))
    _check_against_eager(m, s, [x], list(m.parameters()))
    with gg.no_grad():
        lin.weight.mul_(-3.0)  # an update after scripting is seen
    np.testing.assert_allclose(s(x).detach().numpy(), m(x).detach().numpy())


# ---- compile-time errors ---------------------------------------------------------------------

def _uses_try(x):
    y = x + 1
    try:
        y = y * 2
    except ValueError:
        pass
    return y


def _uses_with(x):
    with gg.no_grad():
        y = x * 2
    return y


def _uses_lambda(x):
    f = lambda t: t + 1  # noqa: E731 - the construct under test
    return f(x)


def _comprehension_over_tensor(x):
    return gg.stack([r * 2 for r in x])


_CACHE: list = []


def _closure_over_list(x):
    return x * len(_CACHE)


def _writes_global(x):
    global _CACHE
    _CACHE = x
    return x


def _numpy_ufunc(x):
    return np.sin(x) + 1


def _stdlib_function(x):
    return x * math.prod((1, 2))


def _item_of_tensor(x):
    return x * x.item()


def _random_permutation(x):
    return x + gg.randperm(3)


def _calls_bad_helper(x):
    y = x * 2
    return _uses_try(y)


ERRORS = [
    (_uses_try, "try:", "try blocks aren't supported", "~~~"),
    (_uses_with, "with gg.no_grad():", "with statements aren't supported", None),
    (_uses_lambda, "f = lambda", "Lambda aren't supported", None),
    (_comprehension_over_tensor, "for r in x", "comprehensions over tensors aren't supported",
     "~"),
    (_closure_over_list, "len(_CACHE)", "closures over mutable state aren't supported", None),
    (_writes_global, "global _CACHE", "global variables aren't supported", None),
    (_numpy_ufunc, "np.sin(x)", "Python builtin <ufunc 'sin'> is currently not supported",
     "~~~~~~"),
    (_stdlib_function, "math.prod", "currently not supported in graphgrad.jit.script", None),
    (_item_of_tensor, "x.item()", "converts a tensor to a Python value", None),
    (_random_permutation, "gg.randperm(3)", "draws random numbers", None),
]


@pytest.mark.parametrize("fn,text,message,pointer", ERRORS, ids=lambda v: getattr(
    v, "__name__", None) if callable(v) else None)
def test_errors_name_the_construct_and_the_line(fn, text, message, pointer):
    error = _script_error(fn, text)
    assert message in error
    shown = error.splitlines()
    start = shown.index(f'  File "{inspect.getsourcefile(fn)}", line {_line_of(fn, text)}')
    k = start + next(j for j, s in enumerate(shown[start:]) if text in s)
    assert shown[k + 1].strip().startswith("~") and shown[k + 1].endswith("<--- HERE")
    if pointer is not None:
        assert shown[k + 1].strip().split(" ")[0] == pointer


def test_error_inside_an_inlined_helper_names_both_lines():
    with pytest.raises(ScriptError) as info:
        script(_calls_bad_helper)
    text = str(info.value)
    assert info.value.lineno == _line_of(_uses_try, "try:")
    assert "'_uses_try' is being compiled since it was called from '_calls_bad_helper'" in text
    assert f"line {_line_of(_calls_bad_helper, 'return _uses_try(y)')}" in text


def test_in_place_update_of_an_alias_is_refused():
    def alias(x):
        y = x * 1
        z = y
        y += 1
        return y + z

    with pytest.raises(ScriptError, match="variable 'z' refers to the same tensor"):
        script(alias)

    def accumulate(x):
        acc = x * 0
        acc += x
        acc *= 2
        return acc

    np.testing.assert_allclose(script(accumulate)(_t(1.0, 2.0)).numpy(), [2.0, 4.0])


def test_variable_defined_in_one_branch_only():
    def one_sided(x):
        if x.sum() > 0:
            y = x * 2
        return y

    assert "'y' is not defined in the false branch" in _script_error(one_sided, "return y")


def test_return_types_must_agree():
    def mixed(x):
        if x.sum() > 0:
            return x
        return None

    with pytest.raises(ScriptError, match="Type mismatch"):
        script(mixed)


def test_branches_may_hold_constants_numbers_and_math():
    def mixed(x):
        if x.sum() > 0:
            y = gg.zeros(3, dtype=gg.float64)  # an eager constant in one branch
            k = 1
        else:
            y = x * 2
            k = 2.5
        return y + math.sqrt(2.0) * gg.exp(x) + math.exp(x.sum() * 0) * k

    s = script(mixed)
    assert [n.kind for n in s.ir.nodes].count("cond") == 1
    for v in (1.0, -1.0):
        _check_against_eager(lambda x: mixed(x) if x.sum().item() > 0 else mixed(x), s,
                             [_t(v, 0.5 * v, 2 * v)])


def test_dropout_in_training_mode_is_a_random_node_and_eval_is_a_guard():
    class Drop(gg.nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = gg.nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(x) * 2

    m = Drop()
    s = script(m)
    x = gg.ones(50, dtype=gg.float64)
    # dropout needs the input's rank: the module is called when the graph runs (it reads
    # its training flag then, as TorchScript does)
    assert _draws(s.graph_for(x), m) == 1
    assert not np.array_equal(s(x).numpy(), s(x).numpy())    # a fresh mask per call
    gg.manual_seed(5)
    got = s(x).numpy()
    gg.manual_seed(5)
    np.testing.assert_array_equal(got, m(x).numpy())          # eager's mask for the seed
    m.eval()   # no mask in eval mode
    np.testing.assert_allclose(s(_t(1.0, 2.0)).numpy(), [2.0, 4.0])
    m.train()
    assert _draws(s.graph_for(x), m) == 1


@pytest.mark.parametrize("fn", [dropout_layer, noisy, DropoutBlock],
                         ids=lambda f: f.__name__)
def test_random_capture_corpus(fn):
    fn = fn() if isinstance(fn, type) else fn
    inputs = inputs_of(fn)
    s = script(fn)
    assert _draws(s.graph_for(*inputs), fn if isinstance(fn, gg.nn.Module) else None) == 1
    check_random_capture(s, fn, inputs)


def _draws(graph, module=None) -> int:
    """The nodes that draw: random nodes, and calls made when the graph runs of what
    draws (dropout, randn_like, a Dropout submodule) where the input's rank was not
    known."""
    def draws(n):
        target = n.params.get("target")
        if n.kind == "call_module":
            return "dropout" in type(module.get_submodule(target)).__name__.lower()
        name = target if isinstance(target, str) else type(target).__name__ if isinstance(
            target, gg.nn.Module) else getattr(target, "__name__", "")
        return n.kind == "random" or (n.kind in ("call_function", "call_method") and any(
            k in name.lower() for k in ("dropout", "rand")))
    return sum(draws(n) for n in graph.nodes)


def test_detach_is_a_stop_gradient_node():
    s = script(stop_gradient)
    assert "detach(" in s.code
    check_stop_gradient(s)


def test_a_draw_from_a_users_generator_is_refused():
    g = gg.Generator().manual_seed(0)

    def noise(x):
        return x + gg.randn(3, generator=g)

    error = _script_error(noise, "gg.randn(3, generator=g)")
    assert "a user's Generator" in error


@pytest.mark.parametrize("fn,nargs", [(nested, 2), (halve_until_small, 1), (early_returns, 1),
                                      (weighted_rows, 1)], ids=lambda v: getattr(v, "__name__",
                                                                                 ""))
def test_graph_verifies_and_its_printed_code_runs(fn, nargs):
    x = [gg.tensor(np.random.default_rng(k).standard_normal((3, 2))) for k in range(nargs)]
    s = script(fn)
    graph = s.graph_for(*x)
    graph.verify()
    expected = _leaves(s(*x))
    by_interpreter = Interpreter(graph).run(*x)
    by_code = python_code(graph).fn(*x)
    for e, a, b in zip(expected, by_interpreter, by_code, strict=True):
        np.testing.assert_allclose(a.numpy(), e.numpy())
        np.testing.assert_allclose(b.numpy(), e.numpy())


_SCALE = gg.tensor([2.0, 3.0], dtype=gg.float64)


def _uses_global_tensor(x):
    return x * _SCALE


def test_tensors_from_globals_and_closures_are_inputs_read_at_call_time():
    global _SCALE
    s = script(_uses_global_tensor)
    assert [p.name for p in s.ir.inputs] == ["x", "_SCALE"]
    np.testing.assert_allclose(s(_t(1.0, 1.0)).numpy(), [2.0, 3.0])
    saved, _SCALE = _SCALE, gg.tensor([5.0, 7.0], dtype=gg.float64)
    try:
        np.testing.assert_allclose(s(_t(1.0, 1.0)).numpy(), [5.0, 7.0])
    finally:
        _SCALE = saved

    offsets = []

    def closure_over_list(x):
        return x + len(offsets)

    with pytest.raises(ScriptError, match="'offsets' is a list read from the enclosing scope"):
        script(closure_over_list)

    w = gg.tensor([1.0, -1.0], dtype=gg.float64, requires_grad=True)

    def closure_over_weight(x):
        return (x * w).sum()

    script(closure_over_weight)(_t(3.0, 4.0)).backward()
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 4.0])


_PAIR = (1.0, 2.0)


def test_unsupported_control_flow_is_refused():
    def returns_in_unrolled_loop(x):
        for _ in range(3):
            for s in _PAIR:
                if s > 1.5:
                    return x * s
        return -x

    assert "return inside a loop over a Python sequence, itself inside a loop on a " \
        "tensor, isn't supported" in _script_error(returns_in_unrolled_loop, "return x * s")

    def iterates_tensor(x):
        total = x * 0
        for row in x:
            total = total + row
        return total

    assert "iterating over a tensor isn't supported" in _script_error(iterates_tensor,
                                                                      "for row in x")


def test_a_scripted_function_calling_a_scripted_function_inlines_it():
    inner = script(elif_chain)

    def outer(x):
        return inner(x) * 2 + inner(-x)

    s = script(outer)
    assert sum(n.kind == "cond" for n in _all_nodes(s.ir)) == 6
    for scale in (-2.0, -0.3, 0.3, 2.0):
        _check_against_eager(lambda x: elif_chain(x) * 2 + elif_chain(-x), s,
                             [_t(0.5, 1.0, -0.25) * scale])


def stepped_ranges(x):
    y = x
    for i in range(1, 7, 2):
        y = y * x + i
    for j in range(5, 0, -2):
        y = y - j * 0.1
    return y


def bounded_steps(x, n: int):
    k = 0
    out = x
    while k < n:
        out = gg.where(out > 1.0, out * 0.5, out + 1.0)
        k += 1
    return out, k


def test_literal_ranges_and_int_counters_are_loops():
    s = script(stepped_ranges)
    assert sum(n.kind == "while_loop" for n in s.ir.nodes) == 2
    assert s._generic.rank_bound is None  # elementwise only: one graph for every shape
    _check_against_eager(stepped_ranges, s, [_t(0.5, 2.0, -1.0)])
    b = script(bounded_steps)
    for n in (0, 1, 4):
        out, k = b(_t(0.5, 2.0), n)
        ref, ref_k = bounded_steps(_t(0.5, 2.0), n)
        np.testing.assert_allclose(out.numpy(), ref.numpy())
        assert int(k.item()) == ref_k


class _Stack(gg.nn.Module):
    """A ModuleList unrolled at compile time, a user method (with a tensor if) inlined."""

    def __init__(self):
        super().__init__()
        self.layers = gg.nn.ModuleList([gg.nn.Linear(3, 3, dtype=gg.float64)
                                        for _ in range(3)])
        self.scale = 0.5

    def act(self, h):
        if h.mean() > 0:
            return gg.tanh(h)
        return h * self.scale

    def forward(self, x):
        for layer in self.layers:
            x = self.act(layer(x)) + x
        return x


def test_module_list_unrolls_and_methods_inline():
    gg.manual_seed(1)
    m = _Stack()
    s = script(m)
    assert [p.name for p in s.ir.inputs] == ["x"] + [
        f"layers_{k}_{w}" for k in range(3) for w in ("weight", "bias")]
    # F.linear picks its fused op by the input's rank: called when the graph runs, so
    # the one graph serves every rank
    assert s._generic.rank_bound is None
    assert sum(n.kind == "cond" for n in s.ir.nodes) == 3
    rng = np.random.default_rng(5)
    for shape in ((4, 3), (2, 5, 3), (3,)):
        _check_against_eager(m, s, [gg.tensor(rng.standard_normal(shape))],
                             list(m.parameters()))


def test_scalar_arguments_before_tensors():
    def repeat_scale(n: int, x, y):
        out = x
        for _ in range(n):
            out = out.softmax(-1) * y
        return out

    s = script(repeat_scale)
    x = gg.tensor(np.random.default_rng(2).standard_normal((2, 3)))
    y = gg.tensor(np.random.default_rng(3).standard_normal(3))
    for n in (0, 2):
        _check_against_eager(lambda a, b, n=n: repeat_scale(n, a, b),
                             lambda a, b, n=n: s(n, a, b), [x, y])


def run_time_sizes(x):
    b = x.size(0)
    d = x.shape[-1]
    y = x.reshape(b, -1) / d ** 0.5
    return y.sum(-1) * b


def test_sizes_read_from_shapes_are_run_time_values():
    s = script(run_time_sizes)
    for shape in ((2, 3, 4), (5, 2), (1, 7)):
        x = gg.tensor(np.random.default_rng(len(shape)).standard_normal(shape))
        _check_against_eager(run_time_sizes, s, [x])
        graph = s.graph_for(x)
        assert [n.kind for n in graph.nodes].count("shape") == 1
        reshape = next(n for n in graph.nodes if n.kind == "call" and n.op.__name__ == "Reshape")
        assert reshape.nargs == 1 and len(reshape.inputs) == 2  # the size is a Dyn input


def item_assignment(x):
    y = x * 2
    y[0] = 5.0
    if x.sum() > 0:
        y[1:] = x[1:] * 3
    return y.sum() + y[0]


def test_item_assignment_is_compiled_out_of_place():
    s = script(item_assignment)
    for v in (1.0, -1.0):
        _check_against_eager(item_assignment, s, [_t(v, 2 * v, 3 * v)])

    def writes_argument(x):
        x[0] = 1.0
        return x

    text = _script_error(writes_argument, "x[0] = 1.0")
    assert "'x' is an argument of the function" in text and "y = x.clone()" in text


def test_assert_on_python_values_is_checked_at_compile_time():
    def checked(x, k=2):
        assert k > 0, "k must be positive"
        return x * k

    np.testing.assert_allclose(script(checked)(_t(1.5)).numpy(), [3.0])

    def failing(x, k=-1):
        assert k > 0, "k must be positive"
        return x * k

    assert "AssertionError at compile time: k must be positive" in _script_error(
        failing, "assert k > 0")

    def on_tensor(x):
        assert x.sum() > 0
        return x

    assert "assert on a tensor isn't supported" in _script_error(on_tensor, "assert x.sum()")


# ---- break, continue and return in loops (TorchScript's exit transform) ---------------------

def break_on_tensor(x, n: int):
    acc = x
    for _ in range(n):
        if acc.sum() > 6:
            break
        acc = acc * x + x
    return acc


def while_true_break(x):
    k = 0
    while True:
        x = x * 1.5
        k = k + 1
        if x.abs().sum() > 12:
            break
    return x * k


def continue_on_counter_and_tensor(x, n: int):
    acc = x * 0
    for i in range(n):
        if i % 2 == 1:
            continue
        if acc.sum() > 3:
            continue
        acc = acc + x * i
    return acc


def exits_in_elif(x, n: int):
    acc = x
    for i in range(n):
        if acc.sum() < -3:
            acc = acc + 2
        elif acc.sum() > 4:
            break
        else:
            if i == 2:
                continue
            acc = acc * 1.5
        acc = acc - 0.25
    return acc


def nested_exits(x, n: int):
    total = x * 0
    for i in range(n):
        j = 0
        while j < n:
            if j > i:
                break
            j = j + 1
            if (x * j).sum() > 2:
                continue
            total = total + x * (i + j)
        if total.sum() > 5:
            break
    return total


def _grow(y, m: int):
    for _ in range(m):
        if y.sum() > 3:
            break
        y = y * 2
    return y


def exits_in_inlined_helper(x, n: int):
    out = x
    for _ in range(n):
        out = _grow(out, 3) - 1
        if out.max() > 20:
            break
    return out


def returns_from_range(x):
    for i in range(3):
        if x.sum() > i:
            return x * i
    return -x


def returns_from_nested_loops(x, n: int):
    total = x * 0
    for _ in range(n):
        for j in range(n):
            if (total + x * j).sum() > 6:
                return total * 10 + j
            total = total + x
    return total


def returns_from_while_true(x):
    while True:
        x = x * 2
        if x.abs().sum() > 9:
            return x


def returns_breaks_and_continues(x, n: int):
    acc = x
    for i in range(n):
        if i == 1:
            continue
        if acc.sum() < -2:
            break
        acc = acc * 1.5
        if acc.sum() > 5:
            return acc * 100
    return acc


def _grow_or_return(y, m: int):
    for i in range(m):
        if y.sum() > 3:
            return y + i
        y = y * 2
    return y - 1


def returns_from_inlined_helper(x, n: int):
    out = x
    for _ in range(n):
        out = _grow_or_return(out, 3) * 0.5
        if out.max() > 1:
            return out
    return out * 0


EXIT_PROGRAMS = [break_on_tensor, while_true_break, continue_on_counter_and_tensor,
                 exits_in_elif, nested_exits, exits_in_inlined_helper, returns_from_range,
                 returns_from_nested_loops, returns_from_while_true,
                 returns_breaks_and_continues, returns_from_inlined_helper]


def _exit_inputs():
    """Inputs on which every break and continue of EXIT_PROGRAMS is taken, by some
    inputs only where it depends on them (``_exit_lines_run`` checks it)."""
    rng = np.random.default_rng(11)
    return [rng.uniform(0.2, 1.0, 3) * scale for scale in (-4.0, -1.0, 0.1, 0.5, 1.0, 2.5)]


def _call(fn, x, program=None):
    """``fn(x, 5)`` or ``fn(x)``, as the Python function ``program`` takes (default
    ``fn``) a size ``n`` or not."""
    takes_n = "n" in inspect.signature(program or fn).parameters
    return fn(x, 5) if takes_n else fn(x)


def _exit_lines_run(fn, x) -> set:
    """The lines of ``fn`` holding a break, a continue or a return in a loop (a return
    nested deeper than the function's body) that an eager call runs."""
    lines, first = inspect.getsourcelines(fn)
    exits = {first + k for k, ln in enumerate(lines) if ln.strip() in ("break", "continue")
             or (ln.startswith(" " * 8) and ln.strip().startswith("return"))}
    ran = set()

    def tracer(frame, event, arg):
        if frame.f_code is fn.__code__:
            if event == "line" and frame.f_lineno in exits:
                ran.add(frame.f_lineno)
            return tracer
        return None

    saved = sys.gettrace()
    sys.settrace(tracer)
    try:
        _call(fn, gg.tensor(x))
    finally:
        sys.settrace(saved)
    return ran, exits


@pytest.mark.parametrize("fn", EXIT_PROGRAMS, ids=lambda f: f.__name__)
def test_loop_exits_match_eager(fn):
    s = script(fn)
    taken = []
    for x in _exit_inputs():
        ran, exits = _exit_lines_run(fn, x)
        taken.append(ran)
        _check_against_eager(lambda t: _call(fn, t), lambda t: _call(s, t, fn),
                             [gg.tensor(x)])
    assert all(any(line in t for t in taken) for line in exits)  # each exit is taken
    if fn not in (while_true_break, returns_from_while_true):  # the inputs take different ones
        assert len({frozenset(t) for t in taken}) > 1


@pytest.mark.parametrize("fn", EXIT_PROGRAMS, ids=lambda f: f.__name__)
def test_loop_exits_match_torch_jit_script(fn):
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated, still the oracle
        ts = torch.jit.script(fn)
    s = script(fn)
    for x in _exit_inputs():
        xt = torch.tensor(x, requires_grad=True)
        ref = _call(ts, xt, fn)
        (ref * ref).sum().backward()
        xg = gg.tensor(x).requires_grad_()
        got = _call(s, xg, fn)
        (got * got).sum().backward()
        np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(xg.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("fn", EXIT_PROGRAMS, ids=lambda f: f.__name__)
def test_graphs_with_exits_verify_and_their_printed_code_runs(fn):
    s = script(fn)
    x = gg.tensor(_exit_inputs()[4])
    args = [x, gg.tensor(5)] if "n" in inspect.signature(fn).parameters else [x]
    graph = s.graph_for(*args[:1], *([5] if len(args) > 1 else []))
    graph.verify()
    expected = _call(s, x, fn)
    by_interpreter = Interpreter(graph).run(*args)[0]
    by_code = python_code(graph).fn(*args)[0]
    np.testing.assert_allclose(by_interpreter.numpy(), expected.numpy())
    np.testing.assert_allclose(by_code.numpy(), expected.numpy())


def test_break_flag_is_loop_carried_and_printed():
    s = script(break_on_tensor)
    code = s.code
    # the flag is a loop-carried variable, and-ed into the loop condition
    assert "def while_loop_cond(__, _did_break, acc, n, x):" in code
    assert "graphgrad.logical_not(_did_break)" in code and "graphgrad.logical_and(" in code
    (loop,) = [n for n in s.ir.nodes if n.kind == "while_loop"]
    body = loop.subgraphs["body"]
    assert [p.name for p in body.inputs[:2]] == ["__", "_did_break"]
    # "if acc.sum() > 6: break" sets the flag to the condition itself (no cond node);
    # the rest of the body runs under "if not flag": one cond
    assert [n.kind for n in body.nodes].count("cond") == 1
    assert "Gt" in _ops(body) and "LogicalNot" in _ops(body)
    assert "_did_break" in s.tabular()


def test_continue_flag_is_local_to_the_body():
    s = script(continue_on_counter_and_tensor)
    (loop,) = [n for n in s.ir.nodes if n.kind == "while_loop"]
    names = [p.name for p in loop.subgraphs["body"].inputs]
    assert not any("did_continue" in n or "did_break" in n for n in names)
    # "if i % 2 == 1: continue" and "if acc.sum() > 3: continue" set the flag to their
    # conditions; the rest of the body runs under two conds ("if not flag"), and no cond
    # outputs the flag, which nothing reads after the body
    body = loop.subgraphs["body"]
    conds = [n for n in _all_nodes(body) if n.kind == "cond"]
    assert len(conds) == 2
    assert all(len(n.spec) == 1 for n in conds)


def nested_flags(x, n: int):
    total = x * 0
    for i in range(n):
        for j in range(n):
            if j >= i:
                break
            total = total + x * j
        if total.sum() > 4:
            break
    return total


def test_break_leaves_only_the_innermost_loop():
    s = script(nested_flags)
    (outer,) = [n for n in s.ir.nodes if n.kind == "while_loop"]
    body = outer.subgraphs["body"]
    (inner,) = [n for n in body.nodes if n.kind == "while_loop"]
    assert "_did_break" in [p.name for p in body.inputs]
    assert "_did_break2" in [p.name for p in inner.subgraphs["body"].inputs]
    assert "_did_break" not in [p.name for p in inner.subgraphs["body"].inputs]
    for scale in (0.05, 0.3, 1.0, 3.0):
        for n in (0, 1, 4, 7):
            x = _t(1.0, 2.0, 0.5) * scale
            _check_against_eager(lambda t, n=n: nested_flags(t, n), lambda t, n=n: s(t, n), [x])


def first_non_positive(x):
    i = 0
    while x[i] > 0:
        i = i + 1
        if i == x.shape[0]:
            break
    return i


def test_while_condition_is_not_evaluated_after_a_break():
    # past the last element, x[i] would raise: the flag must guard the condition
    s = script(first_non_positive)
    for values in ((1.0, 2.0, 3.0), (1.0, -2.0, 3.0), (-1.0, 2.0, 3.0), (2.0, 1.0, 0.0)):
        assert int(s(_t(*values)).item()) == first_non_positive(_t(*values))


_STEPS = (1.0, 2.0, 3.0, 4.0)


def unrolled_exits(x):
    for s in _STEPS:  # a Python condition: unrolling stops at the break
        if s > 2.5:
            break
        x = x * s
    for s in _STEPS:  # a tensor condition: the iterations after it run under cond
        if s == 2.0:
            continue
        if (x / s).sum() > 4:
            break
        x = x + s
    return x


def test_exits_in_unrolled_loops():
    s = script(unrolled_exits)
    muls = [n for n in s.ir.nodes if n.kind == "call" and n.op.__name__ == "Mul"]
    assert len(muls) == 2  # s = 1.0 and 2.0; 3.0 broke out at compile time
    adds = [n for n in _all_nodes(s.ir) if n.kind == "call" and n.op.__name__ == "Add"]
    # s = 2.0 continued at compile time; 1.0, 3.0 and 4.0 add under "if not broke"
    assert sorted(n.inputs[1] for n in adds) == [1.0, 3.0, 4.0]
    assert all(n.graph is not s.ir for n in adds)
    for scale in (-1.0, 0.5, 1.0, 2.0, 4.0):  # 2.0: breaks at s = 1.0, not at 3.0 or 4.0
        _check_against_eager(unrolled_exits, s, [_t(1.0, 0.5, 0.25) * scale])


def test_break_outside_a_loop_is_a_syntax_error(tmp_path, monkeypatch):
    # Python refuses such a function when it compiles it; the source scripting reads can
    # still hold one (edited since the import): TorchScript's message, with the line
    path = tmp_path / "edited_module.py"
    path.write_text("def f(x):\n    if x.sum() > 0:\n        x = x * 2\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("edited_module")
    for word in ("break", "continue"):
        path.write_text(f"def f(x):\n    if x.sum() > 0:\n        {word}\n    return x\n")
        linecache.checkcache(str(path))
        with pytest.raises(ScriptError) as info:
            script(module.f)
        assert f"SyntaxError: '{word}' outside loop" in str(info.value)
        assert info.value.lineno == 3
        assert f"        {word}\n        ~~~~" in str(info.value)


def test_while_true_needs_a_break():
    def spins(x):
        while True:
            x = x * 2
        return x

    assert "the condition of a while loop must be a tensor" in _script_error(spins,
                                                                             "while True")


def test_return_in_a_loop_is_carried_out_of_it():
    s = script(returns_from_range)
    code = s.code
    assert "_did_return" in code and "_return_value" in code
    (loop,) = [n for n in s.ir.nodes if n.kind == "while_loop"]
    names = [p.name for p in loop.subgraphs["body"].inputs]
    assert "_did_return" in names and "_return_value" in names and "_did_break" in names
    # after the loop: if $did_return: return $return_value, else the rest (single exit)
    after = s.ir.nodes[s.ir.nodes.index(loop) + 1:]
    assert [n.kind for n in after].count("cond") == 1
    assert "Neg" in {n.op.__name__ for n in _all_nodes(s.ir) if n.kind == "call"}


def counts_to_threshold(x, n: int):
    acc = x
    k = 0
    while k < n:
        acc = acc * 1.5
        if acc.sum() > 10:
            return acc, k
        k = k + 1
    return acc - 1, k * 2


def test_return_in_a_loop_of_a_tuple_with_a_counter():
    s = script(counts_to_threshold)
    for scale in (-1.0, 0.5, 1.0, 4.0):
        for n in (0, 2, 6):
            x = _t(1.0, 0.5, 0.25) * scale
            out, k = s(x, n)
            ref, ref_k = counts_to_threshold(x, n)
            np.testing.assert_allclose(out.numpy(), ref.numpy())
            assert int(k.item()) == ref_k


class _Halting(gg.nn.Module):
    """A module whose forward skips, stops and returns early in a loop on tensors."""

    def __init__(self):
        super().__init__()
        self.lin = gg.nn.Linear(3, 3, dtype=gg.float64)

    def forward(self, x, n: int):
        for _ in range(n):
            y = gg.tanh(self.lin(x))
            if y.sum() < 0:
                continue
            if y.abs().max() > 0.9:
                return y * 2
            x = x + y
        return x


def test_exits_in_a_module_forward_give_eager_parameter_gradients():
    gg.manual_seed(0)
    m = _Halting()
    s = script(m)
    rng = np.random.default_rng(2)
    for k in range(8):  # continues on k = 2, 4, 7, returns on k = 6, falls through on others
        x = gg.tensor(rng.standard_normal((2, 3)) * (0.3 * k + 0.1), dtype=gg.float64)
        _check_against_eager(lambda t: m(t, 3), lambda t: s(t, 3), [x], list(m.parameters()))


@pytest.mark.parametrize("fn", EXIT_PROGRAMS, ids=lambda f: f.__name__)
def test_exits_give_eager_first_and_second_derivatives(fn):
    s = script(fn)
    for x in _exit_inputs():
        xe, xs = gg.tensor(x).requires_grad_(), gg.tensor(x).requires_grad_()
        e, g = _call(fn, xe), _call(s, xs, fn)
        (ge,) = gg.autograd.grad((e * e * e).sum(), [xe], create_graph=True)
        (gs,) = gg.autograd.grad((g * g * g).sum(), [xs], create_graph=True)
        np.testing.assert_allclose(gs.detach().numpy(), ge.detach().numpy(), rtol=1e-12)
        (he,) = gg.autograd.grad(ge.sum(), [xe])
        (hs,) = gg.autograd.grad(gs.sum(), [xs])
        np.testing.assert_allclose(hs.numpy(), he.numpy(), rtol=1e-12)


def returns_from_range_in_tuple_loop(x):
    for s in (1.0, 2.0):
        for i in range(3):
            if x.sum() > i * s:
                return x * s + i
        x = x - 1
    return -x


def returns_from_tuple_loop(x):
    for s in (1.0, -2.0, 3.0, 0.5):
        if (x * s).sum() > 6:
            return x * s
        x = x + 1
    return x * 0


def returns_from_while_in_tuple_loop(x):
    y = x
    for s in (1.0, -2.0, 3.0, 0.5):
        k = 0
        while k < 2:
            y = y * s
            if y.sum() > 5:
                return y
            k = k + 1
    return y - 1


@pytest.mark.parametrize("fn", [returns_from_range_in_tuple_loop, returns_from_tuple_loop,
                                returns_from_while_in_tuple_loop], ids=lambda f: f.__name__)
def test_returns_in_unrolled_loops_match_eager_and_torch(fn):
    # an unrolled loop compiles as its iterations: an if on a tensor with a return compiles
    # the iterations left and the statements after the loop into both branches
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = torch.jit.script(fn)
    s = script(fn)
    taken = []
    for scale in (-3.0, -0.5, 0.3, 1.0, 2.0, 5.0):
        x = np.array([1.0, 0.5, 0.25]) * scale
        taken.append(_exit_lines_run(fn, x)[0])
        _check_against_eager(fn, s, [gg.tensor(x)])
        xt = torch.tensor(x, requires_grad=True)
        ref = ts(xt)
        (ref * ref).sum().backward()
        xg = gg.tensor(x).requires_grad_()
        got = s(xg)
        (got * got).sum().backward()
        np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(xg.grad.numpy(), xt.grad.numpy(), rtol=1e-12)
    assert any(taken) and not all(taken)  # some inputs return in the loop, others after it
    x = gg.tensor([0.5, -1.0, 2.0])
    graph = s.graph_for(x)
    graph.verify()
    np.testing.assert_allclose(python_code(graph).fn(x)[0].numpy(), fn(x).numpy())


def exits_in_tuple_loop(x):
    for s in (1.0, -2.0, 3.0, 0.5):
        if s < 0:
            continue
        if (x * s).sum() > 2:
            return x * s
        if x.sum() < -3:
            break
        x = x + 1
    return x * 7


def test_break_continue_and_return_in_an_unrolled_loop():
    # (TorchScript refuses break and continue in loops it unrolls)
    s = script(exits_in_tuple_loop)
    taken = set()
    for scale in (-3.0, -2.0, -0.5, 0.3, 1.0, 2.0, 5.0):
        x = np.array([1.0, 0.5, 0.25]) * scale
        ran, exits = _exit_lines_run(exits_in_tuple_loop, x)
        taken |= ran
        _check_against_eager(exits_in_tuple_loop, s, [gg.tensor(x)])
    assert taken == exits

