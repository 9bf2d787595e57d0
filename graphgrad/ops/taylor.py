"""Layer ``ops``: helpers shared by the Taylor rules (``func.jet``) that each op defines.

A Taylor rule has the signature of a jvp rule, one order up:
``taylor(series, out, *inputs, **params)``. ``series`` holds, per input, the list of its
Taylor coefficients x_1..x_K (``None`` for an input with no series: a constant); a single
coefficient may be ``None`` too (a symbolic zero, e.g. x_2.. of a directional seed). The
rule returns the output's coefficients y_1..y_K (entries ``None`` where zero). Rules use
the Taylor-coefficient convention, x_k = (1/k!) d^k x/dt^k, so no factorials appear and
nothing overflows at high order; ``func.jet`` converts at its boundary, as JAX's does.

Every helper here is a graphgrad program (Tensor arithmetic), so a jet can itself be
differentiated in reverse mode, batched by vmap or captured. ``full`` lists include the
order-0 term at index 0: ``full(x0, xs)[k]`` is x_k.
"""

from __future__ import annotations

__all__ = ["full", "order_of", "plus", "times", "cauchy", "ode_term", "linear_taylor",
           "zero_taylor", "exp_series", "log_series", "div_series", "mul_series",
           "sigmoid_series", "scale_series", "bilinear", "square_cauchy", "pow_series",
           "sin_cos_series", "logsumexp_series", "by_derivative", "quadratic_series"]


def order_of(series) -> int:
    """K, the number of coefficients carried (every input with a series has K)."""
    for s in series:
        if s is not None:
            return len(s)
    raise ValueError("Taylor rule called without any input series")


def full(x0, xs, order: int) -> list:
    """[x_0, x_1, ..., x_K] with ``None`` for zero coefficients."""
    return [x0, *(xs if xs is not None else [None] * order)]


def plus(*terms):
    """The sum of the terms that are not ``None`` (``None`` if all are)."""
    total = None
    for t in terms:
        if t is not None:
            total = t if total is None else total + t
    return total


def times(a, b, scale: float = 1.0):
    """scale * a * b (None if either is zero). The scale goes onto the smaller operand:
    a primal (B, H) times a coefficient carrying directions (R, B, H) then costs one
    pass over the large array, not two."""
    if a is None or b is None:
        return None
    if scale == 1.0:
        return a * b
    if _size(a) <= _size(b):
        return (a * scale) * b
    return a * (b * scale)


def _size(t) -> int:
    return t.numel() if hasattr(t, "numel") else 1


def square_cauchy(y: list, k: int, scale: float = 1.0):
    """scale * sum_{j=0..k} y_j y_{k-j}, each distinct product once (the sum is
    symmetric): y_0 y_k appears twice, so it is one product scaled by 2."""
    terms = [times(y[j], y[k - j], 2.0 * scale) for j in range((k + 1) // 2)]
    if k % 2 == 0:
        terms.append(times(y[k // 2], y[k // 2], scale))
    return plus(*terms)


def cauchy(a: list, b: list, k: int, start: int = 0, stop: int | None = None):
    """sum_{j=start..stop} a_j b_{k-j} (Leibniz's rule for the k-th coefficient of a
    product); ``stop`` defaults to k."""
    stop = k if stop is None else stop
    return plus(*(times(a[j], b[k - j]) for j in range(start, stop + 1)))


def ode_term(x: list, g: list, k: int):
    """y_k for y' = g(x) x': (1/k) sum_{j=1..k} j x_j g_{k-j}. Needs g_0..g_{k-1} only,
    which is what lets exp, tanh, sin... build y and g side by side."""
    return plus(*(times(x[j], g[k - j], j / k) for j in range(1, k + 1)))


def linear_taylor(cls, series, out, *inputs, **params) -> list:
    """The rule of an op that is linear (or affine) in its inputs: y_k = L(x_k), which is
    the op's jvp applied to the k-th coefficients (the jvp of a linear op does not read
    the primal values). A bias enters at order 0 only, which the jvp already leaves out.
    Piecewise-linear selections (relu, abs, clamp, maximum, where) use it too: their jvp
    selects by the primal values, which is the active branch's jet away from kinks."""
    order = order_of(series)
    out_terms = []
    for k in range(order):
        dots = tuple(None if s is None else s[k] for s in series)
        out_terms.append(None if all(d is None for d in dots)
                         else cls.jvp(dots, out, *inputs, **params))
    return out_terms


def zero_taylor(cls, series, out, *inputs, **params) -> list:
    """Piecewise-constant ops (sign, floor, comparisons): the output's series is zero."""
    return [None] * order_of(series)


def scale_series(xs: list, c) -> list:
    return [None if t is None else t * c for t in xs]


def mul_series(a: list, b: list, order: int) -> list:
    """Coefficients 1..K of a product of two full series."""
    return [cauchy(a, b, k) for k in range(1, order + 1)]


def exp_series(x: list, y0, order: int) -> list:
    """exp: y' = y x'."""
    y = [y0]
    for k in range(1, order + 1):
        y.append(ode_term(x, y, k))
    return y[1:]


def log_series(x: list, y0, order: int) -> list:
    """log: y_k = (x_k - (1/k) sum_{j=1..k-1} j y_j x_{k-j}) / x_0."""
    y = [y0]
    for k in range(1, order + 1):
        inner = plus(*(times(y[j], x[k - j]) * (j / k) if y[j] is not None
                       and x[k - j] is not None else None for j in range(1, k)))
        num = x[k] if inner is None else (inner * -1 if x[k] is None else x[k] - inner)
        y.append(None if num is None else num / x[0])
    return y[1:]


def div_series(a: list, b: list, y0, order: int) -> list:
    """a / b: y_k = (a_k - sum_{j=0..k-1} y_j b_{k-j}) / b_0."""
    y = [y0]
    for k in range(1, order + 1):
        inner = cauchy(y, b, k, 0, k - 1)
        num = a[k] if inner is None else (inner * -1 if a[k] is None else a[k] - inner)
        y.append(None if num is None else num / b[0])
    return y[1:]


def sigmoid_series(x: list, y0, order: int) -> list:
    """sigmoid: y' = w x' with w = y - y^2 carried alongside (up to order K-1: y_K
    needs no w_K)."""
    y, w = [y0], [y0 - y0 * y0]
    for k in range(1, order + 1):
        y.append(ode_term(x, w, k))
        if k < order:
            w.append(plus(y[k], square_cauchy(y, k, -1.0)))
    return y[1:]


def bilinear(a: list, b: list, k: int, product) -> object:
    """sum_{j=0..k} B(a_j, b_{k-j}) for a bilinear op B (matmul, linear)."""
    return plus(*(None if a[j] is None or b[k - j] is None else product(a[j], b[k - j])
                  for j in range(k + 1)))


def pow_series(x: list, y0, r, order: int) -> list:
    """x ** r for a constant r, from x y' = r x' y:
    y_k = (1/(k x_0)) sum_{j=1..k} (r j - (k - j)) x_j y_{k-j} (divides by x_0)."""
    y = [y0]
    for k in range(1, order + 1):
        acc = plus(*(None if x[j] is None or y[k - j] is None
                     else x[j] * y[k - j] * (r * j - (k - j)) for j in range(1, k + 1)))
        y.append(None if acc is None else acc / (x[0] * k))
    return y[1:]


def sin_cos_series(x: list, s0, c0, order: int, sign: float = -1.0) -> tuple[list, list]:
    """sin and cos together: s' = c x', c' = -s x'; with ``sign=+1`` sinh and cosh
    (c' = +s x')."""
    s, c = [s0], [c0]
    for k in range(1, order + 1):
        sk, ck = ode_term(x, c, k), ode_term(x, s, k)
        s.append(sk)
        c.append(None if ck is None else (ck if sign > 0 else -ck))
    return s[1:], c[1:]


def by_derivative(x: list, g: list, order: int) -> list:
    """y_1..y_K for y' = g x', given the full series of g (JAX's ``def_deriv``)."""
    return [ode_term(x, g, k) for k in range(1, order + 1)]


def quadratic_series(x: list, a: float, b: float, order: int) -> list:
    """The full series of a + b x^2."""
    sq = mul_series(x, x, order)
    return [a + b * (x[0] * x[0])] + scale_series(sq, b)


def logsumexp_series(xs: list, e0, dim, order: int) -> tuple[list, list]:
    """The coefficients of log(sum(exp(x))) over ``dim`` (kept), given e0 = exp(x_0 -
    lse(x_0)), which sums to one: shifting by the constant lse(x_0) keeps exp stable and
    makes the sum's order-0 term 1. Returns (lse terms, full series of e)."""
    e = [e0, *exp_series(full(e0, xs, order), e0, order)]
    total = [1.0] + [None if t is None else t.sum(dim=dim, keepdim=True) for t in e[1:]]
    return log_series(total, 0.0, order), e
