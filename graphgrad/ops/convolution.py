"""Layer ``ops``: convolution over any number of spatial dims as two ops, PyTorch's
``aten.convolution`` (plain or transposed, one class for every kind: conv1d/2d/3d and
conv_transpose1d/2d/3d) and the weight gradient ``ConvolutionBackwardWeight``.

Forward is im2col: the padded input seen through a strided view as every window under
every output position, copied once into a (groups, in/groups x kernel, N x positions)
matrix, then one BLAS GEMM per group (a batched matmul over the groups). Large inputs
run in chunks of examples so that these columns stay under 32 MiB. A transposed
convolution is the opposite: one GEMM into columns, then col2im adds each kernel
offset's columns into the output (prod(kernel) strided adds, no loop over positions).

The rules close over the two ops: a convolution's input gradient is the transposed
convolution with the same weight (and the other way round), its weight gradient is
``ConvolutionBackwardWeight``, whose own gradients are convolutions again. So every
order of derivative runs on these kernels. The unfolded columns are never saved: the
weight gradient recomputes them from the saved input.

Parameters are PyTorch's (``stride``, ``padding``, ``dilation``, ``transposed``,
``output_padding``, ``groups``), as tuples of ints; ``nn.functional``'s conv functions
check the user's arguments with PyTorch's messages before they get here.
"""

from __future__ import annotations

import itertools
import math

from graphgrad.backend import xp

from .arithmetic import needs_grad
from .base import Op, Spec
from .batching import to_front
from .reduce import Sum
from . import taylor as ts

__all__ = ["convolution"]


def _out_sizes(size, k, stride, padding, dilation) -> tuple:
    return tuple((e + 2 * p - d * (ki - 1) - 1) // s + 1
                 for e, ki, s, p, d in zip(size, k, stride, padding, dilation, strict=True))


def _transposed_sizes(size, k, stride, padding, dilation, output_padding) -> tuple:
    return tuple((e - 1) * s - 2 * p + d * (ki - 1) + op + 1 for e, ki, s, p, d, op in
                 zip(size, k, stride, padding, dilation, output_padding, strict=True))


# the unfolded columns of one chunk of examples: at most this (or one example's). They
# are a step's largest temporary: a small CNN's second layer unfolds to 4.5 MiB for a
# batch of 64, more than its activations; 2 MiB keeps its GEMMs thousands of columns wide
_COLUMNS_BYTES = 2 << 20


def _chunks(n_b: int, per_example: int, dtype):
    """Ranges of examples whose columns (``per_example`` elements each) fit in
    ``_COLUMNS_BYTES``: peak memory stays bounded, each GEMM stays large. The chunks
    are of equal size (up to one), so no chunk is a sliver."""
    step = max(1, _COLUMNS_BYTES // max(1, per_example * xp.dtype(dtype).itemsize))
    count = -(-n_b // step)
    bounds = [n_b * i // count for i in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _columns(x, k, stride, padding, dilation, out, groups, per_example: bool = False):
    """im2col: (N, C, *size) -> (groups, C/groups * prod(k), N * prod(out)), row order
    (channel, kernel offsets), column order (example, output position); or, with
    ``per_example``, (N, groups, C/groups * prod(k), prod(out)): then the GEMMs write the
    (N, C_out, ...) output in place, with no transpose after them."""
    n_b, c = x.shape[:2]
    size = x.shape[2:]
    if any(padding):
        padded = xp.zeros((n_b, c, *(e + 2 * p for e, p in zip(size, padding, strict=True))),
                          dtype=x.dtype)
        padded[(slice(None), slice(None),
                *(slice(p, p + e) for p, e in zip(padding, size, strict=True)))] = x
        x = padded
    else:
        x = xp.ascontiguousarray(x)
    cg = c // groups
    sn, sc, *sd = x.strides
    windows = xp.lib.stride_tricks.as_strided(
        x, shape=(groups, cg, *k, n_b, *out),
        strides=(cg * sc, sc, *(a * d for a, d in zip(sd, dilation, strict=True)), sn,
                 *(a * s for a, s in zip(sd, stride, strict=True))), writeable=False)
    if per_example:  # one copy either way
        windows = xp.moveaxis(windows, 2 + len(k), 0)
        return windows.reshape(n_b, groups, cg * math.prod(k), math.prod(out))
    return windows.reshape(groups, cg * math.prod(k), n_b * math.prod(out))


def _add_columns(cols, n_b, c, size, k, stride, padding, dilation, out, groups):
    """col2im, the transpose of ``_columns``: (groups, C/groups * prod(k), N * prod(out))
    summed into (N, C, *size); overlapping windows add up."""
    nd = len(k)
    buf = xp.zeros((n_b, groups, c // groups,
                    *(e + 2 * p for e, p in zip(size, padding, strict=True))), dtype=cols.dtype)
    cols = cols.reshape(groups, c // groups, *k, n_b, *out)
    # (N, G, C/G, *out) per kernel offset: move the example dim to the front once
    cols = cols.transpose(2 + nd, 0, 1, *range(2, 2 + nd), *range(3 + nd, 3 + 2 * nd))
    for offset in itertools.product(*(range(ki) for ki in k)):
        where = tuple(slice(j * d, j * d + s * (o - 1) + 1, s)
                      for j, d, s, o in zip(offset, dilation, stride, out, strict=True))
        buf[(slice(None), slice(None), slice(None), *where)] += cols[
            (slice(None), slice(None), slice(None), *offset)]
    buf = buf.reshape(n_b, c, *buf.shape[3:])
    if any(padding):
        buf = buf[(slice(None), slice(None),
                   *(slice(p, p + e) for p, e in zip(padding, size, strict=True)))].copy()
    return buf


def _by_group(a, groups):
    """(N, C, *sp) -> (groups, C/groups, N * prod(sp)): a GEMM operand per group."""
    n_b, c = a.shape[:2]
    a = a.reshape(n_b, groups, c // groups, -1).transpose(1, 2, 0, 3)
    return a.reshape(groups, c // groups, -1)


def _leftover(size, out, k, stride, padding, dilation) -> tuple:
    """The output_padding that makes the transposed convolution of an ``out``-sized
    tensor come back to ``size``: the input positions past the last window."""
    return tuple(e - ((o - 1) * s - 2 * p + d * (ki - 1) + 1) for e, o, ki, s, p, d in
                 zip(size, out, k, stride, padding, dilation, strict=True))


def _crop(t, size):
    """``t`` cut to spatial ``size`` (a transposed convolution with output_padding past
    the stride gives an input gradient longer than the input)."""
    if tuple(t.shape[2:]) == tuple(size):
        return t
    return t[(slice(None), slice(None), *(slice(0, e) for e in size))]


class Convolution(Op):
    """``convolution(input, weight, bias, stride, padding, dilation, transposed,
    output_padding, groups)``: cross-correlation of (N, C_in, *size) with a weight
    (C_out, C_in/groups, *k), or its transpose with a weight (C_in, C_out/groups, *k)."""

    holomorphic = True  # analytic: the complex step goes through it

    @staticmethod
    def saves_inputs(x, w, b=None):  # x's gradient reads w; w's reads x
        return tuple(i for i, other in ((0, w), (1, x)) if needs_grad(other))

    @staticmethod
    def forward(x, w, b=None, *, stride, padding, dilation, transposed, output_padding,
                groups):
        n_b = x.shape[0]
        k = w.shape[2:]
        w_rows = w.reshape(groups, w.shape[0] // groups, -1)
        dtype = xp.result_type(x, w)
        if not transposed:
            out = _out_sizes(x.shape[2:], k, stride, padding, dilation)
            y = xp.empty((n_b, w.shape[0], *out), dtype=dtype)
            for lo, hi in _chunks(n_b, x.shape[1] * math.prod(k) * math.prod(out), dtype):
                cols = _columns(x[lo:hi], k, stride, padding, dilation, out, groups,
                                per_example=True)
                # (G, O/G, C/G K) @ (n, G, C/G K, L): one GEMM per example and group,
                # written into y's (n, O, ...) memory
                xp.matmul(w_rows, cols, out=y[lo:hi].reshape(hi - lo, groups, -1,
                                                             math.prod(out)))
                del cols  # before the next chunk's: never two chunks' columns at once
        else:
            size = _transposed_sizes(x.shape[2:], k, stride, padding, dilation, output_padding)
            c_out = w.shape[1] * groups
            chunks = _chunks(n_b, c_out * math.prod(k) * math.prod(x.shape[2:]), dtype)
            y = None if len(chunks) == 1 else xp.empty((n_b, c_out, *size), dtype=dtype)
            # w_rows: (G, C_in/G, C_out/G * K); columns (G, C_out/G * K, n * prod(x size))
            for lo, hi in chunks:
                cols = xp.matmul(w_rows.transpose(0, 2, 1), _by_group(x[lo:hi], groups))
                part = _add_columns(cols, hi - lo, c_out, size, k, stride, padding, dilation,
                                    x.shape[2:], groups)
                del cols
                if y is None:
                    y = part
                else:
                    y[lo:hi] = part
                del part
        if b is not None:
            y += b.reshape(1, -1, *(1,) * len(k)).astype(y.dtype, copy=False)
        return y

    @staticmethod
    def vjp(g, out, x, w, b=None, *, stride, padding, dilation, transposed, output_padding,
            groups):
        k = tuple(w.shape[2:])
        size = tuple(x.shape[2:])
        geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        gx = gw = gb = None
        if not transposed:
            if needs_grad(x):
                extra = _leftover(size, g.shape[2:], k, stride, padding, dilation)
                gx = Convolution.apply(g, w, transposed=True, output_padding=extra,
                                       **geometry)
            if needs_grad(w):
                gw = ConvolutionBackwardWeight.apply(x, g, kernel_size=k, **geometry)
        else:
            if needs_grad(x):
                gx = _crop(Convolution.apply(g, w, transposed=False,
                                             output_padding=(0,) * len(k), **geometry), size)
            if needs_grad(w):
                gw = ConvolutionBackwardWeight.apply(g, x, kernel_size=k, **geometry)
        if b is not None and needs_grad(b):
            gb = Sum.apply(g, dim=(0, *range(2, g.ndim)), keepdim=False)
        return (gx, gw) if b is None else (gx, gw, gb)

    @staticmethod
    def jvp(dots, out, x, w, b=None, **params):
        dx, dw = dots[0], dots[1]
        db = dots[2] if b is not None else None
        terms = []
        if dx is not None:
            terms.append(Convolution.apply(dx, w, **params))
        if dw is not None:
            terms.append(Convolution.apply(x, dw, **params))
        if db is not None:
            terms.append(db.reshape(1, -1, *(1,) * (out.ndim - 2)).expand(*out.shape))
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total

    @staticmethod
    def taylor(series, out, x, w, b=None, **params):
        # bilinear in (x, w): Y_k = sum_j conv(x_j, w_{k-j}); the bias is affine and
        # enters at its own orders only
        k = ts.order_of(series)
        fx, fw = ts.full(x, series[0], k), ts.full(w, series[1], k)
        sb = series[2] if b is not None else None

        def conv(a, c):
            return Convolution.apply(a, c, **params)
        return [ts.plus(ts.bilinear(fx, fw, i, conv),
                        None if sb is None or sb[i - 1] is None
                        else sb[i - 1].reshape(1, -1, *(1,) * (out.ndim - 2)).expand(*out.shape))
                for i in range(1, k + 1)]

    @classmethod
    def batch(cls, vals, bdims, *, groups, transposed, **params):
        """Only the input batched: the batch joins the examples. Otherwise each batch
        entry's weight is one more set of groups: channels (B, C) side by side."""
        x, w = vals[0], vals[1]
        b = vals[2] if len(vals) > 2 else None
        dx, dw = bdims[0], bdims[1]
        db = bdims[2] if len(vals) > 2 else None
        if dw is None and db is None:
            x = to_front(x, dx)
            nb, n_b = x.shape[:2]
            y = cls.apply(x.reshape(nb * n_b, *x.shape[2:]), *vals[1:], groups=groups,
                          transposed=transposed, **params)
            return y.reshape(nb, n_b, *y.shape[1:]), 0
        size = next(v.shape[d] for v, d in zip(vals, bdims, strict=True) if d is not None)

        def front(v, d):
            return to_front(v, d) if d is not None else v.unsqueeze(0).expand(size, *v.shape)
        w = front(w, dw)
        x = front(x, dx)
        n_b = x.shape[1]
        x = x.movedim(0, 1).reshape(n_b, size * x.shape[2], *x.shape[3:])
        w = w.reshape(size * w.shape[1], *w.shape[2:])
        rest = () if b is None else (front(b, db).reshape(-1),)
        y = cls.apply(x, w, *rest, groups=groups * size, transposed=transposed, **params)
        return y.reshape(n_b, size, -1, *y.shape[2:]), 1

    @classmethod
    def infer(cls, x, w, b=None, *, stride, padding, dilation, transposed, output_padding,
              groups) -> Spec:
        k = w.shape[2:]
        if transposed:
            size = _transposed_sizes(x.shape[2:], k, stride, padding, dilation, output_padding)
            c_out = w.shape[1] * groups
        else:
            size = _out_sizes(x.shape[2:], k, stride, padding, dilation)
            c_out = w.shape[0]
        return Spec((x.shape[0], c_out, *size), xp.result_type(x.dtype, w.dtype))


class ConvolutionBackwardWeight(Op):
    """The weight gradient of a convolution of ``input`` whose output gradient is
    ``grad_output``: (C_out, C_in/groups, *kernel_size). Bilinear in its two inputs; its
    gradients are the transposed convolution and the convolution with the weight's
    cotangent as weight."""

    holomorphic = True  # analytic: the complex step goes through it

    @staticmethod
    def forward(x, g, *, kernel_size, stride, padding, dilation, groups):
        out = g.shape[2:]
        gw = None
        dtype = xp.result_type(x, g)
        # a chunk holds its columns and the copy of its g that _by_group makes
        per_example = (x.shape[1] * math.prod(kernel_size) + g.shape[1]) * math.prod(out)
        for lo, hi in _chunks(x.shape[0], per_example, dtype):
            cols = _columns(x[lo:hi], kernel_size, stride, padding, dilation, out, groups)
            part = xp.matmul(_by_group(g[lo:hi], groups), cols.transpose(0, 2, 1))
            del cols
            gw = part if gw is None else gw.__iadd__(part)  # (G, O/G, C/G * K)
            del part
        return gw.reshape(g.shape[1], x.shape[1] // groups, *kernel_size)

    @staticmethod
    def vjp(gbar, out, x, g, *, kernel_size, stride, padding, dilation, groups):
        geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        gx = gg = None
        if needs_grad(x):
            extra = _leftover(x.shape[2:], g.shape[2:], kernel_size, stride, padding, dilation)
            gx = Convolution.apply(g, gbar, transposed=True, output_padding=extra, **geometry)
        if needs_grad(g):
            gg = _crop(Convolution.apply(x, gbar, transposed=False,
                                         output_padding=(0,) * len(kernel_size), **geometry),
                       g.shape[2:])
        return gx, gg

    @staticmethod
    def jvp(dots, out, x, g, **params):
        dx, dg = dots
        terms = [ConvolutionBackwardWeight.apply(a, b, **params)
                 for a, b in ((dx, g), (x, dg)) if a is not None and b is not None]
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]

    @staticmethod
    def taylor(series, out, x, g, **params):
        k = ts.order_of(series)  # bilinear in (x, g)
        fx, fg = ts.full(x, series[0], k), ts.full(g, series[1], k)

        def weight_grad(a, c):
            return ConvolutionBackwardWeight.apply(a, c, **params)
        return [ts.bilinear(fx, fg, i, weight_grad) for i in range(1, k + 1)]

    @classmethod
    def batch(cls, vals, bdims, *, groups, **params):
        """Each batch entry is one more set of groups (channels (B, C) side by side)."""
        size = next(v.shape[d] for v, d in zip(vals, bdims, strict=True) if d is not None)
        x, g = (to_front(v, d) if d is not None else v.unsqueeze(0).expand(size, *v.shape)
                for v, d in zip(vals, bdims, strict=True))
        n_b = x.shape[1]
        x = x.movedim(0, 1).reshape(n_b, size * x.shape[2], *x.shape[3:])
        g = g.movedim(0, 1).reshape(n_b, size * g.shape[2], *g.shape[3:])
        gw = cls.apply(x, g, groups=groups * size, **params)
        return gw.reshape(size, -1, *gw.shape[1:]), 0

    @classmethod
    def infer(cls, x, g, *, kernel_size, stride, padding, dilation, groups) -> Spec:
        return Spec((g.shape[1], x.shape[1] // groups, *kernel_size),
                    xp.result_type(x.dtype, g.dtype))


def convolution(input, weight, bias=None, stride=(1,), padding=(0,), dilation=(1,),
                transposed: bool = False, output_padding=(0,), groups: int = 1):
    """``torch.convolution``: the one op under every conv and conv_transpose function.
    Batched input only; int arguments are spread over the weight's spatial dims."""
    n = weight.ndim - 2

    def spread(v):
        v = (v,) if isinstance(v, int) else tuple(int(a) for a in v)
        return v * n if len(v) == 1 else v
    rest = () if bias is None else (bias,)
    return Convolution.apply(input, weight, *rest, stride=spread(stride),
                             padding=spread(padding), dilation=spread(dilation),
                             transposed=bool(transposed), output_padding=spread(output_padding),
                             groups=int(groups))
