"""Training steps of the models where a CPU framework spends its time, graphgrad eager
against PyTorch eager in the same run, one BLAS thread each, same initial weights and
data (the first losses are compared): a CNN on 28x28 (two Conv2d+ReLU+MaxPool, Linear,
batch 64), an LSTM (hidden 128, seq 50, batch 32), a GRU language model, a Transformer
encoder (2 layers, d_model 64, 4 heads, seq 32, batch 16) and ``conv_transpose2d``
forward+backward (4,16,56,56) -> (4,64,115,115). Prints one JSON object: per-step
times, the ratio of the fastest samples (graphgrad / torch), the ratio of the median CPU
times (steadier on a shared machine) and the peak memory of one step.

Peak memory is measured the same way for both frameworks, in a fresh child process per
model and framework: after one warm-up step the kernel's peak-RSS counter is reset
(``/proc/self/clear_refs``), one step runs, and the step's memory is the peak RSS minus
the RSS before it. glibc's malloc is told to map every large block on its own
(``MALLOC_MMAP_THRESHOLD_``) so that freed arrays leave the RSS at once and a reused
heap does not hide a step's allocations. For graphgrad the tracemalloc peak (NumPy
reports its arrays to it) is given as well.

    python bench/models.py [--repeats 5] [--models cnn,lstm,gru,transformer,conv_transpose2d]
                           [--no-memory]
"""

from __future__ import annotations

import timing  # noqa: F401 (first: one BLAS thread, set before NumPy loads BLAS)

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

MODELS = ("cnn", "lstm", "gru", "transformer", "conv_transpose2d")


def _cnn(nn):
    return nn.Sequential(nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 5 * 5, 10))


class _Heads:
    """Builds the recurrent and attention models of either framework (``m`` is the
    top-level module, graphgrad or torch)."""

    @staticmethod
    def lstm(m):
        class Net(m.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = m.nn.LSTM(64, 128, batch_first=True)
                self.head = m.nn.Linear(128, 10)

            def forward(self, x):
                out, _ = self.rnn(x)
                return self.head(out[:, -1])
        return Net()

    @staticmethod
    def gru(m):
        class Net(m.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = m.nn.Embedding(1000, 64)
                self.rnn = m.nn.GRU(64, 128, batch_first=True)
                self.head = m.nn.Linear(128, 1000)

            def forward(self, tokens):
                out, _ = self.rnn(self.embed(tokens))
                return self.head(out.reshape(-1, 128))
        return Net()

    @staticmethod
    def transformer(m):
        class Net(m.nn.Module):
            def __init__(self):
                super().__init__()
                layer = m.nn.TransformerEncoderLayer(64, 4, dim_feedforward=256, dropout=0.0,
                                                     batch_first=True)
                self.encoder = m.nn.TransformerEncoder(layer, 2)
                self.head = m.nn.Linear(64, 10)

            def forward(self, x):
                return self.head(self.encoder(x).mean(dim=1))
        return Net()


def _data(name: str):
    rng = np.random.default_rng(0)
    if name == "cnn":
        return rng.standard_normal((64, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 64)
    if name == "lstm":
        return rng.standard_normal((32, 50, 64)).astype(np.float32), rng.integers(0, 10, 32)
    if name == "gru":
        tokens = rng.integers(0, 1000, (32, 51))
        return tokens[:, :-1].copy(), tokens[:, 1:].reshape(-1).copy()
    if name == "transformer":
        return rng.standard_normal((16, 32, 64)).astype(np.float32), rng.integers(0, 10, 16)
    x = rng.standard_normal((4, 16, 56, 56)).astype(np.float32)
    w = (rng.standard_normal((16, 64, 5, 5)) * 0.05).astype(np.float32)
    return x, w


def make_step(name: str, framework: str):
    """A training step (forward, loss, backward, SGD update) of model ``name`` in
    ``framework``; returns (step, first loss). Both frameworks start from torch's
    initial weights (seed 0)."""
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if framework == "torch":
        m = torch
    else:
        import graphgrad as m
    a, b = _data(name)
    if name == "conv_transpose2d":
        x = m.tensor(a, requires_grad=True)
        w = m.tensor(b, requires_grad=True)

        def step():
            x.grad = w.grad = None
            out = m.nn.functional.conv_transpose2d(x, w, stride=2)
            loss = (out * out).mean()
            loss.backward()
            return float(loss)
        return step, step()
    torch_model = _cnn(torch.nn) if name == "cnn" else getattr(_Heads, name)(torch)
    if framework == "torch":
        model = torch_model
    else:
        model = _cnn(m.nn) if name == "cnn" else getattr(_Heads, name)(m)
        model.load_state_dict({k: m.tensor(v.detach().numpy())
                               for k, v in torch_model.state_dict().items()})
    inputs, target = m.tensor(a), m.tensor(b)
    opt = m.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = m.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss = loss_fn(model(inputs), target)
        loss.backward()
        opt.step()
        return float(loss)
    return step, step()


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory_child(name: str, framework: str) -> dict:
    """Run in a fresh process: the step's peak RSS growth (and tracemalloc's peak for
    graphgrad), after one warm-up step."""
    step, _ = make_step(name, framework)
    step()
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    before = _rss_kib("VmRSS")
    result = {}
    if framework == "graphgrad":
        import tracemalloc
        tracemalloc.start()
        step()
        result["tracemalloc_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        gc.collect()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _rss_kib("VmRSS")
    step()
    result["rss_peak_mib"] = (_rss_kib("VmHWM") - before) / 1024
    return result


def _memory(name: str, framework: str) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    out = subprocess.run([sys.executable, __file__, "--memory-child", name, framework],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--memory-child", nargs=2, metavar=("MODEL", "FRAMEWORK"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(*args.memory_child)))
        return
    import torch
    torch.set_num_threads(1)
    report = {"python": platform.python_version(), "numpy": np.__version__,
              "torch": torch.__version__, "load_average": os.getloadavg(), "models": {}}
    for name in args.models.split(","):
        gg_step, gg_loss = make_step(name, "graphgrad")
        t_step, t_loss = make_step(name, "torch")
        slow = name == "conv_transpose2d"
        times = timing.time_interleaved({"graphgrad": gg_step, "torch": t_step},
                                        repeats=max(2, args.repeats // 2) if slow
                                        else args.repeats,
                                        warmup=1, min_s=0.0 if slow else 0.3,
                                        between=gc.collect)
        entry = {"first_loss": {"graphgrad": gg_loss, "torch": t_loss},
                 "step_ms": {k: round(v["min_ms"], 3) for k, v in times.items()},
                 "median_ms": {k: round(v["median_ms"], 3) for k, v in times.items()},
                 "ratio_min": round(times["graphgrad"]["min_ms"] / times["torch"]["min_ms"], 3),
                 # CPU time leaves out waiting for a core: the figure a busy machine keeps
                 "cpu_median_ms": {k: round(v["cpu_median_ms"], 3) for k, v in times.items()},
                 "ratio_cpu_median": round(times["graphgrad"]["cpu_median_ms"]
                                           / times["torch"]["cpu_median_ms"], 3)}
        if not args.no_memory:
            mem = {fw: _memory(name, fw) for fw in ("graphgrad", "torch")}
            entry["memory_mib"] = mem
            entry["memory_ratio_rss"] = round(
                mem["graphgrad"]["rss_peak_mib"] / max(mem["torch"]["rss_peak_mib"], 1e-3), 3)
        report["models"][name] = entry
        print(json.dumps({name: entry}), file=sys.stderr, flush=True)
    report["load_average_after"] = os.getloadavg()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
