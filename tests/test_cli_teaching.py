"""The CLI explains itself: every command's --help gives each option a help line with its
default; ``graphgrad capture``'s --full (whole messages, the user's line with a caret),
--draw, --optimize, the static rewrite row and the column explanations; a BatchNorm in
train mode reported by its buffers; ``fullgraph=True`` says its reason once; and
``graphgrad.backends`` holds the backend registry."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

import graphgrad as gg
from graphgrad.capture import REWRITTEN, draw, explain, full_text, optimize_text, report
from graphgrad.cli import build_parser
from graphgrad.graph import have_dot

ROOT = Path(__file__).resolve().parent.parent
LECTURE = ROOT / "examples" / "lecture_capture.py"


def _parsers(parser: argparse.ArgumentParser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


@pytest.mark.parametrize("path, parser", list(_parsers(build_parser())),
                         ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_option_has_help_with_its_default(path, parser):
    text = parser.format_help()
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        assert action.help, (path, action.dest)
        line = parser._get_formatter()._get_help_string(action)
        assert "(default" in line or "(required)" in line, (path, action.dest, line)
        if action.default not in (None, False):
            assert str(action.default) in line % {"default": action.default}
    if parser.prog.endswith("train"):
        assert "(default: 0.001)" in text and "(default: adam)" in text


@pytest.mark.parametrize("path, parser", list(_parsers(build_parser())),
                         ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_option_is_one_line_of_help(path, parser):
    lines = parser.format_help().splitlines()
    assert all(len(line) <= 100 for line in lines), path
    start = next((k for k, ln in enumerate(lines) if ln.endswith(("options:", "arguments:"))),
                 len(lines))
    # an option's line is "  --name ... help"; a wrapped help continues on an indented line
    wrapped = [ln for ln in lines[start:] if ln.startswith(" " * 8) and ln.strip()
               and not ln.strip().startswith("-")]
    assert not wrapped, (path, wrapped)


def _cli(*args, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH",
                                                                                "")}
    return subprocess.run([sys.executable, "-m", "graphgrad", *args], capture_output=True,
                          text=True, env=env, cwd=cwd)


def test_capture_full_draw_optimize_and_the_static_rewrite(tmp_path):
    out = _cli("capture", f"{LECTURE}:branch", "--example", "gg.tensor(1.)", "--full",
               "--optimize", "--draw", str(tmp_path / "pics"))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    # the static row fails, the rewrite next to it works
    assert "static (rewritten)  captured" in text
    assert "def branch_static(x):" in text and "static.cond(x < 0" in text
    # the columns explained, the graphs column counting over all of the report's calls
    assert "graphs the method made over ALL of this report's calls" in text
    # --full: the whole message (not cut at ~100 characters) and the user's line, marked
    assert "use TensorFlow ops such as tf.cond to execute subgraphs conditioned" in text
    assert "    if x < 0:" in text and "       ^^^^^" in text
    # --optimize: each graph before and after, with the pass table
    assert "-- before" in text and "-- after" in text and "dead_code_elimination" in text
    pics = sorted((tmp_path / "pics").iterdir())
    assert len(pics) == 6   # rewritten static 1, jit.trace 1, jit.script 1, compile 3
    assert all(p.suffix == (".png" if have_dot() else ".dot") for p in pics)


def test_capture_names_a_missing_rewrite(tmp_path):
    out = _cli("capture", f"{LECTURE}:branch", "--example", "gg.tensor(1.)",
               "--static-rewrite", "nope")
    assert out.returncode == 2 and "has no function 'nope'" in out.stderr
    plain = tmp_path / "plain.py"
    plain.write_text("def branch(x):\n    if x < 0:\n        return x + 1\n    return x - 1\n")
    out = _cli("capture", f"{plain}:branch", "--example", "gg.tensor(1.)",
               "--methods", "static")
    assert "define branch_static in" in out.stdout


def test_batchnorm_in_train_mode_is_checked_by_its_buffers():
    gg.manual_seed(0)
    bn = gg.nn.BatchNorm1d(3)
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    rep = report(bn, gg.randn(4, 3), methods=("eager", "jit.trace", "fx.symbolic_trace"))
    assert rep.function == "BatchNorm1d"
    # the report runs copies: the user's module is untouched
    assert all(gg.equal(v, before[k]) for k, v in bn.state_dict().items())
    # jit.trace replays the running-statistics update (issue 22, item 5)
    assert rep["jit.trace"].outcome == "captured" and rep["jit.trace"].buffers_match
    # a capture whose result is right but whose buffers are not is silently wrong
    fx = rep["fx.symbolic_trace"]
    if fx.buffers_match is False:
        assert fx.outcome == "silently wrong"
        assert any("buffer updates" in n for n in fx.notes)
        row = next(ln for ln in rep.table().splitlines() if ln.startswith("fx."))
        assert row.split("  ")[-1].strip().startswith("its buffer updates")   # not cut off
    else:   # torch.fx cannot trace BatchNorm1d either: its _check_input_dim branches on the rank
        assert fx.outcome == "error" and "rank" in fx.message
    assert "for a module its buffers" in explain(rep)


def test_cli_reports_the_batchnorm_module_by_its_buffers():
    out = _cli("capture", f"{LECTURE}:batchnorm", "--example", "gg.randn(8, 3)",
               "--methods", "jit.trace", "--full")
    assert out.returncode == 0, out.stderr
    assert "capture report for BatchNorm1d" in out.stdout
    assert "== jit.trace: captured" in out.stdout


def test_a_capture_that_drops_buffer_updates_is_silently_wrong():
    class Counter(gg.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", gg.tensor(0.0))

        def forward(self, x):
            self.calls.add_(1)
            return x * 2

    import graphgrad.jit.tracing as tracing
    rep = report(Counter(), gg.randn(3), methods=("eager", "jit.trace"))
    assert rep["jit.trace"].buffers_match and rep["jit.trace"].outcome == "captured"
    # the same module with the trace's write-back switched off: the report must notice
    original = tracing.TracedFunction.__init__

    def without_writes(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._writes = []   # as before the fix: the graph's buffer outputs are ignored

    tracing.TracedFunction.__init__ = without_writes
    try:
        rep = report(Counter(), gg.randn(3), methods=("eager", "jit.trace"))
    finally:
        tracing.TracedFunction.__init__ = original
    r = rep["jit.trace"]
    assert r.buffers_match is False and r.outcome == "silently wrong"
    assert "buffer updates" in full_text(rep)


def test_views_of_a_report(tmp_path):
    from lecture_cases import shape_dependent
    rep = report(shape_dependent, gg.randn(2, 3), methods=("eager", "jit.trace"))
    assert "==== jit.trace, graph 1 of 1" in optimize_text(rep)
    written = draw(rep, tmp_path)
    assert len(written) == 1 and written[0].stat().st_size > 0
    assert REWRITTEN not in rep.results


def test_fullgraph_says_its_reason_once():
    from lecture_cases import branch
    with pytest.raises(Exception) as info:
        gg.compile(branch, fullgraph=True)(gg.tensor(1.0))
    text = str(info.value)
    assert text.count("cannot capture") == 1
    assert text.count("if x < 0:") == 1


def test_backends_registry_is_reachable():
    assert {"eager", "default", "print"} <= set(gg.backends.BACKENDS)
    assert gg.backends.lookup_backend("eager") is gg.backends.BACKENDS["eager"]


def test_a_script_graph_that_calls_the_whole_module_says_so():
    # graphgrad's BatchNorm1d scripted without inputs is one deferred call of the module
    # (its buffers then update as eager's); the report names it rather than showing []
    rep = report(gg.nn.BatchNorm1d(3), gg.randn(4, 3), methods=("eager", "jit.script"))
    row = next(ln for ln in rep.table().splitlines() if ln.startswith("jit.script"))
    assert "self (the whole module, one call)" in row and "[]" not in row
