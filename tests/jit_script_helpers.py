"""Shared helpers of the jit.script test files."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import graphgrad as gg
from graphgrad.jit import ScriptError, script


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
