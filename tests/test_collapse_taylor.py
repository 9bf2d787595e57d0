"""passes.collapse_taylor: collapsed Taylor mode as a graph rewrite of R captured 2-jets;
the collapsed graph agrees with the eager method="collapsed" (written directly as a
dispatch level), with the uncollapsed graph and with Hessian traces."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import func, nn
from graphgrad.graph.interpreter import Interpreter
from graphgrad.passes.collapse_taylor import capture_taylor_operator, collapse_taylor

DT = gg.float64


def _net(d, seed=0):
    gg.manual_seed(seed)
    net = nn.Sequential(nn.Linear(d, 6), nn.Tanh(), nn.Linear(6, 6), nn.Sigmoid(),
                        nn.Linear(6, 1)).to(DT)
    for p in net.parameters():
        p.requires_grad_(False)
    return net


def _run(graph, x):
    out = Interpreter(graph).run(x)
    return (out[0] if isinstance(out, tuple) else out).numpy()


def _linear_nodes(graph) -> int:
    return sum(1 for n in graph.nodes if n.kind == "call" and n.op.__name__ == "Linear")


@pytest.mark.parametrize("d", [2, 3, 5, 8])
def test_collapsed_graph_agrees_with_eager_and_hessian(d):
    net = _net(d)
    x = gg.randn(4, d, dtype=DT)
    plain = capture_taylor_operator(net, x)
    before = plain.count()
    collapsed = collapse_taylor(plain)
    assert plain.count() == before  # a pass never changes its argument
    eager = func.laplacian(net, method="collapsed")(x).numpy()
    hess = func.vmap(func.hessian(lambda p: net(p.unsqueeze(0))[0, 0]))(x).numpy()
    want = np.trace(hess, axis1=-2, axis2=-1).reshape(-1, 1)
    for graph in (plain, collapsed):
        np.testing.assert_allclose(_run(graph, x), want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_run(collapsed, x), eager, rtol=1e-12, atol=1e-14)
    # R directions: 7 linear-layer applications each before (first- and second-order
    # per layer); after, the second-order ones are summed through both layers they
    # reach: the hidden layer's first order per direction, 2 primal, 2 second-order
    assert _linear_nodes(plain) == 7 * d
    assert _linear_nodes(collapsed) == d + 4
    assert collapsed.count() < plain.count()
    assert any(h.startswith("collapse_taylor") for h in collapsed.header)


def test_diagonal_operator_graph():
    net = _net(4, seed=1)
    x = gg.randn(3, 4, dtype=DT)
    c = np.array([0.5, -1.0, 2.0, 0.0])
    collapsed = collapse_taylor(capture_taylor_operator(net, x, c))
    eager = func.linear_operator(net, c)(x).numpy()
    np.testing.assert_allclose(_run(collapsed, x), eager, rtol=1e-12, atol=1e-14)


def test_nothing_to_collapse_returns_the_graph():
    from graphgrad.graph import trace
    g = trace(lambda a: (a * 2.0).sin(), gg.randn(3, dtype=DT))
    assert collapse_taylor(g) is g


def test_printed_code_of_the_collapsed_graph_runs():
    from graphgrad.graph import python_code
    net = _net(2)
    x = gg.randn(3, 2, dtype=DT)
    collapsed = collapse_taylor(capture_taylor_operator(net, x))
    assert "collapse_taylor" in collapsed.code
    out = python_code(collapsed).fn(x)
    np.testing.assert_allclose(out[0].numpy(), _run(collapsed, x), rtol=1e-14)
