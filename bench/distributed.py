"""Data-parallel training on 1 vs 2 ranks, and allreduce bandwidth through DDP's path vs
mpi4py called directly. Prints one JSON object.

    python bench/distributed.py [--quick]

* **throughput**: samples/s of ``graphgrad train``'s digits MLP (``train_digits``, batch
  64, 3 epochs; its mean step time) and of a compute-heavier wide MLP (784-2048-2048-10,
  synthetic data, SGD) on 1 rank (no DDP) and 2 ranks (DDP). ``wide``: strong scaling,
  the global batch 256 split in halves; ``wide_weak``: weak scaling, 256 per rank (as
  DDP programs run: DistributedSampler and a per-process DataLoader(batch_size)), the way
  DDP throughput is usually reported. Every rank runs BLAS on 1 thread (the thread
  variables are set to 1 before launching, in both cases). samples/s = global batch /
  step time: the digits MLP's mean (train_digits' own), the wide MLP's median after 2
  warm-up steps (the slowest rank's). Target: 2 ranks >= 1.6x 1 rank on the wide MLP.
  The wide MLP also reports its step's CPU time per rank (``speedup_by_cpu_time``: the
  speedup 2 ranks would reach with a free core each; waiting spins, so it counts) and,
  from steps of a plain copy of the model run in alternation on each rank with no
  communication, ``speedup_without_communication``: the ceiling that the ranks' own
  computing, side by side on this machine, leaves to DDP.
* **allreduce**: 2 ranks, float32 buffers of 1, 4, 16, 64 and 100 MB; median and min
  time (the measurements taken in turn within each repeat) of ``mpi4py``
  ``Allreduce(IN_PLACE)`` (raw), of raw plus one in-place division by the world size (a
  hand-written DDP's averaging), of ``graphgrad.distributed.all_reduce(...,
  async_op=True).wait()`` plus the division, and of a DDP backward over one parameter of
  that size minus the same backward without DDP (DDP's whole path: hook, allreduce,
  averaging, ``.grad``), also with ``gradient_as_bucket_view=True``. The parameter is
  alone in its bucket, so its gradient is reduced in its own memory (no copies). Target:
  DDP within 1.2x raw for large buffers; ratios over both peers are reported.

Every rank runs on this machine's cores; the report carries ``uptime``'s load averages
before and after, because other work on a shared machine slows the 2-rank runs most.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS")


# ---- the ranks' side ----------------------------------------------------------------------

def _world():
    import graphgrad.distributed as dist
    if os.environ.get("OMPI_COMM_WORLD_SIZE", "1") != "1":
        dist.init_process_group("mpi")
        return dist, dist.get_rank(), dist.get_world_size()
    return dist, 0, 1


def _digits(quick: bool) -> dict:
    from graphgrad.train import train_digits
    _, rank, world = _world()
    out = train_digits("mlp", epochs=1 if quick else 3, batch_size=64, quiet=True,
                       out_dir=tempfile.mkdtemp(), plot=False, distributed=world > 1)
    return {"step_ms": out["step_time_ms"], "batch": 64, "samples_per_s":
            64 / out["step_time_ms"] * 1000}


def _wide(quick: bool, weak: bool = False) -> dict:
    """Strong scaling: the global batch 256 split over the ranks; ``weak``: 256 per rank
    (DistributedSampler + a per-process DataLoader(batch_size=256), as DDP programs run).
    Each step with DDP alternates with one of a plain copy of the model (no DDP, no
    communication) on the same data: its time is what the ranks' computing alone costs
    while they share the machine, i.e. the speedup's ceiling."""
    import numpy as np

    import graphgrad as gg
    from graphgrad import nn
    dist, rank, world = _world()
    steps = 6 if quick else 20
    batch = 256 * world if weak else 256  # the global batch

    def mlp():
        gg.manual_seed(0)
        return nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048),
                             nn.ReLU(), nn.Linear(2048, 10))
    model, alone = mlp(), mlp()
    forward = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opts = {"ddp": gg.optim.SGD(model.parameters(), lr=0.01),
            "alone": gg.optim.SGD(alone.parameters(), lr=0.01)}
    rng = np.random.default_rng(rank)
    x = gg.tensor(rng.standard_normal((batch // world, 784)).astype(np.float32))
    y = gg.tensor(rng.integers(0, 10, batch // world))
    times: dict[str, list[float]] = {"ddp": [], "alone": []}
    cpu = []
    for _ in range(steps + 2):
        for name, net in (("ddp", forward), ("alone", alone)):
            t0, c0 = time.perf_counter(), time.process_time()
            loss = nn.functional.cross_entropy(net(x), y)
            opts[name].zero_grad()
            loss.backward()
            opts[name].step()
            times[name].append(time.perf_counter() - t0)
            if name == "ddp":
                cpu.append(time.process_time() - c0)
    # medians: robust to other processes' bursts; the slowest rank sets the pace
    step = gg.tensor([float(np.median(times["ddp"][2:])), float(np.median(cpu[2:])),
                      float(np.median(times["alone"][2:]))])
    if world > 1:
        dist.all_reduce(step, op=dist.ReduceOp.MAX)
    wall, cpu_step, alone_step = step.tolist()
    return {"step_ms": wall * 1000, "cpu_step_ms": cpu_step * 1000, "batch": batch,
            "samples_per_s": batch / wall, "samples_per_cpu_s": batch / cpu_step,
            "no_communication_step_ms": alone_step * 1000,
            "samples_per_s_without_communication": batch / alone_step}


def _timings(fs: dict, repeats: int, barrier) -> dict[str, tuple[float, float]]:
    """(median, min) seconds of each callable in ``fs``, run in turn within every repeat:
    a burst of other work on the shared machine then slows all of them alike, not one."""
    import numpy as np
    samples: dict[str, list[float]] = {name: [] for name in fs}
    for _ in range(repeats):
        for name, f in fs.items():
            barrier()
            t0 = time.perf_counter()
            f()
            samples[name].append(time.perf_counter() - t0)
    return {name: (float(np.median(v)), float(np.min(v))) for name, v in samples.items()}


class _OneParameter:
    """A module of one flat parameter of ``n`` float32s whose forward is ``w * 1``: its
    backward is one multiply, so a DDP backward is mostly DDP's gradient path."""

    @staticmethod
    def make(n: int):
        import graphgrad as gg
        from graphgrad import nn

        class One(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(gg.ones(n))

            def forward(self):
                return self.w * 1.0
        return One()


def _allreduce_row(mb: int, repeats: int, dist, world: int) -> dict:
    import numpy as np
    from mpi4py import MPI

    import graphgrad as gg
    from graphgrad import nn
    comm = MPI.COMM_WORLD
    n = mb * 1024 * 1024 // 4
    buf = np.ones(n, np.float32)
    t = gg.ones(n)

    def call():
        dist.all_reduce(t, async_op=True).wait()
        t._array /= world

    def raw_and_division():  # a hand-written DDP: allreduce, then average in place
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        np.multiply(buf, 1 / world, out=buf)
    plain = _OneParameter.make(n)
    ddp = nn.parallel.DistributedDataParallel(_OneParameter.make(n), bucket_cap_mb=128)
    ddp_view = nn.parallel.DistributedDataParallel(_OneParameter.make(n), bucket_cap_mb=128,
                                                   gradient_as_bucket_view=True)
    seed = gg.ones(n)

    def backward(model, w):
        w.grad = None  # each backward makes a new .grad, with DDP or without
        model().backward(seed)
    times = _timings({"raw": lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
                      "raw_div": raw_and_division, "ours": call,
                      "plain": lambda: backward(plain, plain.w),
                      "ddp": lambda: backward(ddp, ddp.module.w),
                      "view": lambda: backward(ddp_view, ddp_view.module.w)},
                     repeats, comm.Barrier)
    row: dict = {"MB": mb}
    for stat, k in (("median", 0), ("min", 1)):
        raw, raw_div, ours, plain_bw, ddp_bw, view_bw = (
            times[name][k] for name in ("raw", "raw_div", "ours", "plain", "ddp", "view"))
        ddp_path, view_path = ddp_bw - plain_bw, view_bw - plain_bw
        row[stat] = {
            "raw_mpi4py_ms": raw * 1000, "raw_plus_division_ms": raw_div * 1000,
            "all_reduce_ms": ours * 1000, "ddp_backward_minus_plain_ms": ddp_path * 1000,
            "ddp_bucket_view_backward_minus_plain_ms": view_path * 1000,
            "raw_GBps": 2 * (world - 1) / world * mb / 1024 / raw,
            "all_reduce_over_raw": ours / raw, "ddp_over_raw": ddp_path / raw,
            "ddp_bucket_view_over_raw": view_path / raw,
            "ddp_over_raw_plus_division": ddp_path / raw_div,
            "ddp_bucket_view_over_raw_plus_division": view_path / raw_div}
    return row


def _allreduce(quick: bool) -> dict:
    dist, rank, world = _world()
    repeats = 3 if quick else 15
    return {"world_size": world, "sizes": [_allreduce_row(mb, repeats, dist, world)
                                           for mb in (1, 4, 16, 64, 100)]}


TASKS = {"digits": _digits, "wide": _wide, "wide_weak": lambda quick: _wide(quick, weak=True),
         "allreduce": _allreduce}


def _worker(task: str, out: str, quick: bool) -> None:
    result = TASKS[task](quick)
    if int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == 0:
        Path(out).write_text(json.dumps(result))


# ---- the driver ---------------------------------------------------------------------------

def _launch(task: str, nproc: int, quick: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        env.update({name: "1" for name in THREAD_VARS})  # 1 BLAS thread per rank, always
        cmd = [sys.executable, "-m", "graphgrad.distributed.run", "--nproc", str(nproc),
               __file__, "--worker", task, str(out)] + (["--quick"] if quick else [])
        # the ranks print (train_digits does): keep stdout for the JSON report
        subprocess.run(cmd, env=env, check=True, timeout=1800, stdout=sys.stderr)
        return json.loads(out.read_text())


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--only", nargs="+", default=["digits", "wide", "wide_weak", "allreduce"],
                        choices=["digits", "wide", "wide_weak", "allreduce"],
                        help="the measurements to make (default: all)")
    parser.add_argument("--worker", nargs=2, metavar=("TASK", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(*args.worker, args.quick)
        return
    report = {"cores": os.cpu_count(), "uptime_before": _uptime(),
              "note": "shared machine: other processes' load slows the 2-rank runs most"}
    for task in [t for t in ("digits", "wide", "wide_weak") if t in args.only]:
        one, two = _launch(task, 1, args.quick), _launch(task, 2, args.quick)
        report[task] = {"1_rank": one, "2_ranks": two,
                        "speedup": two["samples_per_s"] / one["samples_per_s"]}
        if "samples_per_cpu_s" in one:  # what 2 ranks would give with a free core each
            report[task]["speedup_by_cpu_time"] = (two["samples_per_cpu_s"]
                                                   / one["samples_per_cpu_s"])
            # the ceiling: 2 ranks computing side by side with no communication at all
            report[task]["speedup_without_communication"] = (
                two["samples_per_s_without_communication"] / one["samples_per_s"])
    targets = report["targets"] = {}
    for task in ("wide", "wide_weak"):
        if task in report:
            targets[f"{task}_2_ranks_speedup_ge_1.6"] = report[task]["speedup"] >= 1.6
    if "allreduce" in args.only:
        report["allreduce"] = _launch("allreduce", 2, args.quick)
        large = report["allreduce"]["sizes"][-1]["median"]
        targets.update({
            "ddp_allreduce_within_1.2x_raw_at_100MB": large["ddp_over_raw"] <= 1.2,
            "ddp_bucket_view_within_1.2x_raw_at_100MB": large["ddp_bucket_view_over_raw"]
            <= 1.2,
            "ddp_allreduce_within_1.2x_raw_plus_division_at_100MB":
                large["ddp_over_raw_plus_division"] <= 1.2,
            "all_reduce_call_within_1.2x_raw_at_100MB": large["all_reduce_over_raw"] <= 1.2})
    report["uptime_after"] = _uptime()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
