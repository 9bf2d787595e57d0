"""Tests for graphgrad.fx: the lecture's outcomes for symbolic tracing, the capture
corpus (outputs and gradients against eager on fresh inputs), leaf modules and
parameters, concrete_args, shape proxies, Interpreter/Transformer, printing and DOT."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import fx, nn
from graphgrad.graph import Graph, python_code
from graphgrad.graph import Interpreter as IRInterpreter
from graphgrad.ops import REGISTRY

from capture_corpus import CORPUS
from lecture_cases import branch, external, shape_dependent
from random_cases import (DropoutBlock, check_random_capture, check_stop_gradient,
                          dropout_layer, inputs_of, noisy, stop_gradient)

CONTROL_FLOW = "symbolically traced variables cannot be used as inputs to control flow"


def _t(*shape, seed=0):
    return gg.tensor(np.random.default_rng(seed).standard_normal(shape), dtype=gg.float64)


def _np(t):
    return t.detach().numpy()


def _tuple(out):
    return out if isinstance(out, (tuple, list)) else (out,)


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if text in line)


# ---- the lecture's three functions ---------------------------------------------------------

def test_branch_raises_trace_error_at_the_if():
    with pytest.raises(fx.TraceError) as info:
        fx.symbolic_trace(branch)
    msg = str(info.value)
    assert msg.splitlines()[0] == CONTROL_FLOW
    assert isinstance(info.value, ValueError)  # torch.fx's TraceError is a ValueError
    assert f'lecture_cases.py", line {_line_of(branch, "if x < 0")}, in branch' in msg
    assert "if x < 0:" in msg


def test_shape_dependent_raises_trace_error_at_the_unpacking():
    with pytest.raises(fx.TraceError) as info:
        fx.symbolic_trace(shape_dependent)
    msg = str(info.value)
    assert msg.startswith("Proxy object cannot be iterated. This can be attempted when the "
                          "Proxy is used in a loop or as a *args or **kwargs function argument.")
    line = _line_of(shape_dependent, "n, m = x.shape")
    assert f'lecture_cases.py", line {line}, in shape_dependent' in msg
    assert "n, m = x.shape" in msg


def test_external_traces_and_freezes_the_random_number():
    gm = fx.symbolic_trace(external)
    x = gg.tensor([1.0, 2.0], dtype=gg.float64)
    a, b = gm(x), gm(x)
    np.testing.assert_array_equal(_np(a), _np(b))   # the "worst case": same value
    assert not np.array_equal(_np(external(x)), _np(external(x)))  # eager draws anew
    # the number is a literal of the graph, in the table and in the code
    (add,) = [n for n in gm.ir.nodes if n.kind == "call"]
    frozen = add.inputs[1]
    assert add.op is REGISTRY["Add"] and isinstance(frozen, float) and 0.0 <= frozen < 1.0
    np.testing.assert_array_equal(_np(a), _np(x) + frozen)
    assert repr(frozen) in gm.code and repr(frozen) in gm.ir.tabular()
    # other shapes work too: the graph knows no shape
    y = gg.ones(2, 3, dtype=gg.float64)
    np.testing.assert_array_equal(_np(gm(y)), np.full((2, 3), 1.0 + frozen))


# ---- the corpus: outputs and gradients against eager on fresh inputs ----------------------

def _grads_match(fn, gm, inputs, rng) -> None:
    eager_in = [t.detach().requires_grad_() for t in inputs]
    traced_in = [t.detach().requires_grad_() for t in inputs]
    params = list(fn.parameters()) if isinstance(fn, nn.Module) else []
    for p in params:  # the corpus modules are shared: other tests leave gradients behind
        p.grad = None
    outs_e = _tuple(fn(*eager_in))
    cots = [gg.tensor(rng.standard_normal(o.shape), dtype=o.dtype) for o in outs_e]
    sum((o * c).sum() for o, c in zip(outs_e, cots, strict=True)).backward()
    eager_pg = [_np(p.grad).copy() for p in params]
    for p in params:
        p.grad = None
    outs_t = _tuple(gm(*traced_in))
    sum((o * c).sum() for o, c in zip(outs_t, cots, strict=True)).backward()
    for a, b in zip(traced_in, eager_in, strict=True):
        np.testing.assert_allclose(_np(a.grad), _np(b.grad), rtol=1e-10, atol=1e-12)
        assert a.grad.shape == a.shape
    for p, g in zip(params, eager_pg, strict=True):
        np.testing.assert_allclose(_np(p.grad), g, rtol=1e-10, atol=1e-12)
        p.grad = None


@pytest.mark.parametrize("case", CORPUS, ids=repr)
def test_corpus(case):
    rng = np.random.default_rng(7)
    gm = fx.symbolic_trace(case.fn, example_inputs=case.make_inputs(rng))
    assert isinstance(gm.ir, Graph)
    gm.ir.verify()
    fresh = case.make_inputs(rng)
    expect = _tuple(case.fn(*fresh))
    got = _tuple(gm(*fresh))
    assert len(got) == len(expect)
    for a, b in zip(got, expect, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-12, atol=1e-12)
    # the same graph run node by node, by the IR's interpreter and by fx's
    ir = IRInterpreter(gm.ir, gm.state()).run(*fresh)
    fxi = _tuple(fx.Interpreter(gm).run(*fresh))
    for a, b, c in zip(ir, fxi, expect, strict=True):
        np.testing.assert_allclose(_np(a), _np(c), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(_np(b), _np(c), rtol=1e-12, atol=1e-12)
    _grads_match(case.fn, gm, fresh, rng)


def test_corpus_graphs_serve_other_sizes_of_the_same_rank():
    cases = {c.name: c for c in CORPUS}
    gm = fx.symbolic_trace(cases["affine"].fn, example_inputs=(_t(3, 4), _t(4, 2), _t(2)))
    x, w, b = _t(6, 5, seed=1), _t(5, 3, seed=2), _t(3, seed=3)
    np.testing.assert_allclose(_np(gm(x, w, b)), _np(x @ w + b))
    assert "f64[?, ?]" in gm.code   # traced with unknown sizes
    with pytest.raises(RuntimeError, match=r"input 'x' of shape \[6\] does not fit"):
        gm(_t(6), w, b)


def test_exact_shapes_where_a_shape_rule_needs_sizes():
    # x.std(0) needs the size of dim 0: traced for the example's shape, and guarded
    cases = {c.name: c for c in CORPUS}
    gm = fx.symbolic_trace(cases["standardize"].fn, example_inputs=(_t(5, 3),))
    assert gm.ir.inputs[0].spec.shape == (5, 3)
    with pytest.raises(RuntimeError, match=r"traced for f64\[5, 3\]"):
        gm(_t(4, 3))


def test_a_library_check_that_needs_sizes_retraces_for_the_example_shape():
    def f(x):
        return gg.nn.functional.layer_norm(x, (4,)) * 2

    gm = fx.symbolic_trace(f, example_inputs=(_t(3, 4),))
    assert gm.ir.inputs[0].spec.shape == (3, 4)
    x = _t(3, 4, seed=9)
    np.testing.assert_allclose(_np(gm(x)), _np(f(x)), rtol=1e-12)


def test_tensors_made_from_a_traced_shape_are_never_guessed():
    # zeros_like reads the shape off the array: with sizes unknown, the graph is traced
    # for the example's shape (and guarded) rather than freezing a made-up shape
    gm = fx.symbolic_trace(lambda x: gg.zeros_like(x) + 1, example_inputs=(_t(2, 3),))
    np.testing.assert_array_equal(_np(gm(_t(2, 3))), np.ones((2, 3)))
    with pytest.raises(RuntimeError, match="trace again with an example of this shape"):
        gm(_t(4, 3))
    # without example inputs, zeros_like is recorded as a call made when the graph runs
    free = fx.symbolic_trace(lambda x: gg.zeros_like(x))
    assert [(n.op, n.target) for n in free.fx_graph.nodes][1] == ("call_function",
                                                                   gg.zeros_like)
    for shape in ((4, 3), (2,)):
        np.testing.assert_array_equal(_np(free(_t(*shape))), np.zeros(shape))


def test_a_dtype_read_while_tracing_is_baked_in_and_checked():
    gm = fx.symbolic_trace(lambda x: x.new_zeros(2) + x, example_inputs=(_t(2),))
    assert gm(_t(2)).dtype == gg.float64
    with pytest.raises(RuntimeError, match="has dtype float32 but the graph was traced for "
                                           "float64"):
        gm(gg.ones(2))
    free = fx.symbolic_trace(lambda x: x * 2 + 1)    # nothing read the dtype: any dtype runs
    for dt in (gg.float32, gg.float64):
        assert free(gg.ones(2, dtype=dt)).dtype == dt


def test_without_example_inputs_rank_needing_calls_run_when_the_graph_runs():
    # softmax(dim=-1) needs the rank: recorded as torch.fx records the call, its shape
    # rule applied on each call's values, so the graph serves every rank
    gm = fx.symbolic_trace(lambda x: gg.softmax(x, dim=-1).sum(-1) * 2)
    assert [(n.op, getattr(n.target, "__name__", n.target)) for n in gm.fx_graph.nodes] == [
        ("placeholder", "x"), ("call_function", "softmax"), ("call_method", "sum"),
        ("call_function", "mul"), ("output", "output")]
    for shape in ((5,), (2, 3), (2, 3, 4)):
        x = _t(*shape)
        np.testing.assert_allclose(_np(gm(x)), _np(gg.softmax(x, dim=-1).sum(-1) * 2))


def test_without_example_inputs_shape_free_code_serves_every_shape():
    cases = {c.name: c for c in CORPUS}
    gm = fx.symbolic_trace(cases["gelu_tanh"].fn)
    for shape in ((7,), (2, 3), ()):
        x = _t(*shape)
        np.testing.assert_allclose(_np(gm(x)), _np(cases["gelu_tanh"].fn(x)))


# ---- shapes as proxies, and where Python needs concrete values ----------------------------

def test_shape_reads_are_nodes():
    def f(x):
        return x.reshape(x.shape[0], -1) * x.size(1) + x.size()[-1]

    gm = fx.symbolic_trace(f)
    kinds = [n.kind for n in gm.ir.nodes]
    assert kinds.count("shape") == 1   # one shape node, read three times
    getitems = [n for n in gm.ir.nodes if n.kind == "call" and n.op.__name__ == "Getitem"]
    assert len(getitems) == 3
    for shape in ((2, 3, 4), (5, 2)):
        x = _t(*shape)
        np.testing.assert_allclose(_np(gm(x)), _np(f(x)))


@pytest.mark.parametrize("fn, error, text", [
    (lambda x: [r for r in x], fx.TraceError, "Proxy object cannot be iterated"),
    (lambda x: x * 2 if x > 0 else x, fx.TraceError, CONTROL_FLOW),
    (lambda x: x and x + 1, fx.TraceError, CONTROL_FLOW),
    (lambda x: x + len(x), RuntimeError, "'len' is not supported in symbolic tracing"),
    (lambda x: x * int(x.shape[0]), fx.TraceError, "has no value at trace time"),
    (lambda x: [x[i] for i in range(x.shape[0])], fx.TraceError, "has no value at trace"),
    (lambda x: x.sum().item() + x, fx.TraceError, "has no value at trace time"),
    (lambda x: gg.tensor(np.sin(x)), TypeError, "does not support ufuncs"),
])
def test_python_needing_values_raises(fn, error, text):
    with pytest.raises(error, match=text.replace("(", r"\(").replace("*", r"\*")):
        fx.symbolic_trace(fn)


def _iadd(x):
    y = x * 1
    y += 1
    return y


def _setitem(x):
    x[0] = 1.0
    return x


@pytest.mark.parametrize("fn, name", [(_iadd, "__iadd__"), (_setitem, "__setitem__"),
                                      (lambda x: x.mul_(2), "mul_")])
def test_in_place_ops_on_proxies_raise(fn, name):
    with pytest.raises(fx.TraceError, match=f"in-place op {name} on the traced value") as info:
        fx.symbolic_trace(fn)
    assert "test_fx.py" in str(info.value)


def test_while_and_assert_raise_trace_error_with_the_line():
    def f(x):
        while x.sum() > 0:
            x = x - 1
        return x

    with pytest.raises(fx.TraceError) as info:
        fx.symbolic_trace(f, example_inputs=(_t(3),))
    assert f'line {_line_of(f, "while x.sum()")}, in f' in str(info.value)

    def g(x):
        assert (x > 0).all(), "positive"
        return x

    with pytest.raises(fx.TraceError, match=CONTROL_FLOW) as info:
        fx.symbolic_trace(g, example_inputs=(_t(3),))
    assert "assert (x > 0).all()" in str(info.value)


def test_tensors_made_at_trace_time_are_frozen_constants():
    def f(x):
        return x + gg.randn(3, dtype=gg.float64)

    gm = fx.symbolic_trace(f)
    (const,) = [n for n in gm.ir.nodes if n.kind == "variable"]
    assert const.params["target"] == "_tensor_constant0"
    x = gg.zeros(3, dtype=gg.float64)
    np.testing.assert_array_equal(_np(gm(x)), _np(gm(x)))
    np.testing.assert_array_equal(_np(gm(x)), _np(gm._tensor_constant0))


@pytest.mark.parametrize("fn, dist", [
    (lambda x: gg.nn.functional.dropout(x, 0.5), "uniform"),
    (lambda x: gg.randn_like(x) + x, "normal"),
])
def test_random_draws_for_traced_values_are_random_nodes(fn, dist):
    # torch.fx records these calls and draws anew per run; so does graphgrad.fx, as a
    # random node of the IR (a draw with no traced input is frozen, as in torch.fx:
    # test_tensors_made_at_trace_time_are_frozen_constants)
    gm = fx.symbolic_trace(fn, example_inputs=(_t(2, 3),))
    [node] = [n for n in gm.ir.nodes if n.kind == "random"]
    assert node.params["dist"] == dist and node.spec.shape == (2, 3)
    assert f"random_{dist}" in gm.ir.tabular() and "_random(" in gm.code
    x = _t(2, 3)
    assert not np.array_equal(_np(gm(x)), _np(gm(x)))


@pytest.mark.parametrize("fn", [dropout_layer, noisy, DropoutBlock],
                         ids=lambda f: f.__name__)
def test_random_capture_corpus(fn):
    fn = fn() if isinstance(fn, type) else fn
    inputs = inputs_of(fn)
    check_random_capture(fx.symbolic_trace(fn, example_inputs=inputs), fn, inputs)


def test_a_draw_no_random_node_reproduces_is_refused():
    with pytest.raises(fx.TraceError, match="rand_like\\(\\) draws random numbers for a "
                                            "traced value in a way") as info:
        fx.symbolic_trace(lambda x: x + gg.rand_like(x, requires_grad=True),
                          example_inputs=(_t(2, 3),))
    assert "test_fx.py" in str(info.value)


def test_detach_is_a_stop_gradient_node():
    gm = fx.symbolic_trace(stop_gradient, example_inputs=inputs_of(stop_gradient))
    assert [n.op.__name__ for n in gm.ir.nodes if n.kind == "call"].count("Detach") == 1
    check_stop_gradient(gm)


def test_a_dropout_module_is_a_leaf_that_draws_per_call():
    m = nn.Sequential(nn.Linear(3, 3, dtype=gg.float64), nn.Dropout(0.5))
    gm = fx.symbolic_trace(m, example_inputs=(_t(2, 3),))
    assert [n.kind for n in gm.ir.nodes].count("call_module") == 2
    x = _t(50, 3)
    assert not np.array_equal(_np(gm(x)), _np(gm(x)))
    m.eval()
    np.testing.assert_allclose(_np(gm(x)), _np(m(x)))


# ---- modules: leaves, parameters ----------------------------------------------------------

class Scaled(nn.Module):
    """A user module (traced through) holding a parameter and a leaf layer."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2, dtype=gg.float64)
        self.scale = nn.Parameter(gg.tensor([2.0, 3.0], dtype=gg.float64))

    def forward(self, x):
        return self.lin(x) * self.scale


def test_leaf_modules_are_call_module_nodes_and_parameters_variables():
    m = Scaled()
    gm = fx.symbolic_trace(m, example_inputs=(_t(4, 3),))
    table = gm.ir.tabular()
    (lin,) = [n for n in gm.ir.nodes if n.kind == "call_module"]
    assert lin.params["target"] == "lin" and lin.target_name == "lin"
    (scale,) = [n for n in gm.ir.nodes if n.kind == "variable"]
    assert scale.params["target"] == "scale"
    assert "call_module" in table and "lin" in table
    assert "self.lin(x)" in gm.code and "self.scale" in gm.code   # as torch.fx prints
    # the GraphModule holds the root's own tensors: training it trains the root
    assert gm.lin is m.lin and gm.scale is m.scale
    assert {n for n, _ in gm.named_parameters()} == {"lin.weight", "lin.bias", "scale"}
    x = _t(4, 3)
    with gg.no_grad():
        m.scale.mul_(10.0)     # an update after tracing is seen: parameters are read live
    np.testing.assert_allclose(_np(gm(x)), _np(m(x)))


def test_a_graph_module_traces_again_to_the_same_graph():
    m = Scaled()
    gm = fx.symbolic_trace(m, example_inputs=(_t(4, 3),))
    again = fx.symbolic_trace(gm, example_inputs=(_t(4, 3),))
    assert [(n.kind, n.name) for n in again.ir.nodes] == \
        [(n.kind, n.name) for n in gm.ir.nodes]
    x = _t(2, 3, seed=4)
    np.testing.assert_allclose(_np(again(x)), _np(m(x)))

    def f(x):
        return x.reshape(x.shape[0], -1) * 2

    shaped = fx.symbolic_trace(fx.symbolic_trace(f))   # no example: any rank, still
    assert [n.kind for n in shaped.ir.nodes].count("shape") == 1
    for shape in ((2, 3, 4), (5, 2)):
        np.testing.assert_allclose(_np(shaped(_t(*shape))), _np(f(_t(*shape))))


def test_is_leaf_module_override_traces_through():
    class NoLeaves(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return False

    m = Scaled()
    tracer = NoLeaves()
    graph = tracer.trace(m, input_specs=(gg.graph.Spec((None, 3), np.dtype("float64")),))
    gm = fx.GraphModule(tracer.root, graph, "Scaled")
    assert not [n for n in graph.nodes if n.kind == "call_module"]
    targets = {n.params["target"] for n in graph.nodes if n.kind == "variable"}
    assert targets == {"lin.weight", "lin.bias", "scale"}
    x = _t(4, 3)
    np.testing.assert_allclose(_np(gm(x)), _np(m(x)))


def test_a_leaf_whose_output_rank_needs_sizes_is_traced_for_the_example_shape():
    class ConvHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3, padding=1, dtype=gg.float64)
            self.head = nn.Linear(32, 3, dtype=gg.float64)

        def forward(self, x):
            return self.head(gg.relu(self.conv(x)).flatten(1))   # flatten needs the rank

    m = ConvHead()
    gm = fx.symbolic_trace(m, example_inputs=(_t(2, 1, 4, 4),))
    assert gm.ir.inputs[0].spec.shape == (2, 1, 4, 4)
    _grads_match(m, gm, (_t(2, 1, 4, 4, seed=3),), np.random.default_rng(0))


def test_buffers_are_read_live_and_constants_are_not_state():
    class Shift(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("offset", gg.ones(3, dtype=gg.float64))

        def forward(self, x):
            return x + self.offset + gg.tensor([1.0, 2.0, 3.0], dtype=gg.float64)

    m = Shift()
    gm = fx.symbolic_trace(m)
    targets = [n.params["target"] for n in gm.ir.nodes if n.kind == "variable"]
    assert targets == ["offset", "_tensor_constant0"]
    assert set(gm.state_dict()) == {"offset"}
    m.offset.fill_(10.0)
    np.testing.assert_allclose(_np(gm(gg.zeros(3, dtype=gg.float64))), [11.0, 12.0, 13.0])


def test_a_module_outside_the_root_is_refused():
    lin = nn.Linear(2, 2)
    with pytest.raises(NameError, match="module is not installed as a submodule"):
        fx.symbolic_trace(lambda x: lin(x))


# ---- concrete_args ------------------------------------------------------------------------

def test_concrete_args_specialize_and_guard():
    def f(x, flag, k=2):
        if flag:
            return x * k
        return x - k

    gm = fx.symbolic_trace(f, concrete_args={"flag": True})
    assert [p.name for p in gm.ir.inputs] == ["x", "k"]
    x = _t(3)
    np.testing.assert_allclose(_np(gm(x, True, 3.0)), _np(x * 3.0))
    np.testing.assert_allclose(_np(gm(x)), _np(x * 2))  # flag defaults to True
    with pytest.raises(AssertionError, match="flag has been specialized to have value True "
                                             "but got another value"):
        gm(x, False)
    gm2 = fx.symbolic_trace(f, concrete_args={"flag": False, "k": fx.PH})
    np.testing.assert_allclose(_np(gm2(x, False, 5.0)), _np(x - 5.0))


def test_concrete_args_as_a_tuple():
    def f(x, scale):
        return x * scale

    gm = fx.symbolic_trace(f, concrete_args=(fx.PH, 3.0))
    np.testing.assert_allclose(_np(gm(_t(2))), _np(_t(2) * 3.0))
    with pytest.raises(RuntimeError, match="Tracing expected 2 arguments but got 1 concrete "
                                           "arguments"):
        fx.symbolic_trace(f, concrete_args=(fx.PH,))


def test_concrete_tensor_warns_that_it_is_not_guarded():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm = fx.symbolic_trace(lambda x, y: x + y, concrete_args={"y": gg.ones(2)})
    assert any("Was not able to add assertion to guarantee correct input y" in str(w.message)
               for w in caught)
    np.testing.assert_allclose(_np(gm(gg.zeros(2), gg.ones(2))), [1.0, 1.0])


# ---- printing, drawing, the IR's interpreter ----------------------------------------------

def test_printed_code_runs_like_the_interpreter_and_dot_has_the_nodes():
    m = Scaled()
    gm = fx.symbolic_trace(m, example_inputs=(_t(4, 3),))
    x = _t(4, 3, seed=5)
    code = python_code(gm.ir, gm.state())
    a = code.fn(x)[0]
    b = IRInterpreter(gm.ir, gm.state()).run(x)[0]
    np.testing.assert_array_equal(_np(a), _np(b))
    dot = gm.ir.to_dot()
    for n in gm.ir.nodes:
        assert n.name in dot
    readable = gm.print_readable(print_output=False)
    assert "\nclass Scaled(graphgrad.nn.Module):\n    def forward(self, x):" in readable


def test_print_tabular_and_proxy_repr(capsys):
    seen = []

    def f(x):
        seen.append(repr(x))
        return gg.relu(x) + 1

    gm = fx.symbolic_trace(f)
    gm.ir.print_tabular()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["opcode", "name", "target", "args", "kwargs"]
    rows = [line.split()[:3] for line in lines[2:]]
    assert rows == [["placeholder", "x", "placeholder"], ["call", "relu", "Relu"],
                    ["call", "add", "Add"], ["output", "output", "output"]]
    assert seen == ["Proxy(x)"]


def test_second_derivatives_through_a_graph_module():
    def f(x):
        return (gg.tanh(x) ** 3).sum()

    gm = fx.symbolic_trace(f, example_inputs=(_t(4),))
    x = _t(4).requires_grad_()
    (g,) = gg.autograd.grad(gm(x), x, create_graph=True)
    (h,) = gg.autograd.grad(g.sum(), x)
    xe = _t(4).requires_grad_()
    (ge,) = gg.autograd.grad(f(xe), xe, create_graph=True)
    (he,) = gg.autograd.grad(ge.sum(), xe)
    np.testing.assert_allclose(_np(g), _np(ge), rtol=1e-12)
    np.testing.assert_allclose(_np(h), _np(he), rtol=1e-12)


# ---- Interpreter and Transformer ----------------------------------------------------------

def test_interpreter_hooks_and_garbage_collection():
    def f(x, y):
        return gg.relu(x + y) * y

    gm = fx.symbolic_trace(f)
    seen = []

    class Recording(fx.Interpreter):
        def call_function(self, target, args, kwargs):
            seen.append(target.__name__)
            return super().call_function(target, args, kwargs)

    x, y = _t(3), _t(3, seed=1)
    interp = Recording(gm)
    np.testing.assert_allclose(_np(interp.run(x, y)), _np(f(x, y)))
    assert seen == ["add", "relu", "mul"]   # the public functions, as torch.fx's targets
    (output,) = gm.fx_graph.find_nodes(op="output")
    assert set(interp.env) == {output}   # everything else freed at last use
    keep = Recording(gm, garbage_collect_values=False)
    keep.run(x, y)
    assert len(keep.env) == len(gm.fx_graph.nodes)
    # partial evaluation: pre-set the add node's value
    (add,) = gm.fx_graph.find_nodes(op="call_function", target=gg.add)
    out = fx.Interpreter(gm).run(x, y, initial_env={add: gg.ones(3, dtype=gg.float64)})
    np.testing.assert_allclose(_np(out), _np(y))


def test_transformer_swaps_add_for_mul():
    def f(x, y):
        return (x + y).sum() + y

    class AddToMul(fx.Transformer):
        def call_function(self, target, args, kwargs):
            if target is gg.add:
                target = gg.mul
            return super().call_function(target, args, kwargs)

    gm = fx.symbolic_trace(f, example_inputs=(_t(3), _t(3)))
    new = AddToMul(gm).transform()
    x, y = _t(3), _t(3, seed=1)
    np.testing.assert_allclose(_np(new(x, y)), _np((x * y).sum() * y))
    np.testing.assert_allclose(_np(gm(x, y)), _np(f(x, y)))   # the original is intact
    ops = [n.op.__name__ for n in new.ir.nodes if n.kind == "call"]
    assert ops == ["Mul", "Sum", "Mul"]
    assert "Add" not in new.code


def test_transformer_keeps_modules_parameters_and_shape_nodes():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3, dtype=gg.float64)
            self.w = nn.Parameter(gg.ones(3, dtype=gg.float64))

        def forward(self, x):
            return self.lin(x).reshape(x.shape[0], -1) * self.w

    m = M()
    gm = fx.symbolic_trace(m, example_inputs=(_t(2, 3),))
    new = fx.Transformer(gm).transform()
    assert [n.kind for n in new.ir.nodes] == [n.kind for n in gm.ir.nodes]
    x = _t(5, 3).requires_grad_()
    out = new(x)
    np.testing.assert_allclose(_np(out), _np(m(x)))
    out.sum().backward()
    assert m.w.grad is not None and m.lin.weight.grad is not None
