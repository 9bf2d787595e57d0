"""Hessian of f(x) = sum(tanh(A @ x)**2) + 0.5 * x @ x by five methods, in one run:

  (a) reverse-over-reverse AD    graphgrad.func.jacrev(jacrev(f))
  (b) forward-over-reverse AD    graphgrad.func.hessian(f) = jacfwd(jacrev(f))  (the reference)
  (c) complex step on the AD gradient: column j = Im(grad f(x + i h e_j)) / h, all
      directions in one vmapped pass (numdiff's default), and (c') one pass per direction
  (d) central differences of the AD gradient: (grad f(x + h e_j) - grad f(x - h e_j)) / 2h
  (e) torch.func.hessian (PyTorch, same inputs, float64)

Prints one JSON object: seconds per Hessian (median wall-clock and fastest CPU time of
repeats, the peers interleaved round by round), max |H - H_b|, the load average.

    python bench/hessian_methods.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import graphgrad as gg  # noqa: E402
from graphgrad import numdiff  # noqa: E402
from graphgrad.numdiff.complex_step import cs_hessian  # noqa: E402


def interleaved(peers: dict, repeats: int) -> tuple[dict, dict, dict]:
    """Each peer once per round (after one warm-up round), the rounds repeated: the
    median wall-clock time, the fastest CPU (process) time and the last result of each.
    Every peer is single-threaded, so CPU time leaves out the time other processes take
    on a shared machine; the ratios below use it."""
    out = {name: fn() for name, fn in peers.items()}  # warm-up
    wall = {name: [] for name in peers}
    cpu = dict.fromkeys(peers, float("inf"))
    for _ in range(repeats):
        for name, fn in peers.items():
            w, c = time.perf_counter(), time.process_time()
            out[name] = fn()
            cpu[name] = min(cpu[name], time.process_time() - c)
            wall[name].append(time.perf_counter() - w)
    return {k: statistics.median(v) for k, v in wall.items()}, cpu, out


def central_of_gradient(grad_f, x: np.ndarray, h: float = 1e-5) -> np.ndarray:
    n = x.size
    cols = []
    for j in range(n):
        e = np.zeros(n)
        e[j] = h
        gp = grad_f(gg.tensor(x + e)).numpy()
        gm = grad_f(gg.tensor(x - e)).numpy()
        cols.append((gp - gm) / (2 * h))
    return np.stack(cols, axis=1)


def run(n: int, repeats: int) -> dict:
    rng = np.random.default_rng(n)
    A = rng.standard_normal((n, n)) / np.sqrt(n)
    x = rng.standard_normal(n)
    At = gg.tensor(A)

    def f(v):
        return ((At @ v).tanh() ** 2).sum() + 0.5 * (v @ v)

    xg = gg.tensor(x)
    grad_f = gg.func.grad(f)
    peers = {"forward_over_reverse": lambda: gg.func.hessian(f)(xg).numpy(),
             "reverse_over_reverse": lambda: gg.func.jacrev(gg.func.jacrev(f))(xg).numpy(),
             "complex_step_of_ad_gradient":
                 lambda: numdiff.hessian(f, x, method="complex_step"),
             "gradient_alone": lambda: grad_f(xg).numpy()}
    slow = {"complex_step_one_pass_per_direction": lambda: cs_hessian(f, x, batched=False),
            "central_diff_of_ad_gradient": lambda: central_of_gradient(grad_f, x)}
    try:
        import torch
        torch.set_num_threads(1)
        Att = torch.tensor(A)

        def ft(v):
            return ((Att @ v).tanh() ** 2).sum() + 0.5 * (v @ v)
        xt = torch.tensor(x)
        peers["torch_func_hessian"] = lambda: torch.func.hessian(ft)(xt).numpy()
    except ImportError:
        pass
    wall, cpu, got = interleaved(peers, repeats)
    more = interleaved(slow, max(1, repeats // 2))
    wall.update(more[0])
    cpu.update(more[1])
    got.update(more[2])
    ref = got["forward_over_reverse"]
    res = {"n": n, "seconds": wall, "cpu_seconds": cpu,
           "max_abs_error_vs_forward_over_reverse": {
               k: float(np.abs(v - ref).max()) for k, v in got.items()
               if k not in ("forward_over_reverse", "gradient_alone")}}
    graphgrad_methods = {k: v for k, v in cpu.items()
                         if k not in ("gradient_alone", "torch_func_hessian")}
    res["fastest_graphgrad_method"] = min(graphgrad_methods, key=graphgrad_methods.get)
    for label, t in (("", wall), ("cpu_", cpu)):
        fastest_ad = min(t["forward_over_reverse"], t["reverse_over_reverse"])
        res[f"{label}complex_step_over_fastest_ad"] = t["complex_step_of_ad_gradient"] / fastest_ad
    res["fastest_overall"] = min((k for k in cpu if k != "gradient_alone"), key=cpu.get)
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="n = 10 and 100 only, fewer repeats")
    args = p.parse_args()
    sizes = (10, 100) if args.quick else (10, 100, 300)
    repeats = 3 if args.quick else 9
    load_before = os.getloadavg()
    results = [run(n, repeats) for n in sizes]
    print(json.dumps({"benchmark": "hessian_methods", "float": "float64",
                      "threads": "1 (OMP/OpenBLAS/MKL, torch.set_num_threads)",
                      "results": results,
                      "load_average_before_after": [load_before, os.getloadavg()]}, indent=2))


if __name__ == "__main__":
    main()
