"""Layer ``nn``: ``nn.functional``'s pooling: max and average pooling over 1, 2 or 3
spatial dims (the N-d ops of ``ops.pooling``, here with PyTorch's argument checks),
max-pool indices and ``max_unpool``, and adaptive pooling."""

from __future__ import annotations

import math

from graphgrad import ops
from graphgrad.backend import xp
from graphgrad.ops.base import scalar_name
from graphgrad.tensor import tensor, zeros

from graphgrad.ops.pooling import (AdaptiveAvgPool, AdaptiveMaxPoolIndices, AvgPool,
                                   MaxPoolIndices, TakePlanes, windows_overlap)

from ..patches import check_out_size, ntuple, out_size
from .convolution import single

__all__ = ["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "max_unpool1d", "max_unpool2d", "max_unpool3d", "adaptive_avg_pool1d",
           "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "adaptive_max_pool3d"]

_DILATION_NAMES = {2: ("dilationH", "dilationW"), 3: ("dilationT", "dilationH", "dilationW")}


def _pool_geometry(input, n: int, kernel_size, stride, padding, dilation):
    """Kernel, stride, padding, dilation as n-tuples, checked as PyTorch's
    ``pooling_output_shape`` and ``pool2d/3d_shape_check`` do, in their order."""
    if input.ndim not in (n + 1, n + 2):
        raise RuntimeError(f"non-empty {n + 1}D or {n + 2}D (batch mode) tensor expected for "
                           f"input")
    k = ntuple(kernel_size, n, "kernel_size")
    s = k if stride is None or stride == [] or stride == () else ntuple(stride, n, "stride")
    p, d = ntuple(padding, n, "padding"), ntuple(dilation, n, "dilation")
    for ki, si, pi, di in zip(k, s, p, d, strict=True):
        if si == 0:
            raise RuntimeError("stride should not be zero")
        if pi > ((ki - 1) * di + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got "
                               f"pad={pi}, kernel_size={ki} and dilation={di}")
    if any(di <= 0 for di in d):
        raise RuntimeError("dilation should be greater than zero, but got " + " ".join(
            f"{name}: {di}" for name, di in zip(_DILATION_NAMES[n], d, strict=True)))
    if any(pi > ki // 2 for pi, ki in zip(p, k, strict=True)):  # half the kernel itself
        if n == 2:
            got = f"padW = {p[1]}, padH = {p[0]}, kW = {k[1]}, kH = {k[0]}"
        else:
            got = (f"kT: {k[0]} kW: {k[2]} kH: {k[1]} padT: {p[0]} padW: {p[2]} "
                   f"padH: {p[1]}")
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but "
                           f"got {got}")
    return k, s, p, d


def _batched(input, n: int):
    return (input.unsqueeze(0), True) if input.ndim == n + 1 else (input, False)


def _max_pool(input, n: int, kernel_size, stride, padding, dilation, ceil_mode: bool,
              return_indices: bool):
    """Max over each window (ops.pooling's index op, then the values read at the
    indices: the gradient goes back through the indices). Indices are flat positions
    in each input plane, as PyTorch's."""
    k, s, p, d = _pool_geometry(input, n, kernel_size, stride, padding, dilation)
    x, unbatched = _batched(input, n)
    out = tuple(out_size(*a, ceil_mode) for a in zip(x.shape[2:], k, d, p, s, strict=True))
    check_out_size(x, out)
    indices = MaxPoolIndices.apply(x, kernel_size=k, stride=s, padding=p, dilation=d,
                                   ceil_mode=bool(ceil_mode))
    values = TakePlanes.apply(x, indices, distinct=not windows_overlap(k, s, d))
    if unbatched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return (values, indices) if return_indices else values


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """``max_pool2d`` over a height-1 image, with ``max_pool1d``'s own checks."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 "
                           f"dim batch size for input, but got:{list(input.shape)}")
    k = single(kernel_size)
    s = k if stride is None or stride == [] or stride == () else single(stride)
    p, d = single(padding), single(dilation)
    for ok, what in ((k > 0, f"kernel_size must be greater than zero, but got {k}"),
                     (s > 0, f"stride must be greater than zero, but got {s}"),
                     (p >= 0, f"padding must be non-negative, but got {p}"),
                     (p <= k // 2, f"padding should be at most half of kernel size, but got "
                                   f"padding={p} and kernel_size={k}"),
                     (d > 0, f"dilation must be greater than zero, but got {d}")):
        if not ok:
            raise RuntimeError(f"max_pool1d() {what}")
    length = out_size(input.shape[-1], k, d, p, s, ceil_mode)
    if length <= 0:
        raise RuntimeError(f"max_pool1d() Invalid computed output size: {length}")
    out = _max_pool(input.unsqueeze(-2), 2, (1, k), (1, s), (0, p), (1, d), ceil_mode,
                    return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    return _max_pool(input, 2, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    return _max_pool(input, 3, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def _avg_pool(input, n: int, kernel_size, stride, padding, ceil_mode: bool,
              count_include_pad: bool, divisor_override, name: str):
    """The window sums over a divisor per output position, as PyTorch's kernel: the
    window clipped to the padded input (``count_include_pad``) or to the input itself,
    or ``divisor_override``. The divisor is separable: a product of per-dim counts."""
    if input.ndim < 3 and n == 2:  # PyTorch reads input.size(-3) first
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(input.ndim, 1)}, {max(input.ndim, 1) - 1}], but got -3)")
    if not input.dtype.is_floating_point and input.dtype.np != xp.int64:
        raise NotImplementedError(f'"{name}" not implemented for '
                                  f"'{scalar_name(input._array.dtype)}'")
    k, s, p, _ = _pool_geometry(input, n, kernel_size, stride, padding, 1)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    x, unbatched = _batched(input, n)
    size = tuple(x.shape[2:])
    if n == 3 and any(e + 2 * pi < ki for e, pi, ki in zip(size, p, k, strict=True)):
        raise RuntimeError(f"input image (T: {size[0]} H: {size[1]} W: {size[2]}) smaller than "
                           f"kernel size (kT: {k[0]} kH: {k[1]} kW: {k[2]})")
    check_out_size(x, tuple(out_size(*a, ceil_mode) for a in zip(size, k, (1,) * n, p, s,
                                                                  strict=True)))
    out = AvgPool.apply(x, kernel_size=k, stride=s, padding=p, ceil_mode=bool(ceil_mode),
                        count_include_pad=bool(count_include_pad),
                        divisor_override=divisor_override)
    return out.squeeze(0) if unbatched else out


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True):
    """``avg_pool2d`` over a height-1 image, as PyTorch computes it."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional "
                           f"tensor for argument #1 'self' (while checking arguments for "
                           f"avg_pool1d)")
    k = single(kernel_size)
    s = k if stride is None or stride == [] or stride == () else single(stride)
    return _avg_pool(input.unsqueeze(-2), 2, (1, k), (1, s), (0, single(padding)), ceil_mode,
                     count_include_pad, None, "avg_pool2d").squeeze(-2)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None):
    return _avg_pool(input, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, "avg_pool2d")


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None):
    return _avg_pool(input, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, "avg_pool3d_out_frame")


def _unpool_output_size(input, k: tuple, s: tuple, p: tuple, output_size) -> tuple:
    """PyTorch's ``_unpool_output_size``: the inverse of the pooling's output size, or
    ``output_size`` (its last n entries) when within a stride of it."""
    n = len(k)
    default = [(input.shape[input.ndim - n + i] - 1) * s[i] + k[i] - 2 * p[i] for i in range(n)]
    if output_size is None:
        return tuple(default)
    if len(output_size) == n + 2:
        output_size = output_size[2:]
    if len(output_size) != n:
        raise ValueError(f"output_size should be a sequence containing {n} or {n + 2} "
                         f"elements, but it has a length of '{len(output_size)}'")
    for i in range(n):
        lo, hi = default[i] - s[i], default[i] + s[i]
        if not lo < output_size[i] < hi:
            raise ValueError(f'invalid output_size "{output_size}" (dim {i} must be between '
                             f'{lo} and {hi})')
    return tuple(output_size)


def _max_unpool(input, indices, n: int, output_size: tuple):
    """Each value written at its flat index in a zero plane of ``output_size``: an
    ``index_put`` (the last write wins), whose gradient gathers at the indices."""
    if indices.dtype.np != xp.int64:
        raise RuntimeError(f"elements in indices should be type int64 but got: "
                           f"{scalar_name(indices._array.dtype)}")
    if input.ndim not in (n + 1, n + 2):
        raise RuntimeError(f"Input to max_unpooling{n}d should be a {n + 1}d or {n + 2}d "
                           f"Tensor, but got a tensor with {input.ndim} dimensions.")
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor "
                           f"({list(input.shape)}) but got indices tensor with shape: "
                           f"{list(indices.shape)}")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f'"max_unpool{n}d" not implemented for '
                                  f"'{scalar_name(input._array.dtype)}'")
    x, unbatched = _batched(input, n)
    idx = indices._array.reshape(x.shape[0], x.shape[1], math.prod(x.shape[2:]))
    plane = math.prod(output_size)
    bad = (idx < 0) | (idx >= plane)
    if bad.any():  # PyTorch's loop goes on and reports the last one it met
        raise RuntimeError(f"Found an invalid max index: {int(idx[bad][-1])} (output volumes "
                           f"are of size {'x'.join(map(str, output_size))})")
    nb, c = x.shape[0], x.shape[1]
    where = (tensor(xp.arange(nb).reshape(-1, 1, 1)), tensor(xp.arange(c).reshape(1, -1, 1)),
             tensor(idx))
    flat = zeros(nb, c, plane, dtype=x.dtype)
    out = ops.index_put(flat, where, x.reshape(nb, c, math.prod(x.shape[2:])))
    out = out.reshape(nb, c, *output_size)
    return out.squeeze(0) if unbatched else out


def _unpool(input, indices, n: int, kernel_size, stride, padding, output_size):
    k = ntuple(kernel_size, n, "kernel_size")
    s = k if stride is None else ntuple(stride, n, "stride")
    size = _unpool_output_size(input, k, s, ntuple(padding, n, "padding"), output_size)
    return _max_unpool(input, indices, n, size)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of ``max_pool1d`` as PyTorch runs it: ``max_unpool2d`` on width 1."""
    k = (single(kernel_size),)
    s = k if stride is None else (single(stride),)
    size = _unpool_output_size(input, k, s, (single(padding),), output_size)
    return _max_unpool(input.unsqueeze(-1), indices.unsqueeze(-1), 2, (*size, 1)).squeeze(-1)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of ``max_pool2d``: each value back at its index, zeros elsewhere."""
    return _unpool(input, indices, 2, kernel_size, stride, padding, output_size)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _unpool(input, indices, 3, kernel_size, stride, padding, output_size)


def _adaptive(input, n: int, output_size, name: str):
    """(input batched, whether it was not, the output size with None as the input's),
    with PyTorch's checks."""
    if input.ndim not in (n + 1, n + 2):
        if n == 1:
            raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional "
                               f"tensor for argument #1 'self' (while checking arguments for "
                               f"{name})")
        colon = ":" if "max" in name else ""
        raise RuntimeError(f"{name}(): Expected {n + 1}D or {n + 2}D tensor, but got{colon} "
                           f"{list(input.shape)}")
    x, unbatched = _batched(input, n)
    size = tuple(x.shape[2:])
    wanted = (output_size,) * n if isinstance(output_size, int) else tuple(output_size)
    if len(wanted) != n:
        raise RuntimeError(f"{name}: output_size must be {n}")
    out = tuple(e if o is None else int(o) for e, o in zip(size, wanted, strict=True))
    return x, unbatched, size, out


def _adaptive_avg(input, n: int, output_size):
    """Means over PyTorch's adaptive windows: output position i covers input positions
    ``floor(i E / O)`` to ``ceil((i + 1) E / O)`` in each dim. Equal windows (E a
    multiple of O) are a plain average pooling; otherwise one separable op."""
    name = f"adaptive_avg_pool{n}d"
    x, unbatched, size, out = _adaptive(input, n, output_size, name)
    if all(e % o == 0 for e, o in zip(size, out, strict=True)):
        k = tuple(e // o for e, o in zip(size, out, strict=True))
        y = AvgPool.apply(x, kernel_size=k, stride=k, padding=(0,) * n, ceil_mode=False,
                          count_include_pad=True, divisor_override=None)
    else:
        y = AdaptiveAvgPool.apply(x, size=size, output_size=out, transposed=False)
    return y.squeeze(0) if unbatched else y


def _adaptive_max(input, n: int, output_size, return_indices: bool):
    """Max over the adaptive windows: the index op, then the values read at the indices
    (the gradient goes back through them), as ``_max_pool``."""
    x, unbatched, size, out = _adaptive(input, n, output_size, f"adaptive_max_pool{n}d")
    indices = AdaptiveMaxPoolIndices.apply(x, output_size=out)
    distinct = all(e % o == 0 for e, o in zip(size, out, strict=True))  # no overlaps
    values = TakePlanes.apply(x, indices, distinct=distinct)
    if unbatched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return (values, indices) if return_indices else values


def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg(input, 1, output_size)


def adaptive_avg_pool2d(input, output_size):
    return _adaptive_avg(input, 2, output_size)


def adaptive_avg_pool3d(input, output_size):
    return _adaptive_avg(input, 3, output_size)


def adaptive_max_pool1d(input, output_size, return_indices: bool = False):
    return _adaptive_max(input, 1, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):
    return _adaptive_max(input, 2, output_size, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices: bool = False):
    return _adaptive_max(input, 3, output_size, return_indices)
