"""graphgrad.compile on state and real workloads: mutable inputs read with guards (a
list/dict argument, a global, a module attribute changed between calls), nn.Modules,
gradients through compiled functions, the capture corpus, and a compiled MLP training
step whose losses equal eager's for 50 steps."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
import graphgrad.nn.functional as F
from graphgrad import compiler, nn, optim
from graphgrad.dynamo import config, counters

from capture_corpus import CORPUS


@pytest.fixture(autouse=True)
def _fresh():
    compiler.reset()
    old = config.suppress_errors
    config.suppress_errors = False
    config.check_stack_effect = True
    yield
    config.suppress_errors = old
    config.check_stack_effect = False


def _close(a, b) -> None:
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(y.detach().numpy(), x.detach().numpy(), rtol=1e-10,
                                   atol=1e-12)


# ---- mutable state seen by the next call ------------------------------------------------------

def test_list_argument_changed_between_calls():
    def f(x, cfg):
        return x * cfg[-1] + len(cfg)

    cf = gg.compile(f)
    x, cfg = gg.ones(2), [1.0, 2.0]
    for change in (lambda: cfg.append(3.0), lambda: cfg.__setitem__(-1, 7.0),
                   lambda: cfg.pop(), lambda: None):
        _close(f(x, cfg), cf(x, cfg))
        change()
        _close(f(x, cfg), cf(x, cfg))


def test_list_mutated_inside_then_read_again():
    def f(x, log):
        log.append(x.shape[0])      # a side effect on the caller's list: runs for real
        return x * log[-1] * len(log)

    cf = gg.compile(f)
    mine, theirs = [], []
    for shape in [(2,), (2,), (3,)]:
        x = gg.ones(*shape)
        _close(f(x, theirs), cf(x, mine))
        assert mine == theirs


def test_dict_argument_and_global_changed_between_calls():
    ns = {"gg": gg, "K": 2.0}
    exec("def f(x, opts):\n"
         "    y = x * K\n"
         "    if opts['relu']:\n"
         "        y = gg.relu(y - opts['shift'])\n"
         "    return y\n", ns)
    f = ns["f"]
    cf = gg.compile(f)
    x = gg.tensor([-1.0, 0.5, 2.0])
    opts = {"relu": True, "shift": 0.5}
    _close(f(x, opts), cf(x, opts))
    opts["shift"] = 1.5
    _close(f(x, opts), cf(x, opts))
    opts["relu"] = False
    _close(f(x, opts), cf(x, opts))
    ns["K"] = -3.0
    _close(f(x, opts), cf(x, opts))
    opts["extra"] = 1
    _close(f(x, opts), cf(x, opts))


def test_module_attribute_and_training_flag_changed_between_calls():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.scale = 2.0

        def forward(self, x):
            y = self.lin(x)
            if self.training:
                y = y * self.scale
            return y.tanh()

    m = Scaled()
    cm = gg.compile(m)
    assert list(dict(cm.named_parameters())) == ["_orig_mod.lin.weight", "_orig_mod.lin.bias"]
    x = gg.randn(4, 3)
    _close(m(x), cm(x))
    m.scale = 5.0
    _close(m(x), cm(x))
    m.eval()
    _close(m(x), cm(x))
    with gg.no_grad():
        m.lin.weight.mul_(2.0)      # in-place update of a parameter: read live, not baked
    _close(m(x), cm(x))
    m.lin = nn.Linear(3, 2)         # a new submodule: the identity guard fails
    _close(m(x), cm(x))


# ---- gradients, the corpus, training -------------------------------------------------------------

def test_backward_through_graph_break_gives_eager_gradients():
    def f(x, w):
        h = gg.tanh(x @ w)
        if h.sum() > 0:              # a graph break in the middle
            h = h * 2
        print_free = h.exp()
        return (print_free * h).sum()

    cf = gg.compile(f)
    rng = np.random.default_rng(1)
    for _ in range(4):
        x = gg.tensor(rng.standard_normal((3, 4)))
        w1 = gg.tensor(rng.standard_normal((4, 2)), requires_grad=True)
        w2 = gg.tensor(w1.detach().numpy(), requires_grad=True)
        f(x, w1).backward()
        cf(x, w2).backward()
        _close(w1.grad, w2.grad)


@pytest.mark.parametrize("case", CORPUS, ids=repr)
def test_corpus_outputs_and_gradients_equal_eager(case):
    rng = np.random.default_rng(0)
    cf = gg.compile(case.fn)
    cf(*case.make_inputs(rng))                # the example call captures
    ins = case.make_inputs(rng)               # fresh inputs: the cached graph runs
    frames = counters["frames"]
    _close(case.fn(*ins), cf(*ins))
    assert counters["frames"] == frames       # no new capture for same-shaped inputs
    a = [t.detach().requires_grad_() for t in ins]
    b = [t.detach().requires_grad_() for t in ins]
    out_a, out_b = case.fn(*a), cf(*b)
    out_a = out_a if isinstance(out_a, (tuple, list)) else (out_a,)
    out_b = out_b if isinstance(out_b, (tuple, list)) else (out_b,)
    sum(o.sum() for o in out_a).backward()
    sum(o.sum() for o in out_b).backward()
    for ta, tb in zip(a, b, strict=True):
        assert (ta.grad is None) == (tb.grad is None)
        if ta.grad is not None:
            _close(ta.grad, tb.grad)
    e = compiler.explain(case.fn)(*case.make_inputs(rng))
    assert e.graph_count == 1 and e.graph_break_count == 0, str(e)


def _mlp(seed: int):
    """A float64 MLP: the tests feed float64 examples, and PyTorch's linear refuses
    float64 examples for float32 weights (mixed dtypes)."""
    gg.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 3)).double()


def test_compiled_mlp_training_step_losses_equal_eager_for_50_steps():
    rng = np.random.default_rng(0)
    x = gg.tensor(rng.standard_normal((32, 8)))
    y = gg.tensor(rng.integers(0, 3, 32))

    def run(compiled: bool) -> list[float]:
        model = _mlp(0)
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(xb, yb):
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()          # graph break: autograd runs for real
            opt.step()               # graph break: the update runs for real
            return loss

        step = gg.compile(step) if compiled else step
        return [step(x, y).item() for _ in range(50)]

    eager, compiled = run(False), run(True)
    assert eager[-1] < eager[0] * 0.5
    np.testing.assert_allclose(compiled, eager, rtol=1e-12, atol=1e-14)
    assert counters["recompiles"] == 0
    # a compiled model inside an eager training loop, the common form
    model_a, model_b = _mlp(1), _mlp(1)
    fast = gg.compile(model_b)
    opt_a = optim.Adam(model_a.parameters(), lr=1e-2)
    opt_b = optim.Adam(fast.parameters(), lr=1e-2)
    for _ in range(50):
        for model, opt in ((model_a, opt_a), (fast, opt_b)):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        _close(model_a(x), fast(x))


def test_global_assignment_runs_for_real_and_is_read_back():
    ns = {"gg": gg, "COUNT": 0, "LAST": None}
    exec("def f(x):\n"
         "    global COUNT, LAST\n"
         "    COUNT = COUNT + 1\n"
         "    LAST = x * 2\n"
         "    return LAST + COUNT\n", ns)
    cf = gg.compile(ns["f"])
    for i in range(1, 4):
        out = cf(gg.ones(2))
        assert out.tolist() == [2.0 + i] * 2 and ns["COUNT"] == i
        assert ns["LAST"].tolist() == [2.0, 2.0]


def test_no_grad_block_is_captured_and_left_on_errors():
    def f(x, w):
        h = x @ w
        with gg.no_grad():           # entering and leaving run for real (graph breaks)
            s = h.sum() * 2
        return h * s, s.requires_grad

    cf = gg.compile(f)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = gg.tensor(rng.standard_normal((2, 3)))
        w1 = gg.tensor(rng.standard_normal((3, 2)), requires_grad=True)
        w2 = gg.tensor(w1.detach().numpy(), requires_grad=True)
        (a, rg_a), (b, rg_b) = f(x, w1), cf(x, w2)
        assert rg_a is rg_b is False and gg.is_grad_enabled()
        a.sum().backward()
        b.sum().backward()
        _close(w1.grad, w2.grad)
    assert counters["graphs"] >= 2 and counters["eager_fallbacks"] == 0

    def g(x):
        with gg.no_grad():
            if x.sum() > 0:
                raise ValueError("positive")
            return x * 2

    cg = gg.compile(g)
    assert cg(-gg.ones(2)).tolist() == [-2.0, -2.0]
    with pytest.raises(ValueError, match="positive"):
        cg(gg.ones(2))
    assert gg.is_grad_enabled()      # the with block was left on the way out

    def h(x):
        try:                          # try/except is not a with block: runs eagerly
            return x + 1
        finally:
            pass

    ch = gg.compile(h)
    assert ch(gg.ones(1)).item() == 2.0 and ch.eager_reason is not None


def test_compiled_step_with_manual_sgd_update_under_no_grad():
    rng = np.random.default_rng(0)
    x = gg.tensor(rng.standard_normal((32, 8)))
    y = gg.tensor(rng.integers(0, 3, 32))

    def run(compiled: bool) -> list[float]:
        model = _mlp(2)
        params = list(model.parameters())

        def step(xb, yb, lr=0.1):
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            with gg.no_grad():
                for p in params:
                    p -= lr * p.grad      # in-place on a parameter: runs for real
                    p.grad = None
            return loss

        step = gg.compile(step) if compiled else step
        return [step(x, y).item() for _ in range(50)]

    eager, compiled = run(False), run(True)
    np.testing.assert_allclose(compiled, eager, rtol=1e-12, atol=1e-14)
    assert counters["cache_hits"] == 49 and counters["recompiles"] == 0
