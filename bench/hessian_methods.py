"""Hessian of f(x) = sum(tanh(A @ x)**2) + 0.5 * x @ x by five methods, in one run:

  (a) reverse-over-reverse AD    graphgrad.func.jacrev(jacrev(f))
  (b) forward-over-reverse AD    graphgrad.func.hessian(f) = jacfwd(jacrev(f))  (the reference)
  (c) complex step on the AD gradient: column j = Im(grad f(x + i h e_j)) / h, all
      directions in one vmapped pass (numdiff's default), and (c') one pass per direction
  (d) central differences of the AD gradient: (grad f(x + h e_j) - grad f(x - h e_j)) / 2h
  (e) torch.func.hessian (PyTorch, same inputs, float64)

Prints one JSON object: seconds per Hessian (median of repeats) and max |H - H_b|.

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


def timed(fn, repeats: int):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


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
    res = {"n": n}
    t_b, H_b = timed(lambda: gg.func.hessian(f)(xg).numpy(), repeats)
    t_a, H_a = timed(lambda: gg.func.jacrev(gg.func.jacrev(f))(xg).numpy(), repeats)
    t_c, H_c = timed(lambda: numdiff.hessian(f, x, method="complex_step"), repeats)
    t_cl, H_cl = timed(lambda: cs_hessian(f, x, batched=False), max(1, repeats // 2))
    grad_f = gg.func.grad(f)
    t_d, H_d = timed(lambda: central_of_gradient(grad_f, x), max(1, repeats // 2))
    t_g, _ = timed(lambda: grad_f(xg).numpy(), repeats)
    res["seconds"] = {"reverse_over_reverse": t_a, "forward_over_reverse": t_b,
                      "complex_step_of_ad_gradient": t_c,
                      "complex_step_one_pass_per_direction": t_cl,
                      "central_diff_of_ad_gradient": t_d,
                      "gradient_alone": t_g}
    res["max_abs_error_vs_forward_over_reverse"] = {
        "reverse_over_reverse": float(np.abs(H_a - H_b).max()),
        "complex_step_of_ad_gradient": float(np.abs(H_c - H_b).max()),
        "complex_step_one_pass_per_direction": float(np.abs(H_cl - H_b).max()),
        "central_diff_of_ad_gradient": float(np.abs(H_d - H_b).max())}
    try:
        import torch
        torch.set_num_threads(1)
        Att = torch.tensor(A)

        def ft(v):
            return ((Att @ v).tanh() ** 2).sum() + 0.5 * (v @ v)
        xt = torch.tensor(x)
        t_e, H_e = timed(lambda: torch.func.hessian(ft)(xt).numpy(), repeats)
        res["seconds"]["torch_func_hessian"] = t_e
        res["max_abs_error_vs_forward_over_reverse"]["torch_func_hessian"] = float(
            np.abs(H_e - H_b).max())
    except ImportError:
        pass
    graphgrad_methods = {k: v for k, v in res["seconds"].items()
                         if k not in ("gradient_alone", "torch_func_hessian")}
    res["fastest_graphgrad_method"] = min(graphgrad_methods, key=graphgrad_methods.get)
    fastest_ad = min(t_a, t_b)
    res["complex_step_over_fastest_ad"] = t_c / fastest_ad
    res["fastest_overall"] = min((k for k in res["seconds"] if k != "gradient_alone"),
                                 key=res["seconds"].get)
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="n = 10 and 100 only, fewer repeats")
    args = p.parse_args()
    sizes = (10, 100) if args.quick else (10, 100, 300)
    repeats = 3 if args.quick else 5
    print(json.dumps({"benchmark": "hessian_methods", "float": "float64",
                      "threads": "1 (OMP/OpenBLAS/MKL, torch.set_num_threads)",
                      "results": [run(n, repeats) for n in sizes]}, indent=2))


if __name__ == "__main__":
    main()
