"""Multi-process checks: each test launches 2 ranks through graphgrad's launcher
(python -m graphgrad.distributed.run, graphgrad run --nproc, graphgrad train --nproc) and
reads what the ranks report. The programs are in tests/distributed_programs/; each one
runs many checks in one launch, so the suite starts few MPI jobs.

The subprocess timeout only stops a hang; no result depends on how long a run takes.
Skipped, saying why, only where MPI (mpi4py and an mpiexec) is not installed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphgrad.distributed import is_available
from graphgrad.distributed.launch import find_mpiexec

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "distributed_programs"
HANG_GUARD = 600  # seconds; a run takes a few


def _mpi_missing() -> str | None:
    if not is_available():
        return "mpi4py is not installed: pip install 'graphgrad[distributed]'"
    try:
        find_mpiexec()
    except RuntimeError as e:
        return str(e)
    return None


pytestmark = pytest.mark.skipif(_mpi_missing() is not None, reason=str(_mpi_missing()))


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          errors="replace", env=env, cwd=cwd, timeout=HANG_GUARD)


def _launch(program: str, *args: str) -> subprocess.CompletedProcess:
    return _run("-m", "graphgrad.distributed.run", "--nproc", "2",
                str(PROGRAMS / program), *args)


def _oks(out: subprocess.CompletedProcess) -> list[str]:
    return [line[3:] for line in out.stdout.splitlines() if line.startswith("ok ")]


@pytest.fixture(scope="module")
def collectives():
    return _launch("collectives.py")


@pytest.fixture(scope="module")
def ddp():
    return _launch("ddp.py")


def test_every_collective_and_reduce_op_matches_numpy(collectives):
    assert collectives.returncode == 0, collectives.stderr[-4000:]
    oks = _oks(collectives)
    for dtype in ("float32", "float64", "int64"):
        for shape in ("()", "(3,)", "(2, 3)"):
            for async_op in (False, True):
                tag = f"{dtype} {shape} async={async_op}"
                assert f"all_reduce reduce {tag}" in oks
                assert f"broadcast all_gather all_gather_into_tensor gather scatter {tag}" in oks
                assert f"send recv isend irecv {tag}" in oks
                assert (f"reduce_scatter reduce_scatter_tensor {tag}" in oks) == (shape != "()")
    for check in ("BAND BOR BXOR PREMUL_SUM", "Work.is_completed before and after wait",
                  "Work.get_future: value, then, add_done_callback",
                  "requires_grad tensors: in place, invisible to autograd",
                  "non-contiguous tensor", "new_group subsets",
                  "all_gather_object broadcast_object_list", "destroy_process_group"):
        assert check in oks


def test_ddp_on_two_ranks_equals_one_process(ddp):
    assert ddp.returncode == 0, ddp.stderr[-4000:]
    oks = _oks(ddp)
    assert "DDP MLP 2 ranks on halves == 1 process on the whole batch, 20 steps, float64" in oks
    assert ("DDP CNN+BatchNorm (per-rank batch statistics, rank 0's running statistics), "
            "20 steps") in oks
    assert "no_sync accumulation" in oks
    assert "buckets: one in the first iteration, rebuilt by size in ready order after it" in oks
    assert "gradient_as_bucket_view: .grad views the buckets; equal to 1 process" in oks
    assert ("a bucket of one parameter: its gradient array is reduced in place and becomes "
            ".grad") in oks
    assert ("a large gradient in a bucket with others: reduced in its own memory, the rest "
            "copied") in oks
    assert "unused parameters without find_unused_parameters: PyTorch's error at iteration 1" \
        in oks
    assert ("find_unused_parameters: equal to 1 process; unused .grad stays None; used on one "
            "rank") in oks
    assert ("static_graph: unused parameters found in the first iteration only; buckets "
            "rebuilt") in oks
    assert ("checkpoint: rank 0 saves, the others wait at a barrier, every rank loads the "
            "same state") in oks


def test_ddp_allreduce_overlaps_backward(ddp):
    """The execution log: the first bucket's allreduce was launched when only some of the
    gradients were ready, i.e. while backward was still running."""
    line = next(o for o in _oks(ddp) if o.startswith("overlap:"))
    launches, ready, total = map(int, re.search(
        r"first of (\d+) bucket allreduces launched with (\d+) of (\d+)", line).groups())
    assert launches > 1 and ready < total


def test_a_rank_that_raises_makes_the_other_raise_and_the_launcher_names_it():
    """Rank 0, waiting in a collective of step 3, raises a RuntimeError naming rank 1 and
    its error (as gloo's ranks raise when a peer exits) before the job is aborted."""
    out = _launch("failure.py", "raise")
    assert out.returncode != 0
    assert "rank 1 failed: ValueError: rank 1 fails on purpose at step 3" in out.stderr
    raised = re.search(r"RuntimeError: \[Rank 0\] (\w+): rank 1 failed: ValueError: rank 1 "
                       r"fails on purpose at step 3", out.stderr)
    assert raised and raised.group(1) in ("allreduce", "broadcast"), out.stderr[-4000:]
    assert "rank 0 stopped: RuntimeError: [Rank 0]" in out.stderr
    assert out.stderr.index("run: rank 1 failed:") < out.stderr.index("run: rank 0 stopped:")
    assert "should not finish" not in out.stdout


def test_with_three_ranks_every_other_rank_raises_before_the_abort():
    """The failed rank aborts the job only once each other rank has reported."""
    out = _run("-m", "graphgrad.distributed.run", "--nproc", "3",
               str(PROGRAMS / "failure.py"), "raise")
    assert out.returncode != 0
    assert "run: rank 1 failed: ValueError: rank 1 fails on purpose at step 3" in out.stderr
    for rank in (0, 2):
        assert (f"run: rank {rank} stopped: RuntimeError: [Rank {rank}] allreduce: rank 1 "
                f"failed: ValueError") in out.stderr, out.stderr[-4000:]


def test_a_killed_rank_makes_the_others_raise_naming_it():
    """Rank 1 kills itself with SIGKILL at step 3: the survivors, waiting in a collective,
    raise RuntimeError naming rank 1 (Open MPI's ULFM reports the dead process) instead
    of being killed by mpiexec; the launcher names the dead rank and exits non-zero."""
    for nproc in (2, 3):
        out = _run("-m", "graphgrad.distributed.run", "--nproc", str(nproc),
                   str(PROGRAMS / "failure.py"), "kill")
        assert out.returncode != 0
        assert re.search(r"run: rank 1 (was killed by signal 9|died: its process died)",
                         out.stderr), out.stderr[-4000:]
        for rank in sorted({0, nproc - 1} - {1}):
            assert re.search(rf"RuntimeError: \[Rank {rank}\] (allreduce|broadcast): rank 1 "
                             r"failed: its process died without a word", out.stderr), \
                out.stderr[-4000:]
            assert f"run: rank {rank} stopped: RuntimeError: [Rank {rank}]" in out.stderr
        assert "should not finish" not in out.stdout


def test_a_rank_that_never_joins_makes_the_other_time_out():
    out = _launch("failure.py", "timeout")
    assert out.returncode != 0
    assert "rank 0 failed: RuntimeError: [Rank 0] allreduce: Timed out waiting 3000ms" \
        in out.stderr
    assert "should not get here" not in out.stdout


def test_graphgrad_run_nproc_runs_an_unmodified_pytorch_ddp_program():
    out = _run("-m", "graphgrad", "run", "--nproc", "2",
               str(PROGRAMS / "torch_ddp.py"))
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.splitlines() == ["ok torch program"]


def test_graphgrad_train_nproc_2_trains_data_parallel(tmp_path):
    out = _run("-m", "graphgrad", "train", "--nproc", "2", "--epochs", "3", "--quiet",
               "--no-plot", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr[-4000:]
    acc = float(re.search(r"test accuracy: ([\d.]+)", out.stdout).group(1))
    assert acc > 0.85
    assert out.stdout.count("test accuracy") == 1  # rank 0 prints, rank 1 does not
    assert (tmp_path / "digits_mlp.npz").is_file()


def test_graphgrad_run_nproc_names_the_failed_rank():
    out = _run("-m", "graphgrad", "run", "--nproc", "2", str(PROGRAMS / "failure.py"),
               "raise")
    assert out.returncode != 0
    assert "graphgrad run: rank 1 failed: ValueError: rank 1 fails on purpose at step 3" \
        in out.stderr
