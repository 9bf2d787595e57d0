"""Layer ``ops``: matrix products (``matmul`` and its spellings mm, bmm, mv, dot, outer)."""

from __future__ import annotations

import math

from graphgrad.backend import xp
from graphgrad.tensor import SparseTensor

from .arithmetic import needs_grad
from .complex_kernels import real_times_complex
from .base import C_NAMES, Op, Spec, broadcast_shapes, fmt_shape, scalar_name, spec_of
from .batching import align, logical_ndim, to_front
from .reduce import Sum
from .shape import Permute
from . import taylor as ts

__all__ = ["matmul", "mm", "bmm", "mv", "dot", "vdot", "outer", "inner", "check_linear_dtypes"]

_SMALL = xp.ones(4)


def reset_avx_state() -> None:
    """Called after a complex matmul: OpenBLAS's complex gemm kernels can return with the
    upper AVX register state dirty; the SSE code of glibc's complex functions (ctanh,
    csin, clog...) that NumPy calls next then pays the AVX-SSE transition penalty on every
    instruction: measured here, complex tanh of a (100, 100) array went from 0.25 ms to
    16 ms after a zgemm, which made complex-step Hessians 2.6x slower. NumPy's AVX loops
    end with vzeroupper, which resets the state for about a microsecond. (The caller checks
    the dtype inline: a function call on every real matmul cost ~100 ns of ~600.)"""
    xp.tanh(_SMALL)


# below this many multiply-adds (m k n) zgemm is fast enough that checking a factor
# for a zero imaginary part does not pay
_SPLIT_MIN = 1 << 15
_WIDE = 16


def complex_matmul(a, b):
    """``a @ b`` for complex operands. The complex step multiplies real weights (cast to
    complex by its mode) with complex activations: with one factor real the product is
    two real GEMMs of work, where zgemm does four (measured at 300 x 300: zgemm 2.3 ms,
    the real route 1.3 ms). The real route forms the same products and sums as zgemm
    less its terms of exact zeros (0 * imaginary part), so the values are equal up to
    the order of summation. It is taken for a factor whose imaginary part is zero
    everywhere (the check is O(size), a few % of the product)."""
    if a.ndim >= 2 and b.ndim >= 2:
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        # the check and the real factor's copy cost O(its size): worth it only when the
        # other factor is wide (a matrix-vector product would pay more than it saves)
        if m * k * n >= _SPLIT_MIN:
            if n >= _WIDE and not a.imag.any():
                return real_times_complex(a.real, b)
            if m >= _WIDE and not b.imag.any():  # (a @ b)^T = b^T @ a^T
                return real_times_complex(b.real.swapaxes(-1, -2),
                                           a.swapaxes(-1, -2)).swapaxes(-1, -2)
    out = xp.matmul(a, b)
    reset_avx_state()
    return out


class Matmul(Op):
    """NumPy/PyTorch ``matmul``: vectors, matrices, and batches that broadcast."""

    rank_free = True
    same_dtypes = True

    @staticmethod
    def saves_inputs(a, b):  # a's gradient reads b, b's reads a
        return tuple(i for i, other in ((0, b), (1, a)) if needs_grad(other))

    holomorphic = True

    @staticmethod
    def forward(a, b, out=None):
        """``out``: only from the memory planner (backends/memory_plan.py), where
        ``accepts_out`` allows it: the product written into that buffer."""
        if a.ndim == 0 or b.ndim == 0:
            raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                               f"{a.ndim}D and {b.ndim}D")
        if a.dtype is not b.dtype:  # (equal dtypes are nearly always the same object)
            Matmul.infer(a, b)  # PyTorch refuses mixed dtypes (after the shapes)
        if a.dtype.kind == "c":
            return complex_matmul(a, b)
        # (no ``out=None`` on the eager path: NumPy parsing it costs ~60 ns a call here)
        return xp.matmul(a, b) if out is None else xp.matmul(a, b, out=out)

    @staticmethod
    def accepts_out(a: Spec, b: Spec) -> bool:
        """Whether ``forward(a, b, out=buf)`` writes into ``buf`` (C-contiguous, the
        result's shape and dtype, owning its data, sharing no memory with ``a`` or ``b``)
        bit for bit what it returns without: real floating operands of one dtype and at
        least two dims, where NumPy's matmul makes the same BLAS call into ``buf``. Not
        complex products (their real route returns views), mixed dtypes or vectors."""
        return (a.dtype == b.dtype and xp.dtype(a.dtype).kind == "f"
                and len(a.shape) >= 2 and len(b.shape) >= 2)

    @staticmethod
    def vjp(g, out, a, b):
        ga = gb = None
        if a.ndim == 1 and b.ndim == 1:
            return (g * b if needs_grad(a) else None), (g * a if needs_grad(b) else None)
        if a.ndim == 1:  # (k) @ (..., k, n) -> (..., n)
            if needs_grad(a):
                ga = (g.unsqueeze(-2) @ b.mT).squeeze(-2)
            if needs_grad(b):
                gb = a.unsqueeze(-1) @ g.unsqueeze(-2)
            return ga, gb
        if b.ndim == 1:  # (..., m, k) @ (k) -> (..., m)
            if needs_grad(a):
                ga = g.unsqueeze(-1) @ b.unsqueeze(-2)
            if needs_grad(b):
                gb = (a.mT @ g.unsqueeze(-1)).squeeze(-1)
            return ga, gb
        if needs_grad(a):
            ga = g @ b.mT
        if needs_grad(b):
            gb = a.mT @ g
        return ga, gb

    @staticmethod
    def jvp(dots, out, a, b):
        da, db = dots
        ta = Matmul.apply(da, b) if da is not None else None
        tb = Matmul.apply(a, db) if db is not None else None
        return tb if ta is None else ta if tb is None else ta + tb

    @staticmethod
    def taylor(series, out, a, b):
        k = ts.order_of(series)  # bilinear: Y_k = sum_j A_j @ B_{k-j}
        fa, fb = ts.full(a, series[0], k), ts.full(b, series[1], k)
        return [ts.bilinear(fa, fb, i, Matmul.apply) for i in range(1, k + 1)]

    @classmethod
    def batch(cls, vals, bdims):
        """Batch dim first; a batched vector becomes a one-row (or one-column) matrix so
        the batch is not mistaken for a matrix dim; then batch ranks are lined up.

        When one side is an unbatched vector or matrix and the other a batch of vectors
        or matrices, the batch is folded into the rows (batched left side) or columns
        (batched right side) of one product: one BLAS gemm/gemv instead of NumPy's loop
        of one small product per example."""
        (a, b), (da, db) = vals, bdims
        la, lb = logical_ndim(a, da), logical_ndim(b, db)
        if (da is None) != (db is None) and 1 <= la <= 2 and 1 <= lb <= 2:
            folded = _fold(a, b, da, db, la, lb)
            if folded is not None:
                return folded
        a, b = to_front(a, da), to_front(b, db)
        if da is not None and la == 1:
            a = a.unsqueeze(1)
        if db is not None and lb == 1:
            b = b.unsqueeze(-1)
        eff_a = 2 if (da is not None and la == 1) else la
        eff_b = 2 if (db is not None and lb == 1) else lb
        nbatch = max(eff_a - 2, eff_b - 2, 0)
        if da is not None and eff_a - 2 < nbatch:
            a = a.reshape(a.shape[0], *([1] * (nbatch - eff_a + 2)), *a.shape[1:])
        if db is not None and eff_b - 2 < nbatch:
            b = b.reshape(b.shape[0], *([1] * (nbatch - eff_b + 2)), *b.shape[1:])
        out = Matmul.apply(a, b)
        size = (a if da is not None else b).shape[0]
        logical = cls.infer(_example(vals[0], bdims[0]), _example(vals[1], bdims[1]))
        return out.reshape(size, *logical.shape), 0

    @classmethod
    def infer(cls, a, b) -> Spec:
        if a.ndim == 0 or b.ndim == 0:
            raise RuntimeError(f"matmul: both arguments to matmul need to be at least 1D, but "
                               f"they are {a.ndim}D and {b.ndim}D")
        sa, sb = a.shape, b.shape
        ka = sa[-1]
        kb = sb[0] if len(sb) == 1 else sb[-2]
        if ka is not None and kb is not None and ka != kb:
            if len(sb) == 2 and None not in sa:  # PyTorch's mm (the rows of a folded)
                raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied "
                                   f"({math.prod(sa[:-1])}x{ka} and {kb}x{sb[1]})")
            raise RuntimeError(f"matmul: shapes {fmt_shape(sa)} and {fmt_shape(sb)} cannot be "
                               f"multiplied ({ka} != {kb})")
        batch = broadcast_shapes("matmul", sa[:-2], sb[:-2])
        shape = batch + (sa[-2:-1] if len(sa) > 1 else ()) + (sb[-1:] if len(sb) > 1 else ())
        if a.dtype != b.dtype:
            raise RuntimeError(_mixed_dtypes(a, b))
        return Spec(shape, a.dtype)


def _mixed_dtypes(a, b) -> str:
    """PyTorch's refusal of a product of two dtypes, worded by the kernel it picks."""
    if a.ndim == 1 and b.ndim == 1:
        return (f"dot : expected both vectors to have same dtype, but found "
                f"{scalar_name(a.dtype)} and {scalar_name(b.dtype)}")
    if b.ndim == 1:
        return (f"addmv input tensors must have the same dtype, but got {scalar_name(b.dtype)}, "
                f"{scalar_name(a.dtype)}, and {scalar_name(b.dtype)}")
    if b.ndim == 2:
        return (f"expected m1 and m2 to have the same dtype, but got: {_c_name(a.dtype)} != "
                f"{_c_name(b.dtype)}")
    return f"expected scalar type {scalar_name(a.dtype)} but found {scalar_name(b.dtype)}"


def _c_name(dtype) -> str:
    name = xp.dtype(dtype).name
    return C_NAMES.get(name, name)


def _fold(a, b, da, db, la, lb):
    """Matmul.batch when exactly one side is batched and both are logical vectors or
    matrices: the batch becomes extra rows or columns of a single product. Returns
    None (the general rule runs and reports the error) when the inner dims differ."""
    if db is None:  # batched left side: a (B, k) or (B, m, k); b (k,) or (k, n)
        a = to_front(a, da)
        size, k = a.shape[0], a.shape[-1]
        if k != b.shape[0]:
            return None
        if la == 1:  # (B, k) @ b: already one product
            return Matmul.apply(a, b), 0
        m = a.shape[1]
        out = Matmul.apply(a.reshape(size * m, k), b)  # (B*m,) or (B*m, n)
        return out.reshape(size, m, *b.shape[1:]), 0
    b = to_front(b, db)  # batched right side: b (B, k) or (B, k, n); a (k,) or (m, k)
    size, k = b.shape[0], b.shape[1]
    if a.shape[-1] != k:
        return None
    if lb == 1:  # a @ b.mT: (m, B) or (B,)
        if la == 1:
            return Matmul.apply(b, a), 0
        return Matmul.apply(a, b.mT), 1
    n = b.shape[2]
    cols = b.movedim(0, 1).reshape(k, size * n)  # a view when n == 1
    out = Matmul.apply(a, cols)  # (B*n,) or (m, B*n)
    if la == 1:
        return out.reshape(size, n), 0
    return out.reshape(a.shape[0], size, n), 1


def _example(v, bdim) -> Spec:
    """The Spec of one example of a (possibly batched) physical value."""
    s = spec_of(v)
    if bdim is None:
        return s
    return Spec(s.shape[:bdim] + s.shape[bdim + 1:], s.dtype)


def matmul(input, other):
    if type(input) is SparseTensor:  # the sparse product (ops.sparse_coo)
        return input.matmul(other)
    return Matmul.apply(input, other)


def _check_ndim(name: str, t, ndim: int, what: str) -> None:
    if t.ndim != ndim:
        raise RuntimeError(f"{name}: {what} must be a {ndim}D tensor, got {t.ndim}D "
                           f"with shape {fmt_shape(tuple(t.shape))}")


def mm(input, mat2):
    if type(input) is SparseTensor:  # the sparse product (ops.sparse_coo)
        return input.mm(mat2)
    _check_ndim("mm", input, 2, "self")
    _check_ndim("mm", mat2, 2, "mat2")
    return Matmul.apply(input, mat2)


def bmm(input, mat2):
    _check_ndim("bmm", input, 3, "batch1")
    _check_ndim("bmm", mat2, 3, "batch2")
    return Matmul.apply(input, mat2)


def mv(input, vec):
    _check_ndim("mv", input, 2, "self")
    _check_ndim("mv", vec, 1, "vec")
    return Matmul.apply(input, vec)


def dot(input, other):
    _check_ndim("dot", input, 1, "self")
    _check_ndim("dot", other, 1, "other")
    return Matmul.apply(input, other)


vdot = inner = dot


def outer(input, vec2):
    for what, t in (("self", input), ("vec2", vec2)):
        if t.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {what}, but got {t.ndim}-D")
    return input.unsqueeze(-1) * vec2.unsqueeze(-2)


class Linear(Op):
    """``torch.nn.functional.linear`` for a matrix of examples: ``input @ weight.T + bias``
    with ``input`` (N, in), ``weight`` (out, in) and an optional ``bias`` that broadcasts to
    (N, out) without growing it. One op where the composite takes three (a transpose, a
    matmul, an add) and its backward five more: a training step's fixed cost is mostly
    per-op overhead. PyTorch records this case as ``AddmmBackward0``; ``nn.functional
    .linear`` also runs batches of matrices on it (their rows as one matrix, so the weight
    gradient is one GEMM) and the composite for other ranks."""

    holomorphic = True
    same_dtypes = True  # as matmul: the complex step casts real operands first

    @staticmethod
    def saves_inputs(x, w, b=None):  # x's gradient reads w; w's reads x; b's reads nothing
        return tuple(i for i, other in ((0, w), (1, x)) if needs_grad(other))

    @staticmethod
    def forward(x, w, b=None, out=None):
        """``out``: only from the memory planner (backends/memory_plan.py), where
        ``accepts_out`` allows it: the result written into that buffer."""
        if x.ndim != 2 or w.ndim != 2:  # (NumPy would broadcast other ranks)
            _check_linear(x.shape, w.shape, None)
        if x.dtype is not w.dtype or b is not None and b.dtype is not w.dtype:
            Linear.infer(x, w, b)  # PyTorch refuses mixed dtypes (after the shapes)
        # other mistakes make NumPy raise; dispatch then asks ``infer`` for the message
        # BLAS reads the transposed weight in place
        if x.dtype.kind == "c":
            out = complex_matmul(x, w.T)
        else:
            out = xp.matmul(x, w.T) if out is None else xp.matmul(x, w.T, out=out)
        if b is not None:
            if b.dtype == out.dtype:
                out += b  # out is fresh or the planner's: no second output array
            else:  # mixed dtypes: promoted as the composite's add would be
                out = out + b
        return out

    @staticmethod
    def vjp(g, out, x, w, b=None):
        # the ops are applied directly (not through g.mT, g.sum): this rule runs three
        # times in every step of an MLP, where each wrapper's argument checks show
        gx = Matmul.apply(g, w) if needs_grad(x) else None
        gw = Matmul.apply(Permute.apply(g, dims=(1, 0)), x) if needs_grad(w) else None
        if b is None:
            return gx, gw
        if not needs_grad(b):
            return gx, gw, None
        # A layer's bias (out,) is added to every row: its cotangent is the column sum,
        # part of this op's own definition. Any other bias shape is a broadcast, which
        # the engine reduces (STYLE rule 4); doing the common case here saves the
        # engine's generic reduce-and-reshape in every training step.
        return gx, gw, (Sum.apply(g, dim=(0,), keepdim=False) if b.ndim == 1 else g)

    @staticmethod
    def jvp(dots, out, x, w, b=None):
        dx, dw = dots[0], dots[1]
        db = dots[2] if b is not None else None
        terms = []
        if dx is not None:
            terms.append(Linear.apply(dx, w) if db is None else Linear.apply(dx, w, db))
            db = None
        if dw is not None:
            terms.append(Linear.apply(x, dw) if db is None else Linear.apply(x, dw, db))
            db = None
        if db is not None:
            terms.append(db.expand(*out.shape))
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total

    @staticmethod
    def taylor(series, out, x, w, b=None):
        # bilinear in (x, w); the bias is affine and enters at its own orders only
        k = ts.order_of(series)
        fx, fw = ts.full(x, series[0], k), ts.full(w, series[1], k)
        sb = series[2] if b is not None else None
        return [ts.plus(ts.bilinear(fx, fw, i, Linear.apply),
                        None if sb is None or sb[i - 1] is None else sb[i - 1].expand(*out.shape))
                for i in range(1, k + 1)]

    @classmethod
    def batch(cls, vals, bdims):
        """Only the examples batched (and a bias that is one row): the batch joins the
        rows, one op. Otherwise the composite on batch-first values (a batched matmul, a
        broadcast add)."""
        x, w = vals[0], vals[1]
        b = vals[2] if len(vals) > 2 else None
        dx, dw = bdims[0], bdims[1]
        db = bdims[2] if len(vals) > 2 else None
        if dw is None and db is None and (b is None or b.ndim < 2 or b.shape[0] == 1):
            x = to_front(x, dx)
            size, n = x.shape[0], x.shape[1]
            rows = x.reshape(size * n, x.shape[2])
            out = cls.apply(rows, w) if b is None else cls.apply(rows, w, b)
            return out.reshape(size, n, out.shape[-1]), 0
        x, w = _batch_first(x, dx), _batch_first(w, dw)
        out = Matmul.apply(x, w.mT)  # (B, N, out): either side's batch broadcasts
        return (out if b is None else out + _batch_first(b, db)), 0

    @staticmethod
    def accepts_out(x: Spec, w: Spec, b: Spec | None = None) -> bool:
        """Whether ``forward(x, w, b, out=buf)`` writes into ``buf`` bit for bit what it
        returns without (``Matmul.accepts_out``'s terms; the bias is then added in place
        as on a fresh result): real floating operands of one dtype, bias included."""
        return (len(x.shape) == 2 and Matmul.accepts_out(x, w)
                and (b is None or b.dtype == w.dtype))

    @classmethod
    def infer(cls, x, w, b=None) -> Spec:
        _check_linear(x.shape, w.shape, None if b is None else b.shape)
        check_linear_dtypes(x, w, b)
        return Spec((x.shape[0], w.shape[0]), w.dtype)


def check_linear_dtypes(x, w, b=None) -> None:
    """PyTorch's refusals of ``addmm(bias, x, weight.T)`` (or of ``x @ weight.T``) on
    operands of different dtypes."""
    if b is not None and b.dtype != w.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got "
                           f"{scalar_name(b.dtype)} and {scalar_name(w.dtype)}")
    if x.dtype != w.dtype:
        if b is None:
            raise RuntimeError(_mixed_dtypes(x, w))
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got "
                           f"{scalar_name(x.dtype)} and {scalar_name(w.dtype)}")


def _batch_first(v, bdim):
    """A batched value as (B, *example padded to 2 dims); unbatched values unchanged."""
    return v if bdim is None else align(v, bdim, 2)


def _check_linear(xs: tuple, ws: tuple, bs: tuple | None) -> None:
    """PyTorch's errors for ``addmm(bias, x, weight.T)``."""
    if len(xs) != 2 or len(ws) != 2:
        raise RuntimeError(f"linear: expected a 2D input and a 2D weight, got shapes "
                           f"{fmt_shape(xs)} and {fmt_shape(ws)}")
    if xs[1] is not None and ws[1] is not None and xs[1] != ws[1]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({xs[0]}x{xs[1]} and "
                           f"{ws[1]}x{ws[0]})")
    if bs is not None:
        out = (xs[0], ws[0])
        if len(bs) > 2:
            raise RuntimeError(f"linear: bias of shape {fmt_shape(bs)} has more dims than the "
                               f"output {fmt_shape(out)}")
        for i in range(1, len(bs) + 1):  # from the last dim, as PyTorch reports the first
            if bs[-i] not in (1, out[-i]) and None not in (bs[-i], out[-i]):
                raise RuntimeError(
                    f"The expanded size of the tensor ({out[-i]}) must match the existing size "
                    f"({bs[-i]}) at non-singleton dimension {2 - i}.  Target sizes: "
                    f"{list(out)}.  Tensor sizes: {list(bs)}")
