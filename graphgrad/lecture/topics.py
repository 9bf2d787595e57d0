"""Layer ``lecture``: the lecture's topics in its order, each with the graphgrad feature
that shows it, what to look for, and the demonstration that ``graphgrad lecture TOPIC``
runs (calculus.py, uses.py, graphs.py, capturing.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Topic", "TOPICS", "topic", "topic_map", "run_topic"]


@dataclass(frozen=True)
class Topic:
    """One topic: ``name`` (the command's argument), ``title``, the graphgrad features
    that show it, what to look for in the demonstration, and the demonstration itself,
    ``run(out, quick) -> facts`` (it prints; the facts are what the tests assert)."""
    name: str
    title: str
    features: str
    look_for: str
    run: Callable[[Path, bool], dict]


def _topics() -> list[Topic]:
    from . import calculus, capturing, graphs, uses
    return [
        Topic("vjp-jvp", "VJP vs JVP: reverse mode gives Jacobian rows, forward mode "
              "columns", "func.vjp, func.jvp, autograd.forward_ad",
              "one VJP per output gives a row, one JVP per input a column; a wide "
              "Jacobian is cheaper by rows, a tall one by columns", calculus.vjp_jvp),
        Topic("jacobians-hessians", "Jacobians and Hessians", "func.jacrev, func.jacfwd, "
              "func.hessian, autograd.functional", "jacrev and jacfwd agree; the Hessian "
              "is forward over reverse, and symmetric", calculus.jacobians_hessians),
        Topic("graph-extension", "Higher-order derivatives by graph extension, and node "
              "growth", "backward(create_graph=True), autograd.grad, autograd.draw",
              "each derivative is a graph built by the backward pass of the previous one; "
              "the drawing colours the nodes the backward pass added; the node count grows "
              "with the order", calculus.graph_extension),
        Topic("higher-order-uses", "Uses of higher-order derivatives: Newton, MAML, PINN",
              "examples/newton_rosenbrock.py, maml_sinusoid.py, pinn_poisson.py",
              "Newton needs a handful of iterations where gradient descent needs "
              "thousands; MAML's second-order meta-gradient adapts better than "
              "pre-training; the PINN's loss differentiates u''", uses.higher_order),
        Topic("finite-differences", "Finite differences vs the complex step",
              "graphgrad.numdiff (graphgrad numdiff study)",
              "finite differences have a best step (truncation vs rounding error); the "
              "complex step has no subtraction, so it stays exact down to tiny steps",
              calculus.finite_differences),
        Topic("csfd-hessian", "Complex-step Hessians (CSFD)", "numdiff.hessian("
              "method='complex_step'), func.hessian",
              "a Hessian column is Im(grad f(x + ih e_j)) / h: n gradient passes, exact to "
              "rounding, against central second differences", calculus.csfd_hessian),
        Topic("autoint", "Automatic integration (AutoInt)", "examples/autoint.py",
              "fit the derivative network to f, then integrate with the primal network: "
              "two evaluations instead of a quadrature", uses.autoint),
        Topic("dag", "The graph is a DAG: ops are nodes, data are edges, dependency edges "
              "and control flow", "graphgrad.graph, static.control_dependencies, "
              "static.cond, static.while_loop", "the dashed orange edge orders two ops "
              "no data links; cond holds both branches as sub-graphs", graphs.dag),
        Topic("scheduling", "Scheduling A, B, C on two workers, with and without the "
              "dependency edge", "Session(workers=2), Session.log, examples/schedule_abc.py",
              "without the edge A and B run at once (they meet at a barrier inside their "
              "ops); with it B waits for A; the results are equal", graphs.scheduling),
        Topic("eager-vs-static", "Eager (define-by-run) vs static (define-then-run) "
              "graphs", "autograd.draw, graphgrad.static", "eager records only the branch "
              "Python took; the static graph holds both, and the fed value picks one at "
              "run time", graphs.eager_vs_static),
        Topic("capture", "Four ways to capture a function, on the lecture's three "
              "functions", "graphgrad capture, fx.symbolic_trace, jit.trace, jit.script, "
              "compile", "which method fails honestly, which warns, which is silently "
              "wrong (the frozen random number), and the static API's rewrite",
              capturing.capture_methods),
        Topic("compile", "The compile run: graph breaks and guards",
              "graphgrad.compile with a backend that prints its graphs",
              "f(0.) hands over two graphs (x < 0, then x - 1), f(1.) none (cached), "
              "f(-1.) one (x + 1)", capturing.compile_run),
        Topic("optimization", "Graph optimization", "graphgrad.passes.optimize, "
              "graphgrad.backends.BACKENDS", "constant folding, simplification, common "
              "subexpressions and dead code shrink the graph; the result is unchanged",
              graphs.optimization),
    ]


TOPICS: list[Topic] = _topics()


def topic(name: str) -> Topic:
    for t in TOPICS:
        if t.name == name:
            return t
    raise KeyError(f"no lecture topic {name!r}; the topics: "
                   f"{', '.join(t.name for t in TOPICS)}")


def topic_map() -> str:
    """The lecture's topics in order, each with what shows it in graphgrad."""
    width = max(len(t.name) for t in TOPICS)
    lines = ["The lecture, topic by topic (graphgrad lecture TOPIC runs one; "
             "graphgrad lecture all runs them all):", ""]
    for k, t in enumerate(TOPICS, 1):
        lines.append(f"{k:>2}. {t.name:<{width}}  {t.title}")
        lines.append(f"    {'':<{width}}  in graphgrad: {t.features}")
    return "\n".join(lines)


def run_topic(name: str, out: str | Path = "out/lecture", quick: bool = False) -> dict:
    """Run one topic's demonstration: print its title and what to look for, run it
    (pictures go to ``out/<topic>/``), and return its facts."""
    t = topic(name)
    k = TOPICS.index(t) + 1
    folder = Path(out) / t.name
    folder.mkdir(parents=True, exist_ok=True)
    print(f"== {k}. {t.title}")
    print(f"look for: {t.look_for}")
    print()
    facts = t.run(folder, quick)
    pictures = sorted(str(p) for p in folder.iterdir() if p.is_file())
    if pictures:
        print("pictures: " + ", ".join(pictures))
    facts["pictures"] = pictures
    return facts
