"""Layer ``distributed``: ``python -m graphgrad.distributed.run``, graphgrad's torchrun.

    python -m graphgrad.distributed.run --nproc 2 train.py [args...]

starts ``train.py`` as N ranks through mpiexec on this machine (see ``launch``); each rank
runs it as ``python train.py args...`` would, with ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` set as torchrun sets them. The command exits 0
when every rank succeeded, else non-zero after a line naming the failed rank. For
unmodified PyTorch programs (``import torch``), use ``graphgrad run --nproc N``.

On several machines, start the ranks with your cluster's MPI launcher instead, e.g.
``mpiexec -n 8 -H node1:4,node2:4 python -m graphgrad.distributed.run --rank train.py``
or ``srun -n 8 python -m graphgrad.distributed.run --rank train.py`` under Slurm.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback

from .launch import launch, run_rank

__all__ = ["main", "run_file"]


def run_file(path: str, args: list[str]) -> int:
    """Run the Python file ``path`` as ``__main__`` with ``sys.argv = [path, *args]``; on
    an exception, its traceback from the file's first frame on (as ``python path`` shows
    it) and exit code 1."""
    script = os.path.abspath(path)
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - reported like python reports it
        sys.last_value = e  # run_rank reports it to the launcher
        tb = e.__traceback__
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb or e.__traceback__)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m graphgrad.distributed.run",
        description=__doc__.split("\n\n")[1].strip() + "\n" + __doc__.split("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", "--nproc-per-node", "--nproc_per_node", type=int,
                        default=1, help="number of ranks on this machine (default 1)")
    parser.add_argument("--rank", action="store_true",
                        help="run the script as one rank of a job that mpiexec or srun "
                             "started (for multi-machine runs); no launching")
    parser.add_argument("script", help="the Python program")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    opts = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if opts.rank:
        return run_rank(run_file, opts.script, opts.args)
    if not os.path.isfile(opts.script):
        print(f"{parser.prog}: can't open file {opts.script!r}", file=sys.stderr)
        return 2
    return launch(opts.nproc, [sys.executable, "-m", "graphgrad.distributed.run", "--rank",
                               opts.script, *opts.args], prog=parser.prog)


if __name__ == "__main__":
    sys.exit(main())
