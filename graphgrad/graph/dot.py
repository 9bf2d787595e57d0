"""Layer ``graph``: a Graph as Graphviz DOT text and its rendering to SVG/PNG with the
``dot`` binary (Debian's graphviz package), when it is installed.

Every drawing carries a legend (``legend=False`` leaves it out) that explains what it
uses: the node shapes (ellipse: an input, note: a constant, cylinder: a variable,
diamond: ``cond``, hexagon: a loop, double octagon: the outputs), the edge styles (solid:
data, dashed orange "ctrl": a dependency edge, dotted: a write into a variable or the
link to a sub-graph) and the notation of each node's third line, its dtype and shape:
``f32[3, 4]`` a float32 3x4 array, ``f32[?, 4]`` a dim known only at run time (a static
placeholder of shape ``(None, 4)``), ``f32[*]`` a value whose rank is unknown too, a
tuple for the several outputs of ``cond``/``while_loop``. Backward nodes (the run-time
``vjp``/``while_grad`` kinds, and any nodes passed as ``backward=``, e.g. those
``static.gradients`` appended) are filled red, so a drawing shows how the backward pass
extends the graph with ordinary ops.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from .graph import Graph
from .node import Node
from .spec import short

__all__ = ["to_dot", "render", "have_dot", "run_dot", "node_label", "legend_lines",
           "LEGEND_NOTATION", "BACKWARD_STYLE"]

_SHAPES = {"placeholder": "ellipse", "constant": "note", "variable": "cylinder",
           "output": "doubleoctagon", "cond": "diamond", "while_loop": "hexagon",
           "while_grad": "hexagon"}
_BACKWARD_KINDS = frozenset({"vjp", "while_grad"})
BACKWARD_STYLE = 'style=filled, fillcolor="#fcbba1"'
CONTROL_STYLE = 'style=dashed, color="#d95f02", fontcolor="#d95f02", label="ctrl"'

# what each kind is called in the legend, in the order the legend lists them
_LEGEND_KINDS = {"placeholder": "input (placeholder)", "constant": "constant",
                 "variable": "variable (state)", "call": "op", "cond": "cond (both branches)",
                 "while_loop": "while_loop", "random": "random draw", "output": "outputs"}

LEGEND_NOTATION = ("each node: name / op / dtype[shape]\n"
                   "f32[3, 4]: float32, shape (3, 4)\n"
                   "f32[?, 4]: a dim known only at run time\n"
                   "f32[*]: even the rank is unknown\n"
                   "(f32[], f32[3]): several outputs")


_VJP_NOTE = ("XBackward: op X's vjp rule, run at run\n"
             "time: it needs a size as a number that\n"
             "only the run knows (e.g. cat's split\n"
             "sizes); other backward ops are ordinary")


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def node_label(name: str, target: str, spec_text: str) -> str:
    """A node's three lines, quoted for DOT: its name, its op and its dtype/shape."""
    return _q(f"{name}|{target}|{spec_text}").replace("|", "\\n")


def legend_lines(kinds: Iterable[str], *, backward: bool = False, control: bool = False,
                 writes: bool = False, subgraphs: bool = False) -> list[str]:
    """DOT lines of a legend cluster: sample nodes for the ``kinds`` drawn (plus the
    backward fill and the edge styles used) and the dtype/shape notation."""
    lines = ["  subgraph cluster_legend {",
             '    label="legend"; style=dashed; color=gray50; fontsize=9;',
             '    node [fontsize=8, margin="0.05,0.02", height=0.2];',
             '    edge [fontsize=8];']
    present = set(kinds) | {"call"}
    shown = [k for k in _LEGEND_KINDS if k in present]
    for k in shown:
        lines.append(f"    legend_{k} [label={_q(_LEGEND_KINDS[k])}, "
                     f"shape={_SHAPES.get(k, 'box')}];")
    if backward:
        lines.append(f'    legend_backward [label="backward op", shape=box, {BACKWARD_STYLE}];')
        lines.append('    legend_call -> legend_backward [label="data"];')
    if "vjp" in present:
        lines.append(f"    legend_vjp [label={_q(_VJP_NOTE)}, shape=box, {BACKWARD_STYLE}];")
    if control:
        lines.append('    legend_ctrl_a [label="op", shape=box];')
        lines.append('    legend_ctrl_b [label="runs after", shape=box];')
        lines.append(f"    legend_ctrl_a -> legend_ctrl_b [{CONTROL_STYLE}];")
    if writes:
        lines.append('    legend_assign [label="assign", shape=box];')
        lines.append('    legend_target [label="variable", shape=cylinder];')
        lines.append('    legend_assign -> legend_target [style=dotted, label="writes"];')
    if subgraphs:
        lines.append('    legend_cluster [label="sub-graph (branch, body)", shape=box, '
                     'style=rounded, color=blue];')
    lines.append(f"    legend_notation [shape=plaintext, label={_q(LEGEND_NOTATION)}];")
    # invisible edges stack the samples in a column (they carry no meaning)
    order = [f"legend_{k}" for k in shown] + ["legend_notation"]
    for a, b in zip(order, order[1:]):
        lines.append(f"    {a} -> {b} [style=invis];")
    lines.append("  }")
    return lines


def to_dot(graph: Graph, *, legend: bool = True, backward: Iterable[Node] = ()) -> str:
    """DOT text: one box per node, clusters for sub-graphs, dependency edges dashed and
    coloured, backward nodes (``backward`` and the vjp kinds) filled; a legend unless
    ``legend=False``."""
    back = set(backward)
    ids: dict[Node, str] = {}

    def nid(n: Node) -> str:
        if n not in ids:
            ids[n] = f"n{len(ids)}"
        return ids[n]

    body: list[str] = []
    edges: list[str] = []
    kinds: set[str] = set()
    used = {"backward": False, "control": False, "writes": False, "subgraphs": False}
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
            kinds.add(n.kind)
            style = ", style=dashed" if n.kind == "group" else ""
            if n.kind in _BACKWARD_KINDS or n in back:
                style, used["backward"] = ", " + BACKWARD_STYLE, True
            body.append(f"{pad}{nid(n)} [label={node_label(n.name, n.target_name, short(n.spec))}"
                        f", shape={_SHAPES.get(n.kind, 'box')}{style}];")
            for i in n.input_nodes():
                edges.append(f"  {nid(i)} -> {nid(n)};")
            for d in n.deps:
                used["control"] = True
                edges.append(f"  {nid(d)} -> {nid(n)} [{CONTROL_STYLE}];")
            if n.kind == "assign":
                used["writes"] = True
                edges.append(f'  {nid(n)} -> {nid(n.target)} [style=dotted, label="writes"];')
            for key, sg in reversed(list(n.subgraphs.items())):
                used["subgraphs"] = True
                cid = f"cluster_{nid(n)}_{key}"
                todo += [("close", depth), ("graph", sg, depth + 1),
                         ("open", cid, f"{n.name}: {key}", depth)]
                if sg.nodes:
                    edges.append(f"  {nid(n)} -> {nid(sg.nodes[-1])} [style=dotted, "
                                 f"arrowhead=none, lhead={cid}];")
    lines = [f"digraph {_q(graph.name)} {{", "  rankdir=TB; compound=true;",
             '  node [shape=box, fontname="monospace", fontsize=10];']
    if legend:
        lines += legend_lines(kinds, **used)
    return "\n".join(lines + body + edges + ["}"]) + "\n"


def have_dot() -> bool:
    return shutil.which("dot") is not None


def run_dot(dot_text: str, path: str | Path, fmt: str | None = None) -> Path:
    """Write ``dot_text`` drawn by Graphviz to ``path`` (format from the suffix)."""
    path = Path(path)
    fmt = fmt or path.suffix.lstrip(".") or "svg"
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("rendering a graph needs Graphviz's `dot` program (Debian: apt "
                           "install graphviz); Graph.to_dot() gives the DOT text without it")
    subprocess.run([exe, f"-T{fmt}", "-o", str(path)], input=dot_text.encode(),
                   check=True, capture_output=True)
    return path


def render(graph: Graph, path: str | Path, fmt: str | None = None, *, legend: bool = True,
           backward: Iterable[Node] = ()) -> Path:
    """Write ``graph`` drawn by Graphviz to ``path`` (format from the suffix: svg, png),
    with its legend; ``backward`` nodes filled as backward ops (see ``to_dot``)."""
    return run_dot(to_dot(graph, legend=legend, backward=backward), path, fmt)
