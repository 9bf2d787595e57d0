"""Layer ``ops``: pooling over any number of spatial dims as single ops with an
index-based backward.

Max pooling is two ops: ``MaxPoolIndices`` finds each window's maximum as PyTorch's
``max_pool*d_with_indices`` reports it (the flat position in the input plane), and
``TakePlanes`` reads the values there. The gradient of ``TakePlanes`` is
``PutPlanes``, which adds each gradient at its index (or, when windows cannot overlap,
writes it): no scan of the windows in the backward, no ``np.add.at``.

Average pooling is ``AvgPool``, the window sums over PyTorch's divisor; its gradient
``AvgPoolBackward`` spreads each output gradient over its window, and the two are each
other's transpose, so derivatives of every order stay on these two kernels.

Windows are scanned by kernel offset: one strided slice of the padded input per offset
(prod(kernel) vectorized steps), never a loop over output positions.
"""

from __future__ import annotations

import itertools
import math

from graphgrad.backend import xp

from . import taylor as ts
from .base import Op, Spec
from .batching import all_to_front
from .shape import _Linear as LinearInFirst

__all__ = ["pool_out_size", "windows_overlap"]


def pool_out_size(size: int, k: int, d: int, p: int, s: int, ceil_mode: bool = False) -> int:
    """PyTorch's ``pooling_output_shape``: windows of ``k`` (dilation ``d``) at stride
    ``s`` over ``size`` padded by ``p``; with ``ceil_mode`` a last partial window counts
    if it starts inside the input or the left padding."""
    span = size + 2 * p - d * (k - 1) - 1
    n = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= size + p:
        n -= 1
    return n


def windows_overlap(kernel_size, stride, dilation) -> bool:
    return any(s < (k - 1) * d + 1 for k, s, d in zip(kernel_size, stride, dilation,
                                                      strict=True))


def _geometry(size, kernel_size, stride, padding, dilation, ceil_mode):
    """Output sizes and the padded extent (left padding, input, right padding enough
    for ceil_mode's last partial window) per dim."""
    out = tuple(pool_out_size(e, k, d, p, s, ceil_mode) for e, k, d, p, s in
                zip(size, kernel_size, dilation, padding, stride, strict=True))
    extent = tuple(max(e + 2 * p, (o - 1) * s + d * (k - 1) + 1) for e, o, k, s, p, d in
                   zip(size, out, kernel_size, stride, padding, dilation, strict=True))
    return out, extent


def _padded(x, padding, extent, fill):
    if tuple(x.shape[2:]) == extent:
        return x
    buf = xp.full((*x.shape[:2], *extent), fill, dtype=x.dtype)
    buf[(slice(None), slice(None),
         *(slice(p, p + e) for p, e in zip(padding, x.shape[2:], strict=True)))] = x
    return buf


def _offsets(kernel_size, stride, dilation, out):
    """(offset, the slices of the padded input it picks for every output position)."""
    for offset in itertools.product(*(range(k) for k in kernel_size)):
        yield offset, (slice(None), slice(None), *(
            slice(j * d, j * d + s * (o - 1) + 1, s)
            for j, d, s, o in zip(offset, dilation, stride, out, strict=True)))


def _fold_batch(cls, vals, bdims, **params):
    """vmap by folding the batch into the examples (every input batched alike)."""
    vals = all_to_front(vals, bdims)
    b, n = vals[0].shape[:2]
    y = cls.apply(*(v.reshape(b * n, *v.shape[2:]) for v in vals), **params)
    return y.reshape(b, n, *y.shape[1:]), 0


class _Linear(LinearInFirst):
    """A pooling op linear in its first input (the others are indices): its tangent and
    Taylor series are the op's on the first input's (shape's linear ops), and vmap folds
    the batch into the examples."""

    holomorphic = True  # analytic: the complex step goes through it
    promotes = True     # (as before: Op's default, where shape's linear ops opt out)

    @classmethod
    def batch(cls, vals, bdims, **params):
        return _fold_batch(cls, vals, bdims, **params)


def _first_maximum(views):
    """The number of the first view holding the elementwise maximum; None where that
    is not PyTorch's answer (a NaN, or a maximum equal to the padding value: its first
    occurrence may lie in the padding)."""
    best = views[0].copy()
    for v in views[1:]:
        xp.maximum(best, v, out=best)  # NaN propagates: detected below
    # pick = number where equal, by arithmetic on small ints (masked writes are slower)
    pick = xp.full(best.shape, -1, dtype=xp.int8 if len(views) < 128 else xp.int32)
    equal = xp.empty(best.shape, dtype=bool)
    step = xp.empty_like(pick)
    for number in range(len(views) - 1, -1, -1):  # backwards: the first equal one wins
        xp.equal(views[number], best, out=equal)
        xp.subtract(number, pick, out=step, dtype=pick.dtype)
        step *= equal
        pick += step
    lowest = -xp.inf if best.dtype.kind in "fc" else xp.iinfo(best.dtype).min
    if pick.size and (pick.min() < 0 or (best == lowest).any()):   # (empty: no min)
        return None
    return pick


def _scanned_maximum(views, lowest, floating: bool):
    """PyTorch's scan: strictly greater, or NaN, replaces; -1 where nothing did."""
    best = xp.full(views[0].shape, lowest, dtype=views[0].dtype)
    pick = xp.full(best.shape, -1, dtype=xp.intp)
    for number, v in enumerate(views):
        take = v > best
        if floating:
            take |= xp.isnan(v)
        xp.copyto(best, v, where=take)
        xp.copyto(pick, number, where=take)
    return pick


class MaxPoolIndices(Op):
    """The flat index in its (N, C) plane of each window's maximum: the first maximum in
    scan order, a NaN counting as the maximum (the last NaN met), and for a window of
    only -inf its first element inside the input, as PyTorch's kernel."""

    differentiable = False
    taylor = classmethod(ts.zero_taylor)  # integer indices: piecewise constant

    @staticmethod
    def forward(x, *, kernel_size, stride, padding, dilation, ceil_mode):
        size = x.shape[2:]
        out, extent = _geometry(size, kernel_size, stride, padding, dilation, ceil_mode)
        floating = x.dtype.kind in "fc"
        lowest = -xp.inf if floating else xp.iinfo(x.dtype).min
        buf = _padded(x, padding, extent, lowest)
        views = [buf[where] for _, where in _offsets(kernel_size, stride, dilation, out)]
        pick = _first_maximum(views)
        if pick is None:  # a NaN, or a window of only the padding's value: PyTorch's scan
            pick = _scanned_maximum(views, lowest, floating)
        # flat index = window start + the picked offset, per dim in plane strides
        plane = [math.prod(size[i + 1:]) for i in range(len(size))]
        offset_flat = xp.zeros(math.prod(kernel_size), dtype=xp.int64)
        start_flat = xp.zeros(out, dtype=xp.int64)
        first_flat = xp.zeros(out, dtype=xp.int64)
        for i, (o, s, p, d, st) in enumerate(zip(out, stride, padding, dilation, plane,
                                                 strict=True)):
            shape = [1] * len(out)
            shape[i] = o
            start = xp.arange(o).reshape(shape) * s - p
            start_flat = start_flat + start * st
            first = start + -(-xp.maximum(-start, 0) // d) * d  # first position inside
            first_flat = first_flat + first * st
        for number, offset in enumerate(itertools.product(*(range(k) for k in kernel_size))):
            offset_flat[number] = sum(j * d * st for j, d, st in
                                      zip(offset, dilation, plane, strict=True))
        flat = start_flat + xp.take(offset_flat, pick)
        return flat if not pick.size or pick.min() >= 0 else xp.where(pick < 0, first_flat, flat)

    @classmethod
    def batch(cls, vals, bdims, **params):
        return _fold_batch(cls, vals, bdims, **params)

    @classmethod
    def infer(cls, x, *, kernel_size, stride, padding, dilation, ceil_mode) -> Spec:
        out, _ = _geometry(x.shape[2:], kernel_size, stride, padding, dilation, ceil_mode)
        return Spec((*x.shape[:2], *out), xp.dtype(xp.int64))


class TakePlanes(_Linear):
    """``input`` (N, C, *size) read at flat ``indices`` (N, C, *out) of each plane;
    ``distinct``: no index repeats within a plane (windows that cannot overlap), so the
    gradient writes instead of adding."""

    @staticmethod
    def forward(x, indices, *, distinct=False):
        n, c = x.shape[:2]
        # (sizes given, not -1: an empty batch leaves -1 undetermined)
        flat = indices.reshape(n, c, math.prod(indices.shape[2:]))
        return xp.take_along_axis(x.reshape(n, c, math.prod(x.shape[2:])), flat,
                                  axis=2).reshape(indices.shape)

    @staticmethod
    def vjp(g, out, x, indices, *, distinct=False):
        return PutPlanes.apply(g, indices, size=tuple(x.shape[2:]),
                               accumulate=not distinct), None

    @classmethod
    def infer(cls, x, indices, **params) -> Spec:
        return Spec(tuple(indices.shape), x.dtype)


class PutPlanes(_Linear):
    """Zeros (N, C, *size) with ``src`` added at the flat ``indices`` of each plane
    (``accumulate``), or written there (the indices are known to be distinct)."""

    @staticmethod
    def forward(src, indices, *, size, accumulate):
        n, c = src.shape[:2]
        plane = math.prod(size)
        where = (indices.reshape(n * c, math.prod(indices.shape[2:]))
                 + xp.arange(n * c)[:, None] * plane).reshape(-1)
        if accumulate and src.dtype.kind == "f":
            out = xp.bincount(where, weights=src.reshape(-1), minlength=n * c * plane)
            out = out.astype(src.dtype, copy=False)
        else:
            out = xp.zeros(n * c * plane, dtype=src.dtype)
            if accumulate:
                xp.add.at(out, where, src.reshape(-1))
            else:
                out[where] = src.reshape(-1)
        return out.reshape(n, c, *size)

    @staticmethod
    def vjp(g, out, src, indices, *, size, accumulate):
        return TakePlanes.apply(g, indices, distinct=not accumulate), None

    @classmethod
    def infer(cls, src, indices, *, size, accumulate) -> Spec:
        return Spec((*src.shape[:2], *size), src.dtype)


def _divisor(size, out, kernel_size, stride, padding, count_include_pad, divisor_override):
    """PyTorch's divisor per output position: the window clipped to the padded input
    (``count_include_pad``) or to the input, or ``divisor_override``. Separable: a
    product of per-dim counts."""
    if divisor_override is not None:
        return xp.full((1,) * (len(out) + 2), divisor_override, dtype=xp.int64)
    divisor = xp.ones((1, 1), dtype=xp.int64)
    for e, k, s, p, o in zip(size, kernel_size, stride, padding, out, strict=True):
        start = xp.arange(o) * s - p
        end = xp.minimum(start + k, e + p)
        if not count_include_pad:
            start, end = xp.maximum(start, 0), xp.minimum(end, e)
        divisor = divisor[..., None] * (end - start)
    return divisor


class AvgPool(_Linear):
    """The window sums of (N, C, *size) over PyTorch's divisor (see ``_divisor``);
    integer inputs divide with truncation, as PyTorch's kernel."""

    @staticmethod
    def forward(x, *, kernel_size, stride, padding, ceil_mode, count_include_pad,
                divisor_override):
        size = x.shape[2:]
        ones = (1,) * len(size)
        out, extent = _geometry(size, kernel_size, stride, padding, ones, ceil_mode)
        buf = _padded(x, padding, extent, 0)
        total = None
        for _, where in _offsets(kernel_size, stride, ones, out):
            total = buf[where].copy() if total is None else total.__iadd__(buf[where])
        divisor = _divisor(size, out, kernel_size, stride, padding, count_include_pad,
                           divisor_override)
        if x.dtype.kind in "iu":
            return xp.trunc(total / divisor).astype(x.dtype)
        total /= divisor.astype(x.dtype)
        return total

    @staticmethod
    def vjp(g, out, x, **params):
        return (AvgPoolBackward.apply(g, size=tuple(x.shape[2:]), **params),)

    @classmethod
    def infer(cls, x, *, kernel_size, stride, padding, ceil_mode, **_) -> Spec:
        out, _ = _geometry(x.shape[2:], kernel_size, stride, padding, (1,) * len(kernel_size),
                           ceil_mode)
        return Spec((*x.shape[:2], *out), x.dtype)


class AvgPoolBackward(_Linear):
    """The transpose of ``AvgPool``: each output gradient over its divisor, added to
    every input position of its window."""

    @staticmethod
    def forward(g, *, size, kernel_size, stride, padding, ceil_mode, count_include_pad,
                divisor_override):
        ones = (1,) * len(size)
        out, extent = _geometry(size, kernel_size, stride, padding, ones, ceil_mode)
        share = g / _divisor(size, out, kernel_size, stride, padding, count_include_pad,
                             divisor_override).astype(g.dtype)
        buf = xp.zeros((*g.shape[:2], *extent), dtype=g.dtype)
        for _, where in _offsets(kernel_size, stride, ones, out):
            buf[where] += share
        return buf[(slice(None), slice(None),
                    *(slice(p, p + e) for p, e in zip(padding, size, strict=True)))].copy()

    @staticmethod
    def vjp(g, out, grad_output, *, size, **params):
        return (AvgPool.apply(g, **params),)

    @classmethod
    def infer(cls, g, *, size, **_) -> Spec:
        return Spec((*g.shape[:2], *size), g.dtype)


# ---- adaptive pooling: PyTorch's windows, start floor(i E / O), end ceil((i + 1) E / O) ----

def _adaptive_windows(e: int, o: int):
    i = xp.arange(o)
    return (i * e) // o, -(-((i + 1) * e) // o)


def _window_slices(axis: int, start: int, end: int) -> tuple:
    return (*(slice(None),) * axis, slice(int(start), int(end)))


class AdaptiveAvgPool(_Linear):
    """The means over the adaptive windows mapping (N, C, *size) to (N, C,
    *output_size); ``transposed``: the adjoint map, (N, C, *output_size) to (N, C,
    *size), which is its gradient (and the other way round). Separable: one dim at a
    time, one slice per output position (sums of slices, not a product with an
    averaging matrix, so an inf or NaN stays in its own windows as in PyTorch)."""

    @staticmethod
    def forward(x, *, size, output_size, transposed):
        for axis, (e, o) in enumerate(zip(size, output_size, strict=True), start=2):
            start, end = _adaptive_windows(e, o)
            if not transposed:
                x = xp.concatenate([x[_window_slices(axis, s, t)].sum(
                    axis=axis, keepdims=True) / x.dtype.type(t - s)
                    for s, t in zip(start, end, strict=True)], axis=axis)
                continue
            buf = xp.zeros((*x.shape[:axis], e, *x.shape[axis + 1:]), dtype=x.dtype)
            for i, (s, t) in enumerate(zip(start, end, strict=True)):
                buf[_window_slices(axis, s, t)] += (
                    x[_window_slices(axis, i, i + 1)] / x.dtype.type(t - s))
            x = buf
        return x

    @staticmethod
    def vjp(g, out, x, *, size, output_size, transposed):
        return (AdaptiveAvgPool.apply(g, size=size, output_size=output_size,
                                      transposed=not transposed),)

    @classmethod
    def infer(cls, x, *, size, output_size, transposed) -> Spec:
        return Spec((*x.shape[:2], *(size if transposed else output_size)), x.dtype)


class AdaptiveMaxPoolIndices(Op):
    """The flat index in its (N, C) plane of each adaptive window's maximum: the first
    maximum in scan order, the last NaN if there is one, the window's first element if
    all are -inf, as PyTorch's kernel. Windows of one dim differ by at most one in
    length: each is read at its longest length with its last element repeated, which
    changes neither the maximum nor the index found."""

    differentiable = False
    taylor = classmethod(ts.zero_taylor)  # integer indices: piecewise constant

    @staticmethod
    def forward(x, *, output_size):
        size = x.shape[2:]
        nd = len(size)
        gathers, lengths = [], []
        for e, o in zip(size, output_size, strict=True):
            start, end = _adaptive_windows(e, o)
            length = int((end - start).max())
            gathers.append(xp.minimum(start[:, None] + xp.arange(length), end[:, None] - 1))
            lengths.append(length)
        # windows (N, C, O_1, K_1, ..., O_n, K_n) by one advanced index per dim
        index = tuple(g.reshape((1,) * (2 * d) + g.shape + (1,) * (2 * (nd - d - 1)))
                      for d, g in enumerate(gathers))
        windows = x[(slice(None), slice(None), *index)]
        order = (0, 1, *range(2, 2 + 2 * nd, 2), *range(3, 3 + 2 * nd, 2))
        windows = windows.transpose(order)
        windows = windows.reshape(*x.shape[:2], *output_size, math.prod(windows.shape[2 + nd:]))
        pick = xp.argmax(windows, axis=-1)  # the first maximum, or the first NaN
        if windows.dtype.kind in "fc":
            nan = xp.isnan(windows)
            if nan.any():
                last = windows.shape[-1] - 1 - xp.argmax(nan[..., ::-1], axis=-1)
                pick = xp.where(nan.any(axis=-1), last, pick)
        offsets = xp.unravel_index(pick, lengths)
        flat = xp.zeros(pick.shape, dtype=xp.int64)
        for d, (g, k) in enumerate(zip(gathers, offsets, strict=True)):
            o_pos = xp.arange(output_size[d]).reshape((-1,) + (1,) * (nd - d - 1))
            flat = flat * size[d] + g[o_pos, k]
        return flat

    @classmethod
    def batch(cls, vals, bdims, **params):
        return _fold_batch(cls, vals, bdims, **params)

    @classmethod
    def infer(cls, x, *, output_size) -> Spec:
        return Spec((*x.shape[:2], *output_size), xp.dtype(xp.int64))
