"""graphgrad.static, the TF1-style declarative API: the lecture's cases, a TF1-style MLP
trained with Session.run, gradients through cond and while_loop against eager autograd
and PyTorch, fetch structures, plan caching, and every error by its TF wording."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg
import graphgrad.static as tf


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield
    tf.reset_default_graph()


# ---- the lecture's cases (../shared/LECTURE_CASES.md) ------------------------------------

def branch(x):  # the eager version, for comparison
    if x < 0:
        return x + 1
    return x - 1


def test_branch_with_static_cond_builds_both_branches():
    x = tf.placeholder(tf.float32, shape=(), name="x")
    y = tf.cond(x < 0, lambda: x + 1, lambda: x - 1)
    ir = tf.get_default_graph().ir
    (node,) = [n for n in ir.nodes if n.kind == "cond"]
    ops = {k: [n.op.__name__ for n in g.nodes if n.kind == "call"]
           for k, g in node.subgraphs.items()}
    assert ops == {"then": ["Add"], "else": ["Sub"]}  # both branches are in the graph
    with tf.Session() as sess:
        for v in (-2.5, -1.0, 0.0, 0.5, 3.0):
            assert sess.run(y, feed_dict={x: v}) == pytest.approx(float(branch(gg.tensor(v))))


def test_shape_dependent_with_unknown_dims():
    x = tf.placeholder(tf.float32, shape=(None, None), name="x")
    assert str(x) == 'Tensor("x:0", shape=(?, ?), dtype=float32)'
    s = tf.shape(x)
    n, m = s[0], s[1]
    y = tf.reshape(x, [m, n]) * tf.cast(n, tf.float32)
    with tf.Session() as sess:
        for shape in [(2, 3), (4, 1), (1, 5)]:
            a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
            np.testing.assert_array_equal(sess.run(y, {x: a}),
                                          a.reshape(shape[1], shape[0]) * shape[0])


# ---- a TF1-style MLP ------------------------------------------------------------------

def test_mlp_trains_with_placeholders_variables_minimize_and_session_run():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((64, 2)).astype(np.float32)
    labels = (data[:, :1] * data[:, 1:] > 0).astype(np.float32)  # XOR-like quadrants
    x = tf.placeholder(tf.float32, shape=(None, 2), name="x")  # the batch dim is unknown
    t = tf.placeholder(tf.float32, shape=(None, 1), name="t")
    w1 = tf.Variable(tf.random_normal((2, 16), stddev=1.0, seed=1), name="w1")
    b1 = tf.Variable(tf.zeros((16,)), name="b1")
    w2 = tf.Variable(tf.random_normal((16, 1), stddev=0.3, seed=2), name="w2")
    b2 = tf.Variable(tf.zeros((1,)), name="b2")
    h = tf.nn.tanh(tf.matmul(x, w1) + b1)
    p = tf.sigmoid(tf.matmul(h, w2) + b2)
    loss = tf.reduce_mean(tf.square(p - t))
    step = tf.train.AdamOptimizer(0.05).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss, {x: data, t: labels})
        for k in range(300):
            batch = slice(0, 64) if k % 2 else slice(16 * (k % 4), 16 * (k % 4) + 16)
            sess.run(step, {x: data[batch], t: labels[batch]})  # any batch size fits
        last = sess.run(loss, {x: data, t: labels})
        assert len(sess._plans) == 3  # built once, run many: one plan per fetch set
    assert first > 0.2 and last < 0.05


def test_gradients_with_an_unknown_batch_dim_run_the_rule_at_run_time():
    x = tf.placeholder(tf.float32, (None, 2), name="x")
    w = tf.Variable(np.array([[1.0], [2.0]], np.float32), name="w")
    loss = tf.reduce_mean(tf.matmul(x, w))
    (gw,) = tf.gradients(loss, [w])
    assert any(n.kind == "vjp" for n in tf.get_default_graph().ir.nodes)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for n in (1, 5):
            xv = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
            np.testing.assert_allclose(sess.run(gw, {x: xv}), xv.mean(0)[:, None], rtol=1e-6)


def test_gradient_descent_matches_a_hand_step():
    w = tf.Variable([1.0, -2.0], name="w")
    loss = tf.reduce_sum(w * w)
    step = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(step)
        np.testing.assert_allclose(sess.run(w), [0.8, -1.6], rtol=1e-6)


# ---- gradients through control flow ------------------------------------------------------

def _eager(x, w, use_torch: bool):
    m = torch if use_torch else gg
    X = m.tensor(x, requires_grad=True)
    W = m.tensor(w, requires_grad=True)
    r = (X.exp() * W).sum() if float((X * W).sum()) > 0 else (X * X * W).sum()
    v = X * 1.0
    for _ in range(3):
        v = v * X.sin() + W
    loss = r + v.sum()
    loss.backward()
    return float(loss), X.grad.numpy(), W.grad.numpy()


@pytest.mark.parametrize("seed", range(4))
def test_gradients_through_cond_and_while_loop_agree_with_eager_and_torch(seed):
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(3)
    x = tf.placeholder(tf.float64, shape=(3,), name="x")
    w = tf.Variable(w0, name="w")
    r = tf.cond(tf.reduce_sum(x * w) > 0, lambda: tf.reduce_sum(tf.exp(x) * w),
                lambda: tf.reduce_sum(x * x * w))
    _, v = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * tf.sin(x) + w),
                         [tf.constant(0), x * 1.0])
    loss = r + tf.reduce_sum(v)
    gx, gw = tf.gradients(loss, [x, w])
    tf.get_default_graph().ir.verify()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(3):
            xv = rng.standard_normal(3)
            lv, a, b = sess.run((loss, gx, gw), {x: xv})
            for use_torch in (False, True):
                el, ea, eb = _eager(xv, w0, use_torch)
                assert lv == pytest.approx(el)
                np.testing.assert_allclose(a, ea, rtol=1e-10)
                np.testing.assert_allclose(b, eb, rtol=1e-10)


def test_while_loop_runs_a_data_dependent_number_of_times():
    x = tf.placeholder(tf.float64, shape=(), name="x")
    y = tf.while_loop(lambda v: v < 100.0, lambda v: v * 2.0, [x])
    (g,) = tf.gradients(y, [x])
    with tf.Session() as sess:
        assert sess.run(y, {x: 3.0}) == 192.0
        assert sess.run(g, {x: 3.0}) == 64.0  # 6 doublings
        assert sess.run(g, {x: 60.0}) == 2.0


def test_gradients_of_unconnected_is_none():
    x = tf.placeholder(tf.float32, (2,), name="x")
    y = tf.placeholder(tf.float32, (2,), name="y")
    assert tf.gradients(tf.reduce_sum(x * 2.0), [x, y])[1] is None


# ---- Session.run -------------------------------------------------------------------------

def test_run_fetch_structures():
    a = tf.constant(1.0)
    b = tf.constant([2.0, 3.0])
    with tf.Session() as sess:
        assert sess.run(a) == 1.0
        out = sess.run({"a": a, "pair": (a, [b, a])})
        assert out["a"] == 1.0 and isinstance(out["pair"], tuple)
        np.testing.assert_array_equal(out["pair"][1][0], [2.0, 3.0])
        assert sess.run("Const:0") == 1.0


def test_assign_control_dependencies_and_group():
    v = tf.Variable(0.0, name="counter")
    inc = tf.assign_add(v, 1.0)
    with tf.control_dependencies([inc]):
        read = tf.identity(v) * 10.0  # reads v after inc ran
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run(read) == 10.0
        assert sess.run(v) == 1.0
        sess.run(tf.group(inc, inc))  # one node: runs once per step
        assert sess.run(v) == 2.0
        assert sess.run(inc) == 3.0  # an assign's value is the new value
    with tf.Session() as other:  # separate sessions have separate variable state
        with pytest.raises(tf.errors.FailedPreconditionError):
            other.run(v)


# ---- errors, in TF's words --------------------------------------------------------------

def test_unfed_placeholder():
    x = tf.placeholder(tf.float32, shape=(None, 3), name="x")
    with tf.Session() as sess, pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"You must feed a value for placeholder tensor 'x' with dtype float and "
                  r"shape \[\?,3\]"):
        sess.run(x * 2)


def test_unfed_placeholder_of_unknown_shape():
    x = tf.placeholder(tf.float32, name="x")
    with tf.Session() as sess, pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"^You must feed a value for placeholder tensor 'x' with dtype float\n"):
        sess.run(x + 1)


def test_feed_of_the_wrong_shape():
    x = tf.placeholder(tf.float32, shape=(None, 2), name="x")
    with tf.Session() as sess, pytest.raises(
            ValueError, match=re_escape("Cannot feed value of shape (2, 3) for Tensor 'x:0', "
                                        "which has shape '(?, 2)'")):
        sess.run(x, {x: np.ones((2, 3))})


def test_fetch_not_in_the_graph():
    other = tf.Graph()
    with other.as_default():
        c = tf.constant(1.0)
    tf.constant(2.0)
    with tf.Session() as sess, pytest.raises(ValueError,
                                             match=r"cannot be interpreted as a Tensor.*is not "
                                                   r"an element of this graph"):
        sess.run(c)


def test_fetch_none_and_bad_types():
    tf.constant(1.0)
    with tf.Session() as sess:
        with pytest.raises(TypeError, match="Fetch argument None has invalid type "
                                            "<class 'NoneType'>"):
            sess.run(None)
        with pytest.raises(TypeError, match="Fetch argument 3 has invalid type <class 'int'>, "
                                            "must be a string or Tensor"):
            sess.run(3)


def test_uninitialized_variable():
    w = tf.Variable([1.0], name="W")
    with tf.Session() as sess, pytest.raises(tf.errors.FailedPreconditionError,
                                             match="Attempting to use uninitialized value W"):
        sess.run(w * 2)


def test_cond_with_a_python_bool():
    with pytest.raises(TypeError, match="pred must not be a Python bool"):
        tf.cond(True, lambda: tf.constant(1.0), lambda: tf.constant(2.0))


def test_cond_branches_with_different_structures():
    x = tf.placeholder(tf.float32, (), name="x")
    with pytest.raises(ValueError, match="Incompatible return values of true_fn and false_fn"):
        tf.cond(x > 0, lambda: (x, x), lambda: x)
    with pytest.raises(TypeError, match="Outputs of true_fn and false_fn must have the same "
                                        "type: float32, int32"):
        tf.cond(x > 0, lambda: x, lambda: tf.constant(1))


def test_closed_session_and_empty_graph():
    with tf.Session() as sess, pytest.raises(RuntimeError, match="The Session graph is empty"):
        sess.run([])
    sess.close()
    with pytest.raises(RuntimeError, match="Attempted to use a closed Session."):
        sess.run([])


def test_feeding_a_tensor_is_refused():
    x = tf.placeholder(tf.float32, (), name="x")
    with tf.Session() as sess, pytest.raises(TypeError, match="The value of a feed cannot "
                                                               "be a tf.Tensor object"):
        sess.run(x, {x: tf.constant(1.0)})


def re_escape(s: str) -> str:
    import re
    return re.escape(s)
