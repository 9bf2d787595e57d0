"""The memory plan's library calls (backends/memory_plan.py ``writes_out``): a large
``Matmul``/``Linear`` result is written into a dead buffer of its shape and dtype through
the op's own ``forward(..., out=buf)`` (ops/linalg.py ``accepts_out``), never into an
operand; results bit for bit the unplanned program's, with and without Numba; a buffer
seen by a live view is refused when the program runs; compiled training equals eager."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import nn
from graphgrad.backends import fused
from graphgrad.graph import Spec
from graphgrad.ops.linalg import Linear, Matmul
from test_memory_plan import N, _check

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(params=[True, False], ids=["numba", "numpy"])
def numba(request, monkeypatch):
    monkeypatch.setattr(fused.config, "numba", request.param)
    return request.param


@pytest.fixture
def products(monkeypatch):
    """Each Matmul/Linear forward call: (op, out given, result is out, out shares memory
    with an operand)."""
    seen = []
    for op in (Matmul, Linear):
        orig = op.forward

        def record(*arrays, out=None, _op=op.__name__, _orig=orig):
            res = _orig(*arrays) if out is None else _orig(*arrays, out=out)
            seen.append((_op, out is not None, out is not None and res is out,
                         out is not None and any(np.shares_memory(out, a) for a in arrays
                                                 if isinstance(a, np.ndarray))))
            return res
        monkeypatch.setattr(op, "forward", staticmethod(record))
    return seen


def _chain(x, w1, w2, w3):
    h = x @ w1
    g = h.softmax(-1)    # a row kernel: never in place, so h's buffer is dead after it
    return (g @ w2) @ w3   # g @ w2 takes h's buffer, the last product g's


def test_products_write_into_dead_buffers(monkeypatch, products, numba):
    gg.manual_seed(0)
    args = [gg.randn(N, N) for _ in range(4)]
    src, _ = _check(_chain, args, monkeypatch)
    planned = [line for line in src.splitlines() if "out=_o" in line]
    assert len(planned) == 2, src
    taken = [c for c in products if c[1]]
    assert len(taken) == 4 and all(c[2] and not c[3] for c in taken), products   # 2 runs


def test_linear_with_bias_writes_into_a_dead_buffer(monkeypatch, products, numba):
    def f(x, w1, b1, w2, b2, w3):
        h = nn.functional.linear(x, w1, b1)
        g = h.softmax(-1)   # (a compiled layer_norm is not bit for bit eager's)
        return nn.functional.linear(nn.functional.linear(g, w2, b2), w3)   # (no bias)

    gg.manual_seed(0)
    args = [gg.randn(N, N), gg.randn(N, N), gg.randn(N), gg.randn(N, N), gg.randn(N),
            gg.randn(N, N)]
    src, _ = _check(f, args, monkeypatch)
    assert src.count("out=_o") == 2, src
    taken = [c for c in products if c[1]]
    assert {c[0] for c in taken} == {"Linear"} and all(c[2] and not c[3] for c in taken)


def test_outputs_and_inputs_are_never_lent(monkeypatch, products):
    def f(x, w):
        h = x @ w
        g = h.softmax(-1)
        return h, g @ w, x @ w   # h is an output; x and w are inputs: nothing to take

    gg.manual_seed(0)
    src, _ = _check(f, [gg.randn(N, N), gg.randn(N, N)], monkeypatch)
    assert "out=_o" not in src, src
    assert not any(c[1] for c in products), products


def test_a_buffer_seen_by_a_live_view_is_refused(monkeypatch, products):
    def f(x, w1, w2):
        h = x @ w1
        t = h.t()            # a view of h, read after the product that plans h's buffer
        g = h.softmax(-1)
        return g @ w2 + t

    gg.manual_seed(0)
    src, _ = _check(f, [gg.randn(N, N), gg.randn(N, N), gg.randn(N, N)], monkeypatch)
    assert "out=_o" in src, src   # planned; refused when run: the product allocated
    assert products and not any(c[1] for c in products), products


@pytest.mark.parametrize("dtype", ["complex64", "float64"])
def test_only_real_floating_matrices_are_planned(monkeypatch, dtype):
    rng = np.random.default_rng(0)

    def make(*shape):
        a = rng.standard_normal(shape)
        return gg.tensor((a + 1j * a if dtype == "complex64" else a).astype(dtype))

    def f(x, w1, w2):
        h = x @ w1
        g = h - h.mean(-1, keepdim=True)   # a row kernel: h dead after it
        return g @ w2

    k = N // 2   # (N, k) of 8-byte elements: 256 KiB
    src, _ = _check(f, [make(N, k), make(k, k), make(k, k)], monkeypatch)
    assert ("out=_o" in src) == (dtype == "float64"), src


def test_accepts_out_declarations():
    def s(*shape, dtype="float32"):
        return Spec(shape, np.dtype(dtype))

    assert Matmul.accepts_out(s(4, 3), s(3, 5))
    assert Matmul.accepts_out(s(2, 4, 3), s(3, 5))                      # a batch
    assert not Matmul.accepts_out(s(4, 3), s(3))                        # a vector
    assert not Matmul.accepts_out(s(3), s(3, 5))
    assert not Matmul.accepts_out(s(4, 3, dtype="complex64"), s(3, 5, dtype="complex64"))
    assert not Matmul.accepts_out(s(4, 3, dtype="int64"), s(3, 5, dtype="int64"))
    assert not Matmul.accepts_out(s(4, 3), s(3, 5, dtype="float64"))
    assert Linear.accepts_out(s(4, 3), s(5, 3), s(5))
    assert Linear.accepts_out(s(4, 3), s(5, 3))
    assert not Linear.accepts_out(s(4, 3), s(5, 3), s(5, dtype="float64"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_into_out_is_bit_identical(dtype):
    rng = np.random.default_rng(0)

    def r(*shape):
        return rng.standard_normal(shape).astype(dtype)

    x, w, b = r(300, 200), r(77, 200), r(77)
    cases = [(Matmul, (x, w.T)), (Matmul, (np.asfortranarray(x), r(200, 77))),
             (Matmul, (r(4, 30, 20), r(20, 9))), (Matmul, (r(4, 30, 20), r(4, 20, 9))),
             (Linear, (x, w, b)), (Linear, (x, w)), (Linear, (x[::2], w, r(1, 77)))]
    for op, args in cases:
        want = op.forward(*args)
        out = np.full(want.shape, np.nan, dtype)
        got = op.forward(*args, out=out)
        assert got is out
        assert out.tobytes() == want.tobytes(), op


def _bench_models():
    """bench/models.py (its ``timing`` import sets BLAS thread variables: restored)."""
    saved = dict(os.environ)
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("models")
    finally:
        sys.path.remove(str(BENCH))
        os.environ.clear()
        os.environ.update(saved)


def _mlp():
    gg.manual_seed(0)
    return nn.Sequential(nn.Linear(N, N), nn.LayerNorm(N), nn.Linear(N, N), nn.Tanh(),
                         nn.Linear(N, N), nn.Softmax(-1), nn.Linear(N, 10))


def _train(name: str, mode, monkeypatch, steps: int = 2) -> list:
    models = _bench_models()
    if name == "mlp":
        model = _mlp()
        rng = np.random.default_rng(0)
        x, y = gg.tensor(rng.standard_normal((512, N)).astype(np.float32)), \
            gg.tensor(rng.integers(0, 10, 512))
    else:
        gg.manual_seed(0)
        model = getattr(models._Heads, name)(gg)
        a, b = models._data(name)
        x, y = gg.tensor(a), gg.tensor(b)
    run = model
    if mode != "eager":
        monkeypatch.setattr(fused.config, "memory_plan", mode)
        gg.dynamo.reset()
        run = gg.compile(model)
    opt = gg.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.CrossEntropyLoss()(run(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("name", ["mlp", "gru", "lstm"])
def test_compiled_training_equals_eager(monkeypatch, products, name):
    runs = {mode: _train(name, mode, monkeypatch) for mode in ("eager", True, False)}
    for a, b in zip(runs[True][1], runs[False][1], strict=True):
        np.testing.assert_array_equal(a, b)   # the plan changes no bit
    np.testing.assert_allclose(runs[True][0], runs["eager"][0], rtol=1e-5)
    for a, b in zip(runs[True][1], runs["eager"][1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    taken = [c for c in products if c[1]]
    assert all(c[2] and not c[3] for c in taken), products
    if name == "mlp":   # a gradient product of the compiled backward (its forward's
        assert any(c[0] == "Matmul" for c in taken), products   # are Linear) took one
