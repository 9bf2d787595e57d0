"""Layer ``lecture``: the topics on derivatives themselves: VJP vs JVP, Jacobians and
Hessians, higher-order derivatives by graph extension (and the growth of the graph),
finite differences vs the complex step, and complex-step Hessians."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from graphgrad import func, numdiff
from graphgrad.autograd import grad
from graphgrad.backend import float64
from graphgrad.ops import stack
from graphgrad.tensor import eye, tensor
from graphgrad.graph.eager_graph import from_tensors

from .pictures import plot_picture, pyplot, tensors_picture

__all__ = ["vjp_jvp", "jacobians_hessians", "graph_extension", "finite_differences",
           "csfd_hessian"]


def _wide(x):
    """R^3 -> R^2: two outputs, three inputs."""
    return stack([x[0] * x[1] * x[2], x[0].sin() + x[2] ** 2])


def vjp_jvp(out: Path, quick: bool) -> dict:
    x = tensor([1.0, 2.0, 3.0], dtype=float64)
    y, vjp_fn = func.vjp(_wide, x)
    eye_out, eye_in = eye(2, dtype=float64), eye(3, dtype=float64)
    rows = [vjp_fn(eye_out[i])[0] for i in range(2)]          # u^T J, u = e_i: row i
    cols = [func.jvp(_wide, (x,), (eye_in[j],))[1] for j in range(3)]  # J v, v = e_j
    by_rows, by_cols = stack(rows), stack(cols, dim=1)
    exact = np.array([[6.0, 3.0, 2.0], [math.cos(1.0), 0.0, 6.0]])
    print("f(x) = [x0 x1 x2, sin(x0) + x2^2] at x = (1, 2, 3): 3 inputs, 2 outputs")
    print("reverse mode: one VJP u^T J per output (u = e_i) gives row i")
    for i, r in enumerate(rows):
        print(f"  VJP with e_{i}: {np.round(r.numpy(), 6).tolist()}")
    print("forward mode: one JVP J v per input (v = e_j) gives column j")
    for j, c in enumerate(cols):
        print(f"  JVP with e_{j}: {np.round(c.numpy(), 6).tolist()}")
    same = bool(np.allclose(by_rows.numpy(), by_cols.numpy()) and
                np.allclose(by_rows.numpy(), exact))
    print(f"2 VJPs and 3 JVPs give the same Jacobian (and the closed form): "
          f"{'yes' if same else 'NO'}")
    print("so a function with few outputs (a loss) is cheaper by reverse mode, one with few "
          "inputs by forward mode")
    xr = tensor([1.0, 2.0, 3.0], dtype=float64, requires_grad=True)
    tensors_picture(out / "graph_of_f.png", _wide(xr), names={"x": xr})
    return {"vjps": len(rows), "jvps": len(cols), "same_jacobian": same,
            "value": y.numpy().tolist()}


def _rosenbrock(x):
    return 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2


def _polar(p):
    """(r, theta) -> (x, y, r^2): a 3x2 Jacobian."""
    return stack([p[0] * p[1].cos(), p[0] * p[1].sin(), p[0] ** 2])


def jacobians_hessians(out: Path, quick: bool) -> dict:
    p = tensor([2.0, 0.5], dtype=float64)
    jr, jf = func.jacrev(_polar)(p), func.jacfwd(_polar)(p)
    exact = np.array([[math.cos(0.5), -2 * math.sin(0.5)], [math.sin(0.5), 2 * math.cos(0.5)],
                      [4.0, 0.0]])
    print("Jacobian of (r, t) -> (r cos t, r sin t, r^2) at (2, 0.5):")
    print(np.array2string(jr.numpy(), precision=6))
    jac_ok = bool(np.allclose(jr.numpy(), jf.numpy()) and np.allclose(jr.numpy(), exact))
    print(f"jacrev (rows by vmap of VJPs) == jacfwd (columns by vmap of JVPs) == closed form: "
          f"{'yes' if jac_ok else 'NO'}")
    x = tensor([1.0, 1.0], dtype=float64)
    h = func.hessian(_rosenbrock)(x).numpy()
    exact_h = np.array([[802.0, -400.0], [-400.0, 200.0]])
    h_ok = bool(np.allclose(h, exact_h))
    print("Hessian of Rosenbrock at its minimum (1, 1), forward over reverse:")
    print(np.array2string(h, precision=6))
    print(f"equals the closed form [[802, -400], [-400, 200]]: {'yes' if h_ok else 'NO'}; "
          f"symmetric: {'yes' if np.allclose(h, h.T) else 'NO'}")
    return {"jacobian_ok": jac_ok, "hessian_ok": h_ok, "hessian": h.tolist()}


def graph_extension(out: Path, quick: bool) -> dict:
    x0 = 0.5
    x = tensor(x0, dtype=float64, requires_grad=True)
    y = x.sin() * x.exp()
    order = 4 if quick else 6
    print(f"f(x) = sin(x) e^x at x = {x0}; d^k f = 2^(k/2) e^x sin(x + k pi/4)")
    print(f"{'order':>5}  {'derivative':>20}  {'error':>8}  {'nodes':>5}  "
          f"{'added by backward':>17}")
    nodes, worst, d = [], 0.0, y
    derivatives = []
    for k in range(1, order + 1):
        (d,) = grad(d, x, create_graph=True)
        derivatives.append(d)
        exact = 2 ** (k / 2) * math.exp(x0) * math.sin(x0 + k * math.pi / 4)
        worst = max(worst, abs(d.item() - exact))
        graph, added = from_tensors(y, d, names={"x": x}, forward=(y,))
        nodes.append(len(graph.nodes))
        print(f"{k:>5}  {d.item():>20.15g}  {abs(d.item() - exact):>8.1e}  "
              f"{len(graph.nodes):>5}  {len(added):>17}")
    print("each derivative is an ordinary graph that the next backward pass extends; the "
          "count grows with the order (the cost blow-up; func.jet is the way out)")
    tensors_picture(out / "first_derivative.png", y, derivatives[0], names={"x": x})
    tensors_picture(out / "second_derivative.png", y, derivatives[1], names={"x": x})
    return {"nodes": nodes, "max_error": worst,
            "growing": all(a < b for a, b in zip(nodes, nodes[1:]))}


def finite_differences(out: Path, quick: bool) -> dict:
    plot = pyplot() is not None
    if not plot:
        print("(no step_study.png: plots need matplotlib, pip install 'graphgrad[plot]')")
    result = numdiff.run_study(out, x=1.5, plot=plot)
    rows = result["rows"]
    best = {k: min(rows, key=lambda r, k=k: r[k]) for k in ("forward", "central",
                                                            "complex_step")}
    print("f(x) = e^x / sqrt(sin(x)^3 + cos(x)^3) at x = 1.5; exact f' from reverse mode")
    print(f"{'h':>8}  {'forward':>9}  {'central':>9}  {'complex step':>12}")
    for r in rows[::2]:
        print(f"{r['h']:>8.0e}  {r['forward']:>9.1e}  {r['central']:>9.1e}  "
              f"{r['complex_step']:>12.1e}")
    for k, r in best.items():
        print(f"best {k}: relative error {r[k]:.1e} at h = {r['h']:.0e}")
    tiny = rows[-1]
    print(f"at h = {tiny['h']:.0e} finite differences are lost to rounding "
          f"(error {tiny['central']:.0e}); the complex step keeps {tiny['complex_step']:.0e}")
    return {"best_forward_h": best["forward"]["h"], "best_central_h": best["central"]["h"],
            "complex_step_error_at_smallest_h": tiny["complex_step"],
            "central_error_at_smallest_h": tiny["central"]}


def csfd_hessian(out: Path, quick: bool) -> dict:
    x = np.array([-1.2, 1.0])
    exact = func.hessian(_rosenbrock)(tensor(x)).numpy()
    scale = np.abs(exact).max()
    cs = numdiff.hessian(_rosenbrock, x, method="complex_step")
    fd = numdiff.hessian(_rosenbrock, x, method="central")
    err_cs, err_fd = np.abs(cs - exact).max() / scale, np.abs(fd - exact).max() / scale
    print("Hessian of Rosenbrock at (-1.2, 1):")
    print(np.array2string(exact, precision=6))
    print(f"complex step (column j = Im(grad f(x + i h e_j)) / h, 2 gradient passes): "
          f"relative error {err_cs:.1e}")
    print(f"central second differences (f only, 4 n^2 evaluations):             "
          f"relative error {err_fd:.1e}")

    def bars(ax):
        ax.bar(["complex step", "central differences"], [max(err_cs, 1e-17), err_fd],
               color=["tab:green", "tab:orange"])
        ax.set_yscale("log")
        ax.set_ylabel("relative error of the Hessian")
    plot_picture(out / "hessian_errors.png", bars, size=(4.5, 3))
    return {"complex_step_error": float(err_cs), "central_error": float(err_fd)}
