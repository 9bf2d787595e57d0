"""Benchmark: one MLP training step as a static graph run by ``Session.run`` vs eager
graphgrad vs PyTorch eager (per-step time, ratios), and the parallel scheduler on
independent large matmuls with 1 vs 2 workers. Prints one JSON object.

BLAS is pinned to one thread per process (before NumPy loads) so that a worker is one
core, as a "device" would be: the 2-worker speedup then measures the scheduler.

    python bench/static_vs_eager.py [--steps 200] [--batch 256] [--hidden 128]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import graphgrad as gg  # noqa: E402
import graphgrad.static as tf  # noqa: E402
from graphgrad.graph import Graph, Scheduler, Spec  # noqa: E402
from graphgrad.ops import REGISTRY  # noqa: E402


def _time(step, steps: int) -> float:
    step()  # warm-up (plans, caches)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


def _data(batch: int, hidden: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 16)).astype(np.float32)
    y = rng.standard_normal((batch, 1)).astype(np.float32)
    w1 = (rng.standard_normal((16, hidden)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((hidden, 1)) * 0.3).astype(np.float32)
    return x, y, w1, w2


def bench_static(batch, hidden, steps, lr=0.01) -> float:
    x, y, w1, w2 = _data(batch, hidden)
    tf.reset_default_graph()
    px = tf.placeholder(tf.float32, (batch, 16), name="x")
    py = tf.placeholder(tf.float32, (batch, 1), name="y")
    v1, v2 = tf.Variable(w1, name="w1"), tf.Variable(w2, name="w2")
    b1 = tf.Variable(np.zeros(hidden, np.float32), name="b1")
    pred = tf.matmul(tf.nn.relu(tf.matmul(px, v1) + b1), v2)
    loss = tf.reduce_mean(tf.square(pred - py))
    step = tf.train.GradientDescentOptimizer(lr).minimize(loss)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    feed = {px: x, py: y}
    return _time(lambda: sess.run([step, loss], feed), steps)


def bench_eager(batch, hidden, steps, lr=0.01) -> float:
    x, y, w1, w2 = _data(batch, hidden)
    x, y = gg.tensor(x), gg.tensor(y)
    params = [gg.tensor(w1, requires_grad=True), gg.tensor(w2, requires_grad=True),
              gg.tensor(np.zeros(hidden, np.float32), requires_grad=True)]

    def step():
        v1, v2, b1 = params
        loss = (((x @ v1 + b1).relu() @ v2 - y) ** 2).mean()
        grads = gg.autograd.grad(loss, params)
        with gg.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(g * lr)
    return _time(step, steps)


def bench_torch(batch, hidden, steps, lr=0.01) -> float:
    torch.set_num_threads(1)
    x, y, w1, w2 = _data(batch, hidden)
    x, y = torch.tensor(x), torch.tensor(y)
    params = [torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True),
              torch.zeros(hidden, requires_grad=True)]

    def step():
        v1, v2, b1 = params
        loss = (((x @ v1 + b1).relu() @ v2 - y) ** 2).mean()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(g * lr)
    return _time(step, steps)


def bench_scheduler(n: int = 1200, k: int = 4, repeats: int = 3) -> dict:
    f64 = np.dtype(np.float64)
    g = Graph("independent_matmuls")
    xs = [g.placeholder(Spec((n, n), f64), f"x{i}") for i in range(k)]
    outs = [g.call(REGISTRY["Matmul"], [x, x], {}, Spec((n, n), f64), name=f"mm{i}")
            for i, x in enumerate(xs)]
    g.set_outputs(outs)
    rng = np.random.default_rng(0)
    args = [gg.tensor(rng.standard_normal((n, n))) for _ in range(k)]
    res = {}
    for w in (1, 2):
        s = Scheduler(g, workers=w)
        s.run(*args)
        t0 = time.perf_counter()
        for _ in range(repeats):
            s.run(*args)
        res[w] = (time.perf_counter() - t0) / repeats
    return {"matmuls": k, "n": n, "workers_1_s": res[1], "workers_2_s": res[2],
            "speedup_2_vs_1": res[1] / res[2]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=128)
    a = ap.parse_args()
    st = bench_static(a.batch, a.hidden, a.steps)
    eg = bench_eager(a.batch, a.hidden, a.steps)
    th = bench_torch(a.batch, a.hidden, a.steps)
    print(json.dumps({
        "mlp_step": {"batch": a.batch, "hidden": a.hidden, "steps": a.steps,
                     "static_session_run_s": st, "eager_graphgrad_s": eg, "torch_eager_s": th,
                     "static_vs_eager": st / eg, "static_vs_torch": st / th,
                     "eager_vs_torch": eg / th},
        "scheduler": bench_scheduler(),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}, indent=2))


if __name__ == "__main__":
    main()
