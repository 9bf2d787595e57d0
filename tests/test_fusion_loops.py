"""Fused kernels that call NumPy's own inner loops (fused_loops.py, fused_segments.py):
results equal eager bit for bit, with Numba and without; what the generated kernel does
(one buffer for a chain, blocks, inputs read in place); when there is no loop."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad.backends import fused as fused_mod
from graphgrad.backends import fused_loops, fused_segments
from graphgrad.backends.fused import lower
from graphgrad.compiler import segments
from graphgrad.dynamo import CompiledFunction
from graphgrad.passes import Fused

HAS_LOOPS = fused_loops.loop(np.tanh, np.float32) is not None


def chain(x):
    for _ in range(10):
        x = (x * 1.0001).tanh()
    return x


def chain2(x):   # a period of four segments: tanh, arithmetic, exp, arithmetic
    for _ in range(4):
        x = ((x * 1.5).tanh() + 0.5).exp() * 0.25
    return x


def mixed(x, y):
    a = (x * 2 - y).exp()
    b = (y.abs() + 1).log() * a
    return (b.sin() + x.tanh()).expm1()


def _kernels(cf) -> list:
    run = segments(cf)[0].compiled
    return [lower(n.params["kernel"]) for n in run.fused_graph.nodes
            if n.kind == "call" and n.op is Fused]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(4, 4), (3, 2731), (1,)])   # 8193: two blocks and a tail
def test_loop_kernels_equal_eager_bit_for_bit(lowering, dtype, shape, monkeypatch):
    real = fused_mod.choose   # the kernel wherever there is one, whatever the cost model says

    def choose(*args, **kw):
        e = real(*args, **kw)
        return e._replace(lowering="numba") if e.numba_us is not None else e
    monkeypatch.setattr(fused_mod, "choose", choose)
    monkeypatch.setattr(fused_mod, "kernel_cache", {})   # (these decisions stay here)
    rng = np.random.default_rng(0)
    x = gg.tensor((rng.standard_normal(shape) * 3).astype(dtype))
    y = gg.tensor((rng.standard_normal(shape) * 3).astype(dtype))
    for fn, args in ((chain, (x,)), (chain2, (x,)), (mixed, (x, y)), (mixed, (x, gg.tensor(np.array(
            0.5, dtype))))):   # a one-value input read as a scalar, filled for its loop
        cf = CompiledFunction(fn, backend="default", share=False)
        with gg.no_grad(), np.errstate(all="ignore"):
            got, want = cf(*args).numpy(), fn(*args).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(_bits(got), _bits(want))
        (k,) = _kernels(cf)
        if lowering == "numba" and HAS_LOOPS:
            assert k.loops and k.lowering == "numba", k.decision.reason
            assert "call_loop" in k.numba_source
        else:
            assert k.lowering == "numpy"


def test_a_chain_ping_pongs_in_one_buffer_in_blocks_written_once(monkeypatch, tmp_path):
    if not (HAS_LOOPS and fused_mod.fused_numba.numba_available()):
        pytest.skip("no Numba or no NumPy loop table")
    monkeypatch.setattr(fused_mod.config, "numba", True)
    monkeypatch.setenv("GRAPHGRAD_KERNEL_CACHE", str(tmp_path))
    cf = CompiledFunction(chain, backend="default", share=False)
    x = gg.randn(4, 4)
    with gg.no_grad():
        cf(x)
    (k,) = _kernels(cf)
    src = k.numba_source
    # 10 loop calls, each in place on the one buffer, the last into the output; the 9
    # repeats of (tanh, multiply) written once in a loop, with one constant
    assert src.count("call_loop(L[0], L[1], b0[:m], b0[:m])") == 1
    assert "for r in range(9):" in src and "b0[:m], out[c0:c1])" in src
    assert src.count("np.empty(") == 1 and src.count("np.float32(float(1.0001))") == 1
    assert f"range(0, n, {fused_segments.LOOP_BLOCK})" in src
    assert list(k.loops.values()) == [(np.tanh, np.dtype(np.float32))] * 10
    assert len(k._addresses) == 2   # one (loop, data) pair per distinct ufunc


def test_a_broadcast_input_runs_the_numpy_lowering(lowering):
    x, b = gg.randn(8, 16), gg.randn(16)
    cf = CompiledFunction(lambda x, b: (x * b).tanh() + 1, backend="default", share=False)
    with gg.no_grad():
        got, want = cf(x, b), (x * b).tanh() + 1
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    (k,) = _kernels(cf)
    assert not k._numba   # no kernel was built for the broadcast layout
    assert k.failed is None


def test_loop_table_lookup():
    if not HAS_LOOPS:
        pytest.skip("NumPy's loop table is not readable here")
    fn, data = fused_loops.loop(np.exp, np.float64)
    src = np.linspace(-5, 5, 37)
    dst = np.empty_like(src)
    fused_loops._call(fn, data, src, dst)
    np.testing.assert_array_equal(dst, np.exp(src))
    assert fused_loops.loop(np.exp, np.int64) is None   # no int64 -> int64 loop
    assert fused_loops.loop(np.add, np.float64) is None   # only unary loops
    assert fused_loops.loop(np.isnan, np.float32) is None   # float -> bool


def test_a_table_that_disagrees_is_refused(monkeypatch):
    """A loop whose probe differs from the ufunc (here: the table read for another ufunc)
    is not used."""
    if not HAS_LOOPS:
        pytest.skip("NumPy's loop table is not readable here")
    monkeypatch.setattr(fused_loops, "_found", {})
    real = fused_loops._UFuncHead.from_address
    monkeypatch.setattr(fused_loops._UFuncHead, "from_address",
                        lambda addr: real(id(np.sin)) if addr == id(np.cos) else real(addr))
    assert fused_loops.loop(np.cos, np.float32) is None
    assert fused_loops.loop(np.sin, np.float32) is not None
