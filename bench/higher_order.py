"""Higher-order derivatives without the blow-up, measured (issue 18). One JSON object:

1. ``kth_derivative``: d^k/dx^k at x = 0.37 of tanh(x) and sin(x) exp(x), k = 1..10:
   graphgrad nested reverse mode (autograd.grad(create_graph=True) k times) with the
   derivative graphs sharing (the default) and without (``set_sharing(False)``, plain
   graph extension as on main), graphgrad Taylor mode (``func.taylor_derivatives``,
   all orders up to k in one pass) and torch nested autograd: seconds to build the k-th
   derivative from scratch (best of repeats) and graph nodes.
2. ``laplacian``: the Laplacian of a tanh MLP (3 hidden layers of width 128, one output)
   at a batch of 256 points, d = 2, 16, 64, 256 inputs: graphgrad's three methods
   (nested reverse, Taylor, collapsed Taylor) and torch (nested autograd, one backward
   pass per input dim; and the trace of torch.func.hessian, vmapped over the points).
   Values only (the weights do not require grad), float64, all checked equal; the
   peers interleaved round by round, fastest wall-clock and CPU time of each.
3. ``pinn``: examples/pinn_poisson.py's loss-and-gradient time and a short L-BFGS run
   with u'' by func.laplacian and by nested autograd.grad.

jax is not installed here: ``jax.experimental.jet`` and ``jax.jit(nested grad)`` are not
measured (the JSON says so). Ratios compare peers measured in the same run; the load
(``os.getloadavg``) is printed with them.

    python bench/higher_order.py [--quick] [--only laplacian]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import graphgrad as gg  # noqa: E402
from graphgrad import func, nn  # noqa: E402
from graphgrad.autograd.sharing import set_sharing  # noqa: E402
from graphgrad.tensor.toposort import toposort  # noqa: E402

torch.set_num_threads(1)
X0 = 0.37
FUNCTIONS = {"tanh": (lambda x: x.tanh(), torch.tanh),
             "sin_exp": (lambda x: x.sin() * x.exp(), lambda x: x.sin() * x.exp())}


def best_of(repeats: int, fn, *args):
    """The fastest of ``repeats`` calls ``fn(*args)`` (other load only adds) and its result."""
    best, out = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, out


def _nested(lib, f, k: int):
    """The k-th derivative of f at X0 by nesting ``lib.autograd.grad(create_graph=True)``
    (graphgrad or torch: the same calls)."""
    x = lib.tensor(X0, dtype=lib.float64, requires_grad=True)
    y = f(x)
    for _ in range(k):
        (y,) = lib.autograd.grad(y, x, create_graph=True)
    return y


def _torch_nodes(t) -> int:
    seen, todo = set(), [t.grad_fn]
    while todo:
        n = todo.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        todo.extend(nxt for nxt, _ in n.next_functions)
    return len(seen)


def kth_derivative(orders, repeats: int) -> dict:
    out = {}
    for name, (f_gg, f_torch) in FUNCTIONS.items():
        rows = []
        for k in orders:
            row = {"k": k}
            for label, share in (("nested_shared", True), ("nested_plain", False)):
                prev = set_sharing(share)
                try:
                    t, y = best_of(repeats, _nested, gg, f_gg, k)
                finally:
                    set_sharing(prev)
                row[label] = {"seconds": t, "nodes": len(toposort([y])), "value": float(y)}
            x = gg.tensor(X0, dtype=gg.float64)
            t, ys = best_of(repeats, func.taylor_derivatives, f_gg, x, 1.0, k)
            row["jet"] = {"seconds": t, "value": float(ys[k])}
            t, y = best_of(repeats, _nested, torch, f_torch, k)
            row["torch_nested"] = {"seconds": t, "nodes": _torch_nodes(y),
                                   "value": float(y.detach())}
            values = [row[m]["value"] for m in ("nested_shared", "nested_plain", "jet",
                                                "torch_nested")]
            row["max_rel_diff"] = float(np.ptp(values) / max(1.0, abs(values[-1])))
            rows.append(row)
        last = rows[-1]
        out[name] = {"rows": rows, "at_k": last["k"], "ratios": {
            "nested_plain_over_jet": last["nested_plain"]["seconds"] / last["jet"]["seconds"],
            "torch_nested_over_jet": last["torch_nested"]["seconds"] / last["jet"]["seconds"],
            "nested_plain_over_nested_shared":
                last["nested_plain"]["seconds"] / last["nested_shared"]["seconds"],
            "nodes_plain_over_shared":
                last["nested_plain"]["nodes"] / last["nested_shared"]["nodes"]}}
        # quadratic growth check: time(k) / time(k/2) <= 4 if jet is O(k^2)
        half = next((r for r in rows if r["k"] == last["k"] // 2), None)
        if half is not None:
            out[name]["ratios"]["jet_time_k_over_half_k"] = \
                last["jet"]["seconds"] / half["jet"]["seconds"]
    return out


def _mlp(d: int):
    gg.manual_seed(d)
    layers = [nn.Linear(d, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(),
              nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 1)]
    net = nn.Sequential(*layers).to(gg.float64)
    for p in net.parameters():
        p.requires_grad_(False)
    tnet = torch.nn.Sequential(torch.nn.Linear(d, 128), torch.nn.Tanh(),
                               torch.nn.Linear(128, 128), torch.nn.Tanh(),
                               torch.nn.Linear(128, 128), torch.nn.Tanh(),
                               torch.nn.Linear(128, 1)).double()
    tnet.load_state_dict({k: torch.tensor(v.numpy()) for k, v in net.state_dict().items()})
    for p in tnet.parameters():
        p.requires_grad_(False)
    return net, tnet


def _torch_nested_laplacian(tnet, x):
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(tnet(x).sum(), x, create_graph=True)
    total = torch.zeros(x.shape[0], dtype=x.dtype)
    for i in range(x.shape[1]):
        (h,) = torch.autograd.grad(g[:, i].sum(), x, retain_graph=True)
        total = total + h[:, i]
    return total


def _torch_hessian_trace(tnet, x):
    def single(p):
        return tnet(p.unsqueeze(0))[0, 0]
    hess = torch.func.vmap(torch.func.hessian(single))(x)
    return hess.diagonal(dim1=-2, dim2=-1).sum(-1)


def _interleaved(repeats: int, peers: dict) -> tuple[dict, dict, dict]:
    """Each peer called once per round, the rounds repeated: the fastest wall-clock and
    CPU (process) time of each, and its last result. All peers are single-threaded, so
    CPU time leaves out the time other processes on a shared machine take from the
    run (wall-clock time does not); both are reported."""
    wall = dict.fromkeys(peers, math.inf)
    cpu = dict.fromkeys(peers, math.inf)
    out = {}
    for _ in range(repeats):
        for name, fn in peers.items():
            w, c = time.perf_counter(), time.process_time()
            out[name] = fn()
            cpu[name] = min(cpu[name], time.process_time() - c)
            wall[name] = min(wall[name], time.perf_counter() - w)
    return wall, cpu, out


def _ratios(s: dict) -> dict:
    torch_best = min(s["torch_nested"], s["torch_func_hessian_trace"])
    return {"torch_best_over_collapsed": torch_best / s["graphgrad_collapsed"],
            "graphgrad_reverse_over_collapsed": s["graphgrad_reverse"]
            / s["graphgrad_collapsed"],
            "graphgrad_taylor_over_collapsed": s["graphgrad_taylor"] / s["graphgrad_collapsed"]}


def _laplacian_peers(d: int, batch: int) -> dict:
    """name -> a call giving the Laplacian at the same batch as a NumPy array."""
    net, tnet = _mlp(d)
    x = gg.randn(batch, d, dtype=gg.float64)
    xt = torch.tensor(x.numpy())
    peers = {}
    for method in ("reverse", "taylor", "collapsed"):
        def run(lap=func.laplacian(net, method=method)):
            with gg.no_grad():
                return lap(x).numpy().ravel()
        peers[f"graphgrad_{method}"] = run
    peers["torch_nested"] = lambda: _torch_nested_laplacian(tnet, xt).numpy()
    peers["torch_func_hessian_trace"] = lambda: _torch_hessian_trace(tnet, xt).numpy()
    return peers


def laplacian(dims, batch: int, repeats: int) -> list:
    """The five peers interleaved round by round (each under the same load), graphgrad's
    under ``no_grad`` (values only; torch's nested passes need grad mode by design)."""
    rows = []
    for d in dims:
        peers = _laplacian_peers(d, batch)
        reps = repeats if d <= 64 else max(2, repeats // 2)
        wall, cpu, values = _interleaved(reps, peers)
        ref = values["torch_func_hessian_trace"]
        rows.append({"d": d, "batch": batch, "repeats": reps, "seconds": wall,
                     "cpu_seconds": cpu,
                     "max_abs_diff_vs_torch_hessian": {k: float(np.abs(v - ref).max())
                                                       for k, v in values.items()},
                     "ratios": _ratios(wall), "cpu_ratios": _ratios(cpu)})
    return rows


def pinn(iters: int) -> dict:
    path = Path(__file__).resolve().parent.parent / "examples" / "pinn_poisson.py"
    spec = importlib.util.spec_from_file_location("pinn_poisson", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = {}
    for route in ("laplacian", "nested"):
        with contextlib.redirect_stdout(io.StringIO()):  # the JSON is this script's output
            r = mod.main(["--quiet", "--no-plot", "--iters", str(iters), "--derivatives",
                          route])
        out[route] = {"train_seconds": r["seconds"], "relative_l2_error": r["relative_l2_error"],
                      "seconds_per_loss_and_grad": r["seconds_per_loss"][route]}
    out["nested_over_laplacian_train"] = out["nested"]["train_seconds"] / \
        out["laplacian"]["train_seconds"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="k <= 6, d <= 16, fewer repeats")
    parser.add_argument("--only", choices=("kth_derivative", "laplacian", "pinn"),
                        help="run one section")
    args = parser.parse_args()
    quick = args.quick
    orders, dims = (range(1, 7), (2, 16)) if quick else (range(1, 11), (2, 16, 64, 256))
    repeats = 2 if quick else 5
    load_before = os.getloadavg()
    sections = {"kth_derivative": lambda: kth_derivative(orders, repeats),
                "laplacian": lambda: laplacian(dims, 256, 3 if quick else 7),
                "pinn": lambda: pinn(100 if quick else 300)}
    result = {"benchmark": "higher_order", "float": "float64",
              "threads": "1 (OMP/OpenBLAS/MKL, torch.set_num_threads)",
              "jax": "not installed: jax.experimental.jet and jax.jit(nested grad) not measured"}
    for name, run in sections.items():
        if args.only in (None, name):
            result[name] = run()
    result["load_average_before_after"] = [load_before, os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
