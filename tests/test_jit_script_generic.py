"""jit.script builds ONE graph from source, before any call, for every corpus function
(whose code reads no shapes), and that graph is right for inputs of several sizes: calls
whose ops need a rank unknown at compile time are made when the graph runs."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad.jit import script

from capture_corpus import CORPUS


def _leaves(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("case", [c for c in CORPUS if c.script_ok], ids=repr)
def test_one_graph_from_source_serves_every_size(case):
    """jit.script builds the corpus functions' graph before any call, and that one graph
    is right for the case's inputs and for inputs of other sizes (every dim one larger;
    for a module, whose layers fix the feature sizes, the batch dim)."""
    scripted = script(case.fn)
    graph = scripted.ir
    assert scripted._generic.rank_bound is None
    assert not any("specialized" in h for h in graph.header)
    rng = np.random.default_rng(11)
    module = isinstance(case.fn, gg.nn.Module)
    for grow in (0, 1):
        inputs = []
        for x in case.make_inputs(rng):
            shape = tuple(x.shape)
            shape = ((shape[0] + grow, *shape[1:]) if module and shape else
                     tuple(d + grow for d in shape))
            inputs.append(gg.tensor(rng.standard_normal(shape)))
        got, want = _leaves(scripted(*inputs)), _leaves(case.fn(*inputs))
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10,
                                       atol=1e-12)
    assert scripted.ir is graph


def test_graphgrads_own_module_is_scripted_from_its_source_where_it_can_be():
    # a leaf module of graphgrad's own compiles from its forward like a user's: its call
    # shows in the one generic graph (as torch.fx's call_function would)
    for m, fn in ((gg.nn.Linear(3, 2), "graphgrad.nn.functional.linear("),
                  (gg.nn.LayerNorm(3), "graphgrad.nn.functional.layer_norm(")):
        s = script(m)
        assert fn in s.code and "self(input)" not in s.code
        assert s._generic.rank_bound is None
        for shape in ((5, 3), (2, 4, 3)):
            x = gg.randn(*shape)
            np.testing.assert_allclose(s(x).detach().numpy(), m(x).detach().numpy(),
                                       rtol=1e-6)
    # BatchNorm's buffer counter is beyond the compiler: it is called whole, like an op,
    # so its running statistics still move as eager's
    bn, ref = gg.nn.BatchNorm1d(3), gg.nn.BatchNorm1d(3)
    sb = script(bn)
    assert "self(input)" in sb.code
    for _ in range(2):
        x = gg.randn(4, 3)
        np.testing.assert_allclose(sb(x).detach().numpy(), ref(x).detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(), rtol=1e-6)
    assert int(bn.num_batches_tracked) == 2


def test_a_sequential_is_scripted_into_its_layers():
    # as torch.fx's graph of a Sequential: a call_module per layer (BatchNorm's buffers
    # update in its own call), graphgrad's functions inline
    m = gg.nn.Sequential(gg.nn.Linear(3, 4), gg.nn.BatchNorm1d(4), gg.nn.ReLU())
    s = script(m)
    assert "getattr(self, '0')(input)" in s.code and "graphgrad.relu(" in s.code
    ref = gg.nn.Sequential(gg.nn.Linear(3, 4), gg.nn.BatchNorm1d(4), gg.nn.ReLU())
    ref.load_state_dict(m.state_dict())
    for _ in range(2):
        x = gg.randn(5, 3)
        np.testing.assert_allclose(s(x).detach().numpy(), ref(x).detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(m[1].running_mean.numpy(), ref[1].running_mean.numpy(),
                               rtol=1e-6)
