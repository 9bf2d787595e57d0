"""The lecture's scheduling example: op A takes T1 and gives T2, op B takes T1' and gives
T3, op C takes T2 and T3 and gives T4. Built with the static API and run by a Session on
two workers, once without and once with a dependency edge from A to B
(``graphgrad.static.control_dependencies``, as when A and B share a buffer).

* Without the edge A and B are ready together and the two workers take one each. The run
  proves it rather than timing it: A and B wait at a barrier inside their ops that opens
  only once both have started, so a schedule that ran them one after the other could not
  finish.
* With the edge B starts only after A has ended, although the second worker is free.

The results are equal; ``Session.log`` (a ``graphgrad.graph.Timeline``) shows the
difference, printed as a text timeline and drawn as a Gantt chart per run
(``schedule_free.png``, ``schedule_edge.png``; matplotlib).

    python examples/schedule_abc.py [--out out/schedule_abc] [--size 300]
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

import numpy as np

import graphgrad.static as tf

MEET_TIMEOUT_S = 60.0  # reached only by a scheduler that never runs A and B together


def build(edge: bool, size: int):
    """The A/B/C graph: A and B are three chained matmuls each (work that takes long
    enough to see on a chart); with ``edge`` every op of B runs after A."""
    g = tf.Graph()
    with g.as_default():
        t1 = tf.placeholder(tf.float64, (size, size), name="T1")
        t1b = tf.placeholder(tf.float64, (size, size), name="T1b")
        a = tf.matmul(tf.matmul(t1, t1, name="A"), t1, name="A_2")
        with tf.control_dependencies([a] if edge else None):
            b = tf.matmul(tf.matmul(t1b, t1b, name="B"), t1b, name="B_2")
        c = tf.add(a, b, name="C")
    return g, (t1, t1b), c


def _meeting(interpreter, names: tuple[str, ...]):
    """Make ``names`` wait at one barrier once started (inside their op's run)."""
    barrier = threading.Barrier(len(names), timeout=MEET_TIMEOUT_S)
    run_node = interpreter.run_node

    def run_and_meet(node, env):
        if node.name in names:
            barrier.wait()   # opens only when every named op is in progress
        return run_node(node, env)

    interpreter.run_node = run_and_meet


def run(edge: bool, size: int = 300, seed: int = 0):
    """Run the graph on two workers; returns (T4, the Session's log)."""
    g, (t1, t1b), c = build(edge, size)
    rng = np.random.default_rng(seed)
    feed = {t1: rng.standard_normal((size, size)) / size,
            t1b: rng.standard_normal((size, size)) / size}
    with tf.Session(graph=g, workers=2) as sess:
        if not edge:
            _meeting(sess.interpreter, ("A", "B"))
        out = sess.run(c, feed)
        return out, sess.log


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--size", type=int, default=300, help="the matrices are size x size")
    ap.add_argument("--out", default="out/schedule_abc", help="folder for the Gantt charts")
    ap.add_argument("--no-plot", action="store_true", help="text timelines only")
    args = ap.parse_args(argv)
    result: dict = {"plots": []}
    outs = {}
    for edge in (False, True):
        key = "edge" if edge else "free"
        out, log = run(edge, args.size)
        outs[key] = out
        together = log.together("A", "B")
        b_after_a = log.entry("B").start >= log.entry("A_2").end
        result[key] = {"A and B together": together, "B after A": b_after_a,
                       "log": log}
        print(f"---- {'with' if edge else 'without'} the dependency edge A -> B "
              f"(two workers)")
        print(log)
        print(f"A and B in progress together: {'yes' if together else 'no'}; "
              f"B started after A ended: {'yes' if b_after_a else 'no'}")
        if not args.no_plot:
            try:
                Path(args.out).mkdir(parents=True, exist_ok=True)
                png = log.gantt(Path(args.out) / f"schedule_{key}.png",
                                f"A/B/C on two workers, {'with' if edge else 'no'} edge A -> B")
            except ImportError as e:
                print(f"(no chart: {e})")
            else:
                result["plots"].append(str(png))
                print(f"wrote {png}")
        print()
    result["same result"] = bool(np.array_equal(outs["free"], outs["edge"]))
    print(f"same T4 with and without the edge: {'yes' if result['same result'] else 'no'}")
    return result


if __name__ == "__main__":
    main()
