"""Per-step time of the digits MLP (64-256-256-10, batch 128, SGD or Adam, cross entropy)
for graphgrad eager, a hand-written NumPy forward/backward and update (the no-framework
limit) and PyTorch eager, in one run, single-threaded, with the samples of the three
interleaved (``timing.time_interleaved``). Prints one JSON object: per-step times and
the ratios of the fastest samples (the headline), of the medians and of the CPU times.

    python bench/mlp_train.py [--repeats 15] [--optimizer sgd|adam] [--overhead] [--compiled]
                              [--phases]

``--compiled`` adds ``graphgrad.compile(model)`` (forward and backward compiled) as a
fourth contender, ``graphgrad_compiled``, with its ratios to NumPy and to graphgrad eager.
``--phases`` prints instead each phase's CPU time per step (forward, loss, backward with
zero_grad, update) for NumPy and graphgrad (and compiled): where the time goes.
"""

from __future__ import annotations

import timing  # noqa: F401 (first: one BLAS thread, set before NumPy loads BLAS)

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

SIZES = (64, 256, 256, 10)
BATCH = 128
LR = {"sgd": 0.01, "adam": 1e-3}
BETAS, EPS = (0.9, 0.999), 1e-8
OPTIMIZER = "sgd"


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)
    ws, bs = [], []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:], strict=True):
        bound = 1 / np.sqrt(fan_in)
        ws.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        bs.append(rng.uniform(-bound, bound, fan_out).astype(np.float32))
    return x, y, ws, bs


def _mlp(nn):
    """SIZES as Linear-ReLU-...-Linear in ``nn`` (graphgrad.nn or torch.nn)."""
    layers = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:], strict=True):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def numpy_step_fn():
    """Forward, backward and the SGD update written out by hand on arrays."""
    forward, loss_of, backward, update = _numpy_phases()

    def step():
        acts = forward()
        p, loss = loss_of(acts[-1])
        update(backward(acts, p))
        return loss
    return step


def _numpy_phases():
    """The NumPy step's four phases: forward, loss, backward and update, each taking what
    the one before returned (``--phases`` times them apart)."""
    x, y, ws, bs = _data()
    n = x.shape[0]
    rows = np.arange(n)

    def forward():
        h1 = x @ ws[0].T + bs[0]
        a1 = np.maximum(h1, 0)
        h2 = a1 @ ws[1].T + bs[1]
        a2 = np.maximum(h2, 0)
        return h1, a1, h2, a2, a2 @ ws[2].T + bs[2]

    def loss_of(z):
        z = z - z.max(axis=1, keepdims=True)
        ez = np.exp(z)
        p = ez / ez.sum(axis=1, keepdims=True)
        return p, -np.log(p[rows, y]).mean()

    def backward(acts, p):
        h1, a1, h2, a2, _ = acts
        dz = p
        dz[rows, y] -= 1
        dz /= n
        gw2, gb2 = dz.T @ a2, dz.sum(0)
        da2 = dz @ ws[2]
        da2 *= h2 > 0
        gw1, gb1 = da2.T @ a1, da2.sum(0)
        da1 = da2 @ ws[1]
        da1 *= h1 > 0
        gw0, gb0 = da1.T @ x, da1.sum(0)
        return gw0, gw1, gw2, gb0, gb1, gb2
    step_update = _numpy_sgd if OPTIMIZER == "sgd" else _numpy_adam()
    return forward, loss_of, backward, lambda grads: step_update((*ws, *bs), grads)


def _numpy_sgd(params, grads) -> None:
    for p, g in zip(params, grads, strict=True):
        p -= LR["sgd"] * g


def _numpy_adam():
    """Adam's update written out on arrays, in place, one scratch array per parameter."""
    moments: list = []
    t = [0]

    def update(params, grads) -> None:
        if not moments:
            moments.extend((np.zeros_like(p), np.zeros_like(p)) for p in params)
        t[0] += 1
        (b1, b2), lr = BETAS, LR["adam"]
        step_size, bc2_sqrt = lr / (1 - b1 ** t[0]), (1 - b2 ** t[0]) ** 0.5
        for p, g, (m, v) in zip(params, grads, moments, strict=True):
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            denom = np.sqrt(v)
            denom /= bc2_sqrt
            denom += EPS
            np.divide(m, denom, out=denom)
            denom *= step_size
            p -= denom
    return update


def _optimizer(optim, params):
    """SGD or Adam of ``optim`` (graphgrad.optim or torch.optim), as the NumPy step."""
    if OPTIMIZER == "sgd":
        return optim.SGD(params, lr=LR["sgd"])
    return optim.Adam(params, lr=LR["adam"], betas=BETAS, eps=EPS)


def graphgrad_step_fn(compiled: bool = False, phases: bool = False):
    """graphgrad's step; ``compiled``: the model through ``graphgrad.compile`` (forward
    and backward compiled: bench/compile_fusion.py); ``phases``: its four phase functions
    instead (``phase_times``)."""
    import graphgrad as gg
    from graphgrad import nn, optim
    x, y, ws, bs = _data()
    model = _mlp(nn)
    for lin, w, b in zip([model[0], model[2], model[4]], ws, bs, strict=True):
        lin.weight._array[...] = w
        lin.bias._array[...] = b
    opt = _optimizer(optim, model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    xt, yt = gg.tensor(x), gg.tensor(y)

    run = gg.compile(model) if compiled else model
    if phases:
        def backward(loss):
            opt.zero_grad()
            loss.backward()
        return (lambda: run(xt)), (lambda out: loss_fn(out, yt)), backward, opt.step

    def step():
        loss = loss_fn(run(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


def phase_times(contenders: dict, repeats: int, steps: int = 40) -> dict:
    """Per-step thread CPU time (µs) of each phase (forward, loss, backward with
    zero_grad, update) of each contender's four phase functions, the minimum over
    ``repeats`` samples of ``steps`` steps, samples interleaved across contenders."""
    clock = time.thread_time
    sums = {k: [] for k in contenders}
    for _ in range(20):
        for forward, loss_of, backward, update in contenders.values():
            _run_phases(forward, loss_of, backward, update, clock)
    for _ in range(repeats):
        for k, (forward, loss_of, backward, update) in contenders.items():
            gc.collect()
            acc = [0.0] * 4
            for _ in range(steps):
                t = _run_phases(forward, loss_of, backward, update, clock)
                for i in range(4):
                    acc[i] += t[i]
            sums[k].append([a / steps * 1e6 for a in acc])
    names = ("forward", "loss", "backward", "update")
    return {k: {name: round(min(s[i] for s in v), 1) for i, name in enumerate(names)}
            for k, v in sums.items()}


def _run_phases(forward, loss_of, backward, update, clock) -> tuple:
    t0 = clock()
    out = forward()
    t1 = clock()
    loss = loss_of(out[-1] if isinstance(out, tuple) else out)
    t2 = clock()
    if isinstance(loss, tuple):   # NumPy's: (probabilities, loss)
        grads = backward(out, loss[0])
        t3 = clock()
        update(grads)
    else:
        backward(loss)
        t3 = clock()
        update()
    return t1 - t0, t2 - t1, t3 - t2, clock() - t3


def torch_step_fn():
    import torch
    torch.set_num_threads(1)
    x, y, ws, bs = _data()
    model = _mlp(torch.nn)
    with torch.no_grad():
        for lin, w, b in zip([model[0], model[2], model[4]], ws, bs, strict=True):
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
    opt = _optimizer(torch.optim, model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        loss = loss_fn(model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


def _ratios(num: dict, den: dict) -> dict:
    """Ratios of the fastest samples (the headline: other processes only add time), of
    the medians, and of the median process CPU times."""
    return {"min": round(num["min_ms"] / den["min_ms"], 3),
            "median": round(num["median_ms"] / den["median_ms"], 3),
            "cpu_median": round(num["cpu_median_ms"] / den["cpu_median_ms"], 3)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15, help="samples per contender")
    ap.add_argument("--min-sample-ms", type=float, default=100.0,
                    help="each sample repeats the step until it lasts this long")
    ap.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--overhead", action="store_true",
                    help="a 4-8-8-3 MLP on 2 examples: what remains is per-step overhead")
    ap.add_argument("--compiled", action="store_true",
                    help="also the step with graphgrad.compile(model)")
    ap.add_argument("--phases", action="store_true",
                    help="instead: per-phase CPU times (forward, loss, backward, update)")
    args = ap.parse_args(argv)
    global SIZES, BATCH, OPTIMIZER
    if args.overhead:
        SIZES, BATCH = (4, 8, 8, 3), 2
    OPTIMIZER = args.optimizer
    if args.phases:
        contenders = {"numpy": _numpy_phases(), "graphgrad": graphgrad_step_fn(phases=True)}
        if args.compiled:
            contenders["graphgrad_compiled"] = graphgrad_step_fn(compiled=True, phases=True)
        result = {"bench": "mlp_train_phases", "model": "-".join(map(str, SIZES)),
                  "batch": BATCH, "optimizer": OPTIMIZER, "us_per_step_min": phase_times(
                      contenders, args.repeats * 3),
                  "uptime": os.popen("uptime").read().strip()}
        print(json.dumps(result))
        return result
    fns = {"numpy": numpy_step_fn, "graphgrad": graphgrad_step_fn}
    if args.compiled:
        fns["graphgrad_compiled"] = lambda: graphgrad_step_fn(compiled=True)
    if not args.no_torch:
        fns["torch"] = torch_step_fn
    times = timing.time_interleaved({name: fn() for name, fn in fns.items()},
                                    repeats=args.repeats, warmup=20,
                                    min_s=args.min_sample_ms / 1e3, between=gc.collect)
    result = {"bench": "mlp_train", "model": "-".join(map(str, SIZES)), "batch": BATCH,
              "optimizer": OPTIMIZER, "threads": 1, "repeats": args.repeats,
              "ms_per_step": {k: {m: round(v[m], 4) for m in ("min_ms", "median_ms",
                                                              "cpu_median_ms")}
                              for k, v in times.items()},
              "graphgrad_over_numpy": _ratios(times["graphgrad"], times["numpy"]),
              "target_graphgrad_over_numpy": 1.5,
              "python": platform.python_version(), "numpy": np.__version__,
              "uptime": os.popen("uptime").read().strip()}
    result["target_met"] = result["graphgrad_over_numpy"]["min"] <= 1.5
    if "graphgrad_compiled" in times:
        result["graphgrad_compiled_over_numpy"] = _ratios(times["graphgrad_compiled"],
                                                          times["numpy"])
        result["graphgrad_compiled_over_eager"] = _ratios(times["graphgrad_compiled"],
                                                          times["graphgrad"])
    if "torch" in times:
        result["torch_over_numpy"] = _ratios(times["torch"], times["numpy"])
        result["graphgrad_over_torch"] = _ratios(times["graphgrad"], times["torch"])
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
