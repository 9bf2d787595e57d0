"""Layer ``train`` (above nn, optim, utils; below cli): the main job, training a classifier
on scikit-learn's 8x8 digits (1797 images that ship with scikit-learn: no download)
with a held-out test split. ``graphgrad train`` runs ``train_digits``.

Optional extras: scikit-learn (the data), tqdm (progress bar), matplotlib (loss curve).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from graphgrad import nn, optim
from graphgrad.autograd import no_grad
from graphgrad.serialization import save
from graphgrad.tensor import Generator, manual_seed, tensor
from graphgrad.utils.data import DataLoader, DistributedSampler, TensorDataset
from graphgrad.utils.progress import progress_bar

__all__ = ["train_digits", "load_digits_split", "make_model", "DEFAULTS"]

# The defaults: the MLP reaches >= 0.95 test accuracy in a few seconds on 2 cores.
DEFAULTS = {"model": "mlp", "epochs": 20, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
            "seed": 0, "out_dir": "out/digits"}


def load_digits_split(seed: int = 0, test_fraction: float = 0.2):
    """(x_train, y_train, x_test, y_test) as float32 images in [0, 1] of shape (N, 64) and
    int64 labels; the split is a seeded permutation, stratified by class."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise ImportError("graphgrad train needs scikit-learn for the digits data: "
                          "pip install 'graphgrad[digits]' (or scikit-learn)") from e
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test = []
    for c in range(10):  # the same share of every class in the test set
        idx = rng.permutation(np.flatnonzero(y == c))
        test.extend(idx[:round(len(idx) * test_fraction)].tolist())
    is_test = np.zeros(len(y), bool)
    is_test[test] = True
    return x[~is_test], y[~is_test], x[is_test], y[is_test]


def make_model(kind: str) -> nn.Module:
    """``mlp``: 64-256-256-10 with ReLU; ``cnn``: two 3x3 conv + 2x2 max-pool blocks."""
    if kind == "mlp":
        return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    if kind == "cnn":
        return nn.Sequential(
            nn.Unflatten(1, (1, 8, 8)),
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 16 x 4 x 4
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32 x 2 x 2
            nn.Flatten(), nn.Linear(128, 10))
    raise ValueError(f"unknown model {kind!r}: choose 'mlp' or 'cnn'")


def _make_optimizer(name: str, params, lr: float) -> optim.Optimizer:
    if name == "sgd":
        return optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return optim.Adam(params, lr=lr)
    if name == "adamw":
        return optim.AdamW(params, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}: choose 'sgd', 'adam' or 'adamw'")


def _accuracy(model: nn.Module, x, y, batch: int = 512) -> float:
    model.eval()
    correct = 0
    with no_grad():
        for i in range(0, x.shape[0], batch):
            logits = model(x[i:i + batch])
            correct += int((logits.argmax(dim=1) == y[i:i + batch]).sum())
    model.train()
    return correct / x.shape[0]


def _plot(history: dict, path: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(history["step_loss"], lw=0.8, label="train loss (per step)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross entropy")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _one_blas_thread():
    """Matrices this small run fastest on one BLAS thread; several threads per process
    oversubscribe the cores (threadpoolctl comes with scikit-learn)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        from contextlib import nullcontext
        return nullcontext()
    return threadpool_limits(1)


def train_digits(model: str = "mlp", epochs: int = 20, batch_size: int = 64, lr: float = 1e-3,
                 optimizer: str = "adam", seed: int = 0, quiet: bool = False,
                 out_dir: str | Path = "out/digits", plot: bool = True,
                 compile: bool = False,  # noqa: A002 - the CLI's name
                 distributed: bool = False) -> dict[str, Any]:
    """Train ``model`` ("mlp" or "cnn") on the digits; print the test accuracy, the mean
    step time and the checkpoint path; return them (and the history) in a dict. With
    ``compile`` the model's forward runs through ``graphgrad.compile`` (bytecode capture;
    the backward pass is the captured graph's, by graph extension). With ``distributed``
    (in every rank of an MPI job: ``graphgrad train --nproc N``) the model is wrapped in
    DistributedDataParallel and each rank takes ``batch_size / N`` of every batch through
    a DistributedSampler, so the steps are those of one process; rank 0 prints and saves."""
    with _one_blas_thread():
        return _train(model, epochs, batch_size, lr, optimizer, seed, quiet, out_dir, plot,
                      compile, distributed)


def _train(model: str, epochs: int, batch_size: int, lr: float, optimizer: str, seed: int,
           quiet: bool, out_dir: str | Path, plot: bool, compiled: bool,
           distributed: bool = False) -> dict[str, Any]:
    rank = 0
    if distributed:
        from graphgrad import distributed as dist
        from graphgrad.nn.parallel import DistributedDataParallel
        if not dist.is_initialized():
            dist.init_process_group("mpi")
        rank, world = dist.get_rank(), dist.get_world_size()
        if batch_size % world:
            raise ValueError(f"--batch-size {batch_size} is not divisible by --nproc {world}")
        quiet, plot = quiet or rank != 0, plot and rank == 0
    manual_seed(seed)
    xtr, ytr, xte, yte = load_digits_split(seed)
    x_train, y_train = tensor(xtr), tensor(ytr)
    x_test, y_test = tensor(xte), tensor(yte)
    net = make_model(model)
    forward = net
    if compiled:
        from graphgrad import compiler  # loaded only when asked
        from graphgrad.dynamo import compile as capture_bytecode
        compiler.reset()   # zero the counters: the report below is this run's
        forward = capture_bytecode(net)
    opt = _make_optimizer(optimizer, net.parameters(), lr)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=batch_size, shuffle=True,
                        generator=Generator().manual_seed(seed))
    if distributed:
        if compiled:
            raise ValueError("--compile and --nproc together are not supported yet")
        forward = DistributedDataParallel(net)
        sampler = DistributedSampler(loader.dataset, seed=seed)
        loader = DataLoader(loader.dataset, batch_size=batch_size // world, sampler=sampler)

    bar = progress_bar(epochs * len(loader), disable=quiet, unit="step", leave=True)
    history: dict[str, list] = {"step_loss": [], "epoch_loss": [], "test_accuracy": []}
    step_times: list[float] = []
    start = time.perf_counter()
    for epoch in range(epochs):
        bar.set_description(f"epoch {epoch + 1}/{epochs}")
        if distributed:
            sampler.set_epoch(epoch)
        total, seen, correct = 0.0, 0, 0
        for xb, yb in loader:
            t0 = time.perf_counter()
            logits = forward(xb)
            loss = loss_fn(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step_times.append(time.perf_counter() - t0)
            value = float(loss)
            history["step_loss"].append(value)
            total += value * xb.shape[0]
            seen += xb.shape[0]
            correct += int((logits.detach().argmax(dim=1) == yb).sum())
            bar.update(1)
            bar.set_postfix(loss=f"{total / seen:.4f}", acc=f"{correct / seen:.3f}")
        history["epoch_loss"].append(total / seen)
        history["test_accuracy"].append(_accuracy(net, x_test, y_test))
    bar.close()
    seconds = time.perf_counter() - start

    test_acc = history["test_accuracy"][-1] if epochs else _accuracy(net, x_test, y_test)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / f"digits_{model}.npz"
    config = {"model": model, "epochs": epochs, "batch_size": batch_size, "lr": lr,
              "optimizer": optimizer, "seed": seed, "compile": compiled}
    if rank == 0:
        save({"model": net.state_dict(), "optimizer": opt.state_dict(), "config": config,
              "test_accuracy": test_acc}, checkpoint)
    if distributed:
        dist.barrier()  # the others wait until rank 0 has written the checkpoint
        config["nproc"] = world
        if rank != 0:
            return {**config, "test_accuracy": test_acc, "step_time_ms": 1000 * float(
                np.mean(step_times)) if step_times else float("nan"), "seconds": seconds}
    plot_path = _plot(history, out / f"digits_{model}_loss.png") if plot and epochs else None
    step_ms = 1000 * float(np.mean(step_times)) if step_times else float("nan")

    print(f"test accuracy: {test_acc:.4f} ({len(yte)} held-out digits, {model}, {optimizer}, "
          f"{epochs} epoch{'' if epochs == 1 else 's'}{', compiled' if compiled else ''})")
    print(f"mean step time: {step_ms:.3f} ms (batch {batch_size}); total {seconds:.1f} s")
    print(f"checkpoint: {checkpoint}")
    if plot_path is not None:
        print(f"loss curve: {plot_path}")
    counters = _compile_report() if compiled else None
    return {**config, "test_accuracy": test_acc, "train_loss": history["epoch_loss"][-1]
            if epochs else float("nan"), "step_time_ms": step_ms, "seconds": seconds,
            "checkpoint": str(checkpoint), "plot": str(plot_path) if plot_path else None,
            "history": history, "compile_counters": counters}


def _compile_report() -> dict[str, int]:
    """Print what graphgrad.compile did in this run (``graphgrad.compiler.counters``)."""
    from graphgrad.compiler import counters
    c = dict(counters)

    def n(key: str, word: str) -> str:
        return f"{c.get(key, 0)} {word}{'' if c.get(key, 0) == 1 else 's'}"

    print(f"graphgrad.compile: {n('graphs', 'graph')} ({n('ops', 'op')}), "
          f"{n('graph_breaks', 'graph break')}, {n('recompiles', 'recompile')}; "
          f"{c.get('cache_hits', 0)} of {n('calls', 'call')} served by cached graphs"
          + (f"; {n('eager_fallbacks', 'call')} ran eagerly" if c.get("eager_fallbacks")
             else ""))
    return c
