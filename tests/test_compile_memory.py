"""Memory planning of the compiled array program: each intermediate is freed at its last
use, so compiled inference never holds more than eager execution does."""

from __future__ import annotations

import tracemalloc

import numpy as np

import graphgrad as gg
from graphgrad import nn
from graphgrad.compiler import segments
from graphgrad.dynamo import CompiledFunction


def _peak(fn, *args) -> int:
    fn(*args)   # warm: caches and the compiled program exist before measuring
    tracemalloc.start()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(16 * 7 * 7, 10))


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.Tanh(),
                         nn.Linear(512, 10))


def test_compiled_inference_peak_memory_is_at_most_eager():
    gg.manual_seed(0)
    for model, x in ((_cnn(), gg.randn(32, 1, 28, 28)), (_mlp(), gg.randn(256, 256))):
        compiled = gg.compile(model)
        with gg.no_grad():
            expect = model(x)
            np.testing.assert_allclose(compiled(x).numpy(), expect.numpy(), rtol=1e-5,
                                       atol=1e-6)
            assert _peak(compiled, x) <= _peak(model, x)


def test_program_frees_each_intermediate_after_its_last_use():
    def f(x, w):
        a = x @ w
        b = a.exp()   # last use of a
        c = b @ w     # last use of b
        return c.sum()

    cf = CompiledFunction(f, backend="default", share=False)
    x, w = gg.randn(4, 4), gg.randn(4, 4)
    with gg.no_grad():
        np.testing.assert_allclose(cf(x, w).numpy(), f(x, w).numpy(), rtol=1e-5)
    src = segments(cf)[0].compiled.source
    lines = [ln.strip() for ln in src.splitlines()]
    dels = [ln for ln in lines if ln.startswith("del ")]
    assert dels, src
    freed = {name for ln in dels for name in ln[4:].split(", ")}
    # every intermediate but the output is freed, each exactly once
    assert sum(len(ln[4:].split(", ")) for ln in dels) == len(freed)
    out_line = [ln for ln in lines if ln.startswith("return (_T(")][0]
    assert not any(name in out_line for name in freed)
