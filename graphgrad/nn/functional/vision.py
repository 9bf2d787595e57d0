"""Layer ``nn``: ``nn.functional``'s ``interpolate``, ``pad`` (constant, reflect,
replicate, circular) and pixel shuffling."""

from __future__ import annotations


import math

from graphgrad import ops
from graphgrad.backend import xp
from graphgrad.ops.base import scalar_name


__all__ = ["interpolate", "pad", "pixel_shuffle", "pixel_unshuffle"]


_LINEAR_DIMS = {"linear": 1, "bilinear": 2, "trilinear": 3}
_MODES = ("nearest | linear | bilinear | bicubic | trilinear | lanczos | area | "
          "nearest-exact")


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False):
    """Resize the spatial dims (all after N, C) by ``mode`` "nearest", "nearest-exact",
    "linear" (3-D), "bilinear" (4-D) or "trilinear" (5-D), with PyTorch's source-index
    rules. Separable: one gather (or two and a blend) per spatial dim, so it
    differentiates like any composite; uint8 bilinear is PyTorch's fixed-point one."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dim = input.ndim - 2
    in_sizes = tuple(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        out_sizes = tuple(size) if isinstance(size, (list, tuple)) else (size,) * dim
        if len(out_sizes) != dim:
            raise ValueError(f"Input and output must have the same number of spatial "
                             f"dimensions, but got input with spatial dimensions of "
                             f"{list(in_sizes)} and output size of {size}. Please provide "
                             f"input tensor in (N, C, d1, d2, ...,dK) format and output size in "
                             f"(o1, o2, ...,oK) format.")
        scales = (None,) * dim
    elif scale_factor is not None:
        factors = tuple(scale_factor) if isinstance(scale_factor, (list, tuple)) \
            else (scale_factor,) * dim
        if len(factors) != dim:
            raise ValueError(f"Input and scale_factor must have the same number of spatial "
                             f"dimensions, but got input with spatial dimensions of "
                             f"{list(in_sizes)} and scale_factor of shape {scale_factor}. "
                             f"Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                             f"scale_factor in (s1, s2, ...,sK) format.")
        out_sizes = tuple(math.floor(s * f) for s, f in zip(in_sizes, factors, strict=True))
        scales = (None,) * dim if recompute_scale_factor else factors
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode in _LINEAR_DIMS and dim != _LINEAR_DIMS[mode] and dim in (1, 2, 3):
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs "
                                  f"{_LINEAR_DIMS[mode] + 2}D input")
    if dim not in (1, 2, 3) or mode not in ("nearest", "nearest-exact", *_LINEAR_DIMS):
        if mode in ("bicubic", "area", "lanczos") and dim in (1, 2, 3):
            raise NotImplementedError(f"interpolate: mode={mode!r} is not supported")
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported "
                                  f"(got {input.ndim}D) for the modes: {_MODES} (got {mode})")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    if any(v <= 0 for v in (*in_sizes, *out_sizes)):
        def sizes(values):
            return ", ".join(f"{a}: {v}" for a, v in zip("DHW"[3 - dim:], values, strict=True))
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"({sizes(in_sizes)}) output ({sizes(out_sizes)})")
    integer = not input.dtype.is_floating_point
    if integer and mode in ("linear", "trilinear"):
        raise NotImplementedError(f'"compute_indices_weights_linear" not implemented for '
                                  f"'{scalar_name(input._array.dtype)}'")
    out = input
    for axis in reversed(range(2, input.ndim)):  # the last dim first, as PyTorch's uint8 path
        n_in, n_out, sf = in_sizes[axis - 2], out_sizes[axis - 2], scales[axis - 2]
        if mode.startswith("nearest"):
            out = ops.index_select(out, axis, _nearest_source(n_in, n_out, sf, mode))
        elif integer:
            if n_out != n_in:  # PyTorch's separable uint8 path skips unchanged dims
                out = _linear_fixed_point(out, axis, n_in, n_out, sf, align_corners)
        else:
            out = _linear(out, axis, n_in, n_out, sf, align_corners)
    return out


def _nearest_source(n_in: int, n_out: int, scale_factor, mode: str):
    """The source index of each output position, in float32 as PyTorch's CPU kernels
    compute it."""
    from graphgrad.tensor import tensor
    dst = xp.arange(n_out)
    scale = xp.float32(1.0 / scale_factor) if scale_factor else \
        xp.float32(n_in) / xp.float32(n_out)
    if mode == "nearest-exact":  # (dst + 0.5) in double, then floorf's float
        src = xp.floor(((dst + 0.5) * xp.float64(scale)).astype(xp.float32))
    else:
        src = xp.floor(dst.astype(xp.float32) * scale)
    return tensor(xp.minimum(src.astype(xp.int64), n_in - 1))


def _source_index(n_in: int, n_out: int, scale_factor, align_corners: bool, dtype):
    """PyTorch's ``area_pixel_compute_source_index`` in ``dtype``, and its index and
    lambda (``guard_index_and_lambda``)."""
    if align_corners:
        scale = dtype(n_in - 1) / dtype(n_out - 1) if n_out > 1 else dtype(0)
        src = scale * xp.arange(n_out, dtype=dtype)
    else:
        scale = dtype(1.0 / scale_factor) if scale_factor and scale_factor > 0 else \
            dtype(n_in) / dtype(n_out)
        src = xp.maximum(scale * (xp.arange(n_out, dtype=dtype) + dtype(0.5)) - dtype(0.5),
                         dtype(0))
    index = xp.minimum(xp.floor(src).astype(xp.int64), n_in - 1)
    lam = xp.clip(src - index, 0, 1).astype(dtype)
    return index, lam


def _linear(x, axis: int, n_in: int, n_out: int, scale_factor, align_corners: bool):
    """One spatial dim of linear interpolation: two gathers and a blend."""
    from graphgrad.tensor import tensor
    ct = xp.float32 if x.dtype.itemsize <= 4 else xp.float64  # PyTorch's opmath
    i0, lam = _source_index(n_in, n_out, scale_factor, align_corners, ct)
    i1 = xp.minimum(i0 + 1, n_in - 1)
    shape = [1] * x.ndim
    shape[axis] = n_out
    lam = tensor(lam.reshape(shape), dtype=x.dtype)
    return ops.index_select(x, axis, tensor(i0)) * (1 - lam) + \
        ops.index_select(x, axis, tensor(i1)) * lam


def _linear_fixed_point(x, axis: int, n_in: int, n_out: int, scale_factor,
                        align_corners: bool):
    """One spatial dim of uint8 linear interpolation as PyTorch computes it (Pillow's
    way): weights in double, the clamped ends folded onto the edge pixel, scaled to
    int16 at the largest precision that keeps them below 2^15, an integer sum rounded
    half up and clamped to [0, 255]."""
    from graphgrad import int32
    from graphgrad.tensor import tensor
    index, lam = _source_index(n_in, n_out, scale_factor, align_corners, xp.float64)
    w = xp.stack([1 - lam, lam], axis=1)
    edge = index + 1 >= n_in  # both taps on the last pixel: one weight, their sum
    w[edge] = xp.stack([(1 - lam) + lam, 0 * lam], axis=1)[edge]
    w_max = float(w.max())
    precision = 0
    while precision < 22 and int(0.5 + w_max * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    w16 = xp.where(w < 0, (w * (1 << precision) - 0.5).astype(xp.int64),
                   (w * (1 << precision) + 0.5).astype(xp.int64)).astype(xp.int32)
    shape = [1] * x.ndim
    shape[axis] = n_out
    taps = [ops.index_select(x, axis, tensor(i)).to(int32) * tensor(w16[:, j].reshape(shape))
            for j, i in enumerate((index, xp.minimum(index + 1, n_in - 1)))]
    total = taps[0] + taps[1] + (1 << (precision - 1))
    return ops.div(total, 1 << precision, rounding_mode="floor").clamp(0, 255).to(x.dtype)


_PAD_SIZES = ("\nSupported combinations for non-constant padding:\n"
              "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
              "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
              "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")


def pad(input, pad, mode: str = "constant", value=None):
    """``torch.nn.functional.pad``: ``pad`` = (left, right) pairs from the last dim on.
    "constant" is the op; "reflect", "replicate" and "circular" gather the source index
    of every output position (``index_select``, whose gradient sums the copies back)."""
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if mode == "constant":
        return ops.pad(input, pad, value=value)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    k = len(pad) // 2
    if k > 3 or input.ndim not in (k + 1, k + 2):
        raise NotImplementedError(f"Padding size {len(pad)} is not supported for {input.ndim}D "
                                  f"input tensor.{_PAD_SIZES}")
    from graphgrad.tensor import tensor
    out = input
    for i in range(k):
        dim, (left, right) = input.ndim - 1 - i, pad[2 * i:2 * i + 2]
        n = input.shape[dim]
        if mode == "reflect" and (left >= n or right >= n):
            raise RuntimeError(f"Argument #4: Padding size should be less than the "
                               f"corresponding input dimension, but got: padding ({left}, "
                               f"{right}) at dimension {dim} of input {list(input.shape)}")
        if mode == "circular" and (left > n or right > n):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        at = xp.arange(-left, n + right)
        if mode == "reflect":
            at = xp.abs(at)
            at = xp.where(at >= n, 2 * (n - 1) - at, at)
        elif mode == "replicate":
            at = xp.clip(at, 0, n - 1)
        else:  # circular wraps within what negative pads leave (crop first, as PyTorch)
            lo, kept = max(0, -left), n - max(0, -left) - max(0, -right)
            at = xp.arange(-max(left, 0), kept + max(right, 0)) % kept + lo
        out = ops.index_select(out, dim, tensor(at))
    return out


def pixel_shuffle(input, upscale_factor: int):
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    r = upscale_factor
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c} "
                           f"is not divisible by {r * r}")
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    n = len(lead)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor: int):
    """(*, C, H r, W r) -> (*, C r^2, H, W), the inverse of ``pixel_shuffle``."""
    r = downscale_factor
    *lead, c, h, w = input.shape
    if h % r or w % r:
        side, size = ("height", h) if h % r else ("width", w)
        raise RuntimeError(f"pixel_unshuffle expects {side} to be divisible by "
                           f"downscale_factor, but input.size({-2 if side == 'height' else -1})"
                           f"={size} is not divisible by {r}")
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    n = len(lead)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)
