"""Checkpoint safety measures (issue 14): does an interrupted save lose the old checkpoint,
and how much memory does loading a zip bomb take. Prints one JSON object.

    PYTHONPATH=. python bench/checkpoint_safety.py [--before REV] [--bomb-mib 1024]

"Before" runs the same interrupted saves against ``graphgrad/serialization.py`` as of git
revision REV (the code before this work) and loads the bomb with that code's ``load``
(or, without git, the way it did: ``np.load`` of every entry). The harness functions
here are also what tests/test_checkpoint_safety.py uses, so the test and the measure
cannot drift apart.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import tracemalloc
import zipfile

import numpy as np

BEFORE_REV = "4de84d9"  # main when issue 14 started: serialization.py wrote in place

# The child saves a checkpoint with a patched numpy.lib.format.write_array that, after the
# first array is written, tells the parent and blocks reading stdin: the parent then kills
# it at that exact point, with no sleeps or timing involved.
_CHILD = r"""
import sys, signal, importlib.util
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, even if started ignored
import numpy as np, numpy.lib.format as fmt
import graphgrad as gg
path, module_file = sys.argv[1], sys.argv[2]
if module_file:
    spec = importlib.util.spec_from_file_location("checkpoint_under_test", module_file)
    ser = importlib.util.module_from_spec(spec); spec.loader.exec_module(ser)
else:
    import graphgrad.serialization as ser
write_array = fmt.write_array
def blocking_write(fp, array, *args, **kwargs):
    write_array(fp, array, *args, **kwargs)
    sys.stdout.write("ready\n"); sys.stdout.flush()
    sys.stdin.read()
fmt.write_array = blocking_write
ser.save({"w": gg.arange(100000, dtype=gg.float64) + 1}, path)
"""


def serialization_module(module_file: str | None):
    """graphgrad.serialization, or the file ``module_file`` loaded as that module."""
    if not module_file:
        import graphgrad.serialization as ser
        return ser
    spec = importlib.util.spec_from_file_location("checkpoint_under_test", module_file)
    ser = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ser)
    return ser


def old_checkpoint(path: str) -> np.ndarray:
    """Write the checkpoint an interrupted save must not lose; return its array."""
    import graphgrad as gg
    w = np.arange(10.0)
    gg.save({"w": gg.tensor(w)}, path)
    return w


def survived(path: str, w: np.ndarray) -> bool:
    """Whether ``path`` still loads to the old checkpoint."""
    import graphgrad as gg
    try:
        return bool(np.array_equal(gg.load(path)["w"].numpy(), w))
    except (OSError, RuntimeError):
        return False


def interrupted_save(directory: str, how: str, module_file: str | None = None) -> dict:
    """Save over an existing checkpoint and interrupt it after the first array is written:
    ``how`` is "SIGKILL" or "SIGINT" (a child process killed there) or "ENOSPC" (an
    OSError there, in this process). Returns whether the old checkpoint survived, the
    files left in ``directory`` and the error the save raised."""
    path = os.path.join(directory, "ckpt.npz")
    w = old_checkpoint(path)
    error = None
    if how in ("SIGKILL", "SIGINT"):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        child = subprocess.Popen([sys.executable, "-c", _CHILD, path, module_file or ""],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env, text=True)
        ready = child.stdout.readline()
        if ready != "ready\n":
            child.kill()
            raise RuntimeError(f"the child never reached the write: {child.stderr.read()}")
        child.send_signal(getattr(signal, how))
        try:  # a guard against a hang, not a timing measure: the kill is immediate
            _, stderr = child.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            child.kill()
            raise
        error = (stderr.strip().splitlines() or [f"killed ({how})"])[-1]
    elif how == "ENOSPC":
        import numpy.lib.format as fmt
        write_array = fmt.write_array

        def full_disk(fp, array, *args, **kwargs):
            write_array(fp, array, *args, **kwargs)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        fmt.write_array = full_disk
        try:
            serialization_module(module_file).save({"w": np.ones(100000)}, path)
        except OSError as e:
            error = f"{type(e).__name__}: {e}"
        finally:
            fmt.write_array = write_array
    else:
        raise ValueError(f"unknown interruption {how!r}")
    return {"survived": survived(path, w), "files": sorted(os.listdir(directory)),
            "error": error}


def write_bomb(path: str, declared_shape: tuple, inflated_bytes: int) -> None:
    """A checkpoint whose tensor entry ``t0`` declares ``declared_shape`` (float64) in its
    .npy header but holds ``inflated_bytes`` zeros, deflated (about 1000x smaller)."""
    structure = json.dumps({"format": "graphgrad-npz-1",
                            "root": {"dict": [["w", {"tensor": 0, "requires_grad": False}]]}})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        with zf.open("__structure__.npy", "w") as fp:
            np.lib.format.write_array(fp, np.array(structure))
        with zf.open("t0.npy", "w", force_zip64=True) as fp:
            np.lib.format.write_array_header_1_0(
                fp, {"descr": "<f8", "fortran_order": False, "shape": declared_shape})
            zeros = bytes(1 << 20)
            for start in range(0, inflated_bytes, len(zeros)):
                fp.write(zeros[:inflated_bytes - start])


def peak_bytes(fn) -> tuple[int, str]:
    """The peak traced allocation while ``fn()`` runs, and how it ended."""
    tracemalloc.start()
    try:
        fn()
        outcome = "loaded"
    except Exception as e:  # noqa: BLE001 -- the outcome is what is measured
        outcome = f"{type(e).__name__}: {e}"[:200]
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak, outcome


def load_all_entries(path: str) -> None:
    """How the code before this work loaded: every entry, through np.load."""
    with np.load(path, allow_pickle=False) as data:
        {k: data[k] for k in data.files}


def old_module_file(rev: str, directory: str) -> str | None:
    """graphgrad/serialization.py at git revision ``rev``, written to ``directory``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        src = subprocess.run(["git", "show", f"{rev}:graphgrad/serialization.py"], cwd=root,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = os.path.join(directory, "serialization_before.py")
    with open(path, "wb") as fh:
        fh.write(src)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=BEFORE_REV, help="git revision of the old code")
    parser.add_argument("--bomb-mib", type=int, default=1024, help="MiB the bomb inflates to")
    args = parser.parse_args()
    import graphgrad as gg

    report: dict = {}
    with tempfile.TemporaryDirectory() as top:
        old = old_module_file(args.before, top)
        for label, module_file in (("before", old), ("after", None)):
            if label == "before" and old is None:
                report["interrupted_saves_before"] = "git revision not available"
                continue
            runs = {}
            for how in ("SIGKILL", "SIGINT", "ENOSPC"):
                directory = tempfile.mkdtemp(dir=top)
                runs[how] = interrupted_save(directory, how, module_file)
            lost = sum(not r["survived"] for r in runs.values())
            report[f"interrupted_saves_losing_old_checkpoint_{label}"] = f"{lost}/3"
            report[f"interrupted_saves_{label}"] = runs

        bomb = os.path.join(top, "bomb.npz")
        inflated = args.bomb_mib << 20
        write_bomb(bomb, (inflated // 8,), inflated)
        report["bomb_file_bytes"] = os.path.getsize(bomb)
        report["bomb_inflated_bytes"] = inflated
        # before: the old code's own load when git has it, else its np.load of every entry
        before = (lambda: serialization_module(old).load(bomb)) if old else (
            lambda: load_all_entries(bomb))
        for label, fn in (("before", before), ("after", lambda: gg.load(bomb))):
            peak, outcome = peak_bytes(fn)
            report[f"bomb_peak_mib_{label}"] = round(peak / 2**20, 2)
            report[f"bomb_outcome_{label}"] = outcome
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    sys.exit(main())
