"""Per-step time of the digits MLP (64-256-256-10, batch 128, SGD or Adam, cross entropy)
for graphgrad eager, a hand-written NumPy forward/backward and update (the no-framework
limit) and PyTorch eager, in one run, single-threaded. The peers take turns in each round;
prints one JSON object with the ratios (of the best times, and per round).

    python bench/mlp_train.py [--steps 200] [--repeats 7] [--optimizer sgd|adam] [--overhead]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"  # before NumPy/torch load BLAS: one thread for every peer

import argparse  # noqa: E402
import json  # noqa: E402
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
    x, y, ws, bs = _data()
    n = x.shape[0]
    rows = np.arange(n)

    def step():
        h1 = x @ ws[0].T + bs[0]
        a1 = np.maximum(h1, 0)
        h2 = a1 @ ws[1].T + bs[1]
        a2 = np.maximum(h2, 0)
        z = a2 @ ws[2].T + bs[2]
        z = z - z.max(axis=1, keepdims=True)
        ez = np.exp(z)
        p = ez / ez.sum(axis=1, keepdims=True)
        loss = -np.log(p[rows, y]).mean()
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
        update((*ws, *bs), (gw0, gw1, gw2, gb0, gb1, gb2))
        return loss
    update = _numpy_sgd if OPTIMIZER == "sgd" else _numpy_adam()
    return step


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


def graphgrad_step_fn():
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

    def step():
        loss = loss_fn(model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


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


def _time_interleaved(steps_fns: dict, steps: int, repeats: int) -> dict[str, dict]:
    """Per-step ms of each peer in each of ``repeats`` rounds of ``steps`` steps (after a
    warm-up), as wall time and as this process's CPU time. The peers take turns within
    a round, so a load change on a shared machine hits them alike; and everything runs
    on one thread, so the CPU time leaves out the time other processes held the core."""
    for step in steps_fns.values():
        for _ in range(20):
            step()
    times = {name: {"wall": [], "cpu": []} for name in steps_fns}
    for _ in range(repeats):
        for name, step in steps_fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                step()
            times[name]["cpu"].append((time.process_time() - c0) / steps * 1e3)
            times[name]["wall"].append((time.perf_counter() - w0) / steps * 1e3)
    return times


def _ratios(num: dict, den: dict) -> dict:
    """Ratios of the best times (CPU and wall), and the range of the per-round CPU ratios."""
    per_round = sorted(a / b for a, b in zip(num["cpu"], den["cpu"], strict=True))
    return {"cpu_best": round(min(num["cpu"]) / min(den["cpu"]), 3),
            "wall_best": round(min(num["wall"]) / min(den["wall"]), 3),
            "cpu_rounds_median": round(per_round[len(per_round) // 2], 3),
            "cpu_rounds_range": [round(per_round[0], 3), round(per_round[-1], 3)]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--overhead", action="store_true",
                    help="a 4-8-8-3 MLP on 2 examples: what remains is per-step overhead")
    args = ap.parse_args(argv)
    global SIZES, BATCH, OPTIMIZER
    if args.overhead:
        SIZES, BATCH = (4, 8, 8, 3), 2
    OPTIMIZER = args.optimizer
    fns = {"numpy": numpy_step_fn, "graphgrad": graphgrad_step_fn}
    if not args.no_torch:
        fns["torch"] = torch_step_fn
    times = _time_interleaved({name: fn() for name, fn in fns.items()}, args.steps,
                              args.repeats)
    result = {"bench": "mlp_train", "model": "-".join(map(str, SIZES)), "batch": BATCH,
              "optimizer": OPTIMIZER, "threads": 1, "steps": args.steps,
              "repeats": args.repeats,
              "ms_per_step_best_cpu": {k: round(min(v["cpu"]), 4) for k, v in times.items()},
              "ms_per_step_best_wall": {k: round(min(v["wall"]), 4)
                                        for k, v in times.items()},
              "graphgrad_over_numpy": _ratios(times["graphgrad"], times["numpy"]),
              "target_graphgrad_over_numpy": 1.5,
              "python": platform.python_version(), "numpy": np.__version__}
    if "torch" in times:
        result["torch_over_numpy"] = _ratios(times["torch"], times["numpy"])
        result["graphgrad_over_torch"] = _ratios(times["graphgrad"], times["torch"])
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
