"""Layer ``graph``: a Graph as Graphviz DOT text (data edges solid, dependency edges
dashed, sub-graphs as clusters) and its rendering to SVG/PNG with the ``dot`` binary
(Debian's graphviz package), when it is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .graph import Graph
from .node import Node
from .spec import short

__all__ = ["to_dot", "render", "have_dot"]


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


_SHAPES = {"placeholder": "ellipse", "constant": "note", "variable": "cylinder",
           "output": "doubleoctagon", "cond": "diamond", "while_loop": "hexagon",
           "while_grad": "hexagon"}


def to_dot(graph: Graph) -> str:
    """DOT text: one box per node, clusters for sub-graphs, dashed dependency edges."""
    ids: dict[Node, str] = {}

    def nid(n: Node) -> str:
        if n not in ids:
            ids[n] = f"n{len(ids)}"
        return ids[n]

    body: list[str] = []
    edges: list[str] = []
    # a LIFO worklist of events, so that clusters nest as sub-graphs do (no recursion)
    todo: list[tuple] = [("graph", graph, 1)]
    while todo:
        event = todo.pop()
        if event[0] == "close":
            body.append("  " * event[1] + "}")
            continue
        if event[0] == "open":
            _, cid, label, depth = event
            body.append("  " * depth + f"subgraph {cid} {{")
            body.append("  " * (depth + 1) + f"label={_q(label)}; style=rounded; color=blue;")
            continue
        _, g, depth = event
        pad = "  " * depth
        for n in g.nodes:
            style = ", style=dashed" if n.kind == "group" else ""
            label = _q(f"{n.name}|{n.target_name}|{short(n.spec)}").replace("|", "\\n")
            body.append(f"{pad}{nid(n)} [label={label}, shape={_SHAPES.get(n.kind, 'box')}"
                        f"{style}];")
            for i in n.input_nodes():
                edges.append(f"  {nid(i)} -> {nid(n)};")
            for d in n.deps:
                edges.append(f'  {nid(d)} -> {nid(n)} [style=dashed, color=gray40, '
                             f'label="ctrl"];')
            if n.kind == "assign":
                edges.append(f'  {nid(n)} -> {nid(n.target)} [style=dotted, label="writes"];')
            for key, sg in reversed(list(n.subgraphs.items())):
                cid = f"cluster_{nid(n)}_{key}"
                todo += [("close", depth), ("graph", sg, depth + 1),
                         ("open", cid, f"{n.name}: {key}", depth)]
                if sg.nodes:
                    edges.append(f"  {nid(n)} -> {nid(sg.nodes[-1])} [style=dotted, "
                                 f"arrowhead=none, lhead={cid}];")
    lines = [f"digraph {_q(graph.name)} {{", "  rankdir=TB; compound=true;",
             '  node [shape=box, fontname="monospace", fontsize=10];']
    return "\n".join(lines + body + edges + ["}"]) + "\n"


def have_dot() -> bool:
    return shutil.which("dot") is not None


def render(graph: Graph, path: str | Path, fmt: str | None = None) -> Path:
    """Write ``graph`` drawn by Graphviz to ``path`` (format from the suffix: svg, png)."""
    path = Path(path)
    fmt = fmt or path.suffix.lstrip(".") or "svg"
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("rendering a graph needs Graphviz's `dot` program (Debian: apt "
                           "install graphviz); Graph.to_dot() gives the DOT text without it")
    subprocess.run([exe, f"-T{fmt}", "-o", str(path)], input=to_dot(graph).encode(),
                   check=True, capture_output=True)
    return path
