"""Layer ``numdiff``: the step-size study. Relative error of forward, central and
complex-step derivatives as the step shrinks: finite differences fall (truncation)
then rise again (cancellation), a V on a log-log plot; the complex step keeps falling
to machine precision and stays there."""

from __future__ import annotations

import csv
from pathlib import Path

from graphgrad.backend.optional import pyplot

import numpy as np

from .complex_step import complex_step_mode
from .finite import evaluate

__all__ = ["step_study", "classic_function", "write_csv", "plot_study", "run_study"]


def classic_function(x):
    """The standard complex-step test function e^x / sqrt(sin(x)^3 + cos(x)^3)."""
    return x.exp() / (x.sin() ** 3 + x.cos() ** 3).sqrt()


def step_study(f, x: float, exact: float, steps=None) -> list[dict]:
    """For each step h: the relative errors of the forward, central and complex-step
    derivatives of the scalar function ``f`` at ``x`` against ``exact``."""
    steps = [10.0 ** -k for k in range(1, 21)] if steps is None else list(steps)
    x0 = np.array(x, dtype=np.float64)
    f0 = float(evaluate(f, x0))
    rows = []
    for h in steps:
        fwd = (float(evaluate(f, x0 + h)) - f0) / h
        cen = (float(evaluate(f, x0 + h)) - float(evaluate(f, x0 - h))) / (2 * h)
        with complex_step_mode():
            cs = float(np.imag(evaluate(f, np.array(x0 + 1j * h, dtype=np.complex128)))) / h
        rows.append({"h": h,
                     "forward": abs(fwd - exact) / abs(exact),
                     "central": abs(cen - exact) / abs(exact),
                     "complex_step": abs(cs - exact) / abs(exact)})
    return rows


def write_csv(rows: list[dict], path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["h", "forward", "central", "complex_step"])
        w.writeheader()
        for r in rows:
            w.writerow({k: f"{v:.6e}" for k, v in r.items()})
    return path


def plot_study(rows: list[dict], path, title: str = "") -> Path:
    """A log-log plot of error against step (needs matplotlib: pip install graphgrad[plot])."""
    plt = pyplot("plotting the step study")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    h = [r["h"] for r in rows]
    floor = 1e-18  # an exact result has error 0, which a log axis cannot show
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for key, label, style in (("forward", "forward difference", "o-"),
                              ("central", "central difference", "s-"),
                              ("complex_step", "complex step", "^-")):
        ax.loglog(h, [max(r[key], floor) for r in rows], style, label=label, markersize=4)
    ax.axhline(np.finfo(np.float64).eps, color="gray", lw=0.8, ls="--", label="machine epsilon")
    ax.invert_xaxis()
    ax.set_xlabel("step h")
    ax.set_ylabel("relative error of f'(x)")
    ax.set_title(title or "Derivative error against step size")
    ax.legend()
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run_study(out_dir="numdiff_study", x: float = 1.5, plot: bool = True) -> dict:
    """The study on the classic function at ``x``, its exact derivative from graphgrad's
    reverse mode; writes ``step_study.csv`` (and ``step_study.png``)."""
    from graphgrad.autograd import grad
    from graphgrad.tensor import tensor
    xt = tensor(x, dtype="float64", requires_grad=True)
    (d,) = grad(classic_function(xt), xt)
    exact = d.item()
    rows = step_study(classic_function, x, exact)
    out = Path(out_dir)
    result = {"exact": exact, "rows": rows, "csv": str(write_csv(rows, out / "step_study.csv"))}
    if plot:
        result["png"] = str(plot_study(
            rows, out / "step_study.png",
            f"f(x) = e^x / sqrt(sin^3 x + cos^3 x) at x = {x}"))
    return result
