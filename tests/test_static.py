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


# ---- the lecture's cases (docs/lecture_cases.md) ------------------------------------

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


def test_gradients_through_run_time_reshape_to_second_order():
    x = tf.placeholder(tf.float64, shape=(None, None), name="x")
    w = tf.placeholder(tf.float64, shape=(None,), name="w")
    n, m = tf.shape(x)[0], tf.shape(x)[1]
    y = tf.reshape(x, [m, n]) * tf.cast(n, tf.float64)  # the lecture's shape case
    loss = tf.reduce_sum(tf.sin(y) * tf.reshape(w, [m, n]))
    (gx,) = tf.gradients(loss, [x])
    (hx,) = tf.gradients(gx, [x])
    rng = np.random.default_rng(1)
    with tf.Session() as sess:
        for shape in [(2, 3), (4, 1)]:
            xv, wv = rng.standard_normal(shape), rng.standard_normal(shape[0] * shape[1])
            got = sess.run([gx, hx], {x: xv, w: wv})
            X = torch.tensor(xv, requires_grad=True)
            L = (torch.sin(X.reshape(shape[1], shape[0]) * shape[0])
                 * torch.tensor(wv).reshape(shape[1], shape[0])).sum()
            (g,) = torch.autograd.grad(L, X, create_graph=True)
            (h,) = torch.autograd.grad(g.sum(), X)
            np.testing.assert_allclose(got[0], g.detach().numpy(), rtol=1e-12)
            np.testing.assert_allclose(got[1], h.numpy(), rtol=1e-12)


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


def test_gradients_with_an_unknown_batch_dim_read_the_size_at_run_time():
    x = tf.placeholder(tf.float32, (None, 2), name="x")
    w = tf.Variable(np.array([[1.0], [2.0]], np.float32), name="w")
    loss = tf.reduce_mean(tf.matmul(x, w))
    (gw,) = tf.gradients(loss, [w])
    nodes = tf.get_default_graph().ir.nodes
    # mean's rule divides by the batch size: ordinary ops on a shape node, no vjp node
    assert not any(n.kind == "vjp" for n in nodes)
    assert any(n.kind == "shape" for n in nodes)
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


# ---- second and higher order through control flow and run-time vjp nodes -------------

UNARY = [lambda a: a.sin(), lambda a: a.tanh(), lambda a: a * a * 0.5,
         lambda a: (a * 0.3).exp(), lambda a: a.sigmoid()]
BINARY = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b.tanh()]


def _random_expr(rng: np.random.Generator, n: int):
    """A random straight-line function of its arguments, the same code for graphgrad
    Symbols and torch tensors (Tensor methods and operators only)."""
    plan = [(int(rng.integers(2)), int(rng.integers(5)), int(rng.integers(9)),
             int(rng.integers(9))) for _ in range(n)]

    def f(*vals):
        vals = list(vals)
        for kind, k, i, j in plan:
            a = vals[i % len(vals)]
            vals.append(UNARY[k](a) if kind == 0 else BINARY[k % 3](a, vals[j % len(vals)]))
        return vals[-1] + vals[0] * vals[1] * 0.1  # every argument is used
    return f


def _random_control_flow_program(seed: int):
    """(static builder, eager torch version) of a random program with a cond and a
    while_loop whose branches and body are random expressions."""
    rng = np.random.default_rng(seed)
    then, other, body = _random_expr(rng, 3), _random_expr(rng, 3), _random_expr(rng, 3)
    iters = int(rng.integers(1, 4))

    def static(x, w):
        r = tf.cond(tf.reduce_sum(x * w) > 0, lambda: then(x, w), lambda: other(x, w))
        _, v = tf.while_loop(lambda i, v: i < iters, lambda i, v: (i + 1, body(v, x, w) * 0.5),
                             [tf.constant(0), x * 1.0])
        return tf.reduce_sum(r) + tf.reduce_sum(v * v)

    def eager(x, w):
        r = then(x, w) if float((x * w).sum().detach()) > 0 else other(x, w)
        v = x * 1.0
        for _ in range(iters):
            v = body(v, x, w) * 0.5
        return r.sum() + (v * v).sum()
    return static, eager


@pytest.mark.parametrize("seed", range(6))
def test_second_order_gradients_through_cond_and_while_loop_agree_with_torch(seed):
    static, eager = _random_control_flow_program(seed)
    x = tf.placeholder(tf.float64, (3,), name="x")
    w = tf.placeholder(tf.float64, (3,), name="w")
    u = tf.placeholder(tf.float64, (3,), name="u")
    loss = static(x, w)
    gx, gw = tf.gradients(loss, [x, w])
    hxx, hxw = tf.gradients(gx, [x, w], grad_ys=u)   # Hessian-vector products
    (hww,) = tf.gradients(tf.gradients(loss, w)[0], w)  # gradients(gradients(y, x), x)
    tf.get_default_graph().ir.verify()
    rng = np.random.default_rng(100 + seed)
    with tf.Session() as sess:
        for _ in range(2):
            xv, wv, uv = (rng.standard_normal(3) for _ in range(3))
            got = sess.run([loss, gx, gw, hxx, hxw, hww], {x: xv, w: wv, u: uv})
            X = torch.tensor(xv, requires_grad=True)
            W = torch.tensor(wv, requires_grad=True)
            L = eager(X, W)
            GX, GW = torch.autograd.grad(L, [X, W], create_graph=True)
            HXX, HXW = torch.autograd.grad(GX, [X, W], torch.tensor(uv), retain_graph=True)
            (HWW,) = torch.autograd.grad(GW.sum(), [W], allow_unused=True)
            HWW = torch.zeros(3) if HWW is None else HWW  # the loss may be linear in w
            for a, b in zip(got, [L, GX, GW, HXX, HXW, HWW], strict=True):
                np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("concat", [False, True])
def test_third_order_with_an_unknown_batch_agrees_with_torch(concat):
    """An unknown batch: ordinary ops to every order; through concat (whose rule needs the
    split sizes as numbers) run-time vjp nodes, and vjp nodes of those."""
    x = tf.placeholder(tf.float64, (None, 3), name="x")
    w = tf.placeholder(tf.float64, (3, 2), name="w")
    u = tf.placeholder(tf.float64, (3, 2), name="u")
    xw = tf.concat([tf.matmul(x, w), x], 1) if concat else tf.matmul(x, w)
    loss = tf.reduce_mean(tf.tanh(xw) ** 2) + tf.reduce_mean(tf.exp(x * 0.1))
    (gw,) = tf.gradients(loss, [w])
    hw, hx = tf.gradients(gw, [w, x], grad_ys=u)
    (t3,) = tf.gradients(hw, [w])
    names = {n.target_name for n in tf.get_default_graph().ir.nodes if n.kind == "vjp"}
    if concat:
        assert {"CatBackward", "CatBackwardBackward", "CatBackwardBackwardBackward"} <= names
    else:
        assert names == set()
    rng = np.random.default_rng(0)
    for batch in (5, 2, 1):
        xv, wv, uv = rng.standard_normal((batch, 3)), rng.standard_normal((3, 2)), \
            rng.standard_normal((3, 2))
        with tf.Session() as sess:
            got = sess.run([gw, hw, hx, t3], {x: xv, w: wv, u: uv})
        X, W = torch.tensor(xv, requires_grad=True), torch.tensor(wv, requires_grad=True)
        XW = torch.cat([X @ W, X], 1) if concat else X @ W
        L = (torch.tanh(XW) ** 2).mean() + torch.exp(X * 0.1).mean()
        (GW,) = torch.autograd.grad(L, W, create_graph=True)
        HW, HX = torch.autograd.grad(GW, [W, X], torch.tensor(uv), create_graph=True)
        (T3,) = torch.autograd.grad(HW.sum(), W)
        for a, b in zip(got, [GW, HW, HX, T3], strict=True):
            np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-10, atol=1e-13)


def test_second_order_through_a_cond_with_an_unused_output_and_unknown_batch():
    x = tf.placeholder(tf.float64, (None, 2), name="x")
    a, _ = tf.cond(tf.reduce_sum(x) > 0, lambda: (tf.sin(x), x * 2.0),
                   lambda: (tf.cos(x), x * 3.0))  # the second output gets no cotangent
    (g,) = tf.gradients(tf.reduce_mean(a), [x])
    (h,) = tf.gradients(g, [x])
    xv = np.array([[0.1, 0.2], [0.3, -0.1], [1.0, 2.0]])
    with tf.Session() as sess:
        for v in (xv, -xv):
            X = torch.tensor(v, requires_grad=True)
            L = (X.sin() if v.sum() > 0 else X.cos()).mean()
            (G,) = torch.autograd.grad(L, X, create_graph=True)
            (H,) = torch.autograd.grad(G.sum(), X)
            got = sess.run([g, h], {x: v})
            np.testing.assert_allclose(got[0], G.detach().numpy(), rtol=1e-12)
            np.testing.assert_allclose(got[1], H.numpy(), rtol=1e-12)


def test_third_order_through_a_while_loop():
    x = tf.placeholder(tf.float64, (), name="x")
    y = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * tf.sin(x) + x * x),
                      [tf.constant(0), x])[1]
    (d1,) = tf.gradients(y, x)
    (d2,) = tf.gradients(d1, x)
    (d3,) = tf.gradients(d2, x)
    X = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    v = X
    for _ in range(3):
        v = v * X.sin() + X * X
    want = [v]
    for _ in range(3):
        want.append(torch.autograd.grad(want[-1], X, create_graph=True)[0])
    with tf.Session() as sess:
        got = sess.run([y, d1, d2, d3], {x: 0.7})
    np.testing.assert_allclose(got, [float(t) for t in want], rtol=1e-11)


# ---- while_loop options (TF1) ------------------------------------------------------------

def test_while_loop_maximum_iterations():
    x = tf.placeholder(tf.float64, shape=(), name="x")
    y = tf.while_loop(lambda v: v < 100.0, lambda v: v * 2.0, [x], maximum_iterations=3)
    (g,) = tf.gradients(y, [x])
    n = tf.placeholder(tf.int32, shape=(), name="n")
    i, s = tf.while_loop(lambda i, s: i < 10, lambda i, s: (i + 1, s + x), (0, x * 0),
                         maximum_iterations=n)  # a tensor bound, AND-ed with cond
    with tf.Session() as sess:
        assert sess.run([y, g], {x: 1.0}) == [8.0, 8.0]  # stopped by the bound
        assert sess.run([y, g], {x: 30.0}) == [120.0, 4.0]  # stopped by cond
        assert sess.run([i, s], {x: 1.5, n: 4}) == [4, 6.0]
        assert sess.run([i, s], {x: 1.5, n: 0}) == [0, 0.0]
        assert sess.run(i, {x: 1.5, n: 50}) == 10
    assert not isinstance(y, (list, tuple))  # the hidden counter is not returned
    with pytest.raises(ValueError, match=re_escape("maximum_iterations must be a scalar, saw "
                                                   "shape: (2,)")):
        tf.while_loop(lambda v: v < 1, lambda v: v, [x], maximum_iterations=[1, 2])


def test_while_loop_shape_invariants_let_a_shape_grow():
    x = tf.placeholder(tf.float64, (2,), name="x")
    acc = tf.while_loop(lambda a: tf.reduce_sum(a) < 50.0,
                        lambda a: tf.concat([a, tf.sin(a) * x[0] + a], 0),
                        [x], shape_invariants=[(None,)], maximum_iterations=3)
    assert acc.shape == (None,)
    y = tf.reduce_sum(acc * acc)
    (g,) = tf.gradients(y, [x])
    (h,) = tf.gradients(g, [x])
    xv = np.array([0.5, 1.5])
    with tf.Session() as sess:
        got = sess.run([y, g, h], {x: xv})
    X = torch.tensor(xv, requires_grad=True)
    a = X
    for _ in range(3):
        if float(a.sum().detach()) >= 50:
            break
        a = torch.cat([a, torch.sin(a) * X[0] + a])
    Y = (a * a).sum()
    (G,) = torch.autograd.grad(Y, X, create_graph=True)
    (H,) = torch.autograd.grad(G.sum(), X)
    for a, b in zip(got, [Y, G, H], strict=True):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-12)


def test_while_loop_errors_in_tf_words():
    x = tf.placeholder(tf.float64, (), name="x")
    with pytest.raises(ValueError, match=re_escape(
            "Input tensor 'x:0' enters the loop with shape (), but has shape (2,) after one "
            "iteration. To allow the shape to vary across iterations, use the "
            "`shape_invariants` argument")):
        tf.while_loop(lambda v: v < 1, lambda v: tf.stack([v, v]), [x])
    with pytest.raises(ValueError, match=re_escape(
            "The shape invariant specified for x:0 is not compatible with the initial shape "
            "of the loop variable. It enters the loop with shape (), but the specified shape "
            "invariant is (2,).")):
        tf.while_loop(lambda v: v < 1, lambda v: v, [x], shape_invariants=[(2,)])
    with pytest.raises(TypeError, match=re_escape(
            "Loop var x:0 enters the loop with type <dtype: 'float64'> but has type "
            "<dtype: 'float32'> after 1 iteration.")):
        tf.while_loop(lambda v: v < 1, lambda v: tf.cast(v, tf.float32), [x])
    with pytest.raises(TypeError, match="parallel_iterations must be a positive integer."):
        tf.while_loop(lambda v: v < 1, lambda v: v, [x], parallel_iterations=0)
    with pytest.raises(TypeError, match="body must be callable."):
        tf.while_loop(lambda v: v < 1, None, [x])
    with pytest.raises(ValueError, match="No loop variables provided"):
        tf.while_loop(lambda: True, lambda: (), [])


def test_while_loop_tf1_positional_order_and_back_prop():
    x = tf.placeholder(tf.float64, (), name="x")
    # (cond, body, loop_vars, shape_invariants, parallel_iterations, back_prop, swap_memory)
    y = tf.while_loop(lambda v: v < 10.0, lambda v: v * 3.0, [x], None, 1, False, True)
    assert tf.gradients(y, [x]) == [None]  # back_prop=False: the loop is a constant
    with tf.Session() as sess:
        assert sess.run(y, {x: 2.0}) == 18.0


def test_gradients_of_unconnected_is_none_or_zero():
    x = tf.placeholder(tf.float32, (2,), name="x")
    y = tf.placeholder(tf.float32, (2,), name="y")
    assert tf.gradients(tf.reduce_sum(x * 2.0), [x, y])[1] is None
    zero = tf.gradients(tf.reduce_sum(x * 2.0), [x, y],
                        unconnected_gradients=tf.UnconnectedGradients.ZERO)[1]
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(zero, {y: [1.0, 2.0]}), [0.0, 0.0])
    with pytest.raises(ValueError, match="Unknown value for unconnected_gradients: 'some'"):
        tf.gradients(x, [x], unconnected_gradients="some")


def test_stop_gradient_is_a_constant_for_gradients_to_any_order():
    x = tf.placeholder(tf.float64, (), name="x")
    y = x * x * tf.stop_gradient(x * x)  # x^4 by value, x^2 * c for gradients
    (g,) = tf.gradients(y, x)
    (h,) = tf.gradients(g, x)
    with tf.Session() as sess:
        assert sess.run([y, g, h], {x: 3.0}) == [81.0, 54.0, 18.0]
    w = tf.Variable([1.0, 2.0])
    assert tf.gradients(tf.reduce_sum(tf.stop_gradient(w * 2.0)), [w]) == [None]


def test_stop_gradients_count_as_constants():
    x = tf.placeholder(tf.float64, (), name="x")
    a = x * x
    b = a * 3.0 + x
    g_all, g_stop = tf.gradients(b, x)[0], tf.gradients(b, x, stop_gradients=[a])[0]
    with tf.Session() as sess:
        assert sess.run([g_all, g_stop], {x: 2.0}) == [13.0, 1.0]  # d(3a + x)/dx, a fixed
    c = tf.constant(0.0)
    d = 2 * c
    ga, gb = tf.gradients(c + d, [c, d], stop_gradients=[c, d])  # TF's documented example
    with tf.Session() as sess:
        assert sess.run([ga, gb]) == [1.0, 1.0]  # not [3.0, 1.0]: nothing flows through d


# ---- random ops: drawn per run -------------------------------------------------------------

def test_random_ops_draw_afresh_each_run_and_once_per_run():
    gg.manual_seed(0)  # unseeded ops draw from graphgrad's generator: fix the statistics
    r = tf.random_normal((1000,), mean=1.0, stddev=2.0)
    twice = r - r  # one node, one draw per run
    with tf.Session() as sess:
        a, d = sess.run([r, twice])
        b = sess.run(r)
    assert not np.array_equal(a, b) and not d.any()
    assert a.dtype == np.float32 and abs(a.mean() - 1.0) < 0.2 and abs(a.std() - 2.0) < 0.2


def test_random_ops_with_seeds_replay_per_session():
    u = tf.random_uniform((3,), minval=-1.0, maxval=1.0, seed=7)
    with tf.Session() as one:
        first = [one.run(u), one.run(u)]
    with tf.Session() as two:
        second = [two.run(u), two.run(u)]
    np.testing.assert_array_equal(first, second)  # TF1: an op seed fixes the sequence
    assert not np.array_equal(first[0], first[1])  # ... which still moves on each run
    assert (np.abs(first) < 1).all()

    def unseeded():
        tf.reset_default_graph()
        return tf.Session().run(tf.random_normal((3,)))
    gg.manual_seed(3)  # no seed: graphgrad's global generator
    a = unseeded()
    gg.manual_seed(3)
    np.testing.assert_array_equal(a, unseeded())

    def graph_seeded():
        tf.reset_default_graph()
        tf.set_random_seed(11)
        x, y = tf.random_normal((2,)), tf.random.normal((2,))
        return tf.Session().run([x, y])
    p, q = graph_seeded(), graph_seeded()
    np.testing.assert_array_equal(p, q)  # a graph seed alone makes every op reproducible
    assert not np.array_equal(p[0], p[1])  # ... with a different sequence per op


def test_random_shape_known_at_run_time_and_integers():
    gg.manual_seed(0)
    x = tf.placeholder(tf.float32, (None, 2), name="x")
    noisy = x + tf.random_normal(tf.shape(x), stddev=0.1)
    k = tf.random_uniform((50,), minval=3, maxval=6, dtype=tf.int32)
    with tf.Session() as sess:
        for n in (1, 4):
            assert sess.run(noisy, {x: np.zeros((n, 2))}).shape == (n, 2)
        ks = sess.run(k)
    assert ks.dtype == np.int32 and set(ks) <= {3, 4, 5}
    t = tf.truncated_normal((2000,), mean=5.0, stddev=0.5, dtype=tf.float64)
    with tf.Session() as sess:
        tv = sess.run(t)
    assert np.abs(tv - 5.0).max() <= 1.0 and abs(tv.mean() - 5.0) < 0.05  # within 2 std
    with pytest.raises(ValueError, match="Must specify maxval for integer dtype tf.int32"):
        tf.random_uniform((2,), dtype=tf.int32)


def test_gradient_uses_the_draw_of_the_same_run():
    x = tf.placeholder(tf.float64, (4,), name="x")
    noise = tf.random_normal((4,), dtype=tf.float64)
    (g,) = tf.gradients(tf.reduce_sum(x * noise), [x])
    with tf.Session() as sess:
        for _ in range(2):
            n, gv = sess.run([noise, g], {x: np.ones(4)})
            np.testing.assert_array_equal(gv, n)


def test_random_in_a_loop_body_draws_every_iteration():
    out = tf.while_loop(lambda i, acc: i < 3,
                        lambda i, acc: (i + 1, tf.concat([acc, tf.random_uniform((1,))], 0)),
                        [0, tf.zeros((0,))], shape_invariants=[(), (None,)])[1]
    with tf.Session() as sess:
        vals = sess.run(out)
    assert vals.shape == (3,) and len(set(vals.tolist())) == 3
    x = tf.placeholder(tf.float32, (), name="x")
    y = tf.while_loop(lambda v: v < 10.0, lambda v: v + tf.random_uniform(()) + 1.0, [x])
    with pytest.raises(NotImplementedError, match="draws random numbers .* Draw outside"):
        tf.gradients(y, [x])


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
