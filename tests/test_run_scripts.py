"""`graphgrad run script.py` runs unmodified PyTorch programs (tests/programs/): each one
runs under graphgrad and under the real PyTorch, and their printed numbers must agree
(data and initial weights come from NumPy, so both start from the same numbers). Also
the clear errors for what graphgrad lacks, exit codes, sys.argv, and install_as_torch.

The child processes get PYTHONPATH=<this checkout> explicitly, so they import the
graphgrad under test wherever it is installed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
# compared line by line with real PyTorch
COMPARED = ["mlp_functional", "from_imports", "dataloader", "scheduler", "nanogpt_probe",
            "grad_scaler_cpu", "mnist_cnn"]
NUMBER = re.compile(r"-?(?:\d+\.\d*|\d+)(?:e[+-]?\d+)?|-?inf|nan")


def _python(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="default")
    # the timeout only stops a hang; no result depends on how long a run takes
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def _graphgrad_run(script: Path, *args: str) -> subprocess.CompletedProcess:
    return _python("-m", "graphgrad", "run", str(script), *args)


def _assert_same_output(ours: str, theirs: str) -> None:
    """Same lines with numbers replaced by '#', and the numbers close in float32."""
    assert NUMBER.sub("#", ours) == NUMBER.sub("#", theirs), (ours, theirs)
    a = [float(v) for v in NUMBER.findall(ours)]
    b = [float(v) for v in NUMBER.findall(theirs)]
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _warnings(stderr: str) -> list[str]:
    return [line.split(": ", 1)[1] for line in stderr.splitlines() if "Warning: " in line
            and "RuntimeWarning" not in line]  # NumPy's inf/nan notes are graphgrad's own


@pytest.mark.parametrize("name", COMPARED)
def test_program_matches_pytorch(name):
    script = PROGRAMS / f"{name}.py"
    ours, theirs = _graphgrad_run(script), _python(str(script))
    assert theirs.returncode == 0, theirs.stderr
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.count("\n") >= 3
    _assert_same_output(ours.stdout, theirs.stdout)
    assert _warnings(ours.stderr) == _warnings(theirs.stderr)


def test_argv_and_exit_code_through_python_m_graphgrad_run():
    script = PROGRAMS / "cli_args.py"
    args = ("--steps", "4", "--lr", "0.05", "--exit-code", "3")
    ours = _python("-m", "graphgrad.run", str(script), *args)
    theirs = _python(str(script), *args)
    assert (ours.returncode, theirs.returncode) == (3, 3), ours.stderr
    assert ours.stdout.startswith("argv0 cli_args.py name __main__ steps 4 lr 0.05\n")
    _assert_same_output(ours.stdout, theirs.stdout)
    assert _graphgrad_run(script, "--steps", "1").returncode == 0


def test_missing_module_is_named_with_the_scripts_traceback():
    script = PROGRAMS / "missing_module.py"
    theirs = _python(str(script))
    assert theirs.returncode == 0 and "imported torch.ao.quantization" in theirs.stdout
    ours = _graphgrad_run(script)
    assert ours.returncode == 1 and ours.stdout == ""
    assert ours.stderr.startswith("Traceback (most recent call last):\n"
                                  f'  File "{script}", line 5, in <module>\n')
    assert ours.stderr.rstrip().endswith(
        "ModuleNotFoundError: torch.ao is not in graphgrad yet (graphgrad has no 'ao' module)")


@pytest.mark.parametrize("source,message", [
    ("import torch\ntorch.no_such_function(1)\n",
     "AttributeError: module 'graphgrad' has no attribute 'no_such_function'\n"
     "torch.no_such_function is not in graphgrad yet"),
    ("import torch.nn as nn\nnn.NoSuchLayer(3)\n",
     "AttributeError: module 'graphgrad.nn' has no attribute 'NoSuchLayer'\n"
     "torch.nn.NoSuchLayer is not in graphgrad yet"),
    ("from torch.cuda import no_such_thing\n",
     "torch.cuda.no_such_thing is not in graphgrad yet"),
    ("import torch.nn.no_such_module\n",
     "ModuleNotFoundError: torch.nn.no_such_module is not in graphgrad yet (graphgrad.nn has "
     "no 'no_such_module' module)"),
    ("import sys\nsys.exit('bad input')\n", "bad input"),
])
def test_missing_attribute_says_not_in_graphgrad(tmp_path, source, message):
    script = tmp_path / "prog.py"
    script.write_text(source)
    ours = _graphgrad_run(script)
    assert ours.returncode == 1
    assert ours.stderr.rstrip().endswith(message), ours.stderr


def test_script_folder_is_first_on_path_and_no_file_is_an_error(tmp_path):
    (tmp_path / "helper_mod.py").write_text("VALUE = 7\n")
    (tmp_path / "prog.py").write_text("import helper_mod, sys, torch\n"
                                      "print(helper_mod.VALUE, sys.path[0])\n")
    ours = _graphgrad_run(tmp_path / "prog.py")
    assert ours.stdout == f"7 {tmp_path}\n", ours.stderr
    missing = _graphgrad_run(tmp_path / "nope.py")
    assert missing.returncode == 2 and "nope.py" in missing.stderr


def test_run_help_documents_the_command():
    out = _python("-m", "graphgrad", "run", "--help")
    assert out.returncode == 0
    assert "usage: graphgrad run [-h] [--nproc N] SCRIPT ..." in out.stdout
    assert "sys.argv is [SCRIPT, ARGS...]" in out.stdout and "(default: none)" in out.stdout
    assert "run an unmodified PyTorch program" in _python("-m", "graphgrad", "--help").stdout


def test_install_as_torch_aliases_the_same_module_objects():
    code = """
import sys
import graphgrad
graphgrad.install_as_torch()
graphgrad.install_as_torch()  # idempotent
assert sum(type(f).__name__ == "TorchAliasFinder" for f in sys.meta_path) == 1
import torch, torch.nn as nn, torch.nn.functional as F
import torch.utils.data, torch.optim.lr_scheduler, torch.func, torch.autograd.functional
import torch.fx, torch.jit, torch.onnx, torch.utils.benchmark, torch.backends.cudnn
from torch.nn.parallel import DataParallel
from torch.cuda.amp import GradScaler
import graphgrad.nn.functional, graphgrad.optim.lr_scheduler
assert torch is graphgrad and nn is graphgrad.nn and F is graphgrad.nn.functional
assert torch.utils.data is graphgrad.utils.data
assert torch.optim.lr_scheduler is graphgrad.optim.lr_scheduler
assert sys.modules["torch.fx"] is graphgrad.fx and sys.modules["torch.jit"] is graphgrad.jit
assert sys.modules["torch.func"] is graphgrad.func
assert sys.modules["torch.autograd.functional"] is graphgrad.autograd.functional
assert torch.backends.cudnn is graphgrad.torch_compat.backends.cudnn
assert DataParallel is graphgrad.nn.DataParallel and GradScaler is torch.cuda.amp.GradScaler
assert graphgrad.__spec__.name == "graphgrad" and graphgrad.nn.__name__ == "graphgrad.nn"
graphgrad.torch_compat.uninstall_as_torch()
assert not any(n == "torch" or n.startswith("torch.") for n in sys.modules)
assert not any(type(f).__name__ == "TorchAliasFinder" for f in sys.meta_path)
print("ok")
"""
    out = _python("-c", code)
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr


def test_install_as_torch_refuses_after_the_real_torch():
    out = _python("-c", "import torch, graphgrad\ngraphgrad.install_as_torch()")
    assert out.returncode == 1
    assert "RuntimeError: install_as_torch(): the real PyTorch is already imported" in out.stderr
