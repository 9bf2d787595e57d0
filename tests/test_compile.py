"""graphgrad.compile: the lecture's run (LECTURE_CASES.md) with the "print" backend, the
shape-dependent and external cases, guards, graph breaks, fullgraph errors, explain and
the counters. No torch needed (these tests also run under CPython 3.12 in .ci/run)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import compiler
from graphgrad.dynamo import Unsupported, config, counters

from lecture_cases import branch, external, shape_dependent


@pytest.fixture(autouse=True)
def _fresh():
    compiler.reset()
    old = config.suppress_errors
    config.suppress_errors = False   # an internal error must fail the test, not hide
    config.check_stack_effect = True
    yield
    config.suppress_errors = old
    config.check_stack_effect = False
    compiler.reset()


def _ops(gm) -> list[str]:
    """The op names of a captured graph (a backend is handed a GraphModule: gm.ir)."""
    graph = getattr(gm, "ir", gm)
    return [n.target_name for n in graph.nodes if n.kind not in ("placeholder", "output")]


def _recording_print_backend():
    """The "print" backend, plus a list of the graphs it was handed."""
    from graphgrad.backends import print_backend
    handed = []

    def backend(graph, example_inputs):
        handed.append(graph)
        return print_backend(graph, example_inputs)
    return backend, handed


# ---- the lecture's run ------------------------------------------------------------------------

def test_lecture_branch_run_with_print_backend(capsys):
    backend, handed = _recording_print_backend()
    f = gg.compile(branch, backend=backend)
    assert counters["frames"] == 0          # nothing happens until the first call

    out = f(gg.tensor(0.))
    assert out.item() == -1.0
    assert [_ops(g) for g in handed] == [["Lt"], ["Sub"]]   # x < 0, then x - 1
    assert counters["graphs"] == 2 and counters["graph_breaks"] == 1
    printed = capsys.readouterr().out
    assert "graphgrad.lt(x, 0)" in printed and "graphgrad.sub(x, 1)" in printed   # torch-style
    assert "def forward(self, x):" in printed

    out = f(gg.tensor(1.))
    assert out.item() == 0.0
    assert len(handed) == 2                 # the cached graphs are reused
    assert counters["cache_hits"] == 1 and counters["frames"] == 2
    assert capsys.readouterr().out == ""

    out = f(gg.tensor(-1.))
    assert out.item() == 0.0
    assert [_ops(g) for g in handed[2:]] == [["Add"]]        # only the other branch: x + 1
    assert counters["graphs"] == 3 and counters["recompiles"] == 0
    assert "graphgrad.add(x, 1)" in capsys.readouterr().out

    for v in (5., -5., 0.5, -0.5):          # both sides now cached
        assert f(gg.tensor(v)).item() == branch(gg.tensor(v)).item()
    assert counters["graphs"] == 3


def test_shape_dependent_guards_recompile_then_dynamic():
    f = gg.compile(shape_dependent, backend="eager")
    rng = np.random.default_rng(0)
    for shape in [(2, 3), (2, 3), (4, 5), (3, 7), (6, 2), (5, 5)]:
        x = gg.tensor(rng.standard_normal(shape))
        np.testing.assert_array_equal(f(x).numpy(), shape_dependent(x).numpy())
    assert counters["recompiles"] == 1      # (4, 5) fails the shape guard ...
    assert counters["frames"] == 2          # ... and the second graph has symbolic dims
    assert "shape=(2, 3)" in f.recompile_reasons[0]
    dyn = f.roots[0].graph
    assert any(n.kind == "shape" for n in dyn.nodes)


def test_dynamic_true_serves_every_size_with_one_graph():
    f = gg.compile(shape_dependent, dynamic=True)
    for shape in [(2, 3), (4, 5), (7, 2)]:
        x = gg.randn(*shape)
        np.testing.assert_array_equal(f(x).numpy(), shape_dependent(x).numpy())
    assert counters["frames"] == 1 and counters["recompiles"] == 0


def test_external_fresh_random_number_every_call():
    f = gg.compile(external, backend="eager")
    x = gg.zeros(3)
    a, b, c = f(x), f(x), f(x)
    assert len({float(a[0]), float(b[0]), float(c[0])}) == 3   # never frozen
    assert counters["graph_breaks"] == 1 and counters["recompiles"] == 0
    assert counters["graphs"] == 1          # the empty graph before the call is skipped
    (brk,) = f.breaks
    assert brk.kind == "unsupported-call" and "rand" in brk.reason
    assert "np.random.rand()" in brk.line and "lecture_cases.py" in brk.where
    np.random.seed(3)
    want = external(x)
    np.random.seed(3)
    np.testing.assert_array_equal(f(x).numpy(), want.numpy())


# ---- fullgraph, explain, counters --------------------------------------------------------------

def test_fullgraph_names_reason_and_source_line():
    f = gg.compile(branch, fullgraph=True)
    with pytest.raises(Unsupported, match=r"(?s)condition is a tensor.*lecture_cases.py.*"
                                          r"if x < 0:"):
        f(gg.tensor(1.))
    g = gg.compile(external, fullgraph=True)
    with pytest.raises(Unsupported, match=r"(?s)rand.*np.random.rand\(\)"):
        g(gg.zeros(2))
    ok = gg.compile(lambda x: (x * 2).sum(), fullgraph=True)
    assert ok(gg.ones(3)).item() == 6.0


def test_explain_branch_and_external():
    e = compiler.explain(branch)(gg.tensor(2.))
    assert e.graph_count == 2 and e.graph_break_count == 1
    assert e.ops_per_graph == [["Lt"], ["Sub"]]
    assert e.break_reasons[0].kind == "data-dependent-branch"
    assert "if x < 0:" in e.break_reasons[0].line
    assert any("x: Tensor shape=() dtype=float32" in g for g in e.out_guards)
    text = str(e)
    assert "Graph Count: 2" in text and "Graph Break Count: 1" in text
    e2 = compiler.explain(external)(gg.ones(2))
    assert e2.graph_count == 1 and e2.graph_break_count == 1
    assert "numpy" in e2.break_reasons[0].reason


def test_recompile_limit_falls_back_to_eager_and_names_the_guard():
    def scale(x, n):
        return x * n

    old = config.recompile_limit
    config.recompile_limit = 3
    try:
        f = gg.compile(scale)
        x = gg.ones(2)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for n in range(6):
                assert f(x, n)[0].item() == n
        assert counters["recompiles"] == 2 and counters["eager_fallbacks"] == 3
        msg = [str(m.message) for m in w if "recompile_limit" in str(m.message)]
        assert len(msg) == 1 and "n == 2" in msg[0]
    finally:
        config.recompile_limit = old


def test_decorator_forms_and_backend_callable():
    seen = []

    def my_backend(gm, example_inputs):
        seen.append((gm, [tuple(e.shape) for e in example_inputs]))
        return gm_forward(gm)

    def gm_forward(gm):
        from graphgrad.graph import Interpreter
        return Interpreter(gm.ir).run   # the IR under the GraphModule

    @gg.compile(backend=my_backend)
    def f(x, y):
        return gg.relu(x @ y) + 1

    x, y = gg.randn(2, 3), gg.randn(3, 4)
    np.testing.assert_allclose(f(x, y).numpy(), (gg.relu(x @ y) + 1).numpy())
    assert len(seen) == 1 and seen[0][1] == [(2, 3), (3, 4)]

    @gg.compile
    def g(x):
        return x.exp()
    np.testing.assert_allclose(g(x).numpy(), x.exp().numpy())
    with pytest.raises(ValueError, match="Invalid backend"):
        gg.compile(g, backend="nope")


def test_backends_are_one_registry_wherever_they_are_reached():
    """The backends are the ``graphgrad.backends`` layer; ``graphgrad.dynamo`` and
    ``graphgrad.compiler`` hand out the same registry, and a registered backend is one
    ``graphgrad.compile`` finds by name."""
    import graphgrad.backends as backends
    from graphgrad import dynamo

    assert gg.backends is backends and dynamo.BACKENDS is backends.BACKENDS
    assert dynamo.lookup_backend("eager") is backends.eager
    assert {"eager", "print", "default"} <= set(gg.compiler.list_backends())
    ran = []

    def mine(graph, example_inputs):
        ran.append(graph)
        return backends.eager(graph, example_inputs)

    dynamo.register_backend("_test_mine", mine)
    try:
        f = gg.compile(lambda x: x.sin() * 2, backend="_test_mine")
        x = gg.randn(3)
        np.testing.assert_allclose(f(x).numpy(), (x.sin() * 2).numpy())
        assert len(ran) == 1
    finally:
        del backends.BACKENDS["_test_mine"]


def test_unsupported_python_version_runs_eagerly(monkeypatch):
    from graphgrad.dynamo import eval_frame
    monkeypatch.setattr(eval_frame, "VERSION_OK", False)
    monkeypatch.setattr(eval_frame, "_WARNED_VERSION", False)
    f = gg.compile(branch)
    with pytest.warns(RuntimeWarning, match="does not support Python"):
        assert f(gg.tensor(-2.)).item() == -1.0
    assert f(gg.tensor(2.)).item() == 1.0
    assert counters["frames"] == 0 and counters["eager_fallbacks"] == 2


def test_unsupported_bytecode_runs_eagerly():
    def uses_try(x):
        try:
            return x + 1
        except ValueError:
            return x

    f = gg.compile(uses_try)
    assert f(gg.ones(2))[0].item() == 2.0
    assert "PUSH_EXC_INFO" in f.eager_reason
    e = compiler.explain(uses_try)(gg.ones(2))
    assert e.graph_count == 0 and "PUSH_EXC_INFO" in e.eager_reason


# ---- graph breaks: what runs for real, and where -----------------------------------------------

def _helper_with_break(v):
    if v.mean() > 0:            # a break inside an inlined callee
        return v * 2
    return v - 3


def test_break_inside_inlined_callee_resumes_there(capsys):
    def f(x):
        y = x + 1
        z = _helper_with_break(y)
        print("between", z.shape)   # runs for real, every call
        return z.sum()

    cf = gg.compile(f)
    for v in (1.0, -5.0, 2.0, -6.0):
        x = gg.full((3,), v)
        assert cf(x).item() == f(x).item()
    out = capsys.readouterr().out
    assert out.count("between") == 8
    kinds = [b.kind for b in cf.breaks]
    assert kinds.count("data-dependent-branch") == 1
    assert any("_helper_with_break" in b.where and "v.mean() > 0" in b.line
               for b in cf.breaks)
    # root (y + 1, the condition), each side of the branch up to print, and one segment
    # after print that both sides share (their continuations are the same template)
    assert counters["recompiles"] == 0 and counters["frames"] == 4


def test_external_state_and_side_effects_run_each_call():
    import random

    def f(x, log):
        r = random.random()
        noise = np.random.default_rng(int(r * 1000)).standard_normal(x.shape[0])
        log.append(r)
        x.add_(1)                    # the caller's tensor changes, as in eager
        return x * float(noise.sum()) + r

    cf = gg.compile(f)
    for seed in range(3):
        x1, x2 = gg.ones(2), gg.ones(2)
        l1, l2 = [], []
        random.seed(seed)
        want = f(x1, l1)
        random.seed(seed)
        got = cf(x2, l2)
        np.testing.assert_allclose(got.numpy(), want.numpy())
        assert l1 == l2 and x2.tolist() == [2.0, 2.0]


def test_corpus_style_functions_with_dynamic_true_serve_all_batch_sizes():
    def mlp(x, w1, w2):
        h = gg.tanh(x @ w1)
        return gg.softmax(h @ w2, dim=-1).sum(-1), x.shape[0] * 2

    cf = gg.compile(mlp, dynamic=True)
    w1, w2 = gg.randn(4, 6), gg.randn(6, 3)
    for b in (2, 5, 9):
        x = gg.randn(b, 4)
        want, got = mlp(x, w1, w2), cf(x, w1, w2)
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-6)
        assert got[1] == want[1] and type(got[1]) is int
    assert counters["frames"] == 1


def test_methods_keyword_only_defaults_star_args_and_kwargs():
    class M(gg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = gg.nn.Linear(3, 3)

        @gg.compile
        def forward(self, x, *, scale=2.0, extra=None):
            y = self.lin(x) * scale
            if extra is not None:
                y = y + extra
            return y

    m = M()
    x = gg.randn(2, 3)
    plain = M.__dict__["forward"].fn
    for kw in ({}, {"scale": 3.0}, {"extra": gg.ones(3)}, {}):
        np.testing.assert_allclose(m(x, **kw).detach().numpy(),
                                   plain(m, x, **kw).detach().numpy())
    bound = gg.compile(m.forward)
    np.testing.assert_allclose(bound(x).detach().numpy(), plain(m, x).detach().numpy())

    def g(x, *rest, k=1, **kw):
        return x * k + sum(rest) + kw.get("z", 0)

    cg = gg.compile(g)
    for args, kw in [((1, 2), {"k": 3, "z": 4}), ((), {"k": 3}), ((5,), {}),
                     ((1, 2), {"k": 3, "z": 4})]:
        np.testing.assert_array_equal(cg(gg.ones(2), *args, **kw).numpy(),
                                      g(gg.ones(2), *args, **kw).numpy())


def test_loop_with_a_graph_break_per_iteration_is_a_cycle_of_cached_segments():
    def countdown(x):
        while x.sum() > 0:       # a tensor condition: a graph break per iteration
            x = x - 1
        return x

    cf = gg.compile(countdown)
    for v in (5.0, 200.0, 3.0, 0.5, -1.0):
        x = gg.full((2,), v)
        assert cf(x).tolist() == countdown(x).tolist()
    # the first test and the loop's test are two places; their segments are reused on
    # every iteration of every call
    assert counters["frames"] <= 5 and counters["concrete_runs"] == 0
    assert "(again:" in compiler.describe(cf)


def test_one_tensor_passed_twice_is_one_graph_value_and_guarded():
    def f(a, b):
        if a is b:
            return a * 3
        return a + b

    cf = gg.compile(f)
    t, u = gg.ones(2), gg.ones(2)
    for a, b in [(t, t), (t, u), (u, u), (u, t)]:
        assert cf(a, b).tolist() == f(a, b).tolist()
    assert counters["recompiles"] == 1


def test_cache_lives_with_the_code_object():
    def f(x):
        return x * 2

    gg.compile(f)(gg.ones(2))
    gg.compile(f)(gg.ones(2))           # a second wrapper: the cached entry serves it
    assert counters["frames"] == 1 and counters["cache_hits"] == 1

    def make(c):
        def g(x):
            return x * c
        return g

    g2, g3 = gg.compile(make(2.0)), gg.compile(make(3.0))   # closures: their own caches
    assert g2(gg.ones(1)).item() == 2.0 and g3(gg.ones(1)).item() == 3.0


def test_default_backend_runs_the_graph_optimized_by_the_passes():
    """The default backend hands its graph to graphgrad.passes.optimize first: a repeated
    expression is computed once (capture itself leaves out what the result does not
    need); values and gradients are eager's."""
    from graphgrad.backends import default

    ran = []

    def capture(gm, example_inputs):
        fn = default(gm, example_inputs)
        ran.append((gm.ir, fn.graph))
        return fn

    def f(x):
        return x.sin() * 2 + x.sin() * 2

    x_eager = gg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    x_comp = gg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    want, got = f(x_eager), gg.compile(f, backend=capture)(x_comp)
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    want.sum().backward()
    got.sum().backward()
    np.testing.assert_array_equal(x_comp.grad.numpy(), x_eager.grad.numpy())
    (before, after), = ran

    def ops(g):
        return sorted(n.op.__name__ for n in g if n.op is not None)
    assert ops(before) == ["Add", "Mul", "Mul", "Sin", "Sin"]
    assert ops(after) == ["Add", "Mul", "Sin"]


def test_named_pair_results_compile():
    """max(dim), sort and topk return (values, indices) named pairs; compiled code gives
    the same named pair of values, not graph placeholders."""
    x = gg.tensor([[3.0, 1.0, 2.0], [0.5, 4.0, -1.0]])
    for fn in (lambda t: gg.max(t, 1), lambda t: t.sort(), lambda t: t.topk(2)):
        want, got = fn(x), gg.compile(fn)(x)
        assert type(got) is type(want)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
