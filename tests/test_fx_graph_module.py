"""Backends written for PyTorch run unchanged under graphgrad.compile: each is handed a
``graphgrad.fx.GraphModule`` (callable, ``.forward``, ``.graph``, ``.code``,
``print_readable()``, ``recompile()``) and may return it, its forward, a function calling
it or ``fx.Interpreter(gm).run``; results match eager code, and the lecture run's
graphs-per-call counts stay [2, 0, 1]."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import compiler, fx
from graphgrad.dynamo import counters

from lecture_cases import branch


@pytest.fixture(autouse=True)
def _fresh():
    compiler.reset()
    yield
    compiler.reset()


# The return styles of the PyTorch documentation's and tutorials' backends.
def returns_gm(gm, example_inputs):
    return gm


def returns_forward(gm, example_inputs):
    gm.graph.print_tabular()
    return gm.forward


def returns_lambda(gm, example_inputs):
    return lambda *args: gm(*args)


def returns_interpreter(gm, example_inputs):
    return fx.Interpreter(gm).run


STYLES = [returns_gm, returns_forward, returns_lambda, returns_interpreter,
          "eager", "print", "default"]


def _mlp(x, w1, w2):
    h = gg.relu(x @ w1 + 1.0)
    return (h @ w2).sum(dim=-1), h.tanh()


def _inputs(seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [gg.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
            for s in ((4, 3), (3, 5), (5, 2))]


@pytest.mark.parametrize("backend", STYLES, ids=lambda b: getattr(b, "__name__", b))
def test_each_return_style_matches_eager_values_and_gradients(backend, capsys):
    want_in, got_in = _inputs(), _inputs()
    want = _mlp(*want_in)
    got = gg.compile(_mlp, backend=backend)(*got_in)
    assert isinstance(got, tuple) and len(got) == 2   # the function's own structure
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6)
    (want[0].sum() + want[1].sum()).backward()
    (got[0].sum() + got[1].sum()).backward()
    for a, b in zip(got_in, want_in, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)
    capsys.readouterr()


def test_the_backend_is_handed_a_graph_module():
    handed = []

    def backend(gm, example_inputs):
        handed.append((gm, example_inputs))
        return gm.forward

    x, w1, w2 = _inputs()
    gg.compile(_mlp, backend=backend)(x, w1, w2)
    (gm, examples), = handed
    assert isinstance(gm, fx.GraphModule) and isinstance(gm, gg.nn.Module)
    assert [tuple(e.shape) for e in examples] == [(4, 3), (3, 5), (5, 2)]
    code = gm.code
    assert "def forward(self, " in code and "graphgrad.relu(" in code and "return (" in code
    assert "class GraphModule(graphgrad.nn.Module):" in gm.print_readable(print_output=False)
    ops = [n.target_name for n in gm.graph.nodes if n.kind == "call"]
    assert ops == ["Matmul", "Add", "Relu", "Matmul", "Sum", "Tanh"]
    out = gm(x, w1, w2)   # called directly: the tuple of the graph's outputs, as dynamo's
    assert isinstance(out, tuple) and len(out) == 2


@pytest.mark.parametrize("backend", [returns_gm, returns_forward, returns_lambda,
                                     returns_interpreter], ids=lambda b: b.__name__)
def test_lecture_run_counts_are_unchanged(backend, capsys):
    """f(0), f(1), f(-1): 2 graphs (x < 0, then x - 1), none (cached), 1 (x + 1)."""
    f = gg.compile(branch, backend=backend)
    per_call = []
    for v in (0., 1., -1.):
        before = counters["graphs"]
        assert f(gg.tensor(v)).item() == branch(gg.tensor(v)).item()
        per_call.append(counters["graphs"] - before)
    assert per_call == [2, 0, 1]
    capsys.readouterr()


def test_a_backend_that_rewrites_the_graph_and_recompiles():
    """The tutorial's rewriting backend: every relu becomes a gelu in gm.graph, then
    gm.recompile() makes gm.code (and so gm.forward) run the edited graph."""
    edited = []

    def relu_to_gelu(gm, example_inputs):
        for node in gm.graph.nodes:   # torch.fx's interface: gm.graph is the fx view
            if node.op == "call_function" and node.target is gg.relu:
                node.target = gg.nn.functional.gelu
                edited.append(node.name)
        gm.recompile()
        assert "graphgrad.gelu(" in gm.code and "relu(" not in gm.code
        return gm.forward

    def f(x):
        return gg.relu(x) * 2 + gg.relu(-x)

    x = gg.tensor(np.linspace(-2, 2, 7).astype(np.float32))
    got = gg.compile(f, backend=relu_to_gelu)(x)
    F = gg.nn.functional
    np.testing.assert_allclose(got.numpy(), (F.gelu(x) * 2 + F.gelu(-x)).numpy(), rtol=1e-6)
    assert len(edited) == 2
    assert not np.allclose(got.numpy(), f(x).numpy())   # the edit took effect


def test_torch_runs_the_same_backends_on_the_same_program():
    """The oracle: the same backend functions, unchanged, under torch.compile give the
    values graphgrad gives."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 5), (5, 2))]

    def mlp_torch(x, w1, w2):
        h = torch.relu(x @ w1 + 1.0)
        return (h @ w2).sum(dim=-1), h.tanh()

    for backend in (returns_gm, returns_lambda, returns_interpreter):
        torch._dynamo.reset()
        want = torch.compile(mlp_torch, backend=_torch_style(backend, torch))(
            *[torch.tensor(a) for a in arrays])
        got = gg.compile(_mlp, backend=backend)(*[gg.tensor(a) for a in arrays])
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


def _torch_style(backend, torch):
    """The same backend, with torch.fx's Interpreter where it names graphgrad's."""
    if backend is returns_interpreter:
        return lambda gm, example_inputs: torch.fx.Interpreter(gm).run
    return backend


@pytest.mark.parametrize("backend", STYLES[:4] + ["eager"], ids=lambda b: getattr(b, "__name__", b))
def test_python_scalars_and_new_shapes_keep_eager_semantics(backend):
    """Python numbers read at run time keep Python-scalar type promotion (an int tensor
    times a float is float32), and new shapes (recompiled, then symbolic sizes) run the
    module the backend returned."""
    def f(x, s):
        return x * s + 1, (x.float() * s).double() / s, x.shape[0] * s

    cf = gg.compile(f, backend=backend)
    for shape, s in [((3,), 2.5), ((5, 2), 0.5), ((4,), 3), ((2, 7), 1.5)]:
        x = gg.arange(int(np.prod(shape))).reshape(*shape)
        *got, got_n = cf(x, s)
        *want, want_n = f(x, s)
        assert type(got_n) is type(want_n) and got_n == want_n
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
