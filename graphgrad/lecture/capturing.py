"""Layer ``lecture``: the topics on capturing Python as graphs: the capture report of
the four methods (and the static API) on the lecture's three functions, and the
lecture's ``compile`` run with a backend that prints what it is handed."""

from __future__ import annotations

from pathlib import Path

from graphgrad import capture, dynamo
from graphgrad.tensor import randn, tensor
from graphgrad.graph import have_dot

from .pictures import graph_picture
from .uses import example

__all__ = ["capture_methods", "compile_run"]


def capture_methods(out: Path, quick: bool) -> dict:
    lc = example("lecture_capture")
    outcomes = {}
    for name, x in (("branch", tensor(1.0)), ("shape_dependent", randn(2, 3)),
                    ("external", randn(3))):
        rep = capture.report(getattr(lc, name), x,
                             static_rewrite=getattr(lc, f"{name}_static"))
        print(rep.table())
        print()
        outcomes[name] = {m: r.outcome for m, r in rep.results.items()}
        if have_dot():
            capture.draw(rep, out)
    print(capture.explain(rep))
    return {"outcomes": outcomes}


def compile_run(out: Path, quick: bool) -> dict:
    lc = example("lecture_capture")
    handed: list = []

    def printing_backend(gm, example_inputs):
        graph = getattr(gm, "graph", gm)
        handed.append(graph)
        print(f"  backend handed graph {len(handed)}: "
              f"{[n.target_name for n in graph.nodes if n.kind == 'call']}")
        return gm   # unchanged: the graph runs as captured

    dynamo.reset()
    f = dynamo.compile(lc.branch, backend=printing_backend)
    per_call, results = [], []
    for v in (0.0, 1.0, -1.0):
        before = len(handed)
        print(f"f(gg.tensor({v})):")
        results.append(f(tensor(v)).item())
        per_call.append(len(handed) - before)
        print(f"  returns {results[-1]:g}; graphs handed over: {per_call[-1]}")
    print(f"graphs per call: {per_call} (the graph break on `if x < 0` splits the function; "
          f"the guards reuse the cached graphs, and the other branch is captured when "
          f"first taken)")
    for k, g in enumerate(handed, 1):
        graph_picture(g, out / f"graph_{k}.png")
    return {"graphs_per_call": per_call, "results": results}
