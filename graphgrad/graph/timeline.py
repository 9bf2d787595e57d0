"""Layer ``graph``: ``Timeline``, the execution log of a parallel run (``Scheduler.log``,
``graphgrad.static.Session.log``) as a list of ``LogEntry(node, worker, start, end)``
that prints readably: one line per node run, in start order, with its worker, its start
and end in milliseconds from the start of the run, and the nodes it was in progress
together with; ``gantt(path)`` draws it as a Gantt chart (matplotlib, the ``plot``
extra)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from graphgrad.backend.optional import pyplot

__all__ = ["LogEntry", "Timeline", "overlaps"]


class LogEntry(NamedTuple):
    """One node run: the node's name, the worker (thread) that ran it, and when it
    started and ended, in seconds from the start of the run."""
    node: str
    worker: int
    start: float
    end: float


def overlaps(a: LogEntry, b: LogEntry) -> bool:
    """Whether two logged runs were in progress at the same time."""
    return a.start < b.end and b.start < a.end


class Timeline(list):
    """A run's ``LogEntry``s sorted by start; ``str()`` is the text timeline."""

    def entry(self, name: str) -> LogEntry:
        for e in self:
            if e.node == name:
                return e
        raise KeyError(f"node {name!r} is not in the execution log")

    def together(self, a: str, b: str) -> bool:
        """Whether nodes ``a`` and ``b`` were in progress at the same time."""
        return overlaps(self.entry(a), self.entry(b))

    def __str__(self) -> str:
        if not self:
            return "(no node ran on the scheduler)"
        width = max(len(e.node) for e in self)
        lines = [f"{'node':<{width}}  worker  start ms    end ms  in progress together with"]
        for e in self:
            with_ = [o.node for o in self if o is not e and overlaps(e, o)]
            lines.append(f"{e.node:<{width}}  {e.worker:>6}  {1e3 * e.start:>8.3f}  "
                         f"{1e3 * e.end:>8.3f}  {', '.join(with_) or '-'}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Timeline({len(self)} node runs)\n{self}"

    def gantt(self, path: str | Path, title: str = "") -> Path:
        """Draw one bar per node run, one row per worker, to ``path`` (PNG, SVG...)."""
        plt = pyplot("drawing a Gantt chart")
        path = Path(path)
        workers = sorted({e.worker for e in self}) or [0]
        fig, ax = plt.subplots(figsize=(6, 0.6 + 0.5 * len(workers)))
        colors = plt.get_cmap("tab10")
        for k, e in enumerate(self):
            ax.barh(e.worker, 1e3 * (e.end - e.start), left=1e3 * e.start, height=0.6,
                    color=colors(k % 10), edgecolor="black")
            ax.text(1e3 * (e.start + e.end) / 2, e.worker, e.node, ha="center",
                    va="center", fontsize=8)
        ax.set_yticks(workers, [f"worker {w}" for w in workers])
        ax.set_xlabel("time since the run started (ms)")
        if title:
            ax.set_title(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path
