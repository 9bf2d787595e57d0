"""The execution log of a parallel run (``Session.log``, ``Scheduler.log``): a Timeline
of LogEntry that prints readably (not as raw tuples), answers which nodes overlapped,
and draws a Gantt chart; static ops take TF's ``name=``, which the log shows."""

from __future__ import annotations

import pytest

import graphgrad.static as tf
from graphgrad.graph import LogEntry, Timeline
from graphgrad.lecture.pictures import pyplot


def _log() -> Timeline:
    return Timeline([LogEntry("A", 0, 0.0, 0.002), LogEntry("B", 1, 0.001, 0.003),
                     LogEntry("C", 0, 0.003, 0.004)])


def test_timeline_prints_one_line_per_node_with_its_overlaps():
    text = str(_log())
    lines = text.splitlines()
    assert lines[0].split() == ["node", "worker", "start", "ms", "end", "ms", "in",
                                "progress", "together", "with"]
    assert lines[1].split() == ["A", "0", "0.000", "2.000", "B"]
    assert lines[2].split() == ["B", "1", "1.000", "3.000", "A"]
    assert lines[3].split() == ["C", "0", "3.000", "4.000", "-"]
    assert "LogEntry(" not in text and "LogEntry(" not in repr(_log())
    assert str(Timeline()) == "(no node ran on the scheduler)"


def test_together_and_entry():
    log = _log()
    assert log.together("A", "B") and not log.together("A", "C")
    assert log.entry("C").worker == 0
    with pytest.raises(KeyError, match="not in the execution log"):
        log.entry("D")


def test_gantt_chart(tmp_path):
    if pyplot() is None:
        with pytest.raises(ImportError, match="graphgrad\\[plot\\]"):
            _log().gantt(tmp_path / "g.png")
        pytest.skip("matplotlib is not installed")
    path = _log().gantt(tmp_path / "g.png", "A, B, C")
    assert path.stat().st_size > 1000


def test_session_log_is_a_timeline_with_the_names_given():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, (3, 3), name="x")
        a = tf.matmul(x, x, name="A")
        b = tf.add(x, 1.0, name="B")
        again = tf.add(x, 2.0, name="B")   # names stay unique, as TF makes them
        c = tf.add(a, b, name="C") + again
    assert [n.name for n in g.ir.nodes if n.kind == "call"][:4] == ["A", "B", "B_1", "C"]
    with tf.Session(graph=g) as sess:
        assert isinstance(sess.log, Timeline) and not sess.log   # one worker: no log
    with tf.Session(graph=g, workers=2) as sess:
        sess.run(c, {x: [[1.0] * 3] * 3})
        log = sess.log
    assert isinstance(log, Timeline)
    assert {"A", "B", "B_1", "C"} <= {e.node for e in log}
    assert log.entry("C").start >= max(log.entry("A").end, log.entry("B").end)
