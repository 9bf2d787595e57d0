"""Layer ``passes``: ``optimize``, which runs passes over a graph until none changes it,
and ``OptimizeReport``, what each pass did (printable).

The default pipeline is ``simplify``, ``constant_folding``,
``common_subexpression_elimination``, ``dead_code_elimination``, in rounds: one pass
makes work for another (simplify and folding leave dead nodes behind and can make two
nodes identical for CSE). Every pass returns its argument when it changes nothing, so
a round in which every pass did so is the fixed point; rounds stop there or after
``max_rounds``. Each pass verifies what it made (``graph.verify``:
edges, order, sub-graph signatures, every shape rule re-run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from graphgrad.graph import Graph, Node

from .common_subexpressions import CSE
from .constant_folding import CONSTANT_FOLDING
from .dead_code import DEAD_CODE
from .rebuild import GraphPass, carry_state, subgraphs_postorder
from .simplify import SIMPLIFY

__all__ = ["optimize", "OptimizeReport", "PassRun", "DEFAULT_PASSES"]

DEFAULT_PASSES = (SIMPLIFY, CONSTANT_FOLDING, CSE, DEAD_CODE)
_BY_NAME = {p.name: p for p in DEFAULT_PASSES}


class PassRun(NamedTuple):
    """One pass run: its name, the round, node counts (sub-graphs included)."""

    name: str
    round: int
    before: int
    after: int
    changed: bool


class OptimizeReport:
    """What ``optimize`` did: ``runs`` (one ``PassRun`` per pass run), ``rounds``,
    ``before``/``after`` node counts, and ``node_map`` (each node of the original graph
    to the node standing for it now; a dropped node has none). ``str()`` is a table."""

    def __init__(self, before: int):
        self.runs: list[PassRun] = []
        self.before = before
        self.after = before
        self.rounds = 0
        self.node_map: dict[Node, Node] | None = {}  # filled by optimize
        self.fixed_point = False

    def carry_state(self, state: dict) -> dict:
        """``state`` (variable values, seeded generators) re-keyed for the optimized graph
        (``rebuild.carry_state``)."""
        if self.node_map is None:
            raise ValueError("a pass that is not one of graphgrad.passes ran: the optimized "
                             "graph's nodes cannot be traced back to the original's")
        return carry_state(state, self.node_map)

    def _compose(self, step: dict[Node, Node] | None) -> None:
        """Follow one more pass: ``step`` maps the nodes of the graphs it rewrote (None:
        a pass that gives no map); nodes of graphs it left alone stay themselves."""
        if self.node_map is None or step is None:
            self.node_map = None
            return
        rewritten = {k.graph for k in step}
        self.node_map = {orig: step.get(mid) if mid.graph in rewritten else mid
                         for orig, mid in self.node_map.items()
                         if mid.graph not in rewritten or mid in step}

    def __str__(self) -> str:
        rows = [("pass", "round", "nodes before", "nodes after")]
        rows += [(r.name, str(r.round), str(r.before), str(r.after)) for r in self.runs]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                 for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        end = "a fixed point" if self.fixed_point else f"the round limit ({self.rounds})"
        lines.append(f"total: {self.before} -> {self.after} nodes, {self.rounds} round"
                     f"{'s' if self.rounds != 1 else ''}, stopped at {end}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<OptimizeReport {self.before} -> {self.after} nodes, {self.rounds} rounds>"


def _as_pass(p) -> GraphPass | Callable:
    if isinstance(p, str):
        if p not in _BY_NAME:
            raise ValueError(f"unknown pass {p!r} (one of {', '.join(_BY_NAME)})")
        return _BY_NAME[p]
    if isinstance(p, GraphPass):
        return p
    found = _BY_NAME.get(getattr(p, "__name__", None))
    if found is not None and getattr(p, "__module__", "").startswith("graphgrad.passes"):
        return found
    if not callable(p):
        raise TypeError(f"a pass is a name, a graphgrad.passes function or a callable "
                        f"Graph -> Graph, got {type(p).__name__}")
    return p


def optimize(graph: Graph, passes: Sequence | None = None,
             max_rounds: int = 10) -> tuple[Graph, OptimizeReport]:
    """Run ``passes`` (default ``DEFAULT_PASSES``; names, the functions of this package or
    any ``Graph -> Graph`` callable) in rounds until a round changes nothing. Returns the
    optimized graph (``graph`` itself when nothing changed; the argument is never
    changed) and the report."""
    pipeline = [_as_pass(p) for p in (DEFAULT_PASSES if passes is None else passes)]
    report = OptimizeReport(graph.count())
    report.node_map = {n: n for g in subgraphs_postorder(graph) for n in g.nodes}
    current = graph
    while report.rounds < max_rounds:
        report.rounds += 1
        changed = False
        for p in pipeline:
            before = current.count()
            if isinstance(p, GraphPass):
                result = p(current)
                new, step = result.graph, result.node_map
            else:
                new, step = p(current), None
                new.verify()
            if new is not current:
                changed = True
                report._compose(step)
            report.runs.append(PassRun(getattr(p, "name", getattr(p, "__name__", repr(p))),
                                       report.rounds, before, new.count(), new is not current))
            current = new
        if not changed:
            report.fixed_point = True
            break
    report.after = current.count()
    return current, report
