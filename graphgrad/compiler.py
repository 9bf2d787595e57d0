"""Layer ``compiler`` (at the rank of ``capture``): the user-facing tools around
``graphgrad.compile``, as ``torch.compiler`` / ``torch._dynamo``:

* ``explain(fn)(*args)``: run ``fn`` once under capture and report the graphs, the graph
  breaks with their reason and source line, the ops per graph, the guards, and what
  the default backend makes of each graph: the fused groups, the lowering each gets
  (Numba kernel or NumPy program) and why, and what did not fuse and why;
* ``reset()``: forget every cached graph and zero the counters;
* ``counters``: what the compiler did (``frames``, ``cache_hits``, ``recompiles``,
  ``graphs``, ``graph_breaks``...; see ``graphgrad.dynamo.stats``);
* ``list_backends()``, ``register_backend``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graphgrad.backends.fused import lower
from graphgrad.dynamo import BACKENDS, CompiledFunction, config, counters, register_backend, reset
from graphgrad.dynamo.eval_frame import BreakRecord, EagerTerm
from graphgrad.nn import Module
from graphgrad.passes import Fused, fuse_elementwise, fusion_report, optimize

__all__ = ["explain", "ExplainOutput", "reset", "counters", "list_backends",
           "register_backend", "config", "segments", "describe"]


def list_backends() -> list[str]:
    return sorted(BACKENDS)


def describe(cf: CompiledFunction) -> str:
    """The cached segment tree of a compiled function, one segment a line: its graph,
    what ends it, and (indented below) the segments that follow it."""
    lines: list[str] = []
    names: dict[int, str] = {}

    def walk(seg, depth: int, label: str) -> None:
        ind = "  " * depth
        if id(seg) in names:   # a loop: the segment was met already
            lines.append(f"{ind}{label}(again: {names[id(seg)]})")
            return
        names[id(seg)] = seg.graph.name if seg.graph is not None else f"segment {len(names)}"
        graph = f"{seg.graph.name} ({seg.ops} ops)" if seg.graph is not None else \
            "(no ops)"
        term = seg.term
        if isinstance(term, EagerTerm):
            end = f"-> runs for real: {term.record.reason} [{term.record.where}]"
        elif term.ret is None:
            end = f"-> rest runs on real values: {term.reason}"
        else:
            end = "-> return"
        guards = "" if seg.guards is None else f"{len(seg.guards)} guards, "
        lines.append(f"{ind}{label}{guards}{graph} {end}")
        if isinstance(term, EagerTerm):
            for child in term.children:
                on_result = [g.text for g in (child.guards.guards if child.guards else ())
                             if getattr(g.source.root(), "key", None) == term.result_index
                             and type(g.source.root()).__name__ == "Slot"]
                walk(child, depth + 1, f"[{' and '.join(on_result) or 'any result'}] ")

    for root in cf.roots:
        walk(root, 0, "root: ")
    return "\n".join(lines)


def segments(cf: CompiledFunction) -> list:
    """Every cached segment of a compiled function (roots first, then their children)."""
    out, todo, seen = [], list(cf.roots), set()
    while todo:
        seg = todo.pop(0)
        if id(seg) in seen:
            continue
        seen.add(id(seg))
        out.append(seg)
        if isinstance(seg.term, EagerTerm):
            todo.extend(seg.term.children)
    return out


@dataclass
class ExplainOutput:
    """What ``explain`` found (the fields of ``torch._dynamo.explain``'s output)."""

    graphs: list = field(default_factory=list)
    graph_count: int = 0
    graph_break_count: int = 0
    break_reasons: list[BreakRecord] = field(default_factory=list)
    op_count: int = 0
    ops_per_graph: list[list[str]] = field(default_factory=list)
    out_guards: list[str] = field(default_factory=list)
    eager_reason: str | None = None
    segment_tree: str = ""
    result: Any = None
    # per fused group: (graph name, its ops, the lowering, why); and the op nodes left
    # unfused: (graph name, node, op, why)
    fused_groups: list = field(default_factory=list)
    not_fused: list = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"Graph Count: {self.graph_count}",
                 f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}"]
        if self.eager_reason:
            lines.append(f"Ran eagerly: {self.eager_reason}")
        lines.append("Break Reasons:")
        for i, b in enumerate(self.break_reasons, 1):
            lines.append(f"  Break Reason {i}: [{b.kind}] {b.reason}")
            lines.append(f"    {b.where}")
            if b.line:
                lines.append(f"      {b.line}")
        lines.append("Ops per Graph:")
        for g, ops in zip(self.graphs, self.ops_per_graph, strict=True):
            lines.append(f"  {g.name}: {', '.join(ops)}")
        lines.append("Out Guards:")
        lines.extend(f"  {g}" for g in self.out_guards)
        lines.append("Fused groups:")
        lines.extend(f"  {g}: {' -> '.join(ops)}: {how} ({why})"
                     for g, ops, how, why in self.fused_groups)
        lines.append("Not fused:")
        lines.extend(f"  {g}: {name} ({op}): {why}" for g, name, op, why in self.not_fused)
        lines.append("Segments:")
        lines.extend(f"  {line}" for line in self.segment_tree.splitlines())
        return "\n".join(lines)


def explain(fn: Callable | Module, *extra_args, **extra_kwargs):
    """``explain(fn)(*args, **kwargs) -> ExplainOutput``: capture ``fn`` on these inputs
    (with the "eager" backend) and say what became of it."""
    def inner(*args, **kwargs):
        if isinstance(fn, Module):
            cf = CompiledFunction(type(fn).forward, backend="eager", share=False)
            result = cf(fn, *args, **kwargs)
        else:
            cf = CompiledFunction(fn, backend="eager", share=False)
            result = cf(*args, **kwargs)
        out = ExplainOutput(result=result, eager_reason=cf.eager_reason)
        out.graphs = list(cf.graphs)
        out.graph_count = len(cf.graphs)
        out.break_reasons = list(cf.breaks)
        out.graph_break_count = len(cf.breaks)
        out.ops_per_graph = [[n.target_name for n in g.nodes
                              if n.kind not in ("placeholder", "output")] for g in cf.graphs]
        out.op_count = sum(len(ops) for ops in out.ops_per_graph)
        out.segment_tree = describe(cf)
        for g in cf.graphs:
            opt = optimize(g)[0]
            out.not_fused.extend((g.name, *row) for row in fusion_report(opt).not_fused)
            for n in fuse_elementwise(opt).nodes:
                if n.kind == "call" and n.op is Fused:
                    k = lower(n.params["kernel"])
                    out.fused_groups.append((g.name, k.program.op_names, k.lowering,
                                             k.decision.reason))
        for seg in segments(cf):
            if seg.guards is not None:
                out.out_guards.extend(g.text for g in seg.guards.guards)
        return out
    if extra_args or extra_kwargs:  # the old calling form explain(fn, *args)
        return inner(*extra_args, **extra_kwargs)
    return inner
