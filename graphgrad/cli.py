"""Layer ``cli``: the ``graphgrad`` command (also ``python -m graphgrad``).

``graphgrad demo`` shows reverse mode by graph extension: derivatives of any order of
one function, checked against their closed forms, and how the graph grows with the
order (the lecture's cost blow-up of higher-order derivatives), beside Taylor mode
(``func.jet``), which gets every order from one forward pass.
"""

from __future__ import annotations

import argparse
import inspect
import math
import sys

__all__ = ["main"]

_DESCRIPTION = """\
graphgrad: a deep-learning framework on NumPy whose machinery is open to inspection.

Commands:
  train            train a digits classifier (MLP or CNN) with a progress bar; the main job
  demo             higher-order derivatives by graph extension and by Taylor mode (jet),
                   checked against closed forms
  numdiff study    error of finite differences and the complex step against the step size
                   (writes a CSV and a log-log plot)
  capture          capture one function every way graphgrad can (static, fx, jit.trace,
                   jit.script, compile) and tabulate what each did, checked against eager
  run              run an unmodified PyTorch program on graphgrad (import torch -> graphgrad)
  lecture          the lecture's topics in order; `graphgrad lecture TOPIC` demonstrates one

`graphgrad COMMAND --help` shows each command's options and their defaults.
"""


class _Help(argparse.RawDescriptionHelpFormatter):
    """Docstrings as written; every option's help ends with its default (a flag's is
    off; an option whose help names its default itself keeps its own wording)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=100)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or action.default is argparse.SUPPRESS or \
                not action.option_strings or action.dest == "help":
            return text
        if action.required:
            return text + " (required)"
        if action.default is None or action.default is False:
            return text + " (default: off)" if action.nargs == 0 else text + \
                " (default: none)"
        return text + " (default: %(default)s)"


def _count_nodes(t) -> int:
    from graphgrad.tensor.toposort import toposort
    return len(toposort([t])) if t.requires_grad else 0


def demo(args: argparse.Namespace) -> int:
    """d^k/dx^k of sin(x) * exp(x) for k = 1..order, each by differentiating the previous
    derivative's graph (nodes and time to build), and by one Taylor-mode pass
    (func.taylor_derivatives, the k-th coefficient of a jet), with the closed form
    2^(k/2) e^x sin(x + k pi/4)."""
    import time

    import graphgrad as gg

    x = gg.tensor(args.x, dtype=gg.float64, requires_grad=True)
    y = x.sin() * x.exp()
    start = time.perf_counter()
    by_jet = gg.func.taylor_derivatives(lambda t: t.sin() * t.exp(), x.detach(), 1.0,
                                        args.order)
    jet_ms = (time.perf_counter() - start) * 1e3
    print(f"f(x) = sin(x) * exp(x) at x = {args.x}")
    print(f"{'order':>5}  {'nested grad':>22}  {'nodes':>6}  {'ms':>7}  {'jet':>22}  "
          f"{'closed form':>22}  {'max error':>9}")
    d = y
    worst = 0.0
    built = 0.0
    for k in range(1, args.order + 1):
        start = time.perf_counter()
        (d,) = gg.autograd.grad(d, x, create_graph=True)
        built += time.perf_counter() - start
        exact = 2 ** (k / 2) * math.exp(args.x) * math.sin(args.x + k * math.pi / 4)
        jet_k = by_jet[k].item()
        err = max(abs(d.item() - exact), abs(jet_k - exact))
        worst = max(worst, err / max(1.0, abs(exact)))
        print(f"{k:>5}  {d.item():>22.15g}  {_count_nodes(d):>6}  {built * 1e3:>7.2f}  "
              f"{jet_k:>22.15g}  {exact:>22.15g}  {err:>9.1e}")
    print("Each nested derivative is a graphgrad graph built by the backward pass of the")
    print("previous one, so it can be differentiated again; nodes and ms (cumulative) show")
    print(f"the growth with the order. The jet column took {jet_ms:.2f} ms for all orders:")
    print("one forward pass carrying the Taylor coefficients (O(k^2) work per op).")
    if worst > 1e-10:
        print(f"error: relative error {worst:.2e} exceeds 1e-10", file=sys.stderr)
        return 1
    return 0


def numdiff_study(args: argparse.Namespace) -> int:
    """Relative error of forward, central and complex-step derivatives of
    f(x) = e^x / sqrt(sin(x)^3 + cos(x)^3) for steps 1e-1 ... 1e-20, against the exact
    derivative from reverse mode. Writes step_study.csv and step_study.png to --out."""
    from graphgrad.numdiff import run_study

    try:
        result = run_study(args.out, x=args.x, plot=not args.no_plot)
    except ImportError as e:
        print(f"error: {e} (or pass --no-plot)", file=sys.stderr)
        return 1
    print(f"exact f'({args.x}) = {result['exact']:.17g} (reverse-mode AD)")
    print(f"{'h':>8}  {'forward':>9}  {'central':>9}  {'complex step':>12}")
    for r in result["rows"]:
        print(f"{r['h']:>8.0e}  {r['forward']:>9.1e}  {r['central']:>9.1e}  "
              f"{r['complex_step']:>12.1e}")
    best = {k: min(result["rows"], key=lambda r, k=k: r[k]) for k in
            ("forward", "central", "complex_step")}
    for k, r in best.items():
        print(f"best {k}: error {r[k]:.1e} at h = {r['h']:.0e}")
    print(f"wrote {result['csv']}" + (f" and {result['png']}" if "png" in result else ""))
    return 0


def _launch_train(args: argparse.Namespace) -> int:
    """``graphgrad train --nproc N``: the same command as N MPI ranks."""
    from graphgrad.distributed.launch import launch
    cmd = [sys.executable, "-m", "graphgrad", "train", "--model", args.model, "--epochs",
           str(args.epochs), "--batch-size", str(args.batch_size), "--lr", str(args.lr),
           "--optimizer", args.optimizer, "--seed", str(args.seed), "--out", args.out,
           "--nproc", str(args.nproc)]
    cmd += [f"--{f.replace('_', '-')}" for f in ("compile", "quiet", "no_plot")
            if getattr(args, f)]
    # the ranks train instead of launching again
    return launch(args.nproc, cmd, prog="graphgrad train", extra_env={"GRAPHGRAD_TRAIN_RANK": "1"})


def train(args: argparse.Namespace) -> int:
    """Train a classifier on scikit-learn's 8x8 digits (held-out test split): progress bar
    with loss and accuracy, then the test accuracy, mean step time and checkpoint path.
    With --nproc N, data-parallel on N ranks through mpiexec (DistributedDataParallel)."""
    import os
    if args.nproc > 1 and not os.environ.get("GRAPHGRAD_TRAIN_RANK"):
        return _launch_train(args)
    try:
        from graphgrad.train import train_digits
        train_digits(model=args.model, epochs=args.epochs, batch_size=args.batch_size,
                     lr=args.lr, optimizer=args.optimizer, seed=args.seed, quiet=args.quiet,
                     out_dir=args.out, plot=not args.no_plot, compile=args.compile,
                     distributed=args.nproc > 1)
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def capture(args: argparse.Namespace) -> int:
    """Run FILE.py:FUNC eagerly and through each capture method (static placeholders,
    fx.symbolic_trace, jit.trace, jit.script, compile) on the --example inputs, and print
    a table of outcomes: captured / warned / error / silently wrong, each checked against
    eager on a second, different input (and for random functions, on a repeated call).
    FUNC may be an nn.Module instance: its buffers (BatchNorm's running statistics) are
    compared with eager's after one call, so a capture that drops their update is
    reported silently wrong. If FILE.py defines FUNC_static (FUNC written for the static
    API with static.cond / static.shape), its row "static (rewritten)" shows it working.
    --example and --second are Python expressions with gg, torch and np in scope.
    Example: graphgrad capture examples/lecture_capture.py:branch --example "gg.tensor(1.)"
    """
    import importlib.util
    from pathlib import Path

    import numpy as np

    import graphgrad as gg
    from graphgrad.capture import METHODS, draw, explain, full_text, optimize_text, report
    from graphgrad.graph import have_dot

    path, _, name = args.target.rpartition(":")
    if not path or not name:
        print(f"error: expected FILE.py:FUNC, got {args.target!r}", file=sys.stderr)
        return 2
    if not Path(path).is_file():
        print(f"error: no such file: {path}", file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if fn is None:
        print(f"error: {path} has no function {name!r}", file=sys.stderr)
        return 2
    scope = {"gg": gg, "graphgrad": gg, "torch": gg, "np": np}

    def inputs(text):
        value = eval(text, scope)  # the user's own expression, as on a Python prompt
        return value if isinstance(value, tuple) else (value,)

    methods = args.methods.split(",") if args.methods else METHODS
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        print(f"error: unknown method(s) {unknown}; choose from {', '.join(METHODS)}",
              file=sys.stderr)
        return 2
    rewrite_name = args.static_rewrite or f"{name}_static"
    rewrite = getattr(module, rewrite_name, None)
    if args.static_rewrite and rewrite is None:
        print(f"error: {path} has no function {args.static_rewrite!r}", file=sys.stderr)
        return 2
    second = inputs(args.second) if args.second else None
    rep = report(fn, *inputs(args.example), second_inputs=second, methods=methods,
                 static_rewrite=rewrite if "static" in methods else None)
    print(rep.table())
    print()
    print(explain(rep))
    if "static" in methods and rewrite is None and rep["static"].outcome == "error":
        print(f"(define {name}_static in {path}, written with graphgrad.static's cond / "
              f"shape, or pass --static-rewrite FUNC, to see the static API's working "
              f"version next to the failure)")
    if args.full:
        print()
        print(full_text(rep))
    if args.graphs:
        print()
        print(rep.graphs_text())
    if args.optimize:
        print()
        print(optimize_text(rep))
    if args.draw:
        written = draw(rep, args.draw)
        print()
        print(f"wrote {len(written)} drawing{'' if len(written) == 1 else 's'} to "
              f"{args.draw}" + ("" if have_dot() else " (DOT text: Graphviz's `dot` is not "
                                "installed)"))
        for p in written:
            print(f"  {p}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run SCRIPT as `python SCRIPT ARGS...` would, with every `import torch` and
    `import torch.X.Y` (also in the modules it imports) resolved to graphgrad's modules:
    torch.nn is graphgrad.nn. sys.argv is [SCRIPT, ARGS...], the script's folder comes
    first on sys.path, it runs as __main__, and the command exits with its exit code
    (0 when it ends normally, 1 with its traceback when it raises). A torch module or
    attribute graphgrad lacks is an error saying it is not in graphgrad yet. CUDA, MPS
    and other accelerators answer as in a CPU-only PyTorch build. Also:
    python -m graphgrad.run SCRIPT [ARGS...]; in a notebook, graphgrad.install_as_torch().
    With --nproc N: N ranks through mpiexec (torch.distributed is graphgrad.distributed).
    """
    from graphgrad.run import run_ranks, run_script
    if args.nproc is not None:
        return run_ranks(args.nproc, args.script, args.args)
    return run_script(args.script, args.args)


def lecture(args: argparse.Namespace) -> int:
    """The lecture on autodiff and computational graphs, topic by topic: without TOPIC, the
    map (each topic, the graphgrad feature that shows it, and the command); with TOPIC,
    the demonstration itself, which prints what to look for and writes its pictures to
    --out. `graphgrad lecture all` runs every topic in order."""
    from graphgrad.lecture import TOPICS, run_topic, topic_map

    if not args.topic:
        print(topic_map())
        return 0
    names = [t.name for t in TOPICS] if args.topic == "all" else [args.topic]
    for k, name in enumerate(names):
        if k:
            print()
        try:
            run_topic(name, out=args.out, quick=args.quick)
        except KeyError as e:
            print(f"error: {e.args[0]}", file=sys.stderr)
            return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphgrad", description=_DESCRIPTION,
                                     formatter_class=_Help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, fn, help_: str, **kw) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=inspect.cleandoc(fn.__doc__),
                              formatter_class=_Help, **kw)

    p = command("demo", demo, "higher-order derivatives by graph extension and by jet")
    p.add_argument("--x", type=float, default=0.5, help="the point to differentiate at")
    p.add_argument("--order", type=int, default=5, help="highest derivative order")
    p.set_defaults(func=demo)
    nd = sub.add_parser("numdiff", help="numerical differentiation tools", formatter_class=_Help,
                        description="Numerical differentiation: finite differences and the "
                                    "complex step.")
    nd_sub = nd.add_subparsers(dest="numdiff_command", metavar="COMMAND")
    s = nd_sub.add_parser("study", help="derivative error against step size (CSV + plot)",
                          description=inspect.cleandoc(numdiff_study.__doc__),
                          formatter_class=_Help)
    s.add_argument("--out", default="numdiff_study", help="output folder")
    s.add_argument("--x", type=float, default=1.5, help="the point")
    s.add_argument("--no-plot", action="store_true", help="write the CSV only")
    s.set_defaults(func=numdiff_study)
    nd.set_defaults(func=lambda a: (nd.print_help(), 0)[1])
    from graphgrad.train import DEFAULTS
    t = command("train", train, "train a digits classifier (MLP or CNN)")
    t.add_argument("--model", choices=["mlp", "cnn"], default=DEFAULTS["model"],
                   help="a 64-256-256-10 MLP, or a small CNN")
    t.add_argument("--epochs", type=int, default=DEFAULTS["epochs"], help="passes over the "
                   "training split")
    t.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"],
                   help="images per step")
    t.add_argument("--lr", type=float, default=DEFAULTS["lr"],
                   help="learning rate: suits adam(w); sgd wants ~0.05")
    t.add_argument("--optimizer", choices=["sgd", "adam", "adamw"],
                   default=DEFAULTS["optimizer"], help="the optimizer")
    t.add_argument("--seed", type=int, default=DEFAULTS["seed"],
                   help="seed of the split, the weights and the shuffling")
    t.add_argument("--compile", action="store_true",
                   help="graphgrad.compile the model; print graphs, breaks")
    t.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="data-parallel on N ranks through mpiexec")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--no-plot", action="store_true", help="no loss-curve PNG")
    t.add_argument("--out", default=DEFAULTS["out_dir"], help="checkpoint folder")
    t.set_defaults(func=train)
    c = command("capture", capture, "compare the ways of capturing a function as a graph")
    c.add_argument("target", metavar="FILE.py:FUNC", help="the function (or nn.Module) to "
                   "capture")
    c.add_argument("--example", required=True,
                   help='example input(s), e.g. "gg.randn(2, 3)", a tuple for several')
    c.add_argument("--second", help="the 2nd input checked (default: each dim + 1, sign flipped)")
    c.add_argument("--methods", help="comma-separated methods, e.g. jit.trace,compile "
                                     "(default: all)")
    c.add_argument("--static-rewrite", metavar="FUNC",
                   help="FUNC written for the static API (default: FUNC_static)")
    c.add_argument("--full", action="store_true",
                   help="whole messages, notes, your source line marked with a caret")
    c.add_argument("--graphs", action="store_true", help="also print each graph as Python")
    c.add_argument("--optimize", action="store_true",
                   help="each graph before/after passes.optimize, with the pass table")
    c.add_argument("--draw", metavar="DIR", help="write a picture of each graph to DIR")
    c.set_defaults(func=capture)
    r = command("run", run, "run an unmodified PyTorch program on graphgrad")
    r.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="run N ranks through mpiexec, data-parallel (default: one process)")
    r.add_argument("script", metavar="SCRIPT", help="the PyTorch program (a .py file)")
    r.add_argument("args", metavar="ARGS", nargs=argparse.REMAINDER,
                   help="passed to the program as sys.argv[1:], unchanged, options "
                        "included (default: none)")
    r.set_defaults(func=run)
    lec = command("lecture", lecture, "the lecture's topics, each with its demonstration")
    lec.add_argument("topic", metavar="TOPIC", nargs="?",
                     help="a topic's name from the map, or 'all' (default: print the map)")
    lec.add_argument("--out", default="out/lecture", help="folder for the pictures")
    lec.add_argument("--quick", action="store_true",
                     help="smaller runs of the long demonstrations")
    lec.set_defaults(func=lecture)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
