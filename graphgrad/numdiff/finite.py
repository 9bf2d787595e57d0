"""Layer ``numdiff``: derivatives by finite differences, the independent oracle.

Nothing here uses autograd: ``f`` is only *evaluated* (under ``no_grad``), on NumPy
copies of the input moved by a step ``h``, and the differences are formed in NumPy.
Forward and backward differences have truncation error O(h), central O(h^2); all of
them lose accuracy to cancellation when h is too small (the V of the step study).
"""

from __future__ import annotations

import numpy as np

from graphgrad.tensor import Tensor, Value, set_grad_mode

__all__ = ["evaluate", "default_step", "fd_jacobian", "fd_hessian", "as_array", "METHODS"]

METHODS = ("central", "forward", "backward", "complex_step")


def as_array(x) -> np.ndarray:
    if isinstance(x, Value):
        return np.array(x.detach().numpy(), copy=True)
    return np.array(x, dtype=np.float64, copy=True)


def evaluate(f, x: np.ndarray, like: Tensor | None = None) -> np.ndarray:
    """``f`` at the array ``x`` (wrapped as a tensor of x's dtype), as an array."""
    from graphgrad.tensor import Tensor
    prev = set_grad_mode(False)  # no graph: f is only evaluated
    try:
        out = f(Tensor._make(np.array(x, copy=True)))
    finally:
        set_grad_mode(prev)
    if isinstance(out, Value):
        return np.array(out.detach()._array, copy=True)
    return np.asarray(out)


def default_step(method: str, dtype, order: int = 1) -> float:
    """The step that balances truncation and rounding error for ``method``: about
    eps^(1/2) forward/backward, eps^(1/3) central, eps^(1/4) for second differences;
    a tiny 1e-20 (float64) or 1e-10 (float32) for the complex step, which has no
    cancellation."""
    eps = np.finfo(np.dtype(dtype) if np.dtype(dtype).kind == "f" else np.float64).eps
    if method == "complex_step":
        return 1e-20 if eps < 1e-10 else 1e-10
    if order == 2:
        return float(eps ** 0.25) if method == "central" else float(eps ** (1 / 3))
    if method == "central":
        return float(eps ** (1 / 3))
    return float(eps ** 0.5)


def _steps(x: np.ndarray, h: float) -> np.ndarray:
    """Per-element steps, scaled with |x| so large inputs are not under-perturbed."""
    return h * np.maximum(1.0, np.abs(x))


def fd_jacobian(f, x, method: str = "central", h: float | None = None) -> np.ndarray:
    """d f(x) / d x by finite differences: shape ``f(x).shape + x.shape``."""
    if method not in ("central", "forward", "backward"):
        raise ValueError(f"fd_jacobian: method must be 'central', 'forward' or 'backward', got "
                         f"{method!r}")
    x0 = as_array(x)
    if x0.dtype.kind != "f":
        x0 = x0.astype(np.float64)
    h = default_step(method, x0.dtype) if h is None else h
    steps = _steps(x0, h).reshape(-1)
    f0 = evaluate(f, x0) if method != "central" else None
    columns = []
    flat = x0.reshape(-1)
    for j in range(flat.size):
        hj = steps[j]
        plus, minus = flat.copy(), flat.copy()
        plus[j] += hj
        minus[j] -= hj
        if method == "central":
            d = (evaluate(f, plus.reshape(x0.shape)) - evaluate(f, minus.reshape(x0.shape)))
            columns.append(d / (2 * hj))
        elif method == "forward":
            columns.append((evaluate(f, plus.reshape(x0.shape)) - f0) / hj)
        else:
            columns.append((f0 - evaluate(f, minus.reshape(x0.shape))) / hj)
    out_shape = columns[0].shape if columns else evaluate(f, x0).shape
    jac = np.stack(columns, axis=-1) if columns else np.zeros(out_shape + (0,))
    return jac.reshape(out_shape + x0.shape)


def fd_hessian(f, x, method: str = "central", h: float | None = None) -> np.ndarray:
    """The Hessian of a scalar ``f`` by second differences of ``f`` itself (O(n^2)
    evaluations): central uses the four-point stencil, forward the three-point one."""
    if method not in ("central", "forward"):
        raise ValueError(f"fd_hessian: method must be 'central' or 'forward', got {method!r}")
    x0 = as_array(x)
    if x0.dtype.kind != "f":
        x0 = x0.astype(np.float64)
    h = default_step(method, x0.dtype, order=2) if h is None else h
    flat = x0.reshape(-1)
    n = flat.size
    steps = _steps(flat, h)

    def at(*moves):
        y = flat.copy()
        for j, s in moves:
            y[j] += s
        return float(np.asarray(evaluate(f, y.reshape(x0.shape))).reshape(()))

    hess = np.zeros((n, n), dtype=x0.dtype)
    f0 = at() if method == "forward" else None
    singles = [at((j, steps[j])) for j in range(n)] if method == "forward" else None
    for i in range(n):
        for j in range(i, n):
            hi, hj = steps[i], steps[j]
            if method == "central":
                v = (at((i, hi), (j, hj)) - at((i, hi), (j, -hj)) - at((i, -hi), (j, hj))
                     + at((i, -hi), (j, -hj))) / (4 * hi * hj)
            else:
                v = (at((i, hi), (j, hj)) - singles[i] - singles[j] + f0) / (hi * hj)
            hess[i, j] = hess[j, i] = v
    return hess.reshape(x0.shape + x0.shape)
