"""Layer ``nn``: ``nn.functional``'s convolutions and pooling beyond the 2-d ones of
``nn.patches`` (1-d forms, transposed convolution, adaptive pooling)."""

from __future__ import annotations


from graphgrad import ops

from ..patches import avg_pool2d, conv2d, fold, max_pool2d, unfold  # noqa: F401

__all__ = ["adaptive_avg_pool2d", "adaptive_max_pool2d", "adaptive_avg_pool1d", "max_pool1d",
           "avg_pool1d", "conv1d", "conv_transpose2d"]


def adaptive_avg_pool2d(input, output_size):
    """Average over PyTorch's adaptive windows: output row i covers input rows
    ``floor(i H / oh)`` to ``ceil((i + 1) H / oh)``, and so for columns."""
    oh, ow = _adaptive_size(input, output_size, "adaptive_avg_pool2d")
    h, w = input.shape[-2], input.shape[-1]
    if h % oh == 0 and w % ow == 0 and input.ndim == 4:  # equal windows: a plain pooling
        return avg_pool2d(input, (h // oh, w // ow))
    return _adaptive_2d(input, oh, ow, lambda x, d: x.mean(dim=d, keepdim=True))


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):
    """Max over PyTorch's adaptive windows (see ``adaptive_avg_pool2d``)."""
    if return_indices:
        raise NotImplementedError("adaptive_max_pool2d(return_indices=True) is not supported")
    oh, ow = _adaptive_size(input, output_size, "adaptive_max_pool2d")
    return _adaptive_2d(input, oh, ow, lambda x, d: ops.max(x, dim=d, keepdim=True).values)


def _adaptive_size(input, output_size, name: str) -> tuple[int, int]:
    if input.ndim not in (3, 4):
        raise RuntimeError(f"{name}(): Expected 3D or 4D tensor, but got {list(input.shape)}")
    size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    return (input.shape[-2] if size[0] is None else size[0],
            input.shape[-1] if size[1] is None else size[1])


def _adaptive_2d(input, oh: int, ow: int, reduce):
    """``reduce`` over each adaptive window. A window is a product of a row range and a
    column range, and mean and max are separable, so the rows are reduced first, then
    the columns: ``oh + ow`` slices in all."""
    h, w = input.shape[-2], input.shape[-1]
    rows = [reduce(input[..., (i * h) // oh:-(-(i + 1) * h // oh), :], -2) for i in range(oh)]
    x = ops.cat(rows, dim=-2)
    cols = [reduce(x[..., (j * w) // ow:-(-(j + 1) * w // ow)], -1) for j in range(ow)]
    return ops.cat(cols, dim=-1)


def adaptive_avg_pool1d(input, output_size):
    return adaptive_avg_pool2d(input.unsqueeze(-2), (1, single(output_size))).squeeze(-2)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """``max_pool2d`` over a height-1 image."""
    stride = kernel_size if stride is None or stride == [] else stride
    out = max_pool2d(input.unsqueeze(-2), (1, single(kernel_size)), (1, single(stride)),
                     (0, single(padding)), (1, single(dilation)), ceil_mode, return_indices)
    return out.squeeze(-2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True):
    if input.ndim == 2:  # unbatched (C, L)
        return avg_pool1d(input.unsqueeze(0), kernel_size, stride, padding, ceil_mode,
                          count_include_pad).squeeze(0)
    stride = kernel_size if stride is None or stride == [] else stride
    out = avg_pool2d(input.unsqueeze(-2), (1, single(kernel_size)), (1, single(stride)),
                     (0, single(padding)), ceil_mode, count_include_pad)
    return out.squeeze(-2)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-D cross-correlation over (N, C, L) or (C, L): ``conv2d`` on a height-1 image."""
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    if x.shape[1] != weight.shape[1] * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, "
                           f"expected input{list(x.shape)} to have {weight.shape[1] * groups} "
                           f"channels, but got {x.shape[1]} channels instead")
    padding = padding if isinstance(padding, str) else (0, single(padding))
    out = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, single(stride)), padding,
                 (1, single(dilation)), groups).squeeze(2)
    return out.squeeze(0) if unbatched else out


def single(v) -> int:
    """An int, or the one int of a 1-tuple (PyTorch's ``single``)."""
    if isinstance(v, int):
        return v
    (v,) = tuple(v)
    return int(v)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """The transpose of ``conv2d`` (its vjp with respect to the input), with ``weight``
    (in_channels, out_channels / groups, kh, kw) as PyTorch's. Computed as that vjp,
    recorded, so it differentiates in input and weight to any order."""
    from ..patches import _pair, linear_transpose
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    if x.shape[1] != weight.shape[0]:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected "
                           f"input{list(x.shape)} to have {weight.shape[0]} channels, but got "
                           f"{x.shape[1]} channels instead")
    (sh, sw), (ph, pw) = _pair(stride, "stride"), _pair(padding, "padding")
    (oph, opw), (dh, dw) = _pair(output_padding, "output_padding"), _pair(dilation, "dilation")
    if not (oph < sh or oph < dh) or not (opw < sw or opw < dw):
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, "
                           f"but got output_padding_height: {oph} output_padding_width: {opw} "
                           f"stride_height: {sh} stride_width: {sw} dilation_height: {dh} "
                           f"dilation_width: {dw}")
    kh, kw = weight.shape[2], weight.shape[3]
    out_h = (x.shape[2] - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    out_w = (x.shape[3] - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    out = linear_transpose(lambda p: conv2d(p, weight, None, stride, padding, dilation, groups),
                           (x.shape[0], weight.shape[1] * groups, out_h, out_w), x)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out
