"""MAML on sinusoid regression: gradients through a gradient step.

What it shows: model-agnostic meta-learning (Finn, Abbeel & Levine, ICML 2017) needs
the derivative of a loss taken *after* a gradient step,

    theta' = theta - alpha * grad_theta L_support(theta)
    meta-loss = L_query(theta'),   d meta-loss / d theta = (I - alpha H) grad L_query(theta'),

so the meta-gradient contains the Hessian of the inner loss. graphgrad computes it by
extending the graph: the inner gradient is taken with
``graphgrad.autograd.grad(..., create_graph=True)``, so it is itself a graph that the
outer ``backward()`` differentiates. The network is a plain function of a list of
parameter tensors (``mlp(params, x)``), so the adapted parameters theta' are ordinary
tensors in the graph. The first-order variant (FOMAML, ``--stop_grad`` in Finn's code)
takes the inner gradient without ``create_graph`` and drops the Hessian term.

All tasks of a meta-batch run at once: the parameters are expanded to one copy per task
(``p.expand(T, ...)``), the per-task losses are summed, and the gradient with respect
to the expanded copies is each task's own gradient, so the inner step is one batched
graph rather than a Python loop over tasks.

Setup (Finn et al. 2017, section 5.1, and their code, cbfinn/maml): a task is
y = A sin(x - phi) with amplitude A in [0.1, 5], phase phi in [0, pi], x in [-5, 5];
K = 10 support and K query points per task; a 1-40-40-1 ReLU MLP; MSE loss; one inner
SGD step with alpha = 0.01; 25 tasks per meta-batch; Adam with lr 1e-3 for the
meta-update (Finn trains 70,000 iterations). The baseline is the same network
pre-trained on all tasks jointly (same number of iterations and tasks, Adam), then
fine-tuned on each new task by the same SGD steps. Evaluation: new tasks, K support
points to adapt, 100 query points to measure, mean MSE with a 95% interval.

Defaults differ from Finn in two places, to learn in minutes on NumPy: PyTorch's
``nn.Linear`` initialisation instead of truncated-normal(0.01) weights (``--init
finn`` restores it), and fewer iterations (``--iters``).

    python examples/maml_sinusoid.py                       # 3000 iterations
    python examples/maml_sinusoid.py --iters 70000 --init finn
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

import graphgrad
from graphgrad.utils.progress import progress_bar

DTYPE = np.float32
LAYERS = ((1, 40), (40, 40), (40, 1))  # (in, out) of each linear layer


# ---- tasks and the functional network ------------------------------------------------

def sample_tasks(rng, n_tasks: int, k_support: int, k_query: int):
    """Sinusoid tasks: support and query sets as (n_tasks, k, 1) tensors, plus the
    amplitudes and phases."""
    amp = rng.uniform(0.1, 5.0, (n_tasks, 1, 1))
    phase = rng.uniform(0.0, math.pi, (n_tasks, 1, 1))
    x = rng.uniform(-5.0, 5.0, (n_tasks, k_support + k_query, 1))
    y = amp * np.sin(x - phase)

    def t(a):
        return graphgrad.tensor(a.astype(DTYPE))

    return (t(x[:, :k_support]), t(y[:, :k_support]), t(x[:, k_support:]),
            t(y[:, k_support:]), amp.ravel(), phase.ravel())


def init_params(rng, kind: str) -> list:
    """[W1, b1, W2, b2, W3, b3] with W of shape (out, in), as nn.Linear stores it.
    kind "torch": nn.Linear's default, U(-1/sqrt(in), 1/sqrt(in)) for W and b;
    kind "finn": truncated normal, std 0.01, for W and zero b (Finn's code)."""
    params = []
    for fan_in, fan_out in LAYERS:
        if kind == "finn":
            w = np.clip(rng.normal(0.0, 0.01, (fan_out, fan_in)), -0.02, 0.02)
            b = np.zeros(fan_out)
        else:
            bound = 1.0 / math.sqrt(fan_in)
            w = rng.uniform(-bound, bound, (fan_out, fan_in))
            b = rng.uniform(-bound, bound, fan_out)
        params += [graphgrad.tensor(w.astype(DTYPE), requires_grad=True),
                   graphgrad.tensor(b.astype(DTYPE), requires_grad=True)]
    return params


def mlp(params, x):
    """The 1-40-40-1 ReLU network as a function of its parameters. x is (T, k, 1);
    each parameter is either shared, W (out, in), or one per task, W (T, out, in):
    matmul broadcasts either way."""
    n_layers = len(params) // 2
    for i in range(n_layers):
        w, b = params[2 * i], params[2 * i + 1]
        x = x @ w.transpose(-1, -2) + b.unsqueeze(-2)
        if i < n_layers - 1:
            x = graphgrad.relu(x)
    return x


def task_losses(params, x, y):
    """MSE of every task: shape (T,)."""
    return ((mlp(params, x) - y) ** 2).mean(dim=(1, 2))


def inner_step(fast, xs, ys, inner_lr: float, create_graph: bool) -> list:
    """One SGD step of every task on its support set; fast holds one parameter copy
    per task (leading dimension T). The gradient of the *sum* of task losses with
    respect to the copies is, copy by copy, each task's own gradient."""
    loss = task_losses(fast, xs, ys).sum()
    grads = graphgrad.autograd.grad(loss, fast, create_graph=create_graph, retain_graph=True)
    return [w - inner_lr * g for w, g in zip(fast, grads, strict=True)]


def adapt(params, xs, ys, inner_lr: float, steps: int, create_graph: bool) -> list:
    """Per-task SGD on the support sets, starting from the shared params expanded to
    one copy per task. create_graph=True keeps the result differentiable with respect
    to params *through the gradient itself* (second-order MAML); False treats the
    inner gradient as a constant (first-order MAML)."""
    n_tasks = xs.shape[0]
    fast = [p.expand(n_tasks, *p.shape) for p in params]
    for _ in range(steps):
        fast = inner_step(fast, xs, ys, inner_lr, create_graph)
    return fast


# ---- training ------------------------------------------------------------------------

def train(method: str, args) -> tuple[list, list, float]:
    """Train with "maml" (second order), "fomaml" (first order) or "pretrained" (joint
    regression on all tasks). Every method sees the same task stream (same seed).
    Returns (parameters, loss per iteration, CPU seconds per iteration)."""
    from graphgrad.optim import Adam

    rng = np.random.default_rng(args.seed)
    params = init_params(rng, args.init)
    opt = Adam(params, lr=args.meta_lr)
    losses = []
    bar = progress_bar(args.iters, method, disable=args.quiet, leave=False)
    start = time.process_time()
    for it in range(args.iters):
        xs, ys, xq, yq, _, _ = sample_tasks(rng, args.meta_batch, args.k, args.k)
        if method == "pretrained":
            x, y = graphgrad.cat([xs, xq], dim=1), graphgrad.cat([ys, yq], dim=1)
            loss = task_losses(params, x, y).mean()
        else:
            fast = adapt(params, xs, ys, args.inner_lr, 1, create_graph=method == "maml")
            loss = task_losses(fast, xq, yq).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
        bar.update(1)
        if it % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
    bar.close()
    return params, losses, (time.process_time() - start) / max(1, args.iters)


def evaluate(params, test_tasks, inner_lr: float, max_steps: int) -> dict:
    """Mean query MSE (and 95% interval) after 0..max_steps SGD steps on the support
    set of each test task."""
    xs, ys, xq, yq, _, _ = test_tasks
    base = [p.detach().requires_grad_(True) for p in params]
    fast = [p.expand(xs.shape[0], *p.shape) for p in base]
    means, cis = [], []
    for steps in range(max_steps + 1):
        if steps:
            fast = inner_step(fast, xs, ys, inner_lr, create_graph=False)
            fast = [w.detach().requires_grad_(True) for w in fast]  # keep graphs short
        with graphgrad.no_grad():
            mse = task_losses(fast, xq, yq).numpy()
        means.append(float(mse.mean()))
        cis.append(float(1.96 * mse.std() / math.sqrt(len(mse))))
    return {"mse": means, "ci95": cis}


# ---- plots ---------------------------------------------------------------------------

def plot(results: dict, trained: dict, args, out: str) -> list[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    os.makedirs(out, exist_ok=True)
    colors = {"maml": "tab:red", "fomaml": "tab:orange", "pretrained": "tab:blue"}
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.2))
    window = max(1, args.iters // 50)
    for method, (_, losses, _) in trained.items():
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
        ax1.plot(smooth, color=colors[method], label=method)
    ax1.set(xlabel="iteration", ylabel="training loss (query MSE / joint MSE)",
            yscale="log", title="meta-training")
    ax1.legend()
    for method, r in results.items():
        steps = np.arange(len(r["mse"]))
        ax2.errorbar(steps, r["mse"], yerr=r["ci95"], color=colors[method], marker="o",
                     ms=3, capsize=2, label=method)
    ax2.set(xlabel="SGD steps on the K support points", ylabel="query MSE on new tasks",
            title=f"adaptation, K = {args.k}")
    ax2.legend()

    # one new task, as in Finn et al. Fig. 2
    rng = np.random.default_rng(args.seed + 7)
    task = sample_tasks(rng, 1, args.k, 0)
    xs, ys, _, _, amp, phase = task
    grid = np.linspace(-5, 5, 200, dtype=DTYPE).reshape(1, 200, 1)
    ax3.plot(grid.ravel(), amp[0] * np.sin(grid.ravel() - phase[0]), "k-", lw=2.5,
             alpha=0.4, label="ground truth")
    ax3.plot(xs.numpy().ravel(), ys.numpy().ravel(), "k^", label=f"{args.k} support points")
    for method in ("maml", "pretrained"):
        if method not in trained:
            continue
        base = [p.detach().requires_grad_(True) for p in trained[method][0]]
        for steps, style in ((0, ":"), (1, "-"), (10, "--")):
            fast = adapt(base, xs, ys, args.inner_lr, steps, False) if steps else base
            with graphgrad.no_grad():
                pred = mlp(fast, graphgrad.tensor(grid)).numpy().ravel()
            ax3.plot(grid.ravel(), pred, style, color=colors[method],
                     label=f"{method}, {steps} step{'s' if steps != 1 else ''}")
    ax3.set(xlabel="x", title="a new task")
    ax3.legend(fontsize=7)
    path = os.path.join(out, "maml_sinusoid.png")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return [path]


# ---- command line --------------------------------------------------------------------

def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=3000,
                        help="meta-training iterations (Finn et al.: 70000)")
    parser.add_argument("--meta-batch", type=int, default=25, help="tasks per iteration")
    parser.add_argument("--k", type=int, default=10, help="support (and query) points")
    parser.add_argument("--inner-lr", type=float, default=0.01)
    parser.add_argument("--meta-lr", type=float, default=1e-3, help="Adam learning rate")
    parser.add_argument("--init", choices=("torch", "finn"), default="torch")
    parser.add_argument("--methods", default="maml,fomaml,pretrained",
                        help="comma-separated subset of maml,fomaml,pretrained")
    parser.add_argument("--test-tasks", type=int, default=600)
    parser.add_argument("--test-points", type=int, default=100)
    parser.add_argument("--test-steps", type=int, default=10, choices=range(1, 101),
                        metavar="N",
                        help="report MSE after 0..test-steps adaptation steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="out/maml_sinusoid", help="folder for PNG plots")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in ("maml", "fomaml", "pretrained"):
            parser.error(f"unknown method {m!r}")

    test_tasks = sample_tasks(np.random.default_rng(10_000 + args.seed), args.test_tasks,
                              args.k, args.test_points)
    trained, results = {}, {}
    for method in methods:
        trained[method] = train(method, args)
        results[method] = evaluate(trained[method][0], test_tasks, args.inner_lr,
                                   args.test_steps)

    print(f"sinusoid regression, K = {args.k}, {args.iters} iterations x {args.meta_batch} "
          f"tasks, inner lr {args.inner_lr}, Adam {args.meta_lr}, init {args.init}; "
          f"{args.test_tasks} new tasks x {args.test_points} query points")
    last = args.test_steps
    extra = f" {last:>7d} steps" if last > 1 else ""
    print(f"{'method':12s} {'0 steps':>8s} {'1 step':>16s}{extra} {'cpu ms/it':>9s}")
    for method in methods:
        r = results[method]
        extra = f" {r['mse'][last]:8.3f}     " if last > 1 else ""
        print(f"{method:12s} {r['mse'][0]:8.3f} {r['mse'][1]:8.3f} +- {r['ci95'][1]:.3f}"
              f"{extra} {1e3 * trained[method][2]:9.1f}")
    if "pretrained" in results:
        for method in ("maml", "fomaml"):
            if method in results:
                ratio = results["pretrained"]["mse"][1] / results[method]["mse"][1]
                print(f"after one step, {method} MSE is {ratio:.1f}x lower than pretrained")

    plots = [] if args.no_plot else plot(results, trained, args, args.out)
    for p in plots:
        print(f"wrote {p}")
    summary = {"plots": plots}
    for method in methods:
        summary[f"{method}_mse"] = results[method]["mse"][1]
        summary[f"{method}_mse_steps"] = results[method]["mse"]
        summary[f"{method}_ci95"] = results[method]["ci95"][1]
        summary[f"{method}_ms_per_iter"] = 1e3 * trained[method][2]
    return summary


if __name__ == "__main__":
    main()
