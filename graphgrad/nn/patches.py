"""Layer ``nn``: sliding-window patches (im2col) and the functions built on them:
``unfold``, ``fold``, ``conv2d``, ``max_pool2d``, ``avg_pool2d``.

Patches are composed from existing ops, no op of their own: the input is padded, and
for each of the kh*kw kernel offsets one strided slice picks that offset's pixel of
every window; stacking the slices gives (N, C, kh*kw, oh, ow). A convolution is then
one matmul and a max-pool a ``max`` over the kernel dim. Backward is the ops' own
rules (a slice scatters its gradient back, the engine sums the offsets), so every
function here differentiates to any order. Cheap for small images (8x8 digits): the
cost is kh*kw slices, not a loop over positions.
"""

from __future__ import annotations

from graphgrad import ops
from graphgrad.tensor import Tensor, zeros

__all__ = ["unfold", "fold", "conv2d", "max_pool2d", "avg_pool2d", "patches", "linear_transpose"]


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    if len(v) != 2:
        raise ValueError(f"{name} must be an int or a pair of ints, got {v}")
    return (int(v[0]), int(v[1]))


def _out(size: int, k: int, d: int, p: int, s: int, ceil_mode: bool = False) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    n = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= size + p:  # the last window must start inside
        n -= 1
    return n


def patches(input: Tensor, kernel_size, dilation=1, padding=0, stride=1, *,
            pad_value: float = 0.0, ceil_mode: bool = False) -> Tensor:
    """(N, C, H, W) -> (N, C, kh*kw, oh, ow): the window under each output position."""
    if input.ndim != 4:
        raise RuntimeError(f"expected a 4-D (N, C, H, W) input, got shape {tuple(input.shape)}")
    (kh, kw), (dh, dw) = _pair(kernel_size, "kernel_size"), _pair(dilation, "dilation")
    (ph, pw), (sh, sw) = _pair(padding, "padding"), _pair(stride, "stride")
    h, w = input.shape[2], input.shape[3]
    oh, ow = _out(h, kh, dh, ph, sh, ceil_mode), _out(w, kw, dw, pw, sw, ceil_mode)
    if oh <= 0 or ow <= 0:
        raise RuntimeError(f"Given input size: ({input.shape[1]}x{h}x{w}). Calculated output "
                           f"size: ({input.shape[1]}x{oh}x{ow}). Output size is too small")
    if (sh, sw) == (kh, kw) and (dh, dw) == (1, 1) and not (ph or pw or ceil_mode):
        # windows tile the image (2x2 pooling): a reshape and a permute, no slices
        x = input[:, :, :oh * kh, :ow * kw] if (oh * kh, ow * kw) != (h, w) else input
        n, c = input.shape[:2]
        return x.reshape(n, c, oh, kh, ow, kw).permute(0, 1, 3, 5, 2, 4).reshape(
            n, c, kh * kw, oh, ow)
    # pad enough for every window, including ceil_mode's partial last one
    extra_h = max(0, (oh - 1) * sh + dh * (kh - 1) + 1 - (h + 2 * ph))
    extra_w = max(0, (ow - 1) * sw + dw * (kw - 1) + 1 - (w + 2 * pw))
    x = input
    if ph or pw or extra_h or extra_w:
        x = ops.pad(input, (pw, pw + extra_w, ph, ph + extra_h), value=pad_value)
    slices = [x[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
              for i in range(kh) for j in range(kw)]
    return ops.stack(slices, 2)


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """``torch.nn.functional.unfold``: (N, C, H, W) -> (N, C*kh*kw, L)."""
    p = patches(input, kernel_size, dilation, padding, stride)
    n, c, k = p.shape[:3]
    return p.reshape(n, c * k, -1)


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """``torch.nn.functional.fold`` (col2im): the transpose of ``unfold``, overlaps summed.
    Computed as the vjp of ``unfold`` (a linear map), so it too is a graphgrad program."""
    oh_w = _pair(output_size, "output_size")
    n = input.shape[0]
    c = input.shape[1] // (_pair(kernel_size, "kernel_size")[0]
                           * _pair(kernel_size, "kernel_size")[1])
    return linear_transpose(lambda x: unfold(x, kernel_size, dilation, padding, stride),
                            (n, c, *oh_w), input)


def linear_transpose(fn, in_shape: tuple, cotangent: Tensor) -> Tensor:
    """``fn^T(cotangent)`` for a linear ``fn`` of a tensor of ``in_shape``: its vjp at
    zeros. Under grad mode the vjp is itself recorded (``create_graph``), so the result
    differentiates further; under ``no_grad`` it is a plain value."""
    from graphgrad.autograd import enable_grad, grad, is_grad_enabled
    record = is_grad_enabled()
    with enable_grad():
        probe = zeros(*in_shape, dtype=cotangent.dtype, requires_grad=True)
        return grad(fn(probe), probe, cotangent, create_graph=record)[0]


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """2-D cross-correlation, as ``torch.nn.functional.conv2d`` (padding may be "same"
    or "valid" for stride 1)."""
    unbatched = input.ndim == 3
    if unbatched:
        input = input.unsqueeze(0)
    out_c, in_per_group, kh, kw = weight.shape
    if input.shape[1] != in_per_group * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, "
                           f"expected input{list(input.shape)} to have "
                           f"{in_per_group * groups} channels, but got {input.shape[1]} "
                           f"channels instead")
    if isinstance(padding, str):
        padding = _string_padding(padding, (kh, kw), _pair(dilation, "dilation"), stride)
    p = patches(input, (kh, kw), dilation, padding, stride)  # (N, C, K, oh, ow)
    n, c, k, oh, ow = p.shape
    if groups == 1:
        cols = p.reshape(n, c * k, oh * ow)
        out = weight.reshape(out_c, c * k) @ cols  # (N, O, L)
    else:
        cols = p.reshape(n, groups, in_per_group * k, oh * ow)
        w = weight.reshape(groups, out_c // groups, in_per_group * k)
        out = (w @ cols).reshape(n, out_c, oh * ow)
    if bias is not None:
        out = out + bias.reshape(1, out_c, 1)
    out = out.reshape(n, out_c, oh, ow)
    return out.squeeze(0) if unbatched else out


def _string_padding(mode: str, k: tuple, d: tuple, stride) -> tuple:
    if mode == "valid":
        return (0, 0)
    if mode != "same":
        raise ValueError(f"Invalid padding string '{mode}', should be one of ['valid', 'same']")
    if _pair(stride, "stride") != (1, 1):
        raise ValueError("padding='same' is not supported for strided convolutions")
    total = [di * (ki - 1) for ki, di in zip(k, d, strict=True)]
    if any(t % 2 for t in total):
        raise NotImplementedError("padding='same' with an even total padding is not supported")
    return (total[0] // 2, total[1] // 2)


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """Max over each window; the gradient goes to the first maximal element, as in
    PyTorch (``max(dim)`` gathers one index; padding is -inf)."""
    if return_indices:
        raise NotImplementedError("max_pool2d(return_indices=True) is not supported")
    unbatched = input.ndim == 3
    if unbatched:
        input = input.unsqueeze(0)
    k = _pair(kernel_size, "kernel_size")
    stride = k if stride is None or stride == [] else stride
    ph, pw = _pair(padding, "padding")
    if ph > k[0] // 2 or pw > k[1] // 2:
        raise RuntimeError("pad should be at most half of effective kernel size, but got "
                           f"pad={max(ph, pw)}, kernel_size={max(k)} and dilation={dilation}")
    p = patches(input, k, dilation, padding, stride, pad_value=float("-inf"),
                ceil_mode=ceil_mode)
    out = ops.max(p, dim=2).values
    return out.squeeze(0) if unbatched else out


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None) -> Tensor:
    if ceil_mode or not count_include_pad:
        raise NotImplementedError("avg_pool2d: ceil_mode and count_include_pad=False are not "
                                  "supported")
    k = _pair(kernel_size, "kernel_size")
    stride = k if stride is None else stride
    p = patches(input, k, 1, padding, stride)
    if divisor_override:
        return p.sum(dim=2) / divisor_override
    return p.mean(dim=2)
