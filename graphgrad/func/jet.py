"""Layer ``func``: ``jet`` (JAX's ``jax.experimental.jet.jet``) and ``taylor_derivatives``.

Taylor mode pushes a truncated Taylor polynomial through ``fun`` in one forward pass:
the first K derivatives along a curve cost O(K^2) per op, where nesting reverse mode K
times builds a graph that grows exponentially in K.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from graphgrad.tensor import Value, tensor, zeros_like

from .pytree import tree_flatten, tree_unflatten
from .taylor_mode import TaylorLevel

__all__ = ["jet", "taylor_derivatives", "jet_coefficients"]


def jet_coefficients(fun: Callable, primals: Sequence, coefficients: Sequence,
                     order: int) -> tuple:
    """Taylor mode in the Taylor-coefficient convention, the core of ``jet``.

    ``coefficients[i]`` lists x_1..x_K of ``primals[i]`` with x_k = (1/k!) d^k x/dt^k
    (``None`` for a zero coefficient, or for the whole list of a constant input). Returns
    ``(out, terms)``: ``fun``'s output pytree and, per output leaf, the list y_1..y_K
    (``None`` where zero)."""
    if order < 1:
        raise ValueError(f"jet: the order must be at least 1, got {order}")
    level = TaylorLevel(order)
    leaves = []
    for p, cs in zip(primals, coefficients, strict=True):
        if not isinstance(p, Value):
            p = tensor(p)
        x = p.view_as(p)  # an alias of its own: the same tensor may be passed twice
        if cs is not None:
            if len(cs) != order:
                raise ValueError(f"jet: every input series must have {order} terms, got "
                                 f"{len(cs)}")
            level.attach(x, list(cs))
        leaves.append(x)
    with level:
        out = fun(*leaves)
        flat, spec = tree_flatten(out)
        terms = [level.series(o) or [None] * order for o in flat]
    return out, terms


def jet(fun: Callable, primals: Sequence, series: Sequence, *,
        factorial_scaled: bool = True) -> tuple:
    """The Taylor expansion of ``fun`` along a curve (``jax.experimental.jet.jet``).

    ``primals`` are the inputs x_0 (a tuple, one per positional argument of ``fun``);
    ``series[i]`` lists the higher terms of input i, [x_1, ..., x_K], each shaped like
    ``primals[i]``. Returns ``(primal_out, series_out)``: ``fun(*primals)`` and, with
    its structure, the list [y_1, ..., y_K] for each output.

    Factorial scaling, as in JAX: with ``factorial_scaled=True`` (the default) the terms
    are *derivatives*, x_k = d^k x/dt^k at t = 0 of the curve x(t), and so are the
    outputs, y_k = d^k/dt^k fun(x(t)). Internally each term is divided by k! (Taylor
    coefficients: products need no binomial weights and high orders do not overflow)
    and each output multiplied back. With ``factorial_scaled=False`` (JAX's ``jet2``)
    inputs and outputs are the Taylor coefficients themselves, x(t) = sum x_k t^k.
    Seeding x_1 = v and x_k = 0 for k >= 2 gives the directional derivatives
    d^k/dt^k fun(x + t v); ``taylor_derivatives`` does that.

    At a kink no two-sided series exists, so the result there is a convention. graphgrad
    takes the one its own vjp/jvp (and PyTorch's derivatives) take, so that y_1 is
    always the jvp: relu, abs and copysign give 0 at x_0 = 0 (JAX's jet gives x_k / 2
    for relu, through max(x, 0), and +x_k for abs); clamp gives x_k inside and on its
    bounds (PyTorch's inclusive mask), 0 beyond; maximum/minimum and amax/amin (and the
    inf-norms) average the tied elements' series, as JAX does; sign, floor, comparisons
    and the random samplers give a zero series. A write in place works on a tensor that
    no view aliases."""
    if not isinstance(primals, (tuple, list)) or not isinstance(series, (tuple, list)):
        raise TypeError("jet: primals and series must be tuples (one entry per argument)")
    if len(primals) != len(series):
        raise ValueError(f"jet: got {len(primals)} primals but {len(series)} series")
    orders = {len(s) for s in series}
    if len(orders) != 1:
        raise ValueError(f"jet: every input series must have the same length, got "
                         f"{sorted(orders)}")
    order = orders.pop()
    scale = [math.factorial(k) for k in range(1, order + 1)] if factorial_scaled \
        else [1] * order
    coeffs = [[None if t is None else t / c for t, c in zip(s, scale, strict=True)]
              for s in series]
    out, terms = jet_coefficients(fun, primals, coeffs, order)
    flat, spec = tree_flatten(out)
    series_out = [[zeros_like(o) if t is None else t * c for t, c in zip(ts, scale, strict=True)]
                  for o, ts in zip(flat, terms, strict=True)]
    return out, tree_unflatten(series_out, spec) if len(flat) != 1 or isinstance(out, (
        list, tuple, dict)) else series_out[0]


def taylor_derivatives(f: Callable, x, v, order: int) -> list:
    """[d^k/dt^k f(x + t v) at t = 0 for k = 0..order], by one Taylor-mode pass.

    ``f`` is a function of one tensor (or an ``nn.Module``) with a tensor output; ``v``
    has ``x``'s shape. For scalar ``x`` and ``v = 1`` these are f(x), f'(x), ..., the
    k-th entry being the k-th derivative."""
    if not isinstance(x, Value):
        x = tensor(x)
    if not isinstance(v, Value):
        v = tensor(v, dtype=x.dtype)
    out, terms = jet_coefficients(f, (x,), ([v] + [None] * (order - 1),), order)
    if not isinstance(out, Value):
        raise TypeError(f"taylor_derivatives: f must return a tensor, got {type(out).__name__}")
    return [out] + [zeros_like(out) if t is None else t * math.factorial(k)
                    for k, t in enumerate(terms[0], start=1)]
