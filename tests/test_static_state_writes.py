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
