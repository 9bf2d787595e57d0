"""Layer ``nn``: ``nn.functional``'s convolutions, 1-, 2- and 3-d, and their transposes,
all on the N-d ``conv_nd`` / ``conv_transpose_nd`` of ``nn.patches``. The 1-d forms run
as 2-d ones over a height-1 image, as PyTorch's do (so their messages name two dims)."""

from __future__ import annotations

from ..patches import (check_conv, check_transposed_channels, conv2d,  # noqa: F401
                       conv_nd, conv_transpose_nd, fold, unfold)

__all__ = ["conv1d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]


def single(v) -> int:
    """An int, or the one int of a 1-tuple (PyTorch's ``single``)."""
    if isinstance(v, int):
        return v
    (v,) = tuple(v)
    return int(v)


def _as_2d(input, weight, name: str):
    """(N, C, L) or (C, L) input and its 1-d weight as a height-1 image and 2-d weight."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2D (unbatched) or 3D (batched) input to {name}, but got "
                           f"input of size: {list(input.shape)}")
    return input.unsqueeze(-2), weight.unsqueeze(-2)


def _height_one(v, fill: int):
    return v if isinstance(v, str) else (fill, single(v))


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-D cross-correlation over (N, C, L) or (C, L)."""
    check_conv(input, weight, bias, stride, padding, dilation, groups, "conv1d")
    x, w = _as_2d(input, weight, "conv1d")
    return conv_nd(x, w, bias, _height_one(stride, 1), _height_one(padding, 0),
                   _height_one(dilation, 1), groups, "conv2d").squeeze(-2)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """3-D cross-correlation over (N, C, D, H, W) or (C, D, H, W)."""
    return conv_nd(input, weight, bias, stride, padding, dilation, groups, "conv3d")


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """The transpose of ``conv1d``; weight (in, out / groups, k)."""
    x, w = _as_2d(input, weight, "conv_transpose1d")
    check_transposed_channels(input, weight)
    return conv_transpose_nd(x, w, bias, _height_one(stride, 1), _height_one(padding, 0),
                             _height_one(output_padding, 0), groups, _height_one(dilation, 1),
                             "conv_transpose2d").squeeze(-2)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """The transpose of ``conv2d``; weight (in, out / groups, kh, kw)."""
    return conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups,
                             dilation, "conv_transpose2d")


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """The transpose of ``conv3d``; weight (in, out / groups, kd, kh, kw)."""
    return conv_transpose_nd(input, weight, bias, stride, padding, output_padding, groups,
                             dilation, "conv_transpose3d")
