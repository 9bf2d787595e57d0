"""A graph value written in place into an eager tensor (a module's buffer) while a static
graph is built: the write cannot take a value that exists only when the graph runs, so it
is refused with what to do instead - before, BatchNorm in train mode silently stored the
placeholder's stand-in and counted graph builds as batches."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
import graphgrad.static as tf


def test_batchnorm_in_train_mode_refuses_and_leaves_no_state():
    bn = gg.nn.BatchNorm1d(3)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(gg.float32, shape=(8, 3))
        with pytest.raises(RuntimeError, match=r"copy_: the value written .* graph node.*"
                                                r"module\.eval\(\)"):
            bn(x)
    assert int(bn.num_batches_tracked) == 0          # no batch counted for a failed call
    assert np.array_equal(bn.running_mean.numpy(), np.zeros(3, np.float32))


def test_batchnorm_in_eval_mode_runs_in_a_static_graph():
    bn = gg.nn.BatchNorm1d(3).eval()
    data = np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(gg.float32, shape=(8, 3))
        y = bn(x)
    with tf.Session(graph=g) as s:
        out = s.run(y, feed_dict={x: data})
    np.testing.assert_allclose(out, bn(gg.tensor(data)).detach().numpy(), rtol=1e-6)


def test_an_eager_tensor_cannot_take_a_graph_value_in_place():
    t = gg.zeros(3)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(gg.float32, shape=(3,))
        for write in (lambda: t.copy_(x * 2), lambda: t.add_(x)):
            with pytest.raises(RuntimeError, match="graph node"):
                write()
    assert np.array_equal(t.numpy(), np.zeros(3, np.float32))


def test_compound_assignment_on_a_graph_value_rebinds_the_name_as_tf1():
    """``y *= 3`` on a graph's tensor builds a new node and rebinds ``y`` (TF1: a graph's
    tensors are immutable); the placeholder object fed by the session stays the same, and
    a value read before the assignment keeps the old node."""
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(gg.float32, shape=(None, 3))
        feed = x
        y = x * 2
        before = y.sum()
        y *= 3
        y -= 1
        x += 1
        assert x is not feed and feed.op_name == "Placeholder"
        with tf.Session() as sess:
            got_y, got_before, got_x = sess.run([y, before, x], {feed: data})
    np.testing.assert_array_equal(got_y, data * 6 - 1)
    assert got_before == (data * 2).sum()
    np.testing.assert_array_equal(got_x, data + 1)


def test_static_gradient_of_a_mean_over_run_time_dims():
    """Mean's vjp multiplies the reduced sizes, Symbols read at run time here (``n *= s``
    on a graph value builds a node, rather than writing into its stand-in)."""
    data = np.random.default_rng(1).standard_normal((3, 4, 2))
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(gg.float64, shape=(None, None, None))
        (dx,) = tf.gradients(x.mean(dim=(0, 1)).sum(), [x])
        with tf.Session() as sess:
            got = sess.run(dx, {x: data})
    np.testing.assert_allclose(got, np.full(data.shape, 1 / 12))
