"""The wheel carries examples/ as ``graphgrad.examples``, so that ``graphgrad lecture``'s
topics that run an example (Newton, MAML, the PINN, AutoInt, scheduling, the capture
cases) find it in an installed graphgrad as in a clone: build the wheel from the
project's files, unpack it where no clone is next to it, and ask for each example."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _examples_the_lecture_runs() -> set[str]:
    names = set()
    for f in (ROOT / "graphgrad" / "lecture").glob("*.py"):
        names |= set(re.findall(r'example\("(\w+)"\)', f.read_text()))
    return names


def test_the_wheel_carries_the_examples_the_lecture_runs(tmp_path):
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("graphgrad", "examples"):
        shutil.copytree(ROOT / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                          "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(src)],
                         capture_output=True, text=True)
    if out.returncode != 0 and "No module named pip" in out.stderr:
        pytest.skip("pip is not installed")
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("graphgrad-*.whl")
    names = _examples_the_lecture_runs()
    assert {"lecture_capture", "schedule_abc", "autoint"} <= names
    with zipfile.ZipFile(wheel) as z:
        packed = set(z.namelist())
        assert {f"graphgrad/examples/{n}.py" for n in names} <= packed
        z.extractall(tmp_path / "site")
    # an installed graphgrad, no clone next to it: the lecture finds the packaged copies
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    code = ("import graphgrad.lecture.uses as u, sys; assert not u.EXAMPLES.exists(); "
            "print(u.example_path(sys.argv[1])); print(u.example(sys.argv[1]).main)")
    run = subprocess.run([sys.executable, "-c", code, "schedule_abc"], capture_output=True,
                         text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    path = Path(run.stdout.splitlines()[0])
    assert path == tmp_path / "site" / "graphgrad" / "examples" / "schedule_abc.py"
