"""Per-step time of the digits MLP (64-256-256-10, batch 128, SGD, cross entropy) for
graphgrad eager, a hand-written NumPy forward/backward (the no-framework limit) and
PyTorch eager, in one run, single-threaded. Prints one JSON object with the ratios.

    python bench/mlp_train.py [--steps 300] [--repeats 5] [--overhead]
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
LR = 0.01


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
        for p_, g in zip((*ws, *bs), (gw0, gw1, gw2, gb0, gb1, gb2), strict=True):
            p_ -= LR * g
        return loss
    return step


def graphgrad_step_fn():
    import graphgrad as gg
    from graphgrad import nn, optim
    x, y, ws, bs = _data()
    model = _mlp(nn)
    for lin, w, b in zip([model[0], model[2], model[4]], ws, bs, strict=True):
        lin.weight._array[...] = w
        lin.bias._array[...] = b
    opt = optim.SGD(model.parameters(), lr=LR)
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
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        loss = loss_fn(model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


def _time(step, steps: int, repeats: int) -> float:
    """Best of ``repeats`` means over ``steps`` steps, in ms (after a warm-up)."""
    for _ in range(20):
        step()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - t0) / steps)
    return best * 1e3


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--overhead", action="store_true",
                    help="a 4-8-8-3 MLP on 2 examples: what remains is per-step overhead")
    args = ap.parse_args(argv)
    global SIZES, BATCH
    if args.overhead:
        SIZES, BATCH = (4, 8, 8, 3), 2
    fns = {"numpy": numpy_step_fn, "graphgrad": graphgrad_step_fn}
    if not args.no_torch:
        fns["torch"] = torch_step_fn
    ms = {name: _time(fn(), args.steps, args.repeats) for name, fn in fns.items()}
    result = {"bench": "mlp_train", "model": "-".join(map(str, SIZES)), "batch": BATCH,
              "optimizer": "SGD", "threads": 1, "steps": args.steps, "repeats": args.repeats,
              "ms_per_step": {k: round(v, 4) for k, v in ms.items()},
              "graphgrad_over_numpy": round(ms["graphgrad"] / ms["numpy"], 3),
              "target_graphgrad_over_numpy": 1.5,
              "python": platform.python_version(), "numpy": np.__version__}
    if "torch" in ms:
        result["torch_over_numpy"] = round(ms["torch"] / ms["numpy"], 3)
        result["graphgrad_over_torch"] = round(ms["graphgrad"] / ms["torch"], 3)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
