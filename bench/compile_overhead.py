"""graphgrad.compile: what the cached path costs, and what compiling buys.

* **dispatch**: ``f(x, y) = x * y + 1`` on (4,) float32 tensors: the compiled function's
  cached call (guard check + dispatch to the compiled segment + building the result)
  against calling the captured graph's compiled callable directly; and a two-segment
  function with a tensor-dependent branch against running its two graphs directly.
  Target: the cached path adds at most 5 microseconds.
* **chain**: 200 small-tensor ops (``x = (x * 1.0001).tanh()`` 100 times on (4, 4)
  float32): graphgrad eager vs compiled (the "default" backend), with PyTorch eager and
  ``torch.compile`` in the same run where they run. Target: compiled faster than eager.
  ``graphgrad_kernel_only`` is the compiled call's one fused kernel called bare: the
  call's floor, so ``call_overhead_us`` is what guards, unwrapping and wrapping add.

Prints one JSON object. ``--quick`` gives a short, noisy run.
"""

from __future__ import annotations

from timing import THREAD_VARS as _THREAD_VARS  # first: one BLAS thread
from timing import time_interleaved

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

import graphgrad as gg  # noqa: E402
from graphgrad.backends import fused  # noqa: E402
from graphgrad.compiler import segments  # noqa: E402

assert _THREAD_VARS


def _graph_fn(seg):
    """The backend's callable of a cached segment (what the backend returned)."""
    return seg.compiled


def simple(x, y):
    return x * y + 1


def branchy(x, y):
    z = x * y
    if z.sum() > 0:
        return z + 1
    return z - 1


def chain(x):
    for _ in range(100):
        x = (x * 1.0001).tanh()
    return x


def bench_dispatch(repeats: int, min_s: float) -> dict:
    x = gg.tensor(np.linspace(0.1, 0.4, 4), dtype=gg.float32)
    y = gg.tensor(np.linspace(1.0, 2.0, 4), dtype=gg.float32)
    cs = gg.compile(simple)
    cs(x, y)
    (seg,) = segments(cs)
    g = _graph_fn(seg)
    cb = gg.compile(branchy)
    cb(x, y)
    first, second = segments(cb)
    g1, g2 = _graph_fn(first), _graph_fn(second)

    def branch_direct():
        cond, z = g1(x, y)
        bool(cond)
        return g2(z)[0]

    t = time_interleaved({
        "graph_direct": lambda: g(x, y)[0], "compiled_call": lambda: cs(x, y),
        "eager": lambda: simple(x, y),
        "branch_graphs_direct": branch_direct, "branch_compiled_call": lambda: cb(x, y),
        "branch_eager": lambda: branchy(x, y),
    }, repeats=repeats, warmup=50, min_s=min_s, between=gc.collect)
    us = {k: v["median_ms"] * 1e3 for k, v in t.items()}
    cpu = {k: v["cpu_median_ms"] * 1e3 for k, v in t.items()}
    return {
        "us": us, "cpu_us": cpu,
        "cached_overhead_us": us["compiled_call"] - us["graph_direct"],
        "cached_overhead_cpu_us": cpu["compiled_call"] - cpu["graph_direct"],
        "branch_cached_overhead_us": us["branch_compiled_call"] - us["branch_graphs_direct"],
        "branch_cached_overhead_cpu_us": cpu["branch_compiled_call"]
        - cpu["branch_graphs_direct"],
    }


def bench_chain(repeats: int, min_s: float) -> dict:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4)).astype(np.float32)
    x = gg.tensor(a)
    cc = gg.compile(chain)
    np.testing.assert_allclose(cc(x).numpy(), chain(x).numpy(), rtol=1e-6)
    (seg,) = segments(cc)
    kernels = [v for v in seg.compiled.__globals__.values() if isinstance(v, fused.FusedKernel)]
    fns = {"graphgrad_eager": lambda: chain(x), "graphgrad_compiled": lambda: cc(x)}
    if len(kernels) == 1:   # the compiled call's floor: its one fused kernel, called bare
        fns["graphgrad_kernel_only"] = lambda: kernels[0](a)
    notes = {}
    try:
        import torch
        torch.set_num_threads(1)
        tx = torch.tensor(a)
        fns["torch_eager"] = lambda: chain(tx)
        try:
            tc = torch.compile(chain)
            tc(tx)
            fns["torch_compile"] = lambda: tc(tx)
        except Exception as e:  # noqa: BLE001 - report why it does not run here
            notes["torch_compile"] = f"{type(e).__name__}: {str(e)[:200]}"
    except ImportError:
        notes["torch"] = "not installed"
    t = time_interleaved(fns, repeats=repeats, warmup=3, min_s=min_s, between=gc.collect)
    us = {k: v["median_ms"] * 1e3 for k, v in t.items()}
    out = {"us_per_call": us, "us_per_op": {k: v / 200 for k, v in us.items()},
           "compiled_speedup_vs_eager": us["graphgrad_eager"] / us["graphgrad_compiled"],
           "notes": notes}
    if "graphgrad_kernel_only" in us:   # what the call adds: guards, unwrapping, wrapping
        out["call_overhead_us"] = us["graphgrad_compiled"] - us["graphgrad_kernel_only"]
        out["kernel_lowering"] = kernels[0].lowering
    if "torch_compile" in us:
        out["compiled_over_torch_compile"] = us["graphgrad_compiled"] / us["torch_compile"]
        if "graphgrad_kernel_only" in us:
            out["kernel_only_over_torch_compile"] = (us["graphgrad_kernel_only"]
                                                     / us["torch_compile"])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    repeats, min_s = (5, 0.02) if args.quick else (21, 0.1)
    d = bench_dispatch(repeats, min_s)
    c = bench_chain(repeats, min_s)
    result = {
        "python": platform.python_version(), "numpy": np.__version__,
        "uptime": os.popen("uptime").read().strip(),
        "dispatch": d, "chain200": c,
        "targets": {
            "cached_overhead_cpu_us<=5": d["cached_overhead_cpu_us"] <= 5.0,
            "compiled_chain_faster_than_eager": c["compiled_speedup_vs_eager"] > 1.0,
        },
    }
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
