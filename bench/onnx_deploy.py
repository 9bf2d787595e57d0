"""What deploying through ONNX buys: the digits CNN (``graphgrad.train.make_model("cnn")``)
exported with ``graphgrad.onnx.export`` (export time, file size) and run in onnxruntime,
against graphgrad eager and ``graphgrad.compile``d inference, at batch 1 and 256, all
single-threaded (onnxruntime with one intra-op thread), samples interleaved.

Every timed call is checked to give the same output first. Prints one JSON object with
``uptime``'s load average before and after; ``--quick`` gives a short, noisy run.
"""

from __future__ import annotations

from timing import THREAD_VARS as _THREAD_VARS  # first: one BLAS thread
from timing import time_interleaved

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import graphgrad as gg  # noqa: E402
from graphgrad.train import make_model  # noqa: E402

assert _THREAD_VARS


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unavailable"


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    import onnx
    import onnxruntime as ort

    load_before = _uptime()
    gg.manual_seed(0)
    model = make_model("cnn").eval()
    path = os.path.join(tempfile.mkdtemp(), "digits_cnn.onnx")
    t0 = time.perf_counter()
    gg.onnx.export(model, (gg.randn(2, 64),), path, input_names=["x"],
                   output_names=["logits"],
                   dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    export_s = time.perf_counter() - t0
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    compiled = gg.compile(model)

    results = {}
    repeats, min_s = (3, 0.05) if args.quick else (15, 0.2)
    for batch in (1, 256):
        x = np.random.default_rng(batch).standard_normal((batch, 64)).astype(np.float32)
        xt = gg.tensor(x)

        def eager(xt=xt):
            with gg.no_grad():
                return model(xt)

        def comp(xt=xt):
            with gg.no_grad():
                return compiled(xt)

        def onnxrt(x=x):
            return session.run(None, {"x": x})[0]

        want = eager().numpy()
        np.testing.assert_allclose(comp().numpy(), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(onnxrt(), want, rtol=1e-5, atol=1e-5)
        times = time_interleaved({"graphgrad_eager": eager, "graphgrad_compiled": comp,
                                  "onnxruntime": onnxrt}, repeats, 3, min_s)
        eager_ms = times["graphgrad_eager"]["median_ms"]
        results[f"batch_{batch}"] = {
            **times,
            "eager_over_onnxruntime": eager_ms / times["onnxruntime"]["median_ms"],
            "compiled_over_onnxruntime": times["graphgrad_compiled"]["median_ms"]
            / times["onnxruntime"]["median_ms"],
        }
    report = {
        "benchmark": "onnx_deploy", "model": "digits CNN (graphgrad.train.make_model('cnn'))",
        "export_s": export_s, "onnx_bytes": os.path.getsize(path),
        "onnx_nodes": len(onnx.load(path).graph.node),
        "results": results, "quick": args.quick,
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "onnxruntime": ort.__version__},
        "uptime_before": load_before, "uptime_after": _uptime(),
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
