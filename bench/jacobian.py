"""Benchmark: the Jacobian of ``tanh(W @ x)`` by ``graphgrad.func.jacrev``/``jacfwd``
against ``torch.func.jacrev``/``jacfwd``, in one run.

Cases: W of shape (10, 1000) (few outputs: reverse mode should win), (1000, 10) (few
inputs: forward mode should win) and (300, 300) (square). float64 by default, the same
dtype on both sides. Single-threaded on both sides for fairness: the BLAS/OpenMP thread
env vars are set to 1 below, before NumPy or PyTorch is imported, and
``torch.set_num_threads(1)``.

Each timing is the median over several samples taken after warm-up; graphgrad's and
PyTorch's samples are interleaved so drift on a noisy machine hits both alike. Each
sample runs the call enough times to last ``--min-sample-ms``. The transform
(``jacrev(f)``) is built once; only its call is timed. Results are checked against
each other and against the analytic Jacobian ``diag(1 - tanh(Wx)^2) W``.

Prints one JSON object::

    python bench/jacobian.py            # full run
    python bench/jacobian.py --quick    # fewer, shorter samples
"""

from __future__ import annotations

import os

from timing import THREAD_VARS as _THREAD_VARS  # first: one BLAS thread
from timing import time_interleaved

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

SHAPES = [(10, 1000), (1000, 10), (300, 300)]
MODES = ("jacrev", "jacfwd")


def run_case(m: int, n: int, dtype: str, rng, args) -> dict:
    W = rng.standard_normal((m, n)).astype(dtype) / np.sqrt(n).astype(dtype)
    x = rng.standard_normal(n).astype(dtype)
    Wg, xg = gg.from_numpy(W.copy()), gg.from_numpy(x.copy())
    Wt, xt = torch.from_numpy(W.copy()), torch.from_numpy(x.copy())

    def f_gg(v):
        return gg.tanh(Wg @ v)

    def f_torch(v):
        return torch.tanh(Wt @ v)

    t = np.tanh(W @ x)
    exact = (1 - t * t)[:, None] * W
    tol = 1e-10 if dtype == "float64" else 1e-4
    fns, check = {}, {}
    for mode in MODES:
        jg = getattr(graphgrad.func, mode)(f_gg)
        jt = getattr(torch.func, mode)(f_torch)
        a, b = jg(xg).numpy(), jt(xt).numpy()
        assert a.dtype == b.dtype == np.dtype(dtype), (a.dtype, b.dtype)
        check[mode] = {
            "max_abs_diff_graphgrad_torch": float(np.max(np.abs(a - b))),
            "max_abs_err_graphgrad_vs_analytic": float(np.max(np.abs(a - exact))),
            "max_abs_err_torch_vs_analytic": float(np.max(np.abs(b - exact))),
        }
        check[mode]["agree"] = bool(np.allclose(a, b, rtol=tol, atol=tol)
                                    and np.allclose(a, exact, rtol=tol, atol=tol))
        fns[f"graphgrad.{mode}"] = lambda jg=jg: jg(xg)
        fns[f"torch.{mode}"] = lambda jt=jt: jt(xt)
    times = time_interleaved(fns, args.repeats, args.warmup, args.min_sample_ms / 1e3)
    med = {k: v["median_ms"] for k, v in times.items()}
    ratios = {mode: med[f"graphgrad.{mode}"] / med[f"torch.{mode}"] for mode in MODES}
    cpu = {k: v["cpu_median_ms"] for k, v in times.items()}
    faster = {fw: ("jacrev" if med[f"{fw}.jacrev"] < med[f"{fw}.jacfwd"] else "jacfwd")
              for fw in ("graphgrad", "torch")}
    return {
        "W_shape": [m, n], "outputs": m, "inputs": n,
        "median_ms": med,
        "timing_detail": times,
        "ratio_graphgrad_over_torch": ratios,
        "ratio_graphgrad_over_torch_cpu_time": {
            mode: cpu[f"graphgrad.{mode}"] / cpu[f"torch.{mode}"] for mode in MODES},
        "within_2x_of_torch": {mode: r <= 2.0 for mode, r in ratios.items()},
        "jacrev_over_jacfwd_time": {fw: med[f"{fw}.jacrev"] / med[f"{fw}.jacfwd"]
                                    for fw in ("graphgrad", "torch")},
        "faster_mode": faster,
        "check": check,
    }


def lecture_point(cases: list) -> dict:
    """Reverse mode costs one backward pass per output row, forward mode one forward
    pass per input column: reverse should win when outputs are few, forward when
    inputs are few. Verdict from the measured times."""
    out = {"claim": "jacrev wins when outputs are few (m << n); jacfwd wins when inputs are "
                    "few (n << m)", "cases": {}}
    holds = True
    for c in cases:
        m, n = c["outputs"], c["inputs"]
        expected = "jacrev" if m < n else "jacfwd" if n < m else None
        key = f"{m}x{n}"
        entry = {"expected_faster": expected or "either (square)",
                 "measured_faster": c["faster_mode"],
                 "jacrev_over_jacfwd_time": c["jacrev_over_jacfwd_time"]}
        if expected is not None:
            entry["holds"] = {fw: c["faster_mode"][fw] == expected for fw in c["faster_mode"]}
            holds = holds and all(entry["holds"].values())
        out["cases"][key] = entry
    out["holds_for_both_frameworks"] = holds
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
    rng = np.random.default_rng(args.seed)
    cases = [run_case(m, n, args.dtype, rng, args) for m, n in SHAPES]
    result = {
        "benchmark": "jacobian of tanh(W @ x)",
        "config": {
            "dtype": args.dtype, "quick": args.quick, "repeats": args.repeats,
            "warmup": args.warmup, "min_sample_ms": args.min_sample_ms, "seed": args.seed,
            "statistic": "median over samples of wall seconds per call (ms); ratios "
                         "and verdicts use it. timing_detail adds min/max and "
                         "the median process CPU time",
            "threads": {"torch.get_num_threads": torch.get_num_threads(),
                        **{v: os.environ.get(v) for v in _THREAD_VARS}},
            "versions": {"python": platform.python_version(), "numpy": np.__version__,
                         "torch": torch.__version__, "graphgrad": gg.__version__},
        },
        "cases": cases,
        "lecture_point": lecture_point(cases),
        "all_agree": all(c["check"][m]["agree"] for c in cases for m in MODES),
        "target_within_2x_of_torch_func": all(all(c["within_2x_of_torch"].values())
                                              for c in cases),
    }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
