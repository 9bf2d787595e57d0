"""Layer ``ops``: convolution over any number of spatial dims as two ops, PyTorch's
``aten.convolution`` (plain or transposed, one class for every kind: conv1d/2d/3d and
conv_transpose1d/2d/3d) and the weight gradient ``ConvolutionBackwardWeight``.

The array kernels are in ``conv_kernels``: im2col and one GEMM per example and group
for a convolution, one such correlation per output phase for a transposed one, and
per-tap GEMMs over phase-split inputs for the weight gradient.

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

from graphgrad.backend import xp

from .arithmetic import needs_grad
from .base import Op, Spec
from .batching import to_front
from . import conv_kernels as kernels
from .reduce import Sum
from . import taylor as ts

__all__ = ["convolution"]


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
        if transposed:
            y = kernels.transposed(x, w, stride, padding, dilation, output_padding, groups)
        else:
            y = kernels.correlate(x, w, stride, padding, dilation, groups)
        if b is not None:
            y += b.reshape(1, -1, *(1,) * (w.ndim - 2)).astype(y.dtype, copy=False)
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
            size = kernels.transposed_sizes(x.shape[2:], k, stride, padding, dilation,
                                            output_padding)
            c_out = w.shape[1] * groups
        else:
            size = kernels.out_sizes(x.shape[2:], k, stride, padding, dilation)
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
        return kernels.weight_grad(x, g, kernel_size, stride, padding, dilation, groups)

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
