"""``static.gradients`` extends the graph with ordinary ops (the lecture's point), also
where the placeholders' dims are known only at run time: the vjp rules run on Symbols
whose unknown sizes are read by ``shape`` nodes, and cotangents are un-broadcast with
``SumToSize`` where only the run can tell. Checked on the lecture's static examples
against eager autograd, for several fed shapes (size 1 included, where broadcasting
would have to be summed back), and on the node kinds of the gradient graph."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
import graphgrad.static as tf
from graphgrad.graph import to_dot

# the lecture's functions rewritten for the static API, as examples/lecture_capture.py


def branch_static(x):
    return tf.cond(x < 0, lambda: x + 1, lambda: x - 1)


def shape_dependent_static(x):
    s = tf.shape(x)
    n, m = s[0], s[1]
    return tf.reshape(x, [m, n]) * tf.cast(n, x.dtype)


def shape_dependent(x):
    n, m = x.shape
    return x.reshape(m, n) * n


def _eager_grad(fn, v: np.ndarray) -> np.ndarray:
    x = gg.tensor(v, requires_grad=True)
    (g,) = gg.autograd.grad((fn(x) ** 2).mean(), x)
    return g.numpy()


def _backward_nodes(g, before: int) -> list:
    return [n for n in g.ir.nodes[before:] if n.kind not in ("item",)]


def test_shape_dependent_gradient_is_ordinary_ops_for_every_shape():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, shape=(None, None), name="x")
        y = shape_dependent_static(x)
        loss = tf.reduce_mean(tf.square(y))
        before = len(g.ir.nodes)
        (dx,) = tf.gradients(loss, x)
    back = _backward_nodes(g, before)
    assert {n.kind for n in back} <= {"call", "constant", "shape"}
    ops = {n.target_name for n in back if n.kind == "call"}
    # mean's rule divides by the element count read at run time; reshape's rule reshapes
    # back to x's run-time sizes
    assert {"Div", "Expand", "Reshape", "Mul", "Getitem"} <= ops
    assert "vjp" not in to_dot(g.ir) and "_vjp(" not in g.ir.code
    rng = np.random.default_rng(0)
    with tf.Session(graph=g) as sess:
        for shape in ((2, 3), (4, 1), (1, 5)):
            v = rng.standard_normal(shape)
            np.testing.assert_allclose(sess.run(dx, {x: v}), _eager_grad(shape_dependent, v),
                                       rtol=1e-12)


def test_branch_gradient_is_a_cond_of_ordinary_ops():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, shape=(), name="x")
        (dx,) = tf.gradients(branch_static(x) ** 2, x)
    cond_grads = [n for n in g.ir.nodes if n.kind == "cond" and n.name.endswith("_grad")]
    assert len(cond_grads) == 1
    for sub in cond_grads[0].subgraphs.values():
        assert not any(n.kind == "vjp" for n in sub.nodes)
    with tf.Session(graph=g) as sess:
        for v in (2.0, -3.0):
            assert sess.run(dx, {x: v}) == pytest.approx(2 * (v - 1 if v >= 0 else v + 1))


def test_broadcasting_with_unknown_dims_is_summed_back_at_run_time():
    g = tf.Graph()
    with g.as_default():
        a = tf.placeholder(tf.float64, shape=(None, None), name="a")
        b = tf.placeholder(tf.float64, shape=(None, None), name="b")
        da, db = tf.gradients(tf.reduce_sum(tf.square(a * b + a)), [a, b])
    assert not any(n.kind == "vjp" for n in g.ir.nodes)
    assert any(n.target_name == "SumToSize" for n in g.ir.nodes)
    rng = np.random.default_rng(1)
    with tf.Session(graph=g) as sess:
        for sa, sb in (((1, 3), (4, 3)), ((4, 3), (4, 1)), ((2, 3), (2, 3))):
            av, bv = rng.standard_normal(sa), rng.standard_normal(sb)
            ta, tb = gg.tensor(av, requires_grad=True), gg.tensor(bv, requires_grad=True)
            ((ta * tb + ta) ** 2).sum().backward()
            got_a, got_b = sess.run([da, db], {a: av, b: bv})
            assert got_a.shape == sa and got_b.shape == sb
            np.testing.assert_allclose(got_a, ta.grad.numpy(), rtol=1e-12)
            np.testing.assert_allclose(got_b, tb.grad.numpy(), rtol=1e-12)


def test_sum_to_size_matches_torch():
    torch = pytest.importorskip("torch")
    v = np.random.default_rng(2).standard_normal((2, 4, 3))
    for size in ((4, 1), (1, 3), (3,), (2, 4, 3), (1, 1, 1)):
        np.testing.assert_allclose(gg.tensor(v).sum_to_size(*size).numpy(),
                                   torch.tensor(v).sum_to_size(*size).numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match=r"size \{\[2, 3\]\} is not expandable"):
        gg.tensor(v).sum_to_size(2, 3)
