"""Taylor-mode transforms inside ``graphgrad.compile`` (issue 18), measured. One JSON object:

* ``laplacian``: the Laplacian of a tanh MLP (3 hidden layers of width 128, one output) at
  256 points, d = 2 and 16 inputs: ``graphgrad.compile`` of ``func.laplacian(net)(x)``
  (traced as unrolled 2-jets, collapsed by ``passes.collapse_taylor``) against the eager
  methods (collapsed Taylor, plain Taylor) and torch (the trace of
  ``torch.func.hessian``, vmapped over the points); the compiled graph's node counts
  through the passes, and the largest difference from eager.
* ``jet``: ``func.taylor_derivatives`` of the same MLP to order 4 along a direction,
  compiled against eager.

Peers are interleaved in one loop (best of repeats: other load only adds) and compared as
ratios; the load average is printed with them. Float64, one BLAS thread.

    python bench/compiled_taylor.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import graphgrad as gg  # noqa: E402
from graphgrad import func, nn  # noqa: E402

torch.set_num_threads(1)


def _mlp(d: int, width: int = 128):
    gg.manual_seed(0)
    net = nn.Sequential(nn.Linear(d, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                        nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1)).to(gg.float64)
    for p in net.parameters():
        p.requires_grad_(False)
    tnet = torch.nn.Sequential(torch.nn.Linear(d, width), torch.nn.Tanh(),
                               torch.nn.Linear(width, width), torch.nn.Tanh(),
                               torch.nn.Linear(width, width), torch.nn.Tanh(),
                               torch.nn.Linear(width, 1)).double()
    with torch.no_grad():
        for p, q in zip(tnet.parameters(), net.parameters(), strict=True):
            p.copy_(torch.from_numpy(q.detach().numpy()))
    return net, tnet


def _interleaved(peers: dict, repeats: int) -> dict:
    """Best seconds per peer, the peers run in turn in each round."""
    best = dict.fromkeys(peers, math.inf)
    for _ in range(repeats):
        for name, fn in peers.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def laplacian(dims, points: int, repeats: int) -> dict:
    return {f"d={d}": _laplacian_row(d, points, repeats) for d in dims}


def _laplacian_row(d: int, points: int, repeats: int) -> dict:
    net, tnet = _mlp(d)
    x = gg.randn(points, d, dtype=gg.float64)
    xt = torch.from_numpy(x.numpy())

    def lap(x):
        return func.laplacian(net)(x)
    gg.compiler.reset()
    compiled = gg.compile(lap)
    got = compiled(x)   # the capture (not timed)
    graph = compiled.graphs[-1]

    def torch_hessian_trace():
        h = torch.func.vmap(torch.func.hessian(lambda p: tnet(p.unsqueeze(0))[0, 0]))(xt)
        return h.diagonal(dim1=-2, dim2=-1).sum(-1)
    peers = {"compiled": lambda: compiled(x),
             "eager_collapsed": lambda: lap(x),
             "eager_taylor": lambda: func.laplacian(net, method="taylor")(x),
             "torch_func_hessian_trace": torch_hessian_trace}
    best = _interleaved(peers, repeats)
    want = lap(x).numpy().ravel()
    return {
        "ms": {k: round(v * 1e3, 3) for k, v in best.items()},
        "ratios": {"eager_collapsed_over_compiled": best["eager_collapsed"] / best["compiled"],
                   "torch_hessian_over_compiled": best["torch_func_hessian_trace"] /
                   best["compiled"]},
        "graph_passes": [h for h in graph.header if "->" in h],
        "max_abs_diff_vs_eager": float(np.abs(got.numpy().ravel() - want).max()),
        "max_abs_diff_vs_torch": float(np.abs(
            torch_hessian_trace().detach().numpy() - want).max())}


def jet(order: int, points: int, repeats: int) -> dict:
    net, _ = _mlp(4)
    x = gg.randn(points, 4, dtype=gg.float64)

    def derivatives(x):
        return func.taylor_derivatives(net, x, gg.ones_like(x), order)
    gg.compiler.reset()
    compiled = gg.compile(derivatives)
    got = compiled(x)
    best = _interleaved({"compiled": lambda: compiled(x), "eager": lambda: derivatives(x)},
                        repeats)
    want = derivatives(x)
    return {"order": order, "ms": {k: round(v * 1e3, 3) for k, v in best.items()},
            "eager_over_compiled": best["eager"] / best["compiled"],
            "max_abs_diff_vs_eager": max(float((g - w).abs().max())
                                         for g, w in zip(got, want, strict=True))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="d = 2 only, fewer repeats")
    quick = parser.parse_args().quick
    repeats = 3 if quick else 7
    load_before = os.getloadavg()
    result = {"benchmark": "compiled_taylor", "float": "float64",
              "threads": "1 (OMP/OpenBLAS/MKL, torch.set_num_threads)",
              "laplacian": laplacian((2,) if quick else (2, 16), 256, repeats),
              "jet": jet(4, 256, repeats)}
    result["load_average_before_after"] = [load_before, os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
