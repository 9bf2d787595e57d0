"""Layer ``ops``: cumulative products along a dim (``cumprod``; ``cumsum`` is in
``reduce``) and the op that computes cumprod's gradient; running maxima and minima
(``cummax``, ``cummin``: an op gives the indices, the values are a gather of them, so
the gradient goes to the element each running extremum came from, as in PyTorch).

The gradient must hold where the input has zeros, and be differentiable again there:
``reversed_cumsum(g * out) / input`` (the textbook rule) divides by zero. Cumprod's vjp
is one op, ``CumprodBackward``, whose forward is PyTorch's O(n) algorithm (the textbook
rule before the first zero of a slice, the product of the others at that zero, 0
after it). Its own rules, needed from the second derivative on, are written in
graphgrad ops with the products that leave one factor out,
``C[k, i] = prod_{j <= i, j != k} x_j`` (the derivative of ``out[i]`` by ``x[k]`` for
``k <= i``): the cumprod of ``n`` copies of the slice with a 1 in place of ``x[k]`` in
copy ``k``. They are exact everywhere and cost ``n`` times the input's size, as
PyTorch's own rule when a graph of the gradient is built.
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor import Tensor

from .arithmetic import needs_grad
from .base import Op, Spec, normalize_dim, scalar_name
from .reduce import MaxMin
from .batching import all_to_front
from .compare import where
from .reduce import along_dim_batched
from .triangular import Triu
from .taylor_products import product_scan
from . import taylor as ts

__all__ = ["cumprod", "cummax", "cummin", "logcumsumexp"]


def _eye(n: int):
    return Tensor._make(xp.eye(n, dtype=xp.bool_))


def _left_out(x):
    """For ``x`` (..., n): (..., n, n), copy ``k`` of the slice with 1 in place of
    ``x[..., k]``."""
    n = x.shape[-1]
    return where(_eye(n), 1.0, x.unsqueeze(-2).expand(*x.shape[:-1], n, n))


def _omitted_products(x):
    """For ``x`` (..., n): ``C`` (..., n, n) with ``C[..., k, i]`` the product of
    ``x[..., :i + 1]`` without ``x[..., k]`` for ``i >= k``, and 0 for ``i < k``."""
    copies = _left_out(x)
    return Triu.apply(Cumprod.apply(copies, dim=copies.ndim - 1), diagonal=0)


def _upper(n: int):
    """(n, n) bool: ``[j, i]`` is True for ``i >= j``."""
    return Tensor._make(xp.triu(xp.ones((n, n), xp.bool_)))


def _reversed_cumsum(w):
    """Along the last axis: ``out[k] = sum_{i >= k} w[i]``."""
    return xp.flip(xp.cumsum(xp.flip(w, -1), -1), -1)


class Cumprod(Op):
    holomorphic = True
    promotes = False

    @staticmethod
    def forward(a, *, dim):
        dtype = xp.int64 if a.dtype.kind in "bui" else None
        if a.ndim == 0:
            return a.astype(dtype or a.dtype)
        return xp.cumprod(a, axis=dim, dtype=dtype)

    @classmethod
    def infer(cls, a, *, dim) -> Spec:  # unknown dims pass through
        return Spec(a.shape, xp.dtype(xp.int64) if a.dtype.kind in "bui" else a.dtype)

    @staticmethod
    def vjp(g, out, a, *, dim):
        if a.ndim == 0:
            return (g,)
        return (CumprodBackward.apply(g, a, dim=dim),)

    @staticmethod
    def jvp(dots, out, a, *, dim):
        if a.ndim == 0:
            return dots[0]
        products = _omitted_products(a.movedim(dim, -1))
        tangent = (products * dots[0].movedim(dim, -1).unsqueeze(-1)).sum(dim=-2)
        return tangent.movedim(-1, dim)

    @staticmethod
    def taylor(series, out, a, *, dim):
        if a.ndim == 0:
            return series[0]
        order = ts.order_of(series)
        moved = [None if t is None else t.movedim(dim, -1) for t in series[0]]
        y = product_scan(ts.full(a.movedim(dim, -1), moved, order), order)
        return [None if t is None else t.movedim(-1, dim) for t in y[1:]]

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        return along_dim_batched(cls, vals[0], bdims[0], dim), 0


class CumprodBackward(Op):
    """Cumprod's gradient for the incoming gradient ``g``:
    ``out[k] = sum_{i >= k} g[i] * prod_{j <= i, j != k} a[j]`` along ``dim``."""

    holomorphic = True
    promotes = False

    @staticmethod
    def forward(g, a, *, dim):
        g, a = xp.moveaxis(g, dim, -1), xp.moveaxis(a, dim, -1)
        zeros_so_far = xp.cumsum(a == 0, axis=-1)
        before = zeros_so_far == 0           # k before the slice's first zero
        first = (a == 0) & (zeros_so_far == 1)  # k at the first zero
        with xp.errstate(all="ignore"):
            grad = _reversed_cumsum(g * xp.cumprod(a, axis=-1)) / xp.where(before, a, 1)
            # at the first zero: the cumprod with that factor left out (0 from the second
            # zero on), summed against g from there
            at_first = _reversed_cumsum(g * xp.cumprod(xp.where(first, 1, a), axis=-1))
        grad = xp.where(before, grad, xp.where(first, at_first, 0))
        return xp.moveaxis(grad.astype(xp.result_type(g, a), copy=False), -1, dim)

    @classmethod
    def infer(cls, g, a, *, dim) -> Spec:
        return Spec(g.shape, xp.result_type(g.dtype, a.dtype))

    @staticmethod
    def vjp(h, out, g, a, *, dim):
        # out = sum_i g_i * triu(cumprod(left_out(a)))[k, i]: linear in g with the
        # matrix C; for a, the cotangent of those cumprods is h_k * g_i (i >= k), and
        # its gradient reaches a through every copy but the one where a_k is left out
        hm, gm, am = h.movedim(dim, -1), g.movedim(dim, -1), a.movedim(dim, -1)
        grad_g = grad_a = None
        if needs_grad(g):
            products = _omitted_products(am)
            grad_g = (products * hm.unsqueeze(-1)).sum(dim=-2).movedim(-1, dim)
        if needs_grad(a):
            copies = _left_out(am)
            weights = Triu.apply(hm.unsqueeze(-1) * gm.unsqueeze(-2), diagonal=0)
            inner = CumprodBackward.apply(weights, copies, dim=copies.ndim - 1)
            grad_a = where(_eye(am.shape[-1]), 0.0, inner).sum(dim=-2).movedim(-1, dim)
        return grad_g, grad_a

    @staticmethod
    def jvp(dots, out, g, a, *, dim):
        dg, da = dots
        tangent = None if dg is None else CumprodBackward.apply(dg, a, dim=dim)
        if da is not None:
            am, dam = a.movedim(dim, -1), da.movedim(dim, -1)
            n = am.shape[-1]
            copies = _left_out(am)
            d_copies = where(_eye(n), 0.0, dam.unsqueeze(-2).expand(*dam.shape[:-1], n, n))
            d_products = Triu.apply(Cumprod.jvp((d_copies,), None, copies,
                                                dim=copies.ndim - 1), diagonal=0)
            term = (d_products * g.movedim(dim, -1).unsqueeze(-2)).sum(dim=-1).movedim(-1, dim)
            tangent = term if tangent is None else tangent + term
        return tangent

    @staticmethod
    def taylor(series, out, g, a, *, dim):
        # out[k] = sum_i g[i] C[k, i] with C the cumprods of the left-out copies (the
        # module docstring): cumprod's rule on the copies, then Leibniz with g
        order = ts.order_of(series)
        am = a.movedim(dim, -1)
        n = am.shape[-1]
        eye = _eye(n)

        def copies(t):  # the series of _left_out: a constant 1 in place of x[k]
            return None if t is None else where(eye, 0.0, t.movedim(dim, -1).unsqueeze(-2)
                                                .expand(*am.shape[:-1], n, n))
        ga, gs = series
        c = product_scan(ts.full(_left_out(am), [copies(t) for t in (
            gs if gs is not None else [None] * order)], order), order)
        c = [None if t is None else Triu.apply(t, diagonal=0) for t in c]

        def rows(t):  # g[i] against column i of C
            return None if t is None else t.movedim(dim, -1).unsqueeze(-2)
        gm = ts.full(rows(g), [rows(t) for t in (ga if ga is not None else [None] * order)],
                     order)
        return [None if t is None else t.sum(dim=-1).movedim(-1, dim)
                for t in ts.mul_series(gm, c, order)]

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        g, a = all_to_front(vals, bdims)
        return cls.apply(g, a, dim=dim + 1), 0


def cumprod(input, dim: int, *, dtype=None):
    """``out[i] = input[0] * ... * input[i]`` along ``dim``."""
    if dtype is not None:
        input = input.to(dtype)
    d = normalize_dim(dim, input.ndim, "cumprod")
    return Cumprod.apply(input, dim=d)


class _RunningExtremumIndices(Op):
    """The index of the running maximum (minimum) along ``dim``: at ties the latest
    index; once a NaN is seen the running value is NaN, at the latest NaN (PyTorch's
    order)."""

    differentiable = False
    promotes = False
    saves_inputs = ()
    holomorphic = True  # the indices of a complex step's real part: see Argsort
    _accumulate = None  # NumPy's maximum or minimum ufunc

    @classmethod
    def forward(cls, a, *, dim):
        if a.ndim == 0:
            return xp.zeros((), xp.int64)
        a = xp.real(a)
        running = cls._accumulate.accumulate(a, axis=dim)
        # where a reaches the running value (a record or a tie) or is NaN, the running
        # index moves to that position; it stays put in between
        shape = [1] * a.ndim
        shape[dim] = a.shape[dim]
        positions = xp.arange(a.shape[dim], dtype=xp.int64).reshape(shape)
        moves = (a == running)
        if a.dtype.kind == "f":
            moves |= xp.isnan(a)
        return xp.maximum.accumulate(xp.where(moves, positions, 0), axis=dim)

    @classmethod
    def infer(cls, a, *, dim) -> Spec:
        return Spec(a.shape, xp.dtype(xp.int64))

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        return along_dim_batched(cls, vals[0], bdims[0], dim), 0


class CummaxIndices(_RunningExtremumIndices):
    _accumulate = xp.maximum


class CumminIndices(_RunningExtremumIndices):
    _accumulate = xp.minimum


def _running_extremum(op, input, dim: int, name: str):
    d = normalize_dim(dim, input.ndim, name)
    indices = op.apply(input, dim=d)
    values = input.clone() if input.ndim == 0 else input.gather(d, indices)
    return MaxMin(values, indices)


def cummax(input, dim: int):
    """``(values, indices)``: the largest element of ``input[..., :i + 1]`` along ``dim``
    at each ``i``, and where it is (``torch.return_types.cummax``)."""
    return _running_extremum(CummaxIndices, input, dim, "cummax")


def cummin(input, dim: int):
    """``(values, indices)``: the running minimum along ``dim`` and where it is."""
    return _running_extremum(CumminIndices, input, dim, "cummin")


class Logcumsumexp(Op):
    """``out[i] = log(sum_{j <= i} exp(input[j]))`` along ``dim``, without overflow.

    Both rules use the weights ``W[j, i] = exp(input[j] - out[i])`` for ``j <= i`` (0
    otherwise), the derivative of ``out[i]`` by ``input[j]``: each is at most 1, so the
    rules cannot overflow, and being plain graphgrad ops they differentiate again
    exactly (n times the input's size, as cumprod's)."""

    holomorphic = False
    promotes = False
    saves_output = True

    @staticmethod
    def forward(a, *, dim):
        if a.dtype.kind not in "fc":
            raise NotImplementedError(f'"logcumsumexp_out_cpu" not implemented for '
                                      f"'{scalar_name(a.dtype)}'")
        if a.ndim == 0:
            return a.copy()
        return xp.logaddexp.accumulate(a, axis=dim)

    @staticmethod
    def _weights(out, a, dim):
        """``W`` (..., n, n) with the slices along ``dim`` moved last."""
        am, om = a.movedim(dim, -1), out.movedim(dim, -1)
        diff = am.unsqueeze(-1) - om.unsqueeze(-2)
        return where(_upper(am.shape[-1]), diff, -float("inf")).exp()

    @classmethod
    def vjp(cls, g, out, a, *, dim):
        if a.ndim == 0:
            return (g,)
        w = cls._weights(out, a, dim)
        return ((w * g.movedim(dim, -1).unsqueeze(-2)).sum(dim=-1).movedim(-1, dim),)

    @classmethod
    def jvp(cls, dots, out, a, *, dim):
        if a.ndim == 0:
            return dots[0]
        w = cls._weights(out, a, dim)
        return (w * dots[0].movedim(dim, -1).unsqueeze(-1)).sum(dim=-2).movedim(-1, dim)

    @classmethod
    def taylor(cls, series, out, a, *, dim):
        # out[i] + log S_i(t), S_i(t) = sum_{j <= i} W[j, i] E_j(t) with E_j the series of
        # exp(x_j(t) - x_j0) (E_j0 = 1): S_i(0) = 1, and W <= 1 cannot overflow
        if a.ndim == 0:
            return series[0]
        order = ts.order_of(series)
        w = cls._weights(out, a, dim)
        e = ts.exp_series(ts.full(None, series[0], order), 1.0, order)
        s = [None if t is None else (w * t.movedim(dim, -1).unsqueeze(-1)).sum(dim=-2)
             .movedim(-1, dim) for t in e]
        return ts.log_series([1.0, *s], 0.0, order)

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        return along_dim_batched(cls, vals[0], bdims[0], dim), 0


def logcumsumexp(input, dim: int):
    """The log of the cumulative sum of ``exp(input)`` along ``dim``."""
    return Logcumsumexp.apply(input, dim=normalize_dim(dim, input.ndim, "logcumsumexp"))
