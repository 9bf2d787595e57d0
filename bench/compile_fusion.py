"""graphgrad.compile with fusion, fused lowerings and the compiled backward, against
graphgrad eager, PyTorch eager and ``torch.compile`` in the same run (jax is not
installed here, so there is no jax.jit column).

* **chain200**: 200 ops (``x = (x * 1.0001).tanh()`` 100 times) on (4, 4) float32:
  overhead-bound. Target: compiled <= 1.5x torch.compile. Also with
  ``fused.config.libm`` (tanh inside the Numba kernel; last-bit differences from NumPy).
* **memory-bound** on (4096, 1024) float32, forward and forward+backward: GELU (tanh
  form), LayerNorm, softmax + cross-entropy, a 10-op arithmetic chain. Targets:
  compiled >= 2x faster than graphgrad eager, within 1.3x of torch.compile.
  numexpr (a peer, never a dependency of graphgrad; one thread, as the rest) evaluates
  the GELU and 10-op chain forwards where installed: ``compiled_over_numexpr_fwd``.
* **mlp_train**: bench/mlp_train.py's model and step, ``graphgrad.compile(model)``
  against the hand-written NumPy step. Target: <= 1.05x NumPy.
* **latency**: a fresh process's first call of a compiled arithmetic chain (import,
  capture, Numba compile) with an empty kernel cache, then a second process with the
  cache the first one wrote.

Prints one JSON object (with ``uptime``: the machine's load during the run).

    python bench/compile_fusion.py [--quick] [--no-torch] [--only chain200,mlp_train,...]
"""

from __future__ import annotations

import timing  # noqa: F401 (first: one BLAS thread, set before NumPy loads BLAS)

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import graphgrad as gg  # noqa: E402
import graphgrad.nn.functional as F  # noqa: E402
from graphgrad.backends import fused  # noqa: E402

HERE = Path(__file__).resolve().parent


def chain(x):
    for _ in range(100):
        x = (x * 1.0001).tanh()
    return x


def arith10(x):
    """10 elementwise arithmetic ops."""
    y = x * 1.5 + 0.5
    y = y.relu() * x - 0.25
    y = y / (x * x + 1.0)
    return y.abs() + x


def _workloads(fmod):
    """name -> fn(x, aux) on a (4096, 1024) input (``fmod``: graphgrad's or torch's
    functional module)."""
    return {
        "gelu": lambda x, w, b, y: fmod.gelu(x, approximate="tanh"),
        "layer_norm": lambda x, w, b, y: fmod.layer_norm(x, (x.shape[-1],), w, b),
        "softmax_ce": lambda x, w, b, y: fmod.cross_entropy(x, y),
        "chain10": lambda x, w, b, y: arith10(x),
    }


# the same forwards as numexpr expressions (``x`` the input; relu as ``where``). Its
# constants are named float32 values: a literal is a double, which makes the whole
# expression float64 (twice the memory traffic)
_NUMEXPR = {
    "gelu": "h * x * (o + tanh(k * (x + g * x * x * x)))",
    "chain10": "abs((where(x * a + h > z, x * a + h, z) * x - q) / (x * x + o)) + x",
}
_NUMEXPR_CONSTANTS = {k: np.float32(v) for k, v in dict(
    h=0.5, o=1.0, k=0.7978845608028654, g=0.044715, a=1.5, z=0.0, q=0.25).items()}


def _numexpr():
    try:
        import numexpr
    except ImportError:
        return None
    numexpr.set_num_threads(1)
    return numexpr


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return torch


def _time(fns: dict, repeats: int, min_s: float) -> dict:
    t = timing.time_interleaved(fns, repeats=repeats, warmup=2, min_s=min_s, between=gc.collect)
    return {k: round(v["min_ms"], 4) for k, v in t.items()}


def bench_chain(torch, repeats: int) -> dict:
    x = gg.randn(4, 4)
    compiled = gg.compile(chain)
    with gg.no_grad():
        compiled(x)   # its kernels made before libm is switched on
    fused.config.libm = True   # opt-in: tanh in the Numba kernel (last-bit differences)
    libm = gg.compile(lambda x: chain(x))
    with gg.no_grad():
        libm(x)
    fused.config.libm = False
    fns = {"graphgrad_eager": lambda: chain(x), "graphgrad_compiled": lambda: compiled(x),
           "graphgrad_compiled_libm": lambda: libm(x)}
    if torch is not None:
        tx = torch.from_numpy(x.numpy())
        tc = torch.compile(chain)
        fns.update(torch_eager=lambda: chain(tx), torch_compile=lambda: tc(tx))
    with gg.no_grad():
        ms = _time(fns, repeats, 0.05)
    out = {"ms": ms}
    if torch is not None:
        for k in ("graphgrad_compiled", "graphgrad_compiled_libm"):
            out[f"{k}_over_torch_compile"] = round(ms[k] / ms["torch_compile"], 3)
        out["target_met"] = out["graphgrad_compiled_over_torch_compile"] <= 1.5
        out["target_met_with_libm"] = out["graphgrad_compiled_libm_over_torch_compile"] <= 1.5
    return out


def _inputs(rng):
    x = rng.standard_normal((4096, 1024)).astype(np.float32)
    w = rng.standard_normal(1024).astype(np.float32)
    b = rng.standard_normal(1024).astype(np.float32)
    y = rng.integers(0, 1024, 4096)
    return x, w, b, y


def bench_memory(torch, repeats: int) -> dict:
    arrays = _inputs(np.random.default_rng(0))
    twork = _workloads(torch.nn.functional) if torch else {}
    ne = _numexpr()
    return {name: _memory_case(fn, twork.get(name), arrays, torch, repeats,
                               ne and _NUMEXPR.get(name) and (ne, _NUMEXPR[name]))
            for name, fn in _workloads(F).items()}


def _memory_case(fn, tfn, arrays, torch, repeats: int, numexpr=None) -> dict:
    x, w, b, y = arrays
    gx, gw, gb, gy = (gg.tensor(a) for a in arrays)
    gxr = gg.tensor(x, requires_grad=True)
    cfn = gg.compile(fn)

    def fwd(f=fn):
        with gg.no_grad():
            return f(gx, gw, gb, gy)

    def bwd(f=fn):
        f(gxr, gw, gb, gy).sum().backward()
    fns = {"eager_fwd": fwd, "compiled_fwd": lambda: fwd(cfn), "eager_fwd_bwd": bwd,
           "compiled_fwd_bwd": lambda: bwd(cfn)}
    if torch is not None:
        tx, tw, tb, ty = (torch.from_numpy(a) for a in arrays)
        txr = torch.from_numpy(x.copy()).requires_grad_()
        tc = torch.compile(tfn)

        def tfwd():
            with torch.no_grad():
                return tc(tx, tw, tb, ty)
        fns.update(torch_compile_fwd=tfwd,
                   torch_compile_fwd_bwd=lambda: tc(txr, tw, tb, ty).sum().backward())
    if numexpr:
        ne, expr = numexpr
        names = dict(_NUMEXPR_CONSTANTS, x=x)
        fns["numexpr_fwd"] = lambda: ne.evaluate(expr, local_dict=names)
        assert fns["numexpr_fwd"]().dtype == x.dtype
        want = fwd(cfn).numpy()
        # numexpr computes in its own order (tanh, constants): close, not bit-equal
        assert np.allclose(fns["numexpr_fwd"](), want, rtol=1e-4, atol=1e-5)
    ms = _time(fns, repeats, 0.2)
    r = {"ms": ms,
         "eager_over_compiled_fwd": round(ms["eager_fwd"] / ms["compiled_fwd"], 3),
         "eager_over_compiled_fwd_bwd": round(ms["eager_fwd_bwd"] / ms["compiled_fwd_bwd"], 3)}
    if torch is not None:
        r["compiled_over_torch_compile_fwd"] = round(ms["compiled_fwd"]
                                                     / ms["torch_compile_fwd"], 3)
        r["compiled_over_torch_compile_fwd_bwd"] = round(ms["compiled_fwd_bwd"]
                                                         / ms["torch_compile_fwd_bwd"], 3)
    if numexpr:
        r["compiled_over_numexpr_fwd"] = round(ms["compiled_fwd"] / ms["numexpr_fwd"], 3)
    return r


def bench_mlp(repeats: int) -> dict:
    sys.path.insert(0, str(HERE))
    import mlp_train
    ms = _time({"numpy": mlp_train.numpy_step_fn(), "graphgrad_eager":
                mlp_train.graphgrad_step_fn(), "graphgrad_compiled":
                mlp_train.graphgrad_step_fn(compiled=True)}, repeats, 0.1)
    ratio = round(ms["graphgrad_compiled"] / ms["numpy"], 3)
    return {"ms": ms, "compiled_over_numpy": ratio, "eager_over_numpy":
            round(ms["graphgrad_eager"] / ms["numpy"], 3), "target_met": ratio <= 1.05}


_PARTS = ("chain200", "memory_bound_4096x1024", "mlp_train", "latency")

_LATENCY = """
import time
t0 = time.perf_counter()
import graphgrad as gg
t1 = time.perf_counter()
f = gg.compile(lambda x: (((x * 1.5 + 0.5).relu() * x - 0.25) / (x * x + 1.0)).abs() + x)
x = gg.randn(256, 256)
with gg.no_grad():
    t2 = time.perf_counter(); f(x); t3 = time.perf_counter(); f(x); t4 = time.perf_counter()
from graphgrad.backends import fused
print(t1 - t0, t3 - t2, t4 - t3, [k.lowering for k in fused.kernel_cache.values()])
"""


def bench_latency() -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GRAPHGRAD_KERNEL_CACHE=cache)
        for run in ("first_process", "second_process"):
            res = subprocess.run([sys.executable, "-c", _LATENCY], env=env, text=True,
                                 capture_output=True, check=True)
            imp, first, second, lowering = res.stdout.strip().split(" ", 3)
            out[run] = {"import_s": round(float(imp), 3), "first_call_s": round(float(first), 3),
                        "second_call_ms": round(float(second) * 1e3, 3), "lowering": lowering}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--only", default=",".join(_PARTS),
                    help=f"comma-separated parts to run, of {', '.join(_PARTS)}")
    args = ap.parse_args(argv)
    only = args.only.split(",")
    if unknown := [p for p in only if p not in _PARTS]:
        ap.error(f"--only: unknown parts {unknown}; choose from {', '.join(_PARTS)}")
    repeats = 3 if args.quick else 7
    torch = None if args.no_torch else _torch()
    ne = _numexpr()
    result = {"bench": "compile_fusion", "jax": "not installed",
              "numexpr": getattr(ne, "__version__", "not installed"),
              "torch": getattr(torch, "__version__", None),
              "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
    parts = {"chain200": lambda: bench_chain(torch, repeats),
             "memory_bound_4096x1024": lambda: bench_memory(torch, repeats),
             "mlp_train": lambda: bench_mlp(repeats), "latency": bench_latency}
    result.update({name: run() for name, run in parts.items() if name in only})
    result["uptime_after"] = subprocess.run(["uptime"], capture_output=True,
                                            text=True).stdout.strip()
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
