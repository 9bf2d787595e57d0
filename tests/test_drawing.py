"""Drawings that explain themselves: every DOT drawing has a legend (node shapes, edge
styles, the dtype/shape notation), dependency edges and backward nodes are coloured, and
``graphgrad.autograd.draw`` draws the eager graph of a tensor with the gradient graph
that ``create_graph=True`` extends it with (backward nodes = the gradient's nodes that
are not in the forward graph)."""

from __future__ import annotations

import re

import pytest

import graphgrad as gg
import graphgrad.static as tf
from graphgrad.graph import have_dot, render, to_dot
from graphgrad.graph.dot import BACKWARD_STYLE, LEGEND_NOTATION
from graphgrad.graph.eager_graph import from_tensors


def _static_with_grad():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (None,), name="x")
        a = x * 2.0
        with tf.control_dependencies([a]):
            b = x + 1.0
        # concat's rule needs the split sizes as numbers: its vjp node runs at run time;
        # mean's and mul's gradients are ordinary ops that read the size at run time
        y = tf.reduce_mean(tf.concat([a * b, x], 0))
        n = len(g.ir.nodes)
        tf.gradients(y, [x])
    return g.ir, g.ir.nodes[n:]


def _filled(dot: str) -> set[str]:
    """The labels' first lines (node names) of the nodes drawn filled as backward."""
    return {m.group(1) for line in dot.splitlines() if BACKWARD_STYLE in line
            and not line.strip().startswith("legend")
            for m in [re.search(r'label="([^\\"]+)\\n', line)] if m}


def test_every_drawing_has_a_legend_with_the_notation():
    graph, backward = _static_with_grad()
    dot = to_dot(graph, backward=backward)
    assert "subgraph cluster_legend" in dot
    for line in LEGEND_NOTATION.splitlines():
        assert line in dot.replace("\\n", "\n")
    assert 'legend_placeholder [label="input (placeholder)", shape=ellipse]' in dot
    assert 'legend_backward [label="backward op"' in dot
    assert 'legend_ctrl_a -> legend_ctrl_b' in dot
    assert "XBackward: op X's vjp rule" in dot   # the graph has run-time vjp nodes
    assert "cluster_legend" not in to_dot(graph, legend=False)


def test_control_edges_and_backward_nodes_are_coloured():
    graph, backward = _static_with_grad()
    dot = to_dot(graph, backward=backward)
    ctrl = [line for line in dot.splitlines() if 'label="ctrl"' in line
            and "legend" not in line]
    assert len(ctrl) == 1 and "style=dashed" in ctrl[0] and "color=" in ctrl[0]
    assert _filled(dot) == {n.name for n in backward}
    # without ``backward``, only the run-time vjp kinds (dims unknown) are backward
    assert _filled(to_dot(graph)) == {n.name for n in graph.nodes if n.kind == "vjp"} != set()
    assert {n.target_name for n in graph.nodes if n.kind == "vjp"} == {"CatBackward"}
    assert {"Mul", "Div", "Expand"} <= {n.target_name for n in backward if n.kind == "call"}


def test_autograd_draw_marks_the_graph_extension():
    x = gg.tensor(2.0, requires_grad=True)
    y = x.sin() * x
    (dy,) = gg.autograd.grad(y, x, create_graph=True)
    graph, backward = from_tensors(y, dy, names={"x": x}, forward=(y,))
    forward_ops = {n.name for n in graph.nodes if n.kind == "call"} - {n.name for n in backward}
    assert {graph.node(n).target_name for n in forward_ops} == {"Sin", "Mul"}
    # d/dx sin(x) x = cos(x) x + sin(x): the backward reads the forward's sin and x
    assert {n.target_name for n in backward if n.kind == "call"} >= {"Cos", "Mul", "Add"}
    sin = next(n for n in graph.nodes if n.target_name == "Sin")
    assert any(sin in n.input_nodes() for n in backward)
    dot = gg.autograd.draw(y, dy, names={"x": x})
    assert _filled(dot) == {n.name for n in backward}
    assert "cluster_legend" in dot
    with pytest.raises(TypeError, match="expects one or more Tensors"):
        gg.autograd.draw(1.0)


def test_second_order_extension_grows_the_drawing():
    x = gg.tensor(0.5, requires_grad=True)
    y = x.exp() * x.sin()
    (d1,) = gg.autograd.grad(y, x, create_graph=True)
    (d2,) = gg.autograd.grad(d1, x, create_graph=True)
    g1, b1 = from_tensors(y, d1, forward=(y,))
    g2, b2 = from_tensors(y, d2, forward=(y,))
    assert len(b2) > len(b1) > 0


def test_render_writes_pictures_with_the_legend(tmp_path):
    graph, backward = _static_with_grad()
    x = gg.tensor(2.0, requires_grad=True)
    y = x * x
    if not have_dot():
        pytest.skip("Graphviz `dot` is not installed")
    for fmt in ("svg", "png"):
        out = render(graph, tmp_path / f"g.{fmt}", backward=backward)
        assert out.stat().st_size > 1000
    svg = (tmp_path / "g.svg").read_text()
    assert "legend" in svg and "backward op" in svg
    out = gg.autograd.draw(y, path=tmp_path / "eager.svg")
    assert "Mul" in out.read_text()
