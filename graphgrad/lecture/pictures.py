"""Layer ``lecture``: writing a topic's pictures when the tool is there (Graphviz's
``dot`` for graphs, matplotlib for plots) and saying which tool is missing otherwise,
so every demonstration runs headless and without the optional extras."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from graphgrad.backend import optional
from graphgrad.graph import Graph, have_dot, render

__all__ = ["graph_picture", "tensors_picture", "plot_picture", "pyplot"]


def graph_picture(graph: Graph, path: Path, **kw) -> Path | None:
    """``graph`` drawn with its legend to ``path`` (PNG), or None without Graphviz."""
    if not have_dot():
        print(f"(no {path.name}: drawing graphs needs Graphviz's `dot`)")
        return None
    return render(graph, path, **kw)


def tensors_picture(path: Path, *tensors, names: dict | None = None) -> Path | None:
    """The eager graph of ``tensors`` (``graphgrad.autograd.draw``), or None."""
    from graphgrad.graph.eager_graph import draw
    if not have_dot():
        print(f"(no {path.name}: drawing graphs needs Graphviz's `dot`)")
        return None
    return draw(*tensors, path=path, names=names)


def pyplot():
    """matplotlib.pyplot on the headless Agg backend, or None when it is not installed."""
    try:
        return optional.pyplot("plots")
    except ImportError:
        return None


def plot_picture(path: Path, draw: Callable, size: tuple = (5, 3.2)) -> Path | None:
    """``draw(ax)`` on a new figure saved to ``path``, or None without matplotlib."""
    plt = pyplot()
    if plt is None:
        print(f"(no {path.name}: plots need matplotlib, pip install 'graphgrad[plot]')")
        return None
    fig, ax = plt.subplots(figsize=size)
    draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
