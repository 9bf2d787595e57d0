"""The parallel scheduler: the lecture's A/B/C dependency-edge example read from what
the scheduler decided (which nodes were in progress together, in which order nodes
started and ended; no wall-clock timing), and results equal to the sequential
interpreter on random DAGs with the log respecting every data and control edge."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import numpy as np
import pytest

import graphgrad as gg
from graphgrad.graph import Graph, Interpreter, Scheduler, Spec, overlaps
from graphgrad.graph.scheduler import LogEntry
from graphgrad.ops import REGISTRY

F64 = np.dtype(np.float64)
N = 8
BARRIER_TIMEOUT_S = 30.0  # only a schedule that never runs A and B together waits this long


def abc_graph(edge: bool) -> Graph:
    """A: T1 -> T2; B: T1' -> T3; C: (T2, T3) -> T4; with ``edge``, B waits for A."""
    g = Graph("abc")
    t1 = g.placeholder(Spec((N, N), F64), "T1")
    t1b = g.placeholder(Spec((N, N), F64), "T1b")
    mm = REGISTRY["Matmul"]
    a = g.call(mm, [t1, t1], {}, Spec((N, N), F64), name="A")
    a2 = g.call(mm, [a, t1], {}, Spec((N, N), F64), name="A2")
    b = g.call(mm, [t1b, t1b], {}, Spec((N, N), F64), name="B",
               deps=[a2] if edge else [])
    b2 = g.call(mm, [b, t1b], {}, Spec((N, N), F64), name="B2")
    c = g.call(REGISTRY["Add"], [a2, b2], {}, Spec((N, N), F64), name="C")
    g.set_outputs([c])
    return g.verify()


class RecordingScheduler(Scheduler):
    """A Scheduler whose node runs record ("start"/"end", node) events, in the order the
    workers reach them, and can make chosen nodes wait at a barrier once started."""

    def __init__(self, graph, workers: int, rendezvous: Iterable[str] = ()):
        super().__init__(graph, workers=workers)
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._rendezvous = set(rendezvous)
        self._barrier = threading.Barrier(len(self._rendezvous) or 1, timeout=BARRIER_TIMEOUT_S)

    def run_node(self, node, env):
        with self._lock:
            self.events.append(("start", node.name))
        if node.name in self._rendezvous:
            self._barrier.wait()  # returns once every rendezvous node has started
        value = super().run_node(node, env)
        with self._lock:
            self.events.append(("end", node.name))
        return value

    def at(self, kind: str, name: str) -> int:
        return self.events.index((kind, name))


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(0)
    return [gg.tensor(rng.standard_normal((N, N)) / N) for _ in range(2)]


def test_abc_runs_a_and_b_together_without_the_edge(inputs):
    """Without the control edge A and B are both ready at once, so the two workers take
    one each: both start before either ends. The barrier inside A and B only opens when
    both have started; a scheduler that ran them one after the other breaks it."""
    expected = Interpreter(abc_graph(False)).run(*inputs)[0].numpy()
    free = RecordingScheduler(abc_graph(False), workers=2, rendezvous=("A", "B"))
    try:
        out = free.run(*inputs)[0]
    except threading.BrokenBarrierError:
        pytest.fail(f"A and B were not in progress together on 2 workers: {free.events}")
    np.testing.assert_array_equal(out.numpy(), expected)
    assert max(free.at("start", "A"), free.at("start", "B")) < min(
        free.at("end", "A"), free.at("end", "B")), free.events
    assert {free.entry("A").worker, free.entry("B").worker} == {0, 1}


def test_abc_serializes_b_after_a_with_the_edge(inputs):
    """With the control edge B -> A2, B starts only after A2 ended, and C only after both
    of its inputs ended, although a second worker is free all along."""
    expected = Interpreter(abc_graph(False)).run(*inputs)[0].numpy()
    tied = RecordingScheduler(abc_graph(True), workers=2)
    out = tied.run(*inputs)[0]
    np.testing.assert_array_equal(out.numpy(), expected)
    assert tied.at("end", "A") < tied.at("start", "A2") < tied.at("end", "A2") \
        < tied.at("start", "B"), tied.events
    assert tied.at("end", "B") < tied.at("start", "B2"), tied.events
    assert max(tied.at("end", "A2"), tied.at("end", "B2")) < tied.at("start", "C"), tied.events
    ran = sorted(name for kind, name in tied.events if kind == "start")
    assert ran == sorted(e.node for e in tied.log) == ["A", "A2", "B", "B2", "C", "output"]


def test_overlaps_reads_the_log_entries():
    a = LogEntry("a", 0, 0.0, 2.0)
    assert overlaps(a, LogEntry("b", 1, 1.0, 3.0)) and overlaps(LogEntry("b", 1, 1.0, 3.0), a)
    assert not overlaps(a, LogEntry("c", 1, 2.0, 3.0))  # one ends as the other starts
    assert not overlaps(a, LogEntry("d", 1, 5.0, 6.0))


def _random_dag(rng: np.random.Generator, n: int) -> Graph:
    g = Graph("random")
    vals = [g.placeholder(Spec((4, 4), F64), f"x{k}") for k in range(3)]
    unary = ["Sin", "Tanh", "Exp", "Neg"]
    binary = ["Add", "Mul", "Sub", "Matmul"]
    for k in range(n):
        deps = [vals[int(rng.integers(len(vals)))]] if rng.random() < 0.2 else []
        if rng.random() < 0.4:
            op = REGISTRY[unary[int(rng.integers(4))]]
            ins = [vals[int(rng.integers(len(vals)))]]
        else:
            op = REGISTRY[binary[int(rng.integers(4))]]
            ins = [vals[int(rng.integers(len(vals)))], vals[int(rng.integers(len(vals)))]]
        vals.append(g.call(op, ins, {}, Spec((4, 4), F64), deps=deps, name=f"n{k}"))
    g.set_outputs(vals[-4:])
    return g.verify()


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("workers", [1, 3])
def test_random_dags_equal_the_sequential_interpreter(seed, workers):
    rng = np.random.default_rng(seed)
    g = _random_dag(rng, 30)
    xs = [gg.tensor(rng.standard_normal((4, 4)) * 0.3) for _ in range(3)]
    expected = Interpreter(g).run(*xs)
    s = Scheduler(g, workers=workers)
    got = s.run(*xs)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    ends = {e.node: e.end for e in s.log}
    for e in s.log:  # every node started after all its data and control inputs ended
        node = g.node(e.node)
        for i in (*node.input_nodes(), *node.deps):
            if i.name in ends:
                assert e.start >= ends[i.name], (e, i.name)
    assert {e.worker for e in s.log} <= set(range(workers))


def test_a_failing_node_raises_on_the_caller():
    g = Graph("bad")
    x = g.placeholder(Spec((2, 3), F64), "x")
    g.set_outputs([g.call(REGISTRY["Matmul"], [x, x], {}, Spec((2, 3), F64), name="mm")])
    with pytest.raises(RuntimeError, match="matmul"):
        Scheduler(g, workers=2).run(gg.zeros(2, 3, dtype=gg.float64))


def test_session_on_the_scheduler():
    import graphgrad.static as tf
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, (3,), name="x")
    y = tf.reduce_sum(tf.exp(x) * 2.0 + tf.sin(x))
    with tf.get_default_graph().as_default(), tf.Session(workers=2) as sess:
        got = sess.run(y, {x: [0.1, 0.2, 0.3]})  # a builder is active: run below it
        assert len(sess.log) == len([n for n in tf.get_default_graph().ir.nodes
                                     if n.kind not in ("placeholder", "output")])
    xs = np.array([0.1, 0.2, 0.3], np.float32)
    assert got == pytest.approx(float((np.exp(xs) * 2 + np.sin(xs)).sum()), rel=1e-6)
    tf.reset_default_graph()


def test_random_nodes_on_the_scheduler_draw_once_per_run():
    import graphgrad.static as tf
    tf.reset_default_graph()
    draws = [tf.random_normal((50,), dtype=tf.float64, seed=k) for k in range(4)]
    total = draws[0] + draws[1] + draws[2] + draws[3]
    with tf.Session(workers=2) as sess:
        first = sess.run([total, *draws])
        assert sorted(e.node for e in sess.log if e.node.startswith("random")) == sorted(
            d.op_name for d in draws)  # each node ran once, on some worker
        second = sess.run([total, *draws])
    with tf.Session() as serial:  # the same seeded sequences, one thread
        again = serial.run([total, *draws])
    np.testing.assert_allclose(first[0], sum(first[1:]), rtol=1e-12)
    assert not np.array_equal(first[0], second[0])
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    tf.reset_default_graph()


def test_higher_order_graph_on_the_scheduler_equals_the_interpreter():
    import graphgrad.static as tf
    tf.reset_default_graph()
    x = tf.placeholder(tf.float64, (None, 3), name="x")  # unknown batch: vjp nodes
    w = tf.placeholder(tf.float64, (3,), name="w")
    h = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tf.tanh(v * w) + v),
                      [0, x])[1]
    loss = tf.reduce_mean(h * h)
    (gw,) = tf.gradients(loss, [w])
    hess = [tf.gradients(gw[k], [w])[0] for k in range(3)]  # independent vjp nodes
    ir = tf.get_default_graph().ir
    ir.set_outputs([gw._node, *[t._node for t in hess]])
    rng = np.random.default_rng(0)
    args = [gg.tensor(rng.standard_normal((4, 3))), gg.tensor(rng.standard_normal(3))]
    want = Interpreter(ir).run(*args)
    for _ in range(3):
        s = Scheduler(ir, workers=3)
        got = s.run(*args)
        assert gg.is_grad_enabled()  # the vjp nodes took turns with the global grad mode
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    tf.reset_default_graph()
