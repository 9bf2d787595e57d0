"""Benchmark: the Hessian of ``f(x) = sum(tanh(A @ x)**2) + 0.5 * x @ x`` by
``graphgrad.func.hessian`` (``jacfwd(jacrev(f))``, forward-over-reverse) against
``torch.func.hessian`` (and ``jax.hessian`` when JAX is importable; it is not a
dependency and is never installed by this script), for A of shape (n, n), n = 10,
100, 300, plus each framework's Hessian/gradient cost ratio (``func.grad`` timed the
same way).

float64 by default, the same dtype on every side. Single-threaded for fairness: the
BLAS/OpenMP thread env vars are set to 1 below, before NumPy or PyTorch is imported,
and ``torch.set_num_threads(1)``. Each timing is the median over several samples
taken after warm-up, the frameworks' samples interleaved; each sample runs the call
enough times to last ``--min-sample-ms``. The transform is built once; only its call
is timed. Results are checked against each other and against the analytic Hessian
``A^T diag(2 (1 - t^2)(1 - 3 t^2)) A + I`` with ``t = tanh(A x)``.

Prints one JSON object::

    python bench/hessian.py            # full run
    python bench/hessian.py --quick    # fewer, shorter samples
"""

from __future__ import annotations

import os

from timing import THREAD_VARS as _THREAD_VARS  # first: one BLAS thread
from timing import time_interleaved
# if JAX is present, keep it on one CPU thread too (read when jax is first imported)
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.func  # noqa: E402

import graphgrad as gg  # noqa: E402
import graphgrad.func  # noqa: E402

torch.set_num_threads(1)

SIZES = [10, 100, 300]
TARGET_SIZES = (100, 300)  # the brief's target: within 2x of torch.func at these n


def _import_jax():
    try:
        import jax
        import jax.numpy as jnp
    except Exception as e:  # noqa: BLE001 - any failure means "not available"
        return None, None, f"{type(e).__name__}: {e}"
    jax.config.update("jax_enable_x64", True)
    return jax, jnp, None


def run_case(n: int, dtype: str, rng, args, jax, jnp) -> dict:
    A = rng.standard_normal((n, n)).astype(dtype) / np.sqrt(n).astype(dtype)
    x = rng.standard_normal(n).astype(dtype)
    Ag, xg = gg.from_numpy(A.copy()), gg.from_numpy(x.copy())
    At, xt = torch.from_numpy(A.copy()), torch.from_numpy(x.copy())

    def f_gg(v):
        return (gg.tanh(Ag @ v) ** 2).sum() + 0.5 * (v @ v)

    def f_torch(v):
        return (torch.tanh(At @ v) ** 2).sum() + 0.5 * (v @ v)

    t = np.tanh(A @ x)
    exact_h = A.T @ ((2 * (1 - t * t) * (1 - 3 * t * t))[:, None] * A) + np.eye(n, dtype=dtype)
    exact_g = A.T @ (2 * t * (1 - t * t)) + x
    tol = 1e-9 if dtype == "float64" else 1e-4

    fw = {"graphgrad": (graphgrad.func, f_gg, xg), "torch": (torch.func, f_torch, xt)}
    if jax is not None:
        Aj, xj = jnp.asarray(A), jnp.asarray(x)

        def f_jax(v):
            return (jnp.tanh(Aj @ v) ** 2).sum() + 0.5 * (v @ v)
        fw["jax"] = (jax, f_jax, xj)

    fns, results = {}, {}
    for name, (mod, f, xv) in fw.items():
        h, g = mod.hessian(f), mod.grad(f)
        if name == "jax":  # eager JAX re-traces each call; jit is how JAX is used
            h, g = jax.jit(h), jax.jit(g)

            def call_h(h=h):
                return h(xj).block_until_ready()

            def call_g(g=g):
                return g(xj).block_until_ready()
        else:
            def call_h(h=h, xv=xv):
                return h(xv)

            def call_g(g=g, xv=xv):
                return g(xv)
        results[name] = (np.asarray(call_h()), np.asarray(call_g()))
        fns[f"{name}.hessian"] = call_h
        fns[f"{name}.grad"] = call_g

    check = {}
    ref_h, ref_g = results["torch"]
    for name, (hh, gv) in results.items():
        assert hh.dtype == np.dtype(dtype), (name, hh.dtype)
        check[name] = {"max_abs_err_hessian_vs_analytic": float(np.max(np.abs(hh - exact_h))),
                       "max_abs_err_grad_vs_analytic": float(np.max(np.abs(gv - exact_g)))}
        if name != "torch":
            check[name]["max_abs_diff_hessian_vs_torch"] = float(np.max(np.abs(hh - ref_h)))
        check[name]["agree"] = bool(np.allclose(hh, exact_h, rtol=tol, atol=tol)
                                    and np.allclose(gv, exact_g, rtol=tol, atol=tol)
                                    and np.allclose(hh, ref_h, rtol=tol, atol=tol))

    times = time_interleaved(fns, args.repeats, args.warmup, args.min_sample_ms / 1e3)
    med = {k: v["median_ms"] for k, v in times.items()}
    cpu = {k: v["cpu_median_ms"] for k, v in times.items()}
    ratio = med["graphgrad.hessian"] / med["torch.hessian"]
    out = {
        "n": n,
        "median_ms": med,
        "timing_detail": times,
        "ratio_graphgrad_over_torch": {
            "hessian": ratio, "grad": med["graphgrad.grad"] / med["torch.grad"]},
        "ratio_graphgrad_over_torch_cpu_time": {
            "hessian": cpu["graphgrad.hessian"] / cpu["torch.hessian"],
            "grad": cpu["graphgrad.grad"] / cpu["torch.grad"]},
        "hessian_over_grad_cost": {name: med[f"{name}.hessian"] / med[f"{name}.grad"]
                                   for name in fw},
        "check": check,
    }
    if "jax" in fw:
        out["ratio_graphgrad_over_jax_jit"] = {
            "hessian": med["graphgrad.hessian"] / med["jax.hessian"],
            "grad": med["graphgrad.grad"] / med["jax.grad"]}
    if n in TARGET_SIZES:
        out["within_2x_of_torch"] = ratio <= 2.0
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--repeats", type=int, default=None, help="samples per timing")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--min-sample-ms", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 5 if args.quick else 21
    if args.warmup is None:
        args.warmup = 2 if args.quick else 5
    if args.min_sample_ms is None:
        args.min_sample_ms = 5.0 if args.quick else 50.0
    jax, jnp, jax_missing = _import_jax()
    rng = np.random.default_rng(args.seed)
    cases = [run_case(n, args.dtype, rng, args, jax, jnp) for n in SIZES]
    result = {
        "benchmark": "hessian of sum(tanh(A @ x)**2) + 0.5 * x @ x",
        "config": {
            "dtype": args.dtype, "quick": args.quick, "repeats": args.repeats,
            "warmup": args.warmup, "min_sample_ms": args.min_sample_ms, "seed": args.seed,
            "statistic": "median over samples of wall seconds per call (ms); ratios "
                         "and verdicts use it. timing_detail adds min/max and "
                         "the median process CPU time",
            "threads": {"torch.get_num_threads": torch.get_num_threads(),
                        **{v: os.environ.get(v) for v in _THREAD_VARS}},
            "versions": {"python": platform.python_version(), "numpy": np.__version__,
                         "torch": torch.__version__, "graphgrad": gg.__version__,
                         "jax": jax.__version__ if jax is not None else None},
            "jax": ("jax.jit(jax.hessian(f)), jax.jit(jax.grad(f))" if jax is not None
                    else f"not importable ({jax_missing}); skipped"),
        },
        "cases": cases,
        "all_agree": all(c["check"][k]["agree"] for c in cases for k in c["check"]),
        "target_within_2x_of_torch_func_at_n_100_300": all(
            c["within_2x_of_torch"] for c in cases if c["n"] in TARGET_SIZES),
    }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
