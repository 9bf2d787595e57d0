"""The capture report on the lecture's three functions, asserted cell by cell against
docs/lecture_cases.md; the report's own checks (frozen random values, specialised
branches) on small functions; and the ``graphgrad capture`` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from capture_corpus import CORPUS
from lecture_cases import branch, external, shape_dependent

import graphgrad as gg
from graphgrad.capture import METHODS, other_inputs, report

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def branch_report():
    return report(branch, gg.tensor(1.0))


@pytest.fixture(scope="module")
def shape_report():
    return report(shape_dependent, gg.randn(2, 3))


@pytest.fixture(scope="module")
def external_report():
    return report(external, gg.randn(3))


def test_every_method_has_a_row(branch_report):
    assert tuple(branch_report.results) == METHODS
    assert branch_report["eager"].outcome == "eager"


# ---- branch: data-dependent control flow ---------------------------------------------------

def test_branch_static_needs_cond(branch_report):
    r = branch_report["static"]
    assert r.outcome == "error"
    assert "Using a `tf.Tensor` as a Python `bool` is not allowed" in r.message


def test_branch_fx_raises_trace_error(branch_report):
    r = branch_report["fx.symbolic_trace"]
    assert r.outcome == "error"
    assert "TraceError" in r.message
    assert "symbolically traced variables cannot be used as inputs to control flow" in r.message


def test_branch_jit_trace_warns_and_specialises(branch_report):
    r = branch_report["jit.trace"]
    assert r.outcome == "warned"
    assert r.message.startswith("TracerWarning: Converting a tensor to a Python boolean")
    assert r.example_matches is True
    assert r.second_matches is False          # the other branch is not in the graph


def test_branch_script_holds_both_branches(branch_report):
    r = branch_report["jit.script"]
    assert r.outcome == "captured"
    assert r.example_matches and r.second_matches
    assert any(n.kind == "cond" for n in r.graphs[0].nodes)


def test_branch_compile_captures_one_graph_per_path(branch_report):
    r = branch_report["compile"]
    assert r.outcome == "captured"
    assert r.example_matches and r.second_matches
    # x < 0, then x - 1 (the example's branch), then x + 1 (the second input's branch)
    assert len(r.graphs) == 3


# ---- shape_dependent ------------------------------------------------------------------------

def test_shape_static_unknown_dims_fail(shape_report):
    assert shape_report["static"].outcome == "error"


def test_shape_fx_cannot_iterate_a_proxy(shape_report):
    r = shape_report["fx.symbolic_trace"]
    assert r.outcome == "error"
    assert "TraceError" in r.message


def test_shape_jit_trace_generalises(shape_report):
    r = shape_report["jit.trace"]
    assert r.outcome == "captured"
    assert r.example_matches and r.second_matches     # the second input is 3 x 4


def test_shape_script_needs_the_rank(shape_report):
    r = shape_report["jit.script"]
    assert r.outcome == "error"
    assert "n, m = x.shape" in r.message


def test_shape_compile_right_for_other_shapes(shape_report):
    r = shape_report["compile"]
    assert r.outcome == "captured"
    assert r.example_matches and r.second_matches


# ---- external -------------------------------------------------------------------------------

def test_external_eager_is_nondeterministic(external_report):
    assert external_report.deterministic is False


@pytest.mark.parametrize("method", ["static", "fx.symbolic_trace"])
def test_external_frozen_random_number_is_silently_wrong(external_report, method):
    r = external_report[method]
    assert r.outcome == "silently wrong"
    assert r.fresh_each_call is False
    assert "frozen" in " ".join(r.notes)


def test_external_jit_trace_names_the_call(external_report):
    r = external_report["jit.trace"]
    assert r.outcome == "error"
    assert "rand" in r.message and "lecture_cases.py" in r.message


def test_external_script_rejects_the_call(external_report):
    r = external_report["jit.script"]
    assert r.outcome == "error"
    assert "rand" in r.message


def test_external_compile_draws_fresh_numbers(external_report):
    r = external_report["compile"]
    assert r.outcome == "captured"
    assert r.fresh_each_call is True


# ---- the report's checks on their own --------------------------------------------------------

def test_other_inputs_grow_and_flip_sign():
    (a,) = other_inputs((gg.tensor([[1.0, 2.0]]),))
    assert a.shape == (2, 3) and bool((a < 0).all())
    (b,) = other_inputs((gg.tensor(-1.0),), grow=False)
    assert b.shape == () and b.item() > 0


def test_a_correct_capture_is_captured():
    rep = report(lambda x, y: (x * y).tanh().sum(0), gg.randn(3, 2), gg.randn(3, 2),
                 methods=("eager", "static"))
    assert rep["static"].outcome == "captured"
    assert rep["static"].example_matches and rep["static"].second_matches


def test_unknown_method_is_an_error():
    with pytest.raises(ValueError, match="unknown method"):
        report(branch, gg.tensor(1.0), methods=("eager", "nonsense"))


def test_table_lists_every_method(branch_report):
    text = branch_report.table()
    for m in METHODS:
        assert m in text
    assert "capture report for branch" in text


def test_graphs_print_as_python(external_report):
    text = external_report.graphs_text()
    assert "# ---- static" in text and "def forward" in text


def test_cli_capture_prints_the_table(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "graphgrad", "capture",
         str(ROOT / "examples" / "lecture_capture.py") + ":external", "--example",
         "gg.randn(3)", "--methods", "static", "--graphs"],
        capture_output=True, text=True, check=True, cwd=tmp_path)
    assert "capture report for external" in out.stdout
    assert "silently wrong" in out.stdout
    assert "def forward" in out.stdout


def test_cli_capture_bad_target():
    out = subprocess.run([sys.executable, "-m", "graphgrad", "capture", "nofile.py:f",
                          "--example", "1"], capture_output=True, text=True)
    assert out.returncode == 2 and "no such file" in out.stderr


def test_lecture_example_file_matches_the_tests():
    # the example file the README points at holds the same three functions
    import importlib.util
    spec = importlib.util.spec_from_file_location("lc", ROOT / "examples" / "lecture_capture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = gg.tensor(-2.0)
    assert mod.branch(x).item() == branch(x).item()
    y = gg.randn(2, 3)
    np.testing.assert_allclose(mod.shape_dependent(y).numpy(), shape_dependent(y).numpy())


# ---- the corpus: no method is silently wrong on ordinary code -------------------------------

@pytest.mark.parametrize("case", CORPUS, ids=repr)
def test_corpus_is_never_silently_wrong(case):
    rep = report(case.fn, *case.make_inputs(np.random.default_rng(7)))
    for method, r in rep.results.items():
        assert r.outcome != "silently wrong", (method, r)
    # the two methods that keep Python's semantics for every input capture every case
    for method in ("jit.script", "compile"):
        r = rep[method]
        assert r.outcome == "captured" and r.second_matches, (method, r.message)
