"""``graphgrad lecture``: the map lists the lecture's topics in order, and every topic's
demonstration runs headless in its quick configuration, prints its facts and writes its
pictures (when Graphviz / matplotlib are there). The scheduling topic's overlap is
decided by a barrier inside ops A and B (examples/schedule_abc.py), not by timing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphgrad.graph import have_dot
from graphgrad.lecture import TOPICS, run_topic, topic_map
from graphgrad.lecture.pictures import pyplot

ROOT = Path(__file__).resolve().parent.parent
ORDER = ["vjp-jvp", "jacobians-hessians", "graph-extension", "higher-order-uses",
         "finite-differences", "csfd-hessian", "autoint", "dag", "scheduling",
         "eager-vs-static", "capture", "compile", "optimization"]
# the pictures each topic writes with each tool
DOT_PICTURES = {"vjp-jvp": 1, "graph-extension": 2, "dag": 1, "eager-vs-static": 3,
                "capture": 10, "compile": 3, "optimization": 2}
PLOT_PICTURES = {"higher-order-uses": 3, "finite-differences": 1, "csfd-hessian": 1,
                 "autoint": 1, "scheduling": 2}


def test_the_map_lists_the_topics_in_the_lectures_order():
    assert [t.name for t in TOPICS] == ORDER
    text = topic_map()
    positions = [text.index(f" {name} ") for name in ORDER]
    assert positions == sorted(positions)
    for t in TOPICS:
        assert t.title in text and t.features in text


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {}, tmp_path_factory.mktemp("lecture")


def _run(name: str, runs, capsys) -> tuple[dict, str]:
    done, out = runs
    facts = run_topic(name, out=out, quick=True)
    printed = capsys.readouterr().out
    assert printed.startswith(f"== {ORDER.index(name) + 1}. ")
    assert "look for: " in printed
    pngs = [p for p in facts["pictures"] if p.endswith(".png")]
    assert all(Path(p).stat().st_size > 1000 for p in pngs)
    want = (DOT_PICTURES.get(name, 0) if have_dot() else 0) + \
        (PLOT_PICTURES.get(name, 0) if pyplot() is not None else 0)
    assert len(pngs) >= want, (name, pngs)
    return facts, printed


def test_vjp_jvp(runs, capsys):
    facts, printed = _run("vjp-jvp", runs, capsys)
    assert facts["vjps"] == 2 and facts["jvps"] == 3 and facts["same_jacobian"]
    assert "2 VJPs and 3 JVPs give the same Jacobian (and the closed form): yes" in printed


def test_jacobians_hessians(runs, capsys):
    facts, printed = _run("jacobians-hessians", runs, capsys)
    assert facts["jacobian_ok"] and facts["hessian_ok"]
    assert facts["hessian"] == [[802.0, -400.0], [-400.0, 200.0]]


def test_graph_extension(runs, capsys):
    facts, printed = _run("graph-extension", runs, capsys)
    assert facts["growing"] and facts["max_error"] < 1e-12
    assert facts["nodes"][0] < facts["nodes"][-1] and len(facts["nodes"]) == 4


def test_higher_order_uses(runs, capsys):
    facts, printed = _run("higher-order-uses", runs, capsys)
    assert 4 <= facts["newton_iters"] <= 8 and not facts["gd_converged"]
    assert facts["maml_mse"] < 0.7 * facts["pretrained_mse"]
    assert facts["pinn_error"] < 1e-4
    assert f"Newton: {facts['newton_iters']} iterations; gradient descent: 2000 " \
           "(not converged)" in printed


def test_finite_differences(runs, capsys):
    facts, printed = _run("finite-differences", runs, capsys)
    assert facts["best_forward_h"] > facts["best_central_h"] * 1e-6
    assert facts["complex_step_error_at_smallest_h"] < 1e-14
    assert facts["central_error_at_smallest_h"] > 0.1


def test_csfd_hessian(runs, capsys):
    facts, printed = _run("csfd-hessian", runs, capsys)
    assert facts["complex_step_error"] < 1e-14 < facts["central_error"]


def test_autoint(runs, capsys):
    facts, printed = _run("autoint", runs, capsys)
    assert facts["relative_error"] < 1e-3


def test_dag(runs, capsys):
    facts, printed = _run("dag", runs, capsys)
    assert facts["control_edges"] == [("A", "B")]
    assert facts["branches"] == {"then": ["Add"], "else": ["Sub"]}
    assert facts["runs"] == {1.0: 4.0, -3.0: -4.0}


def test_scheduling(runs, capsys):
    facts, printed = _run("scheduling", runs, capsys)
    # without the edge: the barrier inside A and B opened, so both were in progress at once
    assert facts["free_together"] and not facts["edge_together"]
    assert facts["edge_b_after_a"] and facts["same_result"]
    assert "A and B in progress together: yes; B started after A ended: no" in printed
    assert "A and B in progress together: no; B started after A ended: yes" in printed
    assert "LogEntry(" not in printed and "in progress together with" in printed


def test_eager_vs_static(runs, capsys):
    facts, printed = _run("eager-vs-static", runs, capsys)
    assert facts["eager_ops"] == {1.0: ["Sub"], -1.0: ["Add"]}
    assert facts["static_branches"] == {"then": ["Add"], "else": ["Sub"]}
    assert facts["static_runs"] == {1.0: 0.0, -1.0: 0.0}


def test_capture(runs, capsys):
    facts, printed = _run("capture", runs, capsys)
    o = facts["outcomes"]
    assert o["branch"]["static"] == "error" and o["branch"]["static (rewritten)"] == "captured"
    assert o["shape_dependent"]["static (rewritten)"] == "captured"
    assert o["external"]["fx.symbolic_trace"] == "silently wrong"
    assert o["external"]["static (rewritten)"] == "captured"
    assert o["branch"]["jit.trace"] == "warned" and o["branch"]["jit.script"] == "captured"
    assert "graphs    graphs the method made over ALL of this report's calls" in printed


def test_compile(runs, capsys):
    facts, printed = _run("compile", runs, capsys)
    assert facts["graphs_per_call"] == [2, 0, 1]
    assert facts["results"] == [-1.0, 0.0, 0.0]
    assert "graphs per call: [2, 0, 1]" in printed


def test_optimization(runs, capsys):
    facts, printed = _run("optimization", runs, capsys)
    assert facts["same_result"] and facts["after"] < facts["before"]
    assert "Exp" not in facts["ops_after"] and facts["ops_after"].count("Sin") == 1


def test_cli_lecture(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH",
                                                                                "")}
    run = [sys.executable, "-m", "graphgrad", "lecture"]
    out = subprocess.run(run, capture_output=True, text=True, check=True, env=env)
    assert out.stdout.index("vjp-jvp") < out.stdout.index("optimization")
    out = subprocess.run(run + ["compile", "--out", str(tmp_path)], capture_output=True,
                         text=True, check=True, env=env)
    assert "graphs per call: [2, 0, 1]" in out.stdout
    bad = subprocess.run(run + ["nonsense"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "no lecture topic 'nonsense'" in bad.stderr


def test_readme_and_docs_carry_the_map():
    for doc in (ROOT / "README.md", ROOT / "docs" / "lecture.md"):
        text = doc.read_text()
        positions = [text.index(f"`{name}`") for name in ORDER]
        assert positions == sorted(positions), doc


def test_no_link_in_the_project_points_outside_it():
    import re
    files = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("examples/*"),
             *ROOT.glob("tests/*.py"), *ROOT.glob("graphgrad/**/*.py")]
    for f in files:
        if f.suffix not in (".md", ".py") or f.name == "test_lecture.py":
            continue
        text = f.read_text()
        assert "../shared" not in text and "shared/reference" not in text, f
        links = re.findall(r"\]\(([^)#]+)\)", text) if f.suffix == ".md" else []
        for target in links:
            if target.startswith(("http://", "https://")):
                continue
            resolved = (f.parent / target).resolve()
            assert resolved.exists() and ROOT in resolved.parents, (f, target)


def test_topics_run_without_graphviz_or_matplotlib(tmp_path, monkeypatch, capsys):
    """Without the optional tools a topic still runs and says which tool it lacks."""
    import graphgrad.backend.optional as optional
    import graphgrad.graph.timeline as timeline
    import graphgrad.lecture.capturing as capturing
    import graphgrad.lecture.pictures as pictures

    def no_matplotlib(purpose):
        raise ImportError(f"{purpose} needs matplotlib: pip install 'graphgrad[plot]'")

    monkeypatch.setattr(pictures, "have_dot", lambda: False)
    monkeypatch.setattr(capturing, "have_dot", lambda: False)
    monkeypatch.setattr(optional, "pyplot", no_matplotlib)
    monkeypatch.setattr(timeline, "pyplot", no_matplotlib)
    for name in ("vjp-jvp", "graph-extension", "finite-differences", "csfd-hessian", "dag",
                 "scheduling", "capture", "compile", "optimization"):
        facts = run_topic(name, out=tmp_path, quick=True)
        assert not [p for p in facts["pictures"] if p.endswith(".png")], name
    printed = capsys.readouterr().out
    assert "drawing graphs needs Graphviz's `dot`" in printed
    assert "plots need matplotlib" in printed and "(no chart: drawing a Gantt chart" in printed
