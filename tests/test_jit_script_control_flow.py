"""``graphgrad.jit.script`` of control flow: nested if/else, elif chains, while on tensors,
for-range, early returns, inlined helpers, module lists, run-time sizes, item assignment;
outputs and gradients against eager, the graphs' shapes, printed code that runs."""

from __future__ import annotations

import numpy as np
import pytest
from jit_script_helpers import (
    _all_nodes,
    _check_against_eager,
    _leaves,
    _ops,
    _script_error,
    _t,
)

import graphgrad as gg
from graphgrad.graph import Interpreter, python_code
from graphgrad.jit import ScriptFunction, script

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
