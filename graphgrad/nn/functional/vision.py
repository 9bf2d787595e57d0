"""Layer ``nn``: ``nn.functional``'s ``interpolate``, ``pad`` (constant, reflect,
replicate, circular) and pixel shuffling."""

from __future__ import annotations


from graphgrad import ops
from graphgrad.backend import xp


__all__ = ["interpolate", "pad", "pixel_shuffle", "pixel_unshuffle"]


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False):
    """Resize the spatial dims (all after N, C) by ``mode`` "nearest", "linear" (3-D) or
    "bilinear" (4-D), with PyTorch's source-index rules. Separable: one gather (or two
    and a blend) per spatial dim, so it differentiates like any composite."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    if mode not in ("nearest", "linear", "bilinear") or antialias:
        raise NotImplementedError(f"interpolate: mode={mode!r} (antialias={antialias}) is not "
                                  f"supported; nearest, linear and bilinear are")
    dim = input.ndim - 2
    if (mode, dim) in (("linear", 2), ("bilinear", 1)) or dim not in (1, 2):
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs "
                                  f"{3 if mode == 'linear' else 4}D input")
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
        out_sizes = tuple(int(s * f) for s, f in zip(in_sizes, factors, strict=True))
        scales = (None,) * dim if recompute_scale_factor else factors
    else:
        raise ValueError("either size or scale_factor should be defined")
    out = input
    for axis, n_in, n_out, sf in zip(range(2, input.ndim), in_sizes, out_sizes, scales,
                                      strict=True):
        out = _resample(out, axis, n_in, n_out, sf, mode, align_corners)
    return out


def _resample(x, axis: int, n_in: int, n_out: int, scale_factor, mode: str, align_corners):
    """One spatial dim of ``interpolate``: ``n_in`` -> ``n_out`` along ``axis``."""
    from graphgrad.tensor import tensor
    dst = xp.arange(n_out, dtype=xp.float64)
    if mode == "nearest":
        # PyTorch computes the scale and the product in float32 (floorf)
        scale = xp.float32(1.0 / scale_factor if scale_factor else n_in / n_out)
        idx = xp.minimum(xp.floor(dst.astype(xp.float32) * scale).astype(xp.int64), n_in - 1)
        return ops.index_select(x, axis, tensor(idx))
    if align_corners:
        src = dst * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        scale = 1.0 / scale_factor if scale_factor else n_in / n_out
        src = xp.maximum(scale * (dst + 0.5) - 0.5, 0.0)
    i0 = src.astype(xp.int64)
    i1 = xp.minimum(i0 + 1, n_in - 1)
    shape = [1] * x.ndim
    shape[axis] = n_out
    lam = tensor((src - i0).reshape(shape), dtype=x.dtype)
    return ops.index_select(x, axis, tensor(i0)) * (1 - lam) + \
        ops.index_select(x, axis, tensor(i1)) * lam


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
