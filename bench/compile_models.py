"""``graphgrad.compile(model)`` against graphgrad eager on the models of bench/models.py
(cnn, lstm, gru, transformer; same builders, data and torch initial weights): inference
(``no_grad``) and a training step (cross-entropy, backward, SGD). Columns: ``eager``,
``compiled`` (the memory plan of array programs on, the default, backends/memory_plan.py)
and ``compiled_noplan`` (``fused.config.memory_plan = False`` when the programs are
built; absent where graphgrad has no such switch), timed interleaved in one process, one
BLAS thread. Per column: min and median ms, the ratio to eager (mins, medians), the
tracemalloc peak of one step and the minor page faults per step
(``getrusage(RUSAGE_SELF).ru_minflt``, averaged over ``--fault-steps``).

    python bench/compile_models.py [--repeats 5] [--models cnn,lstm,gru,transformer]
"""

from __future__ import annotations

import timing  # noqa: F401 (first: one BLAS thread, set before NumPy loads BLAS)

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import tracemalloc  # noqa: E402

import models  # noqa: E402 (bench/models.py: the builders and data)

MODELS = ("cnn", "lstm", "gru", "transformer")


def _model(name: str):
    """A graphgrad model of ``name`` with torch's seed-0 initial weights."""
    import torch

    import graphgrad as gg
    torch.manual_seed(0)
    tm = models._cnn(torch.nn) if name == "cnn" else getattr(models._Heads, name)(torch)
    m = models._cnn(gg.nn) if name == "cnn" else getattr(models._Heads, name)(gg)
    m.load_state_dict({k: gg.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    return m


def _steps(name: str, variant: str) -> tuple:
    """(inference step, training step) of one column; compiled programs are built here,
    under the column's setting of the memory plan."""
    import graphgrad as gg
    from graphgrad.backends import fused
    a, b = models._data(name)
    x, y = gg.tensor(a), gg.tensor(b)
    loss_fn = gg.nn.CrossEntropyLoss()
    infer_model, train_model = _model(name), _model(name)
    if variant != "eager":   # (a cache of its own: the columns never share a program)
        from graphgrad.dynamo import CompiledFunction, OptimizedModule
        infer_model, train_model = (
            OptimizedModule(m, CompiledFunction(type(m).forward, "default", share=False))
            for m in (infer_model, train_model))
    opt = gg.optim.SGD(train_model.parameters(), lr=0.01)

    def infer():
        with gg.no_grad():
            return infer_model(x)

    def train():
        opt.zero_grad()
        loss = loss_fn(train_model(x), y)
        loss.backward()
        opt.step()
        return loss

    saved = getattr(fused.config, "memory_plan", None)
    if saved is not None:
        fused.config.memory_plan = variant != "compiled_noplan"
    try:
        infer()
        train()   # built now (the AOT forward and backward too)
    finally:
        if saved is not None:
            fused.config.memory_plan = saved
    return infer, train


def _memory(fn, fault_steps: int) -> dict:
    fn()
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(fault_steps):
        fn()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    return {"tracemalloc_peak_mib": round(peak / 2**20, 3),
            "minflt_per_step": round(faults / fault_steps, 1)}


def bench_model(name: str, repeats: int, fault_steps: int) -> dict:
    from graphgrad.backends import fused
    variants = ["eager", "compiled"]
    if hasattr(fused.config, "memory_plan"):
        variants.append("compiled_noplan")
    steps = {v: _steps(name, v) for v in variants}
    out = {}
    for i, kind in enumerate(("inference", "train_step")):
        fns = {v: s[i] for v, s in steps.items()}
        t = timing.time_interleaved(fns, repeats=repeats, warmup=1, min_s=0.2,
                                    between=gc.collect)
        entry = {"min_ms": {v: round(r["min_ms"], 3) for v, r in t.items()},
                 "median_ms": {v: round(r["median_ms"], 3) for v, r in t.items()}}
        for v in variants[1:]:
            entry[f"{v}_over_eager_min"] = round(t[v]["min_ms"] / t["eager"]["min_ms"], 3)
            entry[f"{v}_over_eager_median"] = round(
                t[v]["median_ms"] / t["eager"]["median_ms"], 3)
        entry["memory"] = {v: _memory(f, fault_steps) for v, f in fns.items()}
        out[kind] = entry
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--fault-steps", type=int, default=5)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    import graphgrad
    report = {"bench": "compile_models", "graphgrad": os.path.dirname(graphgrad.__file__),
              "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
              "models": {}}
    for name in args.models.split(","):
        report["models"][name] = bench_model(name, args.repeats, args.fault_steps)
    report["uptime_after"] = subprocess.run(["uptime"], capture_output=True,
                                            text=True).stdout.strip()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
