"""``graphgrad.jit.script`` of break, continue and return in loops (TorchScript's exit
transform): outputs and first/second derivatives against eager, loop exits checked
against ``torch.jit.script``, the flags in the printed graph."""

from __future__ import annotations

import importlib
import inspect
import linecache
import sys
import warnings

import numpy as np
import pytest
from jit_script_helpers import (
    _all_nodes,
    _check_against_eager,
    _ops,
    _script_error,
    _t,
)

import graphgrad as gg
from graphgrad.graph import Interpreter, python_code
from graphgrad.jit import ScriptError, script

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
