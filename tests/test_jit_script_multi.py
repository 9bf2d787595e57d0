"""jit.script compiles ONE graph, before any call, for calls whose ops need the input's
rank and that return several tensors (``max(dim)``, ``topk``, ``sort``, ``split``,
``chunk``) or a Python value (``numel``, ``size(i)``), and for subscript assignment: the
call is one node made when the graph runs and its items are ``operator.getitem`` nodes on
it, as torch.fx records them. That one graph is right, against eager, for inputs of
several ranks and sizes."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import graphgrad as gg
from graphgrad.jit import script

import script_multi_cases as cases

FUNCTIONS = [cases.max_dim, cases.max_values, cases.topk_sum, cases.sort_last,
             cases.split_add, cases.chunk_mul, cases.mean_by_numel, cases.scale_by_size,
             cases.zero_first_column]
SHAPES = [(4,), (3, 4), (2, 5, 4), (2, 1, 3, 4)]   # the last dim 4: split(2)/chunk(2) pairs


def _leaves(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_one_graph_from_source_serves_every_rank(fn):
    scripted = script(fn)
    graph = scripted.ir
    assert scripted._generic.rank_bound is None, graph.header
    assert not any("specialized" in h or "not run" in h for h in graph.header)
    rng = np.random.default_rng(7)
    for shape in SHAPES:
        x = gg.tensor(rng.standard_normal(shape))
        got, want = _leaves(scripted(x)), _leaves(fn(x))
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12)
    assert scripted.ir is graph   # no graph compiled per shape


def test_several_outputs_are_getitem_nodes_on_one_call():
    scripted = script(cases.max_dim)
    nodes = list(scripted.graph.nodes)
    calls = [n for n in nodes if n.op == "call_method" and n.target == "max"]
    assert len(calls) == 1
    items = [n for n in nodes if n.target is operator.getitem]
    assert [n.args for n in items] == [(calls[0], 0), (calls[0], 1)]
    assert "operator.getitem(" in scripted.code


def test_gradients_flow_through_a_deferred_tuple():
    x = gg.tensor(np.random.default_rng(1).standard_normal((3, 4)), requires_grad=True)
    (script(cases.split_add)(x) ** 2).sum().backward()
    got = x.grad.numpy().copy()
    x.grad = None
    (cases.split_add(x) ** 2).sum().backward()
    np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-12)


def test_indexing_a_deferred_tuple_by_a_tensor_is_a_script_error():
    with pytest.raises(gg.jit.ScriptError, match="returns several tensors"):
        script(_bad_index)


def _bad_index(x):
    return x.split(2, dim=-1)[x]
