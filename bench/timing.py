"""Shared by the benchmarks: one BLAS thread (set before NumPy is imported, so import
this module first) and interleaved timing of several callables."""

from __future__ import annotations

import os

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
for _v in THREAD_VARS:  # must precede the NumPy/PyTorch imports to take effect
    os.environ[_v] = "1"

import statistics  # noqa: E402
import time  # noqa: E402


def _calibrate(fn, min_s: float) -> int:
    """Calls per sample so that one sample lasts at least ``min_s``."""
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_s or number >= 1 << 16:
            return number
        number = max(number * 2, int(number * min_s / max(dt, 1e-9) * 1.2))


def time_interleaved(fns: dict, repeats: int, warmup: int, min_s: float,
                     between=None) -> dict:
    """Per-call wall time (median, min, max) and process CPU time (median) of each fn,
    samples interleaved across fns. Everything runs on one thread, so CPU time leaves
    out the time the process waited for a core on a busy machine. ``between``, if
    given, is called before each sample, outside the timed region (e.g. ``gc.collect``)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    numbers = {k: _calibrate(fn, min_s) for k, fn in fns.items()}
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            n = numbers[k]
            if between is not None:
                between()
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                fn()
            wall[k].append((time.perf_counter() - t0) / n)
            cpu[k].append((time.process_time() - c0) / n)
    return {k: {"median_ms": statistics.median(s) * 1e3, "min_ms": min(s) * 1e3,
                "max_ms": max(s) * 1e3, "cpu_median_ms": statistics.median(cpu[k]) * 1e3,
                "calls_per_sample": numbers[k], "samples": len(s)}
            for k, s in wall.items()}
