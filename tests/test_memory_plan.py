"""The memory plan of compiled array programs (backends/memory_plan.py): large fused
groups and lone elementwise ops write into a buffer the program holds (in place, or a
dead value's buffer), checked when the program runs; results never change, and graph
inputs, constants, outputs and buffers seen by a live view are never written."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import nn
from graphgrad.backends import fused
from graphgrad.backends.fused import FusedKernel
from graphgrad.backends.memory_plan import REFS
from graphgrad.compiler import segments
from graphgrad.dynamo import CompiledFunction
from test_compile_memory import _peak

N = 256   # (256, 256) float32 is 256 KiB: above PLAN_MIN_BYTES


@pytest.fixture
def calls(monkeypatch):
    """Each fused kernel call: (program, out given, out is one of its inputs, result is
    out)."""
    seen = []
    orig = FusedKernel.__call__

    def record(self, *arrays, out=None):
        res = orig(self, *arrays, out=out)
        seen.append((repr(self.program), out is not None, any(out is a for a in arrays),
                     out is not None and res is out))
        return res
    monkeypatch.setattr(FusedKernel, "__call__", record)
    return seen


@pytest.fixture(params=[True, False], ids=["numba", "numpy"])
def numba(request, monkeypatch):
    monkeypatch.setattr(fused.config, "numba", request.param)
    return request.param


def _compile(f, plan: bool, monkeypatch):
    monkeypatch.setattr(fused.config, "memory_plan", plan)
    return CompiledFunction(f, backend="default", share=False)


def _run(cf, *args):
    with gg.no_grad():
        out = cf(*args)
    return out if isinstance(out, tuple) else (out,)


def _source(cf) -> str:
    return segments(cf)[0].compiled.source


def _check(f, args, monkeypatch):
    """f compiled with and without the plan: results bit for bit eager's, inputs
    unchanged; the planned program's source."""
    before = [a.numpy().copy() for a in args]
    with gg.no_grad():
        eager = f(*args)
    eager = eager if isinstance(eager, tuple) else (eager,)
    for plan in (True, False):
        cf = _compile(f, plan, monkeypatch)
        for _ in range(2):
            got = _run(cf, *args)
            for g, e in zip(got, eager, strict=True):
                np.testing.assert_array_equal(g.numpy(), e.numpy())
        for a, b in zip(args, before, strict=True):
            np.testing.assert_array_equal(a.numpy(), b)
        if plan:
            src = _source(cf)
    return src, got


def test_refcount_baseline_is_one_local_and_the_call():
    assert REFS == 2


def test_conv_relu_conv_runs_relu_in_place(monkeypatch, calls, numba):
    gg.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 8, 3), nn.ReLU())
    x = gg.randn(8, 3, 32, 32)
    src, _ = _check(lambda a: model(a), [x], monkeypatch)
    if numba and fused.fused_numba.numba_available():
        # (NumPy's relu is not a ufunc: its program would copy, so it allocates)
        assert "out=_o" in src and "_o = t" in src, src
        assert any(c[1] and c[2] and c[3] for c in calls), calls


def test_elementwise_groups_between_matmuls(monkeypatch, calls, numba):
    def f(x, w1, w2):
        h = ((x @ w1) * 0.5 + 1.0) * x   # a group on a matmul's result, which dies there
        return ((h @ w2) - 0.25) * 3.0 + x

    gg.manual_seed(0)
    args = [gg.randn(N, N), gg.randn(N, N), gg.randn(N, N)]
    src, _ = _check(f, args, monkeypatch)
    assert src.count("out=_o") == 2, src
    in_place = [c for c in calls if c[1]]
    assert in_place and all(c[2] and c[3] for c in in_place), calls


def test_inputs_and_outputs_are_never_written(monkeypatch, calls):
    def f(x, w):
        a = x @ w
        b = a * 2.0 + 1.0   # a is an output: not in place
        c = x * 3.0 - 1.0   # x is a graph input: not in place
        return a, b, c

    gg.manual_seed(0)
    src, _ = _check(f, [gg.randn(N, N), gg.randn(N, N)], monkeypatch)
    assert not any(c[2] for c in calls), calls


def test_a_dead_buffer_is_reused(monkeypatch, calls):
    def f(x, w1, w2):
        h = x @ w1
        s = h @ w2          # h dies here (a matmul: no out)
        return s * 2.0 + 1.0, s   # s is an output, so the group takes h's buffer

    gg.manual_seed(0)
    src, _ = _check(f, [gg.randn(N, N), gg.randn(N, N), gg.randn(N, N)], monkeypatch)
    assert "out=_o" in src, src
    taken = [c for c in calls if c[1]]
    assert taken and all(c[3] and not c[2] for c in taken), calls


def test_a_buffer_seen_by_a_live_view_is_not_reused(monkeypatch, calls):
    def f(x, w):
        h = x @ w
        v = h.reshape(-1)          # a view of h, kept as an output
        t = h.t()                  # a view of h, read after the group
        y = h * 2.0 + 1.0          # h's last use: planned in place, refused when run
        return y, v, t @ w

    gg.manual_seed(0)
    src, got = _check(f, [gg.randn(N, N), gg.randn(N, N)], monkeypatch)
    assert "out=_o" in src, src   # planned, refused when run: the group allocated
    assert calls and not any(c[1] for c in calls), calls


def test_row_kernels_never_run_in_place(monkeypatch, calls, numba):
    def f(x, w):
        h = x @ w
        return (h - h.mean(-1, keepdim=True)) * 2.0   # a row reduction on h, which dies

    gg.manual_seed(0)
    _check(f, [gg.randn(N, N), gg.randn(N, N)], monkeypatch)
    assert not any(c[2] for c in calls), calls
    k = next(k for k in fused.kernel_cache.values() if "Mean" in repr(k.program))
    assert not k.may_alias(0)


def test_small_graphs_are_not_planned(monkeypatch):
    def f(x):
        for _ in range(20):
            x = (x * 1.0001).tanh()
        return x

    src, _ = _check(f, [gg.randn(4, 4)], monkeypatch)
    assert "out=_o" not in src


def _mlp():
    gg.manual_seed(0)
    return nn.Sequential(nn.Linear(N, N), nn.ReLU(), nn.Linear(N, N), nn.Tanh(),
                         nn.Linear(N, 10))


def test_compiled_training_equals_eager(monkeypatch, calls):
    x, y = gg.randn(512, N), gg.randint(0, 10, (512,))
    grads = {}
    for mode in ("eager", True, False):
        model = _mlp()
        if mode != "eager":
            monkeypatch.setattr(fused.config, "memory_plan", mode)
            gg.dynamo.reset()
            run = gg.compile(model)
        else:
            run = model
        for _ in range(2):
            model.zero_grad()
            nn.CrossEntropyLoss()(run(x), y).backward()
        grads[mode] = [p.grad.numpy().copy() for p in model.parameters()]
    for a, b in zip(grads[True], grads[False], strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(grads[True], grads["eager"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert any(c[1] for c in calls), calls   # the backward program was planned


def test_plan_lowers_peak_memory(monkeypatch):
    def f(x, w1, w2, w3):
        # (without the plan the peak is a, b and the group's result at once: three
        # buffers; with it, the result is a's buffer)
        a, b = x @ w1, x @ w2
        return (a * 0.5 + b) @ w3

    gg.manual_seed(0)
    args = [gg.randn(1024, N), gg.randn(N, N), gg.randn(N, N), gg.randn(N, N)]
    peaks = {plan: _peak(lambda *a, c=_compile(f, plan, monkeypatch): _run(c, *a), *args)
             for plan in (True, False)}
    assert peaks[True] < peaks[False], peaks


def _programs(monkeypatch, shape) -> list:
    """Fused programs of several kinds (flat, a NumPy loop step, broadcast inputs, a row
    kernel) on ``shape``, from the fusion pass."""
    made: dict = {}
    monkeypatch.setattr(fused, "kernel_cache", made)
    n, d = shape
    fns = [(lambda a, b: (a * 2.0 + b).relu() - 1.0, [shape, shape]),
           (lambda a, b: (a * 0.5).tanh() * b + 0.5, [shape, shape]),
           (lambda a, c: (a * c + 1.0) * 3.0 - c, [shape, (1, d)]),
           (lambda a, b: (a - a.mean(-1, keepdim=True)) * b * 2.0, [shape, shape])]
    for f, shapes in fns:
        with gg.no_grad():
            CompiledFunction(f, backend="default", share=False)(*[gg.randn(*s) for s in shapes])
    return [k.program for k in made.values()]


@pytest.mark.parametrize("mode", ["numba", "numpy", "autotune", "failed"])
@pytest.mark.parametrize("shape", [(300, 200), (1024, 512)], ids=["whole", "blocked"])
def test_out_is_bit_identical_on_every_path(monkeypatch, mode, shape):
    programs = _programs(monkeypatch, shape)
    assert len(programs) == 4
    monkeypatch.setattr(fused.config, "numba", mode != "numpy")
    monkeypatch.setattr(fused.config, "autotune", mode == "autotune")
    monkeypatch.setattr(fused, "autotune_decisions", {})
    if mode == "failed":
        def broken(src):
            raise RuntimeError("no compiler today")
        monkeypatch.setattr(fused.fused_numba, "load", broken)
    rng = np.random.default_rng(0)
    for p in programs:
        arrays = [rng.standard_normal(tuple(s.shape)).astype(s.dtype) for s in p.input_specs]
        want = p.run(tuple(arrays))   # the reference lowering: each op's forward, as eager
        k = FusedKernel(p)
        for _ in range(2):   # (the first call compiles, autotunes or fails)
            out = np.empty(want.shape, want.dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = k(*arrays, out=out)
            assert got is out
            np.testing.assert_array_equal(out, want, err_msg=f"{p!r} {k.decision.reason}")
            if k.may_alias(0):
                first = arrays[0].copy()
                got = k(first, *arrays[1:], out=first)
                assert got is first
                np.testing.assert_array_equal(first, want)
        assert k.may_alias(0) == ("Mean" not in repr(p))
        if mode == "failed":
            assert k.lowering == "numpy"
