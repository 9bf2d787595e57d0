"""The fusion pass (``graphgrad.passes.fuse_elementwise``) and the fused lowerings
(``graphgrad.backends.fused``): which groups form on known graphs, what never fuses,
that fused graphs still print, run and draw, and the lowering each group gets with and
without Numba."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import graphgrad as gg
import graphgrad.nn.functional as F
from graphgrad.backends import fused as fused_mod
from graphgrad.backends.fused import lower
from graphgrad.compiler import explain, segments
from graphgrad.dynamo import CompiledFunction
from graphgrad.graph import Interpreter
from graphgrad.passes import Fused, fuse_elementwise, fusion_report, optimize

HAS_NUMBA = fused_mod.fused_numba.numba_available()


def _graph(fn, *args):
    cf = CompiledFunction(fn, backend="eager", share=False)
    cf(*args)
    return optimize(cf.graphs[0])[0]


def _groups(fn, *args) -> list[list[str]]:
    return [ops for _, ops in fusion_report(_graph(fn, *args)).groups]


def layer_norm(x, w, b):
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / (v + 1e-5).sqrt() * w + b


def softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def gelu_mlp(x, w1, w2):
    h = x @ w1
    h = 0.5 * h * (1 + (0.7978845608 * (h + 0.044715 * h ** 3)).tanh())
    return h @ w2


def lecture(x1, x2):
    """The lecture's running example: f(x1, x2) = ln(x1) + x1 * x2 - sin(x2)."""
    return x1.log() + x1 * x2 - x2.sin()


def test_expected_groups_on_known_graphs():
    x, w, b = gg.randn(8, 16), gg.randn(16), gg.randn(16)
    # row-local reductions (keepdim, over the last dim) sit inside one group
    assert _groups(layer_norm, x, w, b) == [["Mean", "Sub", "Pow", "Mean", "Add", "Sqrt",
                                             "Div", "Mul", "Add"]]
    assert _groups(softmax, x) == [["Amax", "Sub", "Exp", "Sum", "Div"]]
    assert _groups(gelu_mlp, x, gg.randn(16, 32), gg.randn(32, 4)) == [
        ["Mul", "Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul"]]
    assert _groups(lecture, gg.rand(4) + 1, gg.randn(4)) == [["Log", "Mul", "Add", "Sin",
                                                              "Sub"]]


def test_what_never_fuses_and_why():
    rep = fusion_report(_graph(gelu_mlp, gg.randn(8, 16), gg.randn(16, 32), gg.randn(32, 4)))
    assert {op: why for _, op, why in rep.not_fused} == {
        "Matmul": "a library call (BLAS/convolution): never fused"}
    # a max over the rows (dim 0) needs every row before x - max can start
    rep = fusion_report(_graph(lambda x: (x - x.amax(0, keepdim=True)).exp()
                               * x.sum(-1, keepdim=True), gg.randn(8, 16)))
    reasons = {op: why for _, op, why in rep.not_fused}
    assert reasons["Amax"] == ("a reduction over the first dim or dropping dims: it may "
                               "only end a group")
    assert "group 0: Sub -> Exp -> Sum -> Mul" in str(rep)


def test_mixed_promotion_and_dependency_edges_stay_out():
    # int64 tensor * 2.5: PyTorch gives float32, NumPy float64: dispatch decides
    rep = fusion_report(_graph(lambda i, x: (i * 2.5) + x + 1, gg.arange(4), gg.randn(4)))
    assert ("Mul", "NumPy's dtype differs from PyTorch's promotion (dispatch decides)") in \
        [(op, why) for _, op, why in rep.not_fused]
    g = _graph(lambda x: (x * 2).exp(), gg.randn(4))
    exp = [n for n in g.nodes if n.kind == "call" and n.op.__name__ == "Exp"][0]
    mul = [n for n in g.nodes if n.kind == "call" and n.op.__name__ == "Mul"][0]
    exp.deps = (mul,)   # a control edge: neither may join a group
    assert fusion_report(g).groups == []


def test_fused_graph_prints_runs_and_draws():
    x, w, b = gg.randn(8, 16), gg.randn(16), gg.randn(16)
    g = fuse_elementwise(_graph(layer_norm, x, w, b))
    assert sum(n.kind == "call" and n.op is Fused for n in g.nodes) == 1
    assert not any(n.kind == "call" and n.op.__name__ in ("Sub", "Mean") for n in g.nodes)
    assert "fuse_elementwise" in g.code and "FusedFunction(" in g.code
    assert "Fused" in g.to_dot()
    want = layer_norm(x, w, b).numpy()
    got = Interpreter(g).run(x, w, b)[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    printed = g.code
    from graphgrad.graph import python_code
    np.testing.assert_allclose(python_code(g).fn(x, w, b)[0].numpy(), want, rtol=1e-6,
                               atol=1e-6)
    assert printed.count("FusedFunction(") == 1


def _kernels(cf) -> list:
    run = segments(cf)[0].compiled
    return [lower(n.params["kernel"]) for n in run.fused_graph.nodes
            if n.kind == "call" and n.op is Fused]


def chain(x):
    for _ in range(100):
        x = (x * 1.0001).tanh()
    return x


def arith(x, y):
    for _ in range(2):
        x = (x * 1.5 + y).relu() - 0.25 * y
        x = x / (y * y + 1)
    return x


def test_lowering_choice(lowering):
    # tanh: by NumPy's own loop inside the kernel (fused_loops.py) where its loop is found
    tanh_loop = fused_mod.fused_loops.loop(np.tanh, np.float32) is not None
    cases = [(chain, (gg.randn(4, 4),), "numba" if tanh_loop else "numpy"),
             (lambda x: (x * 2 + 1).relu() * 3 - x, (gg.randn(4, 4),), "numba"),  # one call
             (arith, (gg.randn(256, 512), gg.randn(512)), "numba"),  # arithmetic only
             (lambda x: (x * 2).tanh().exp() + 1, (gg.randn(512, 512),), "numpy")]
    for fn, args, expect in cases:
        cf = CompiledFunction(fn, backend="default", share=False)
        with gg.no_grad():
            got, want = cf(*args), fn(*args)
        np.testing.assert_array_equal(got.numpy(), want.numpy())   # bit for bit
        (k,) = _kernels(cf)
        if lowering == "numpy":
            assert k.lowering == "numpy" and "Numba disabled" in k.decision.reason
        else:
            assert k.lowering == expect, k.decision.reason
            if expect == "numpy" and not tanh_loop:
                assert "Tanh has no Numba kernel form" in k.decision.reason
    out = explain(arith)(gg.randn(256, 512), gg.randn(512))
    assert "Fused groups:" in str(out) and out.fused_groups


def test_numpy_lowering_is_bit_exact_and_reuses_buffers(monkeypatch):
    monkeypatch.setattr(fused_mod.config, "numba", False)
    x, y = gg.randn(1024, 256), gg.randn(256)
    for fn in (arith, lambda a, b: F.softmax((a * b + 1) * 0.5, -1)):
        cf = CompiledFunction(fn, backend="default", share=False)
        with gg.no_grad():
            np.testing.assert_array_equal(cf(x, y).numpy(), fn(x, y).numpy())
        (k,) = _kernels(cf)
        assert "out=" in k.numpy_source and "for r, e in _bounds" in k.numpy_source  # blocked


def test_numpy_lowering_types_number_literals_bit_exactly(monkeypatch):
    """Python numbers beside an array operand become 0-d arrays of its dtype (half the
    call cost on small arrays), as NumPy's promotion casts them anyway: same bits."""
    monkeypatch.setattr(fused_mod.config, "numba", False)

    def floats(x):
        return ((x * 1.0001 + 3) > 0.5) * x - 2

    def ints(x):
        return ((x * 3 + 2) > 1) * x - 7
    cases = [(floats, gg.randn(4, 4)), (floats, gg.randn(4, 4, dtype=gg.float64)),
             (ints, gg.randint(-9, 9, (4, 4), dtype=gg.int32)),
             (ints, gg.randint(0, 200, (4, 4), dtype=gg.uint8))]
    for f, x in cases:
        cf = CompiledFunction(f, backend="default", share=False)
        with gg.no_grad():
            got, want = cf(x), f(x)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        (k,) = _kernels(cf)
        assert k.numpy_source.count("_k") == 4, k.numpy_source   # every literal typed


def test_a_kernel_that_fails_to_compile_falls_back_once(monkeypatch, tmp_path):
    if not HAS_NUMBA:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(fused_mod.config, "numba", True)
    monkeypatch.setenv("GRAPHGRAD_KERNEL_CACHE", str(tmp_path))
    real = fused_mod.fused_numba.source

    def broken(program, layout, libm=False):
        src, why = real(program, layout, libm)
        return (src.replace("out[", "out[undefined_name + ") if src else src), why
    monkeypatch.setattr(fused_mod.fused_numba, "source", broken)
    fused_mod.kernel_cache.clear()
    x = gg.randn(4, 4)
    cf = CompiledFunction(arith, backend="default", share=False)
    with gg.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = cf(x, x), cf(x, x)
    assert sum("failed to compile" in str(w.message) for w in caught) == 1
    np.testing.assert_array_equal(first.numpy(), arith(x, x).numpy())
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    (k,) = _kernels(cf)
    assert k.lowering == "numpy" and "Numba failed" in k.decision.reason
    fused_mod.kernel_cache.clear()


_SCRIPT = """
import graphgrad as gg
from graphgrad.backends import fused
x = gg.randn(4, 4)
f = gg.compile(lambda x: ((x * 1.5 + 2) * x - 1).relu() * 3)
with gg.no_grad():
    f(x)
print(sorted(k.lowering for k in fused.kernel_cache.values()))
"""


def test_generated_kernels_are_cached_on_disk_across_processes(tmp_path):
    if not HAS_NUMBA:
        pytest.skip("numba is not installed")
    env = dict(os.environ, GRAPHGRAD_KERNEL_CACHE=str(tmp_path),
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                             text=True, check=True, timeout=300)
        assert out.stdout.strip() == "['numba']"
    modules = list(tmp_path.glob("ggk_*.py"))
    assert len(modules) == 1   # the same source, one file: the second process imported it
    index = list(tmp_path.glob("__pycache__/ggk_*.nbi"))
    assert index, "Numba wrote no on-disk cache index"


def test_libm_opt_in_puts_transcendentals_in_numba_kernels(monkeypatch, tmp_path):
    if not HAS_NUMBA:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(fused_mod.config, "numba", True)
    monkeypatch.setattr(fused_mod.config, "libm", True)
    monkeypatch.setenv("GRAPHGRAD_KERNEL_CACHE", str(tmp_path))
    for fn, x, expect in ((chain, gg.randn(4, 4), "numba"),   # overhead-bound: one call
                          (lambda x: (x * 2).tanh() + 1, gg.randn(512, 512), "numpy")):
        cf = CompiledFunction(fn, backend="default", share=False)
        with gg.no_grad():
            # scalar libm: equal to NumPy's SIMD loops up to the last bits
            np.testing.assert_allclose(cf(x).numpy(), fn(x).numpy(), rtol=1e-6, atol=1e-6)
        (k,) = _kernels(cf)
        assert k.lowering == expect, k.decision.reason


class _FakeClock:
    """Readings from a list (autotuning reads it before and after each timed run)."""

    def __init__(self, readings):
        self.readings = list(readings)
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return self.readings.pop(0)


def _interleaved(numba_s: float, numpy_s: float) -> list:
    out, t = [], 0.0
    for _ in range(fused_mod.AUTOTUNE_REPEATS):
        for d in (numba_s, numpy_s):
            out += [t, t + d]
            t += d
    return out


@pytest.mark.parametrize("numba_s, numpy_s, expect", [(5e-6, 1e-6, "numpy"),
                                                     (1e-6, 5e-6, "numba")])
def test_autotune_follows_the_measurements_and_caches_them(monkeypatch, tmp_path, numba_s,
                                                           numpy_s, expect):
    if not HAS_NUMBA:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(fused_mod.config, "numba", True)
    monkeypatch.setattr(fused_mod.config, "autotune", True)
    monkeypatch.setenv("GRAPHGRAD_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(fused_mod, "kernel_cache", {})
    monkeypatch.setattr(fused_mod, "autotune_decisions", {})
    clock = _FakeClock(_interleaved(numba_s, numpy_s))
    monkeypatch.setattr(fused_mod.config, "clock", clock)
    x, y = gg.randn(64, 32), gg.randn(32)
    cf = CompiledFunction(arith, backend="default", share=False)
    with gg.no_grad():
        first, second = cf(x, y), cf(x, y)
    np.testing.assert_array_equal(first.numpy(), arith(x, y).numpy())
    np.testing.assert_array_equal(second.numpy(), first.numpy())
    (k,) = _kernels(cf)
    assert k.lowering == expect and "autotuned" in k.decision.reason
    assert clock.reads == 4 * fused_mod.AUTOTUNE_REPEATS   # the second call timed nothing
    # an equal group lowered again takes the cached decision without timing
    fused_mod.kernel_cache.clear()
    cf = CompiledFunction(arith, backend="default", share=False)
    with gg.no_grad():
        cf(x, y)
    (k,) = _kernels(cf)
    assert k.lowering == expect and clock.reads == 4 * fused_mod.AUTOTUNE_REPEATS


def test_autotune_times_nothing_without_a_choice(monkeypatch, tmp_path):
    monkeypatch.setattr(fused_mod.config, "autotune", True)
    monkeypatch.setattr(fused_mod, "kernel_cache", {})
    clock = _FakeClock([])
    monkeypatch.setattr(fused_mod.config, "clock", clock)
    for numba, fn in ((False, arith), (True, lambda x, y: (x * y).sigmoid() + 1)):  # no kernel
        monkeypatch.setattr(fused_mod.config, "numba", numba and HAS_NUMBA)
        cf = CompiledFunction(fn, backend="default", share=False)
        with gg.no_grad():
            cf(gg.randn(8, 4), gg.randn(4))
        (k,) = _kernels(cf)
        assert k.lowering == "numpy" and "autotuned" not in k.decision.reason
    assert clock.reads == 0


def test_a_broadcast_value_reaches_numba_as_a_scalar(lowering):
    """A full-shape input whose strides are all 0 (a backward's ones) is passed as one
    value, so the kernel keeps its flat loop; the result is the reference lowering's."""
    x, y = gg.randn(64, 32), gg.randn(64, 32)
    cf = CompiledFunction(arith, backend="default", share=False)
    with gg.no_grad():
        cf(x, y)
    (k,) = _kernels(cf)
    ones = np.broadcast_to(np.float32(1.5), (64, 32))
    got = k(x.numpy(), ones)
    np.testing.assert_array_equal(got, k.program.run((x.numpy(), ones)))
    assert fused_mod._code(ones, (64, 32)) == "s"
    if lowering == "numba":
        assert k.lowering == "numba" and "sf" not in k._numba and "fs" in k._numba
