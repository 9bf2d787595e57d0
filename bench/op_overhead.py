"""Benchmark: the per-op overhead of graphgrad's eager mode against PyTorch eager and
plain NumPy, in microseconds per op, in one process.

Cases:

* tiny: a chain of ``--ops`` (1000) elementwise ops on a (4, 4) float32 tensor, where
  the work is nothing and the per-op bookkeeping is everything. One step of the chain
  is ``x = ((x * 1.0001 + 0.001).tanh() * w).sin()``: five op calls (mul by a scalar,
  add a scalar, tanh, mul by a constant (4, 4) tensor, sin), each counted as one op.
  Forward only (nothing requires grad) for graphgrad, PyTorch and NumPy; forward plus
  backward (the input requires grad, then ``y.sum().backward()``) for graphgrad and
  PyTorch. Per-op cost is the total time of the chain (and, for fwd+bwd, of the sum
  and the whole backward pass) divided by the number of chain ops.
* large: (1000, 1000) float32 ``A @ B`` and ``tanh(A)``, forward only: graphgrad
  against NumPy (PyTorch for reference), where the wrapper should cost nothing.

Fairness: everything runs on one thread. The BLAS/OpenMP thread variables
(OPENBLAS/OMP/MKL/VECLIB/NUMEXPR) are set to 1 below, before NumPy or PyTorch is
imported, and ``torch.set_num_threads(1)``. The same Python function runs the chain
for graphgrad and PyTorch (NumPy's calls ``np.tanh``/``np.sin`` instead of methods),
so the loop overhead is the same on every side.

Noise: each timing is taken over ``--repeats`` samples after warm-up; the samples of
all contenders are interleaved, so drift on a busy machine hits them alike, and each
sample repeats the call until it lasts ``--min-sample-ms``. The headline ratios use
the *minimum* over samples: on a shared machine other processes only ever add time,
so the fastest sample is the best estimate of what the code itself costs. Medians
(and their ratios) and the median process CPU time are reported beside them. The garbage collector
stays on (it is part of the cost a user
pays) but ``gc.collect()`` runs between samples, outside the timed region. Results
are checked against each other (values and gradients).

Prints one JSON object::

    python bench/op_overhead.py            # full run (about a minute)
    python bench/op_overhead.py --quick    # fewer, shorter samples
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
import torch  # noqa: E402

import graphgrad as gg  # noqa: E402

torch.set_num_threads(1)

OPS_PER_STEP = 5
OP_MIX = "x = ((x * 1.0001 + 0.001).tanh() * w).sin(): mul(scalar), add(scalar), tanh, " \
         "mul(tensor), sin"
TARGETS = {"tiny_fwdbwd_ratio_vs_torch": 2.0, "large_ratio_vs_numpy": 1.1}


# ---- the workloads -------------------------------------------------------------------

def chain(x, w, steps: int):
    """graphgrad and PyTorch: the same code, methods and operators."""
    for _ in range(steps):
        x = ((x * 1.0001 + 0.001).tanh() * w).sin()
    return x


def chain_numpy(x, w, steps: int):
    tanh, sin = np.tanh, np.sin
    for _ in range(steps):
        x = sin(tanh(x * 1.0001 + 0.001) * w)
    return x


# ---- timing --------------------------------------------------------------------------

def _scaled(times: dict, per: float, unit: str) -> dict:
    """``timing.time_interleaved``'s milliseconds per call as ``unit`` (us or ms) per
    ``per`` (ops per call)."""
    f = {"us": 1e3, "ms": 1.0}[unit] / per
    return {k: {"median_" + unit: v["median_ms"] * f, "min_" + unit: v["min_ms"] * f,
                "max_" + unit: v["max_ms"] * f, "cpu_median_" + unit: v["cpu_median_ms"] * f,
                "calls_per_sample": v["calls_per_sample"], "samples": v["samples"]}
            for k, v in times.items()}


# ---- the cases -----------------------------------------------------------------------

def tiny_case(args, rng) -> dict:
    steps = args.ops // OPS_PER_STEP
    n_ops = steps * OPS_PER_STEP
    x0 = rng.uniform(-1, 1, (4, 4)).astype(np.float32)
    w0 = rng.uniform(0.5, 1.5, (4, 4)).astype(np.float32)

    xg, wg = gg.tensor(x0), gg.tensor(w0)
    xt, wt = torch.tensor(x0), torch.tensor(w0)
    xg_rg = gg.tensor(x0, requires_grad=True)
    xt_rg = torch.tensor(x0, requires_grad=True)

    def gg_fwd():
        return chain(xg, wg, steps)

    def torch_fwd():
        return chain(xt, wt, steps)

    def numpy_fwd():
        return chain_numpy(x0, w0, steps)

    def gg_fwdbwd():
        xg_rg.grad = None
        chain(xg_rg, wg, steps).sum().backward()

    def torch_fwdbwd():
        xt_rg.grad = None
        chain(xt_rg, wt, steps).sum().backward()

    # correctness: same values, same gradients, float32 throughout
    yg, yt, yn = gg_fwd().numpy(), torch_fwd().numpy(), numpy_fwd()
    gg_fwdbwd()
    torch_fwdbwd()
    gg_grad, t_grad = xg_rg.grad.numpy(), xt_rg.grad.numpy()
    check = {
        "dtypes": [str(yg.dtype), str(yt.dtype), str(yn.dtype), str(gg_grad.dtype)],
        "max_abs_diff_fwd_graphgrad_torch": float(np.max(np.abs(yg - yt))),
        "max_abs_diff_fwd_graphgrad_numpy": float(np.max(np.abs(yg - yn))),
        "max_abs_diff_grad_graphgrad_torch": float(np.max(np.abs(gg_grad - t_grad))),
    }
    check["agree"] = bool(
        yg.dtype == yt.dtype == yn.dtype == gg_grad.dtype == np.float32
        and np.allclose(yg, yt, rtol=1e-4, atol=1e-5) and np.allclose(yg, yn, rtol=1e-4, atol=1e-5)
        and np.allclose(gg_grad, t_grad, rtol=1e-3, atol=1e-5))

    fns = {"graphgrad.fwd": gg_fwd, "torch.fwd": torch_fwd, "numpy.fwd": numpy_fwd,
           "graphgrad.fwdbwd": gg_fwdbwd, "torch.fwdbwd": torch_fwdbwd}
    times = _scaled(time_interleaved(fns, args.repeats, args.warmup, args.min_sample_ms / 1e3,
                                     between=gc.collect),
                    n_ops, "us")
    med = {k: v["median_us"] for k, v in times.items()}
    mn = {k: v["min_us"] for k, v in times.items()}
    cpu = {k: v["cpu_median_us"] for k, v in times.items()}
    return {
        "shape": [4, 4], "dtype": "float32", "ops": n_ops, "op_mix": OP_MIX,
        "per_op_note": "fwdbwd: (chain + sum + backward) / ops",
        "us_per_op_median": med,
        "us_per_op_min": mn,
        "timing_detail": times,
        "derived_us_per_op_min": {
            "graphgrad_backward_only": mn["graphgrad.fwdbwd"] - mn["graphgrad.fwd"],
            "torch_backward_only": mn["torch.fwdbwd"] - mn["torch.fwd"],
            "graphgrad_wrapper_over_numpy": mn["graphgrad.fwd"] - mn["numpy.fwd"],
            "torch_wrapper_over_numpy": mn["torch.fwd"] - mn["numpy.fwd"],
        },
        "ratios": {
            "fwd_graphgrad_over_torch_min": mn["graphgrad.fwd"] / mn["torch.fwd"],
            "fwdbwd_graphgrad_over_torch_min": mn["graphgrad.fwdbwd"] / mn["torch.fwdbwd"],
            "fwd_graphgrad_over_numpy_min": mn["graphgrad.fwd"] / mn["numpy.fwd"],
            "fwd_torch_over_numpy_min": mn["torch.fwd"] / mn["numpy.fwd"],
            "fwd_graphgrad_over_torch_median": med["graphgrad.fwd"] / med["torch.fwd"],
            "fwdbwd_graphgrad_over_torch_median": med["graphgrad.fwdbwd"] / med["torch.fwdbwd"],
            "fwd_graphgrad_over_torch_cpu": cpu["graphgrad.fwd"] / cpu["torch.fwd"],
            "fwdbwd_graphgrad_over_torch_cpu": cpu["graphgrad.fwdbwd"] / cpu["torch.fwdbwd"],
        },
        "check": check,
    }


def large_case(args, rng) -> dict:
    n = args.large_n
    a0 = rng.standard_normal((n, n)).astype(np.float32)
    b0 = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    ag, bg = gg.from_numpy(a0), gg.from_numpy(b0)
    at, bt = torch.from_numpy(a0), torch.from_numpy(b0)
    fns = {
        "graphgrad.matmul": lambda: ag @ bg,
        "numpy.matmul": lambda: a0 @ b0,
        "torch.matmul": lambda: at @ bt,
        "graphgrad.tanh": lambda: ag.tanh(),
        "numpy.tanh": lambda: np.tanh(a0),
        "torch.tanh": lambda: at.tanh(),
    }
    mg, mn_, mt = (ag @ bg).numpy(), a0 @ b0, (at @ bt).numpy()
    tg, tn, tt = ag.tanh().numpy(), np.tanh(a0), at.tanh().numpy()
    check = {
        "dtypes": [str(mg.dtype), str(tg.dtype)],
        "graphgrad_equals_numpy_bitwise": bool(np.array_equal(mg, mn_) and np.array_equal(tg, tn)),
        "max_abs_diff_matmul_graphgrad_torch": float(np.max(np.abs(mg - mt))),
        "max_abs_diff_tanh_graphgrad_torch": float(np.max(np.abs(tg - tt))),
    }
    check["agree"] = bool(mg.dtype == tg.dtype == np.float32
                          and check["graphgrad_equals_numpy_bitwise"]
                          and np.allclose(mg, mt, rtol=1e-3, atol=1e-3)
                          and np.allclose(tg, tt, rtol=1e-5, atol=1e-6))
    times = _scaled(time_interleaved(fns, args.large_repeats, args.warmup,
                                     args.min_sample_ms / 1e3, between=gc.collect), 1, "ms")
    med = {k: v["median_ms"] for k, v in times.items()}
    mn = {k: v["min_ms"] for k, v in times.items()}
    ratios = {}
    for op in ("matmul", "tanh"):
        ratios[f"{op}_graphgrad_over_numpy_min"] = mn[f"graphgrad.{op}"] / mn[f"numpy.{op}"]
        ratios[f"{op}_graphgrad_over_numpy_median"] = med[f"graphgrad.{op}"] / med[f"numpy.{op}"]
        ratios[f"{op}_torch_over_numpy_min"] = mn[f"torch.{op}"] / mn[f"numpy.{op}"]
    ratios["total_graphgrad_over_numpy_min"] = (
        (mn["graphgrad.matmul"] + mn["graphgrad.tanh"])
        / (mn["numpy.matmul"] + mn["numpy.tanh"]))
    return {"shape": [n, n], "dtype": "float32", "ms_median": med, "ms_min": mn,
            "timing_detail": times, "ratios": ratios, "check": check}


# ---- main ----------------------------------------------------------------------------

def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    p.add_argument("--ops", type=int, default=1000, help="ops in the tiny chain")
    p.add_argument("--large-n", type=int, default=1000, help="size of the large case")
    p.add_argument("--repeats", type=int, default=None, help="samples per tiny timing")
    p.add_argument("--large-repeats", type=int, default=None, help="samples per large timing")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--min-sample-ms", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.ops < OPS_PER_STEP:
        p.error(f"--ops must be at least {OPS_PER_STEP}")
    if args.repeats is None:
        args.repeats = 7 if args.quick else 41
    if args.large_repeats is None:
        args.large_repeats = 5 if args.quick else 21
    if args.warmup is None:
        args.warmup = 1 if args.quick else 3
    if args.min_sample_ms is None:
        args.min_sample_ms = 5.0 if args.quick else 20.0
    rng = np.random.default_rng(args.seed)
    tiny = tiny_case(args, rng)
    large = large_case(args, rng)
    r_fwd = tiny["ratios"]["fwd_graphgrad_over_torch_min"]
    r_fb = tiny["ratios"]["fwdbwd_graphgrad_over_torch_min"]
    r_large = max(large["ratios"]["matmul_graphgrad_over_numpy_min"],
                  large["ratios"]["tanh_graphgrad_over_numpy_min"])
    result = {
        "benchmark": "eager per-op overhead: graphgrad vs PyTorch vs NumPy",
        "tiny_fwd_ratio_vs_torch": r_fwd,
        "tiny_fwdbwd_ratio_vs_torch": r_fb,
        "large_ratio_vs_numpy": r_large,
        "targets": {
            "tiny_fwdbwd_ratio_vs_torch_le": TARGETS["tiny_fwdbwd_ratio_vs_torch"],
            "large_ratio_vs_numpy_le": TARGETS["large_ratio_vs_numpy"],
            "tiny_fwdbwd_met": r_fb <= TARGETS["tiny_fwdbwd_ratio_vs_torch"],
            "large_met": r_large <= TARGETS["large_ratio_vs_numpy"],
        },
        "all_agree": tiny["check"]["agree"] and large["check"]["agree"],
        "config": {
            "quick": args.quick, "ops": args.ops, "large_n": args.large_n,
            "repeats": args.repeats, "large_repeats": args.large_repeats,
            "warmup": args.warmup, "min_sample_ms": args.min_sample_ms, "seed": args.seed,
            "statistic": "min over interleaved samples of wall time per call (the headline "
                         "ratios use it); medians, their ratios and timing_detail (max, "
                         "process CPU time) beside it",
            "large_ratio_definition": "max over matmul and tanh of graphgrad/numpy (min)",
            "gc": "enabled while timing; gc.collect() between samples",
            "threads": {"torch.get_num_threads": torch.get_num_threads(),
                        **{v: os.environ.get(v) for v in _THREAD_VARS}},
            "versions": {"python": platform.python_version(), "numpy": np.__version__,
                         "torch": torch.__version__, "graphgrad": gg.__version__},
            "cpu_count": os.cpu_count(),
        },
        "tiny": tiny,
        "large": large,
    }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return result


if __name__ == "__main__":
    main()
