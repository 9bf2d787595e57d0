"""Layer ``lecture``: the topics on graphs as such: the DAG with dependency edges and
control flow, scheduling A/B/C on two workers, eager (define-by-run) vs static
(define-then-run) graphs, and graph optimization."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import graphgrad.static as static
from graphgrad.backends import BACKENDS
from graphgrad.graph import Interpreter
from graphgrad.graph import trace as trace_graph
from graphgrad.graph.eager_graph import from_tensors
from graphgrad.passes import optimize
from graphgrad.tensor import randn, tensor

from .pictures import graph_picture, tensors_picture
from .uses import example

__all__ = ["dag", "scheduling", "eager_vs_static", "optimization"]


def _ops(graph) -> list[str]:
    return [n.target_name for n in graph.nodes if n.kind == "call"]


def _cond_and_runs(g, x, y, values) -> tuple[dict, dict]:
    """The ops of each branch of ``g``'s cond node, and ``y`` for each fed ``x``."""
    cond = next(n for n in g.ir.nodes if n.kind == "cond")
    branches = {k: _ops(sg) for k, sg in cond.subgraphs.items()}
    with static.Session(graph=g) as sess:
        return branches, {v: float(sess.run(y, {x: v})) for v in values}


def dag(out: Path, quick: bool) -> dict:
    g = static.Graph()
    with g.as_default():
        x = static.placeholder(static.float32, (), name="x")
        a = static.multiply(x, 2.0, name="A")
        with static.control_dependencies([a]):   # B runs after A: no data links them
            b = static.add(x, 1.0, name="B")
        c = static.cond(b > 0, lambda: a + b, lambda: a - b, name="C")
    print("a static graph: A = 2x; B = x + 1 with a dependency edge from A;")
    print("C = cond(B > 0, A + B, A - B), a control-flow node holding both branches")
    print(g.ir.tabular())
    ctrl = [(d.name, n.name) for n in g.ir.nodes for d in n.deps]
    branches, runs = _cond_and_runs(g, x, c, (1.0, -3.0))
    print(f"dependency edges: {', '.join(f'{a} -> {b}' for a, b in ctrl)}; cond's "
          f"branches: {branches}")
    print(f"fed x = 1: B > 0 picks A + B = {runs[1.0]:g}; fed x = -3: A - B = {runs[-3.0]:g}")
    graph_picture(g.ir, out / "dag.png")
    return {"control_edges": ctrl, "branches": branches, "runs": runs}


def scheduling(out: Path, quick: bool) -> dict:
    r = example("schedule_abc").main(["--out", str(out)] + (["--size", "120"] if quick
                                                             else []))
    return {"free_together": r["free"]["A and B together"],
            "edge_together": r["edge"]["A and B together"],
            "edge_b_after_a": r["edge"]["B after A"], "same_result": r["same result"]}


def eager_vs_static(out: Path, quick: bool) -> dict:
    lc = example("lecture_capture")
    eager_ops = {}
    for v in (1.0, -1.0):
        x = tensor(v, requires_grad=True)
        y = lc.branch(x)
        graph, _ = from_tensors(y, names={"x": x})
        eager_ops[v] = _ops(graph)
        print(f"eager branch(x = {v:g}) = {y.item():g}: the recorded graph holds "
              f"{eager_ops[v]} (only the branch Python took)")
        tensors_picture(out / f"eager_x={v:g}.png", y, names={"x": x})
    g = static.Graph()
    with g.as_default():
        x = static.placeholder(static.float32, (), name="x")
        y = lc.branch_static(x)
    static_ops, fed = _cond_and_runs(g, x, y, (1.0, -1.0))
    print(f"static branch_static (static.cond): built once, holds both branches "
          f"{static_ops}; fed 1 -> {fed[1.0]:g}, fed -1 -> {fed[-1.0]:g}")
    print("branch itself cannot be built statically: `if x < 0` asks a placeholder for a "
          "Python bool (see the topic capture)")
    graph_picture(g.ir, out / "static_branch.png")
    return {"eager_ops": eager_ops, "static_branches": static_ops, "static_runs": fed}


def _redundant(x):
    a = (x * 1.0).sin()            # x * 1 simplifies to x
    b = x.sin()                    # the same as a: one node after CSE
    scale = tensor(2.0) * 3.0   # constants only: folded
    unused = x.exp()               # noqa: F841 - dead code, removed
    return a + b * scale


def optimization(out: Path, quick: bool) -> dict:
    x = randn(4)
    graph = trace_graph(_redundant, x)
    better, report = optimize(graph)
    print(graph.code)
    print(report)
    print(better.code)
    before, after = Interpreter(graph).run(x)[0], Interpreter(better).run(x)[0]
    same = bool(np.allclose(before.numpy(), after.numpy()))
    print(f"{report.before} -> {report.after} nodes; same result: {'yes' if same else 'NO'}")
    print(f"backends that run such graphs (graphgrad.backends.BACKENDS): "
          f"{', '.join(sorted(BACKENDS))}; 'default' optimizes like this first")
    graph_picture(graph, out / "before.png")
    graph_picture(better, out / "after.png")
    return {"before": report.before, "after": report.after, "same_result": same,
            "ops_after": _ops(better)}
