"""``graphgrad.jit.script``'s compile-time errors (the construct and the user's line with a
``~~~~`` pointer), random ops and stop-gradients in scripted graphs, tensors read from
globals and closures at call time."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from jit_script_helpers import (
    _check_against_eager,
    _line_of,
    _script_error,
    _t,
)
from random_cases import (
    DropoutBlock,
    check_random_capture,
    check_stop_gradient,
    dropout_layer,
    inputs_of,
    noisy,
    stop_gradient,
)

import graphgrad as gg
from graphgrad.jit import ScriptError, script

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
