"""Benchmark: forward and forward+backward time of the activations a training step
calls on every layer (tanh, sigmoid, gelu exact and tanh-approximate), graphgrad
eager against PyTorch eager, per call, in one process, one BLAS/OpenMP thread each.

Each sample runs the call until it lasts ``--min-sample-ms``; graphgrad's and
PyTorch's samples are interleaved and the minimum over ``--repeats`` samples is the
headline (other processes only ever add time). Results are checked against each other.

Prints one JSON object::

    python bench/activations.py [--shape 32 128] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

import graphgrad as gg  # noqa: E402

torch.set_num_threads(1)

CASES = {
    "tanh": lambda m, x: x.tanh(),
    "sigmoid": lambda m, x: x.sigmoid(),
    "gelu": lambda m, x: m.nn.functional.gelu(x),
    "gelu_tanh": lambda m, x: m.nn.functional.gelu(x, approximate="tanh"),
}


def _sample(fn, min_ms: float) -> float:
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed * 1e3 >= min_ms:
            return elapsed / calls


def _timed(fns: dict, repeats: int, min_ms: float) -> dict:
    for fn in fns.values():
        fn()
    best = {k: float("inf") for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            best[k] = min(best[k], _sample(fn, min_ms))
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--min-sample-ms", type=float, default=20.0)
    args = parser.parse_args()
    a = np.random.default_rng(0).standard_normal(args.shape).astype(np.float32)
    report = {"shape": args.shape, "dtype": "float32", "unit": "us per call", "cases": {}}
    for name, f in CASES.items():
        xg, xt = gg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        g = np.random.default_rng(1).standard_normal(args.shape).astype(np.float32)
        gg_g, t_g = gg.tensor(g), torch.tensor(g)

        def fwd_g(f=f, xg=xg):
            with gg.no_grad():
                f(gg, xg)

        def fwd_t(f=f, xt=xt):
            with torch.no_grad():
                f(torch, xt)

        def both_g(f=f, xg=xg, gg_g=gg_g):
            f(gg, xg).backward(gg_g)
            xg.grad = None

        def both_t(f=f, xt=xt, t_g=t_g):
            f(torch, xt).backward(t_g)
            xt.grad = None
        f(gg, xg).backward(gg_g)
        f(torch, xt).backward(t_g)
        np.testing.assert_allclose(xg.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
        t = _timed({"fwd_gg": fwd_g, "fwd_torch": fwd_t, "fwdbwd_gg": both_g,
                    "fwdbwd_torch": both_t}, args.repeats, args.min_sample_ms)
        report["cases"][name] = {k: round(v * 1e6, 2) for k, v in t.items()} | {
            "fwd_ratio": round(t["fwd_gg"] / t["fwd_torch"], 2),
            "fwdbwd_ratio": round(t["fwdbwd_gg"] / t["fwdbwd_torch"], 2)}
    report["load"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
