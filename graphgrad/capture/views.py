"""Layer ``capture``: the capture report's views beyond the table: what its columns mean
(``explain``), every row in full (``full_text``: whole messages, notes, the user's line
with a caret, the static rewrite's source), a picture per captured graph (``draw``), and
each graph before and after ``graphgrad.passes.optimize`` with the table of what every
pass did (``optimize_text``)."""

from __future__ import annotations

import re
from pathlib import Path

from graphgrad.graph import have_dot, render, to_dot

from .report import REWRITTEN, CaptureReport

__all__ = ["explain", "full_text", "draw", "optimize_text"]


def explain(rep: CaptureReport) -> str:
    """The columns of ``rep.table()``, explained."""
    second = f" ({rep.second})" if rep.second else ""
    return "\n".join([
        "columns:",
        "  outcome   captured: a graph was made and it agreed with eager on every check;",
        "            warned: capturing warned (e.g. TracerWarning), the checks tell whether "
        "it is right;",
        "            error: capturing or a call raised (an honest failure);",
        "            silently wrong: no warning, no error, and a check found a wrong "
        "result;",
        "            eager: the reference the checks compare with",
        "  graphs    graphs the method made over ALL of this report's calls (the capture, "
        "two calls",
        "            on the example, one on the 2nd input): compile makes one per graph "
        "break and per",
        "            new branch or shape; 0 where capturing failed",
        f"  same as eager on a 2nd input   the capture's result on a different input"
        f"{second},",
        "            compared with eager's; for a random function, whether each call draws "
        "afresh",
        "  detail    the error or warning (its first line: --full shows all of it with your "
        "line),",
        "            else the ops of each graph, [graph 1] / [graph 2]; then the notes",
        "checks against eager: the result on the example, a second call (random values), "
        "the 2nd input,",
        "and for a module its buffers after one call (BatchNorm's running statistics)."])


def full_text(rep: CaptureReport) -> str:
    """Every row in full: the whole message, the user's line it points at (with a
    caret), the notes, and for the rewritten static row the rewrite's source."""
    parts = []
    for r in rep.results.values():
        lines = [f"== {r.method}: {r.outcome}"]
        message = r.message.rstrip().splitlines()
        for w in r.where:  # the message may show the line already: show it once, marked
            message = _without_line(message, w)
        lines += message
        lines += [w.text() for w in r.where]
        if r.source:
            lines.append("the function, rewritten for the static API:")
            lines += ["    " + ln for ln in r.source.rstrip().splitlines()]
        if r.graphs and not r.message:
            lines.append("graphs: " + " / ".join(f"{g.name} ({g.count()} nodes)"
                                                  for g in r.graphs))
        lines += [f"note: {n}" for n in r.notes]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _without_line(lines: list[str], w) -> list[str]:
    """``lines`` less a ``File "...", line N`` line for ``w`` and the source line after it."""
    out, skip = [], False
    for ln in lines:
        if skip and ln.strip() == w.source.strip():
            skip = False
            continue
        skip = ln.strip().startswith(f'File "{w.file}", line {w.line}')
        if not skip:
            out.append(ln)
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def draw(rep: CaptureReport, folder: str | Path, fmt: str = "png") -> list[Path]:
    """One picture per captured graph, ``<method>_<k>.<fmt>`` in ``folder`` (Graphviz);
    without Graphviz's ``dot`` the DOT text, ``<method>_<k>.dot``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for r in rep.results.values():
        for k, g in enumerate(r.graphs, 1):
            stem = folder / f"{_slug(rep.function)}_{_slug(r.method)}_{k}"
            if have_dot():
                written.append(render(g, stem.with_suffix(f".{fmt}")))
            else:
                path = stem.with_suffix(".dot")
                path.write_text(to_dot(g))
                written.append(path)
    return written


def optimize_text(rep: CaptureReport) -> str:
    """Each captured graph before and after ``graphgrad.passes.optimize``: the printed
    Python of both and the table of what each pass did."""
    from graphgrad.passes import optimize
    parts = []
    for r in rep.results.values():
        if r.method == REWRITTEN and not r.graphs:
            continue
        for k, g in enumerate(r.graphs, 1):
            title = f"{r.method}, graph {k} of {len(r.graphs)}"
            try:
                better, table = optimize(g)
            except Exception as e:  # noqa: BLE001 - a graph the passes refuse: say why
                parts.append(f"==== {title}: not optimized ({type(e).__name__}: {e})")
                continue
            after = "(unchanged: no pass found anything to do)" if better is g else \
                better.code.rstrip()
            parts.append(f"==== {title}: {table.before} -> {table.after} nodes\n"
                         f"-- before\n{g.code.rstrip()}\n-- after\n{after}\n"
                         f"-- passes\n{table}")
    return "\n\n".join(parts) if parts else "(no graph was captured)"
