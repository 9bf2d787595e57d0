"""Layer ``run``: run an unmodified PyTorch program on graphgrad.

    graphgrad run script.py [args...]
    python -m graphgrad.run script.py [args...]
    graphgrad run --nproc N script.py [args...]     (N ranks through mpiexec)

Every ``import torch`` / ``import torch.nn.functional as F`` / ``from torch.utils.data
import DataLoader`` in the program (and in what it imports) resolves to graphgrad's
modules (torch_compat/importer.py). The script runs as ``__main__`` with ``sys.argv`` and
``sys.path[0]`` set as ``python script.py args...`` sets them; the command exits with the
script's exit code and prints its traceback from the script's own frames. Where the
program reaches a torch module or attribute graphgrad lacks, the error says so.

With ``--nproc N`` the script runs as N ranks of an MPI job on this machine
(graphgrad.distributed.launch): ``torch.distributed`` is graphgrad.distributed on MPI,
``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` are set as torchrun sets them, each rank gets
cores // N BLAS threads, and the command exits non-zero naming the rank that failed.
"""

from __future__ import annotations

import os
import re
import runpy
import sys
import traceback
import types

from graphgrad.distributed.launch import launch, run_rank
from graphgrad.torch_compat.importer import STAND_INS, install_as_torch

__all__ = ["run_script", "run_ranks", "main"]

_USAGE = "usage: python -m graphgrad.run [--nproc N] script.py [args...]"
_TORCH_NAMES = {graphgrad: torch for torch, graphgrad in STAND_INS.items()}


def _torch_name(module_name: str) -> str:
    """The torch spelling of a graphgrad module name (graphgrad.nn -> torch.nn)."""
    if module_name in _TORCH_NAMES:
        return _TORCH_NAMES[module_name]
    return "torch" + module_name.removeprefix("graphgrad")


def _explain(exc: BaseException) -> None:
    """Add a note saying which torch feature graphgrad lacks, when that is the error: an
    attribute missing on a graphgrad module, or ``from torch import X`` of a missing X."""
    missing = None
    if isinstance(exc, AttributeError) and isinstance(getattr(exc, "obj", None),
                                                      types.ModuleType):
        module = exc.obj.__name__
        if module.split(".")[0] == "graphgrad" and exc.name:
            missing = f"{_torch_name(module)}.{exc.name}"
    elif type(exc) is ImportError:  # not ModuleNotFoundError: that one already says it
        found = re.match(r"cannot import name '(\w+)' from '(graphgrad[\w.]*)'", str(exc))
        if found:
            missing = f"{_torch_name(found.group(2))}.{found.group(1)}"
    if missing:
        exc.add_note(f"{missing} is not in graphgrad yet")


def _print_traceback(exc: BaseException, script: str) -> None:
    """The traceback from the script's first frame on, as ``python script.py`` shows it."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)


def run_script(path: str, args: list[str]) -> int:
    """Run the PyTorch program ``path`` with ``args`` on graphgrad; its exit code."""
    script = os.path.abspath(path)
    if not os.path.isfile(script):
        print(f"graphgrad run: can't open file {path!r}: [Errno 2] No such file or directory",
              file=sys.stderr)
        return 2
    install_as_torch()
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(script)  # python puts the script's folder first
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:  # sys.exit(code) in the script: python's rules for the code
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException as e:  # noqa: BLE001 - reported like python reports it
        sys.last_value = e  # as the interpreter keeps it: a launched rank reports it
        _explain(e)
        _print_traceback(e, script)
        return 130 if isinstance(e, KeyboardInterrupt) else 1
    finally:
        sys.stdout.flush()
    return 0


def run_ranks(nproc: int, path: str, args: list[str]) -> int:
    """Run the PyTorch program ``path`` as ``nproc`` MPI ranks; 0 when all succeeded."""
    if not os.path.isfile(path):
        print(f"graphgrad run: can't open file {path!r}: [Errno 2] No such file or directory",
              file=sys.stderr)
        return 2
    return launch(nproc, [sys.executable, "-m", "graphgrad.run", "--rank", path, *args])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{_USAGE}\n\n{__doc__.split(chr(10) + chr(10), 2)[2]}")
        return 0 if argv else 2
    if argv[0] == "--nproc" and len(argv) >= 3:
        return run_ranks(int(argv[1]), argv[2], argv[3:])
    if argv[0] == "--rank" and len(argv) >= 2:  # one rank of a launch (or of mpiexec/srun)
        return run_rank(run_script, argv[1], argv[2:])
    return run_script(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
