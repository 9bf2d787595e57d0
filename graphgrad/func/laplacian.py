"""Layer ``func``: second-order PDE operators, ``laplacian(f)`` and
``linear_operator(f, coefficients)``, by collapsed Taylor mode, plain Taylor mode or
nested reverse mode (``method=``), so the three can be compared on one function.

Both compute sum_r w_r d^2/dt^2 f(x + t v_r) for directions v_r: the Laplacian takes
v_r = e_r, w_r = 1; a diagonal operator sum_i c_i d_ii f takes w_r = c_r; a full one
sum_ij C_ij d_ij f = tr(C H) takes the eigenvectors of sym(C) with its eigenvalues as
weights (signed: indefinite C works). ``x`` is one point (d,) or a batch (B, d) on which
``f`` acts row by row (an ``nn.Module`` does); a vector-valued ``f`` gets the operator
of each output.

``method="collapsed"`` is written directly, as a dispatch level
(``func/taylor_collapsed.py``). The same collapse also exists as a graph rewrite,
``graphgrad.passes.collapse_taylor`` on the captured ``method="taylor"`` computation
(``capture_taylor_operator``); tests/test_collapse_taylor.py checks that they agree.

Under ``graphgrad.compile`` a call of ``laplacian``/``linear_operator`` is traced into
the graph as unrolled 2-jets (plain Taylor mode) and compile collapses them with that
pass (``dynamo/taylor_calls.py``); ``method="reverse"`` stays a graph break.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graphgrad.autograd import enable_grad
from graphgrad.autograd import grad as autograd_grad
from graphgrad.tensor import Value, is_grad_enabled, tensor, zeros_like

from .jet import jet_coefficients
from .taylor_collapsed import CollapsedLevel
from .vmap import vmap

__all__ = ["laplacian", "linear_operator", "METHODS"]

METHODS = ("collapsed", "taylor", "reverse")


def laplacian(f: Callable, *, method: str = "collapsed") -> Callable:
    """``laplacian(f)(x)``: sum_i d^2 f / dx_i^2 at ``x`` (the last dim of ``x`` holds the
    d coordinates; leading dims are a batch that ``f`` maps row by row)."""
    _check_method(method)

    def apply(x: Value) -> Value:
        d = x.shape[-1]
        eye = np.eye(d)
        return _weighted_second(f, x, eye, np.ones(d), method)
    return apply


def linear_operator(f: Callable, coefficients, *, method: str = "collapsed") -> Callable:
    """``linear_operator(f, c)(x)``: sum_ij c_ij d^2 f / dx_i dx_j, with ``c`` a (d,) vector
    (a diagonal operator) or a (d, d) matrix (its symmetric part counts). The coefficients
    are constants: they are factored once, in NumPy, not differentiated."""
    _check_method(method)
    directions, weights = operator_directions(coefficients)

    def apply(x: Value) -> Value:
        if x.shape[-1] != directions.shape[1]:
            raise ValueError(f"linear_operator: x has {x.shape[-1]} coordinates but the "
                             f"coefficients are for {directions.shape[1]}")
        return _weighted_second(f, x, directions, weights, method)
    return apply


def operator_directions(coefficients) -> tuple[np.ndarray, np.ndarray]:
    """(directions v_r, weights w_r) with sum_ij c_ij d_ij f = sum_r w_r d^2/dt^2
    f(x + t v_r), for ``linear_operator``'s coefficients (also read by graphgrad.compile,
    which traces the operator as unrolled jets)."""
    c = np.asarray(coefficients.detach().numpy() if isinstance(coefficients, Value)
                   else coefficients, dtype=np.float64)
    if c.ndim == 1:
        return np.eye(c.shape[0]), c
    if c.ndim == 2 and c.shape[0] == c.shape[1]:
        weights, vecs = np.linalg.eigh((c + c.T) / 2)
        keep = np.abs(weights) > 1e-14 * max(np.abs(weights).max(), 1e-300)
        return vecs.T[keep], weights[keep]
    raise ValueError(f"linear_operator: coefficients must be a (d,) or (d, d) array, got "
                     f"shape {c.shape}")


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _weighted_second(f, x, directions: np.ndarray, weights: np.ndarray, method: str):
    """sum_r w_r d^2/dt^2 f(x + t v_r), with the v_r applied to the last dim of x."""
    r, d = directions.shape
    # (r, 1, ..., d): the same seed for every point of a batch, broadcast where used
    seeds = tensor(directions, dtype=x.dtype).reshape(r, *([1] * (x.ndim - 1)), d)
    spelled = seeds.expand(r, *x.shape)
    w = tensor(weights, dtype=x.dtype)
    if method == "reverse":
        return _reverse(f, x, spelled, w)
    if method == "taylor":
        def second(v):
            out, terms = jet_coefficients(f, (x,), ([v, None],), 2)
            y2 = terms[0][1]
            return zeros_like(out) if y2 is None else y2
        per = vmap(second)(spelled)
        return 2 * (per * w.reshape(r, *([1] * (per.ndim - 1)))).sum(dim=0)
    level = CollapsedLevel(w)
    x0 = x.view_as(x)
    level.seed(x0, seeds)
    with level:
        out = f(x0)
        top = level.second(out)
    return zeros_like(out) if top is None else 2 * top


def _reverse(f, x, seeds, w):
    """Nested reverse mode: the gradient with ``create_graph=True``, then one more
    backward pass per direction and output (the plain route graph extension takes). The
    last passes record a graph only when grad mode is on (a PINN's loss differentiates
    the result w.r.t. the parameters), as every other op would."""
    keep = is_grad_enabled()
    with enable_grad():
        x0 = x.detach().requires_grad_(True) if not x.requires_grad else x.view_as(x)
        out = f(x0)
        batch = x.ndim - 1  # leading dims of out that are the batch of points
        flat = out.reshape(*out.shape[:batch], -1)
        results = []
        for j in range(flat.shape[-1]):
            (g,) = autograd_grad(flat[..., j].sum(), x0, create_graph=True)
            total = None
            for i in range(seeds.shape[0]):
                v = seeds[i]
                (h,) = autograd_grad((g * v).sum(), x0, create_graph=keep,
                                     retain_graph=True)
                term = (h * v).sum(dim=-1) * w[i]
                total = term if total is None else total + term
            results.append(total)
    from graphgrad.ops import stack
    return stack(results, dim=-1).reshape(out.shape)
