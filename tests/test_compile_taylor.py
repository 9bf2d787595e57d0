"""func.jet, func.taylor_derivatives, func.laplacian and func.linear_operator inside
graphgrad.compile: traced into one graph (the Taylor level over the capture's builder,
the differentiated function interpreted), equal to eager in float64; a Laplacian's
unrolled jets collapsed by passes.collapse_taylor in compile's pipeline; what cannot be
traced is a graph break with its reason and the eager result, never a wrong graph."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import compiler, func, nn
from graphgrad.dynamo import Unsupported
from graphgrad.func.jet import jet_coefficients
from graphgrad.func.pytree import tree_flatten
from graphgrad.graph import trace
from graphgrad.graph.interpreter import Interpreter
from graphgrad.passes.collapse_taylor import capture_taylor_operator

from test_collapse_taylor import DT, _linear_nodes, _net


def _one_graph(fn, *args):
    e = compiler.explain(fn)(*args)
    assert (e.graph_count, e.graph_break_count) == (1, 0), str(e)


def _close(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-10,
                                   atol=1e-12)


def test_jet_to_order_4_on_an_mlp_and_tensor_methods():
    net = _net(3)
    rng = np.random.default_rng(0)
    x = gg.tensor(rng.standard_normal((4, 3)))
    series = [gg.tensor(rng.standard_normal((4, 3))) for _ in range(4)]

    def f(x, s1, s2, s3, s4):
        def g(z):  # made in the traced code; Tensor methods and functional ops
            h = net(z)
            return (h.sin() * z.sum(-1, keepdim=True)).exp() + gg.tanh(h) ** 2
        out, ser = func.jet(g, (x,), ((s1, s2, s3, s4),))
        return (out, *ser)
    compiled = gg.compile(f)
    got, want = compiled(x, *series), f(x, *series)
    _close(got, want)
    assert any(float(t.abs().max()) > 1e-3 for t in want[3:])
    _one_graph(f, x, *series)


def test_taylor_derivatives_of_a_module_to_order_4():
    net = _net(2, seed=3)
    x = gg.tensor(np.random.default_rng(1).standard_normal((5, 2)))

    def f(x):
        return func.taylor_derivatives(net, x, gg.ones_like(x), 4)
    _close(gg.compile(f)(x), f(x))
    _one_graph(f, x)


def test_module_weights_are_graph_inputs_not_constants():
    """The module the transform differentiates is interpreted: its parameters are guarded
    inputs of the graph, so an update in place shows in the next call."""
    net = _net(2, seed=4)
    x = gg.tensor(np.random.default_rng(2).standard_normal((3, 2)))

    def f(x):
        return func.laplacian(net)(x)
    compiled = gg.compile(f)
    _close([compiled(x)], [f(x)])
    with gg.no_grad():
        net[0].weight.mul_(1.7)
    _close([compiled(x)], [f(x)])


@pytest.mark.parametrize("d", [2, 3, 5])
def test_laplacian_of_an_mlp_is_one_collapsed_graph(d):
    net = _net(d)
    x = gg.randn(4, d, dtype=DT)

    def lap(x):
        return func.laplacian(net)(x)

    def unrolled(x):  # the same jets written out: compiled without the collapse
        eye = gg.eye(d, dtype=DT)
        total = None
        for r in range(d):
            y = func.taylor_derivatives(net, x, eye[r], 2)[2]
            total = y if total is None else total + y
        return total
    compiled, plain = gg.compile(lap), gg.compile(unrolled)
    got = compiled(x)
    want = func.laplacian(net, method="collapsed")(x)
    hess = func.vmap(func.hessian(lambda p: net(p.unsqueeze(0))[0, 0]))(x).numpy()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.numpy().ravel(), np.trace(hess, axis1=-2, axis2=-1),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(plain(x).numpy(), want.numpy(), rtol=1e-10, atol=1e-12)
    _one_graph(lap, x)
    graph, plain_graph = compiled.graphs[-1], plain.graphs[-1]
    assert any(h.startswith("collapse_taylor") for h in graph.header)
    assert not any(h.startswith("collapse_taylor") for h in plain_graph.header)
    # unrolled, per direction 6 Linear applications (primal 2, first order 2, second
    # order 2: the last layer's primal is dead); collapsed: the primal once, the first
    # orders per direction (the first layer's too: its weight is a graph input, not a
    # constant), the second orders once per layer that has one
    assert _linear_nodes(plain_graph) == 6 * d
    assert _linear_nodes(graph) == 2 * d + 4
    assert graph.count() < plain_graph.count()


@pytest.mark.parametrize("kind", ["diagonal", "full"])
def test_linear_operator(kind):
    d = 3
    net = _net(d, seed=5)
    x = gg.randn(2, d, dtype=DT)
    rng = np.random.default_rng(3)
    c = rng.uniform(0.5, 2.0, d) if kind == "diagonal" else rng.standard_normal((d, d))

    def f(x):
        return func.linear_operator(net, c)(x)
    _close([gg.compile(f)(x)], [func.linear_operator(net, c, method="reverse")(x)])
    _one_graph(f, x)


def _branchy(z):
    if float(z.sum()) > 0:  # needs the value: a break inside the function
        return z.sin()
    return z.cos()


def test_a_break_inside_the_function_breaks_the_transform_with_its_reason():
    x = gg.tensor([0.3, 0.5])

    def f(x):
        return func.taylor_derivatives(_branchy, x, gg.ones_like(x), 3)
    _close(gg.compile(f)(x), f(x))
    e = compiler.explain(f)(x)
    assert e.graph_break_count == 1
    assert "taylor_derivatives cannot be traced into the graph" in e.break_reasons[0].reason


def test_laplacian_by_nested_reverse_mode_breaks():
    net = _net(2)
    x = gg.randn(3, 2, dtype=DT)

    def f(x):
        return func.laplacian(net, method="reverse")(x)
    _close([gg.compile(f)(x)], [f(x)])
    e = compiler.explain(f)(x)
    assert e.graph_break_count == 1
    assert "method='reverse'" in e.break_reasons[0].reason


def test_traced_jet_sees_tensor_methods():
    """graph.trace of a Laplacian whose function calls Tensor methods: a Symbol's method
    reaches the Taylor level over the builder (it used to push the builder over it, and
    the series were lost)."""
    x = gg.tensor(np.random.default_rng(4).standard_normal((2, 3)))

    def f(p):
        return (p.sin() * p).sum(-1, keepdim=True)
    graph = capture_taylor_operator(f, x)
    (got,) = Interpreter(graph).run(x)
    np.testing.assert_allclose(got.numpy(), func.laplacian(f)(x).numpy(), rtol=1e-12)
    g2 = trace(lambda p: func.taylor_derivatives(lambda z: z.exp().sum(), p,
                                                 gg.ones_like(p), 3)[3], x)
    (third,) = Interpreter(g2).run(x)
    np.testing.assert_allclose(third.numpy(), float(x.exp().sum() * 1.0), rtol=1e-12)


@pytest.mark.parametrize("which", ["laplacian", "taylor_derivatives"])
def test_parameter_gradients_through_the_compiled_transform(which):
    """A PINN-style loss: the compiled graph's backward reaches the module's parameters
    (graph inputs) with the eager gradients. The last bias does not move a second
    derivative: no gradient in either."""
    gg.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 5), nn.Tanh(), nn.Linear(5, 1)).to(DT)
    x = gg.randn(4, 2, dtype=DT)

    def loss(x):
        if which == "laplacian":
            y = func.laplacian(net)(x)
        else:
            y = func.taylor_derivatives(net, x, gg.ones_like(x), 3)[3]
        return (y ** 2).mean()
    grads = []
    for fn in (gg.compile(loss), loss):
        net.zero_grad()
        fn(x).backward()
        grads.append([p.grad for p in net.parameters()])
    for got, want in zip(*grads, strict=True):
        if want is None:
            assert got is None
            continue
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-14)
    assert grads[1][0] is not None
    _one_graph(loss, x)


def test_fullgraph_names_why_the_transform_runs_eagerly():
    net = _net(2)

    def f(x):
        return func.laplacian(net, method="reverse")(x)
    with pytest.raises(Unsupported, match="method=.reverse."):
        gg.compile(f, fullgraph=True)(gg.randn(3, 2, dtype=DT))


def test_graph_trace_of_the_operators_right_or_refused():
    """graph.trace of a function calling func.laplacian: the collapsed level (a Taylor
    level) is traced through; method='taylor' runs jets under vmap, which a Symbol's
    method would bypass: refused, naming vmap's level, instead of a wrong graph."""
    net = _net(3, seed=6)
    x = gg.randn(4, 3, dtype=DT)
    graph = trace(lambda p: func.laplacian(net)(p), x)
    (got,) = Interpreter(graph).run(x)
    np.testing.assert_allclose(got.numpy(), func.laplacian(net)(x).numpy(), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="VmapLevel"):
        trace(lambda p: func.laplacian(net, method="taylor")(p), x)


class _TwoInTwoOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(2, 3), nn.Linear(3, 2)

    def forward(self, x, y):
        h = self.a(x).tanh()
        if h.shape[-1] == 3:  # a branch on a shape: decided at capture, guarded
            h = h * y.sum()
        return self.b(h).sin(), (h ** 2).sum(-1)


gg.manual_seed(1)
_NET2 = _TwoInTwoOut().to(DT)
_VX = [gg.randn(4, 2, dtype=DT) for _ in range(3)]   # read from outside: guarded lists
_VY = [gg.randn(5, dtype=DT) for _ in range(3)]


def _jet_scaled(x, y):
    return func.jet(_NET2, (x, y), (_VX, _VY), factorial_scaled=False)


def _jet_bound_method(x, y):
    return func.jet(_NET2.forward, (x, y), (_VX, [None, None, None]))


def _jet_coefficients(x, y):
    return jet_coefficients(lambda a: _NET2(a, y)[0], (x,), ([_VX[0], None, _VX[2]],), 3)


@pytest.mark.parametrize("fn", [_jet_scaled, _jet_bound_method, _jet_coefficients])
def test_jet_of_a_module_with_two_inputs_and_outputs(fn):
    x, y = gg.randn(4, 2, dtype=DT), gg.randn(5, dtype=DT)
    got, _ = tree_flatten(gg.compile(fn)(x, y))
    want, _ = tree_flatten(fn(x, y))
    got, want = [g for g in got if g is not None], [w for w in want if w is not None]
    assert len(got) == len(want) >= 4
    _close(got, want)
    _one_graph(fn, x, y)
