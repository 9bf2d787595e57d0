"""Layer ``nn``: sliding-window patches (im2col) over any number of spatial dims and
what is built on them: ``unfold``, ``fold``, the N-d convolution ``conv_nd`` and its
transpose ``conv_transpose_nd`` (``nn.functional`` wraps them as conv1d/2d/3d).

Patches are composed from existing ops, no op of their own: the input is padded, and
for each of the prod(kernel) kernel offsets one strided slice picks that offset's
element of every window; stacking the slices gives (N, C, prod(kernel), *out). A
convolution is then one matmul and a pooling a reduction over the kernel dim. Backward
is the ops' own rules (a slice scatters its gradient back, the engine sums the
offsets), so every function here differentiates to any order. Cheap for small images:
the cost is prod(kernel) slices, not a loop over positions.
"""

from __future__ import annotations

import itertools
import math

from graphgrad import ops
from graphgrad.ops.pooling import pool_out_size as out_size
from graphgrad.tensor import Tensor, zeros

__all__ = ["unfold", "fold", "conv2d", "conv_nd", "conv_transpose_nd", "patches",
           "linear_transpose", "ntuple", "out_size", "check_out_size",
           "check_conv", "check_transposed_channels"]


def ntuple(v, n: int, name: str) -> tuple[int, ...]:
    """An int, a 1-sequence or an n-sequence as n ints."""
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    if len(v) == 1:
        return (int(v[0]),) * n
    if len(v) != n:
        raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {v}")
    return tuple(int(x) for x in v)


def _pair(v, name: str) -> tuple[int, int]:
    return ntuple(v, 2, name)


def check_out_size(input: Tensor, out: tuple) -> None:
    """PyTorch's refusal of windows that leave no output position."""
    if any(o <= 0 for o in out):
        c, size = input.shape[1], tuple(input.shape[2:])
        raise RuntimeError(f"Given input size: ({'x'.join(map(str, (c, *size)))}). Calculated "
                           f"output size: ({'x'.join(map(str, (c, *out)))}). Output size is "
                           f"too small")


def patches(input: Tensor, kernel_size, dilation=1, padding=0, stride=1, *,
            pad_value: float = 0.0, ceil_mode: bool = False) -> Tensor:
    """(N, C, *spatial) -> (N, C, prod(kernel), *out): the window under each output
    position, the kernel offsets in row-major order."""
    n = input.ndim - 2
    if n < 1:
        raise RuntimeError(f"expected an (N, C, ...) input, got shape {tuple(input.shape)}")
    k, d = ntuple(kernel_size, n, "kernel_size"), ntuple(dilation, n, "dilation")
    p, s = ntuple(padding, n, "padding"), ntuple(stride, n, "stride")
    size = tuple(input.shape[2:])
    out = tuple(out_size(*a, ceil_mode) for a in zip(size, k, d, p, s, strict=True))
    check_out_size(input, out)
    nb, c = input.shape[:2]
    if s == k and d == (1,) * n and not any(p) and not ceil_mode:
        # windows tile the input (2x2 pooling): a crop, a reshape and a permute, no slices
        crop = tuple(o * ki for o, ki in zip(out, k, strict=True))
        x = input[(slice(None), slice(None), *(slice(0, e) for e in crop))] \
            if crop != size else input
        x = x.reshape(nb, c, *itertools.chain(*zip(out, k, strict=True)))
        order = [0, 1, *range(3, 2 + 2 * n, 2), *range(2, 2 + 2 * n, 2)]
        return x.permute(*order).reshape(nb, c, math.prod(k), *out)
    # pad enough for every window, including ceil_mode's partial last one
    extra = [max(0, (o - 1) * si + di * (ki - 1) + 1 - (e + 2 * pi))
             for o, si, di, ki, e, pi in zip(out, s, d, k, size, p, strict=True)]
    x = input
    if any(p) or any(extra):
        pads = []
        for pi, ei in zip(reversed(p), reversed(extra), strict=True):  # last dim first
            pads += [pi, pi + ei]
        x = ops.pad(input, tuple(pads), value=pad_value)
    slices = [x[(slice(None), slice(None),
                 *(slice(j * di, j * di + si * (o - 1) + 1, si)
                   for j, di, si, o in zip(offset, d, s, out, strict=True)))]
              for offset in itertools.product(*(range(ki) for ki in k))]
    return ops.stack(slices, 2)


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """``torch.nn.functional.unfold``: (N, C, H, W) -> (N, C*kh*kw, L)."""
    if input.ndim != 4:
        raise RuntimeError(f"expected a 4-D (N, C, H, W) input, got shape {tuple(input.shape)}")
    p = patches(input, _pair(kernel_size, "kernel_size"), dilation, padding, stride)
    n, c, k = p.shape[:3]
    return p.reshape(n, c * k, -1)


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """``torch.nn.functional.fold`` (col2im): the transpose of ``unfold``, overlaps summed.
    Computed as the vjp of ``unfold`` (a linear map), so it too is a graphgrad program."""
    oh_w = _pair(output_size, "output_size")
    n = input.shape[0]
    c = input.shape[1] // math.prod(_pair(kernel_size, "kernel_size"))
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


def _conv_dims(input: Tensor, weight: Tensor, stride, name: str) -> int:
    """The spatial dims of the op ``name`` (conv3d: 3), checked against input and weight
    as PyTorch's (a weight of other dims is reported through the stride's length)."""
    n = int(name[-2])
    if input.ndim not in (n + 1, n + 2):
        raise RuntimeError(f"Expected {n + 1}D (unbatched) or {n + 2}D (batched) input to "
                           f"{name}, but got input of size: {list(input.shape)}")
    if weight.ndim != n + 2:
        stride = ntuple(stride, n, "stride")
        raise RuntimeError(f"expected stride to be a single integer value or a list of "
                           f"{weight.ndim - 2} values to match the convolution dimensions, but "
                           f"got stride={list(stride)}")
    return n


def _conv_tuple(v, n: int, name: str) -> tuple[int, ...]:
    """A convolution argument as n ints, with PyTorch's message for a wrong length."""
    if not isinstance(v, int) and len(tuple(v)) not in (1, n):
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {n} "
                           f"values to match the convolution dimensions, but got "
                           f"{name}={list(v)}")
    return ntuple(v, n, name)


def check_conv_params(stride: tuple, padding, dilation: tuple, groups: int,
                      output_padding: tuple = ()) -> None:
    """PyTorch's ``_convolution`` parameter checks, in its order."""
    if not isinstance(padding, str) and any(v < 0 for v in padding):
        raise RuntimeError("negative padding is not supported")
    if any(v < 0 for v in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(v <= 0 for v in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(v < 0 for v in dilation):
        raise RuntimeError("dilation should be greater than zero")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")


def check_conv(input: Tensor, weight: Tensor, bias: Tensor | None, stride, padding,
               dilation, groups: int, name: str) -> tuple:
    """PyTorch's checks of a convolution's input, weight, bias and parameters, in its
    order; returns stride, padding, dilation as tuples (padding may stay a string)."""
    n = _conv_dims(input, weight, stride, name)
    stride, dilation = _conv_tuple(stride, n, "stride"), _conv_tuple(dilation, n, "dilation")
    if not isinstance(padding, str):
        padding = _conv_tuple(padding, n, "padding")
    check_conv_params(stride, padding, dilation, groups)
    shape = list(input.shape) if input.ndim == n + 2 else [1, *input.shape]
    out_c, in_per_group = weight.shape[:2]
    if out_c < groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be at least {groups} at "
                           f"dimension 0, but got weight of size {list(weight.shape)} instead")
    if out_c % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} "
                           f"at dimension 0, but got weight of size [{list(weight.shape)}] "
                           f"instead")
    if shape[1] != in_per_group * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, "
                           f"expected input{shape} to have {in_per_group * groups} channels, "
                           f"but got {shape[1]} channels instead")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != out_c):
        raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be "
                           f"1-dimensional with {out_c} elements, but got bias of size "
                           f"{list(bias.shape)} instead")
    return stride, padding, dilation


def conv_nd(input: Tensor, weight: Tensor, bias: Tensor | None, stride, padding, dilation,
            groups: int, name: str) -> Tensor:
    """N-d cross-correlation over (N, C, *spatial) or unbatched (C, *spatial) input, N
    from the weight (out, in / groups, *kernel); as ``torch.nn.functional.conv<N>d``
    (padding may be "same" or "valid")."""
    stride, padding, dilation = check_conv(input, weight, bias, stride, padding, dilation,
                                           groups, name)
    unbatched = input.ndim == weight.ndim - 1
    if unbatched:
        input = input.unsqueeze(0)
    k = weight.shape[2:]
    if isinstance(padding, str):
        padding, extra = _string_padding(padding, k, dilation, stride)
        if any(extra):  # an odd total: PyTorch pads the one extra element on the right
            pads = []
            for e in reversed(extra):
                pads += [0, e]
            input = ops.pad(input, tuple(pads))
    padded = [e + 2 * p for e, p in zip(input.shape[2:], padding, strict=True)]
    if any(pe < di * (ki - 1) + 1 for pe, di, ki in zip(padded, dilation, k, strict=True)):
        raise RuntimeError(f"Calculated padded input size per channel: "
                           f"({' x '.join(map(str, padded))}). Kernel size: "
                           f"({' x '.join(map(str, k))}). Kernel size can't be greater than "
                           f"actual input size")
    if any(v == 0 for v in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    y = ops.convolution(input, weight, bias, stride, padding, dilation, False, (0,) * len(k),
                        groups)
    return y.squeeze(0) if unbatched else y


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """2-D cross-correlation, as ``torch.nn.functional.conv2d``."""
    return conv_nd(input, weight, bias, stride, padding, dilation, groups, "conv2d")


def _string_padding(mode: str, k, d: tuple, stride: tuple) -> tuple:
    """(padding each side, one more on the right) for a padding string."""
    if mode == "valid":
        return (0,) * len(d), (0,) * len(d)
    if mode != "same":
        raise ValueError(f"Invalid padding string '{mode}', should be one of ['valid', 'same']")
    if any(s != 1 for s in stride):
        raise ValueError("padding='same' is not supported for strided convolutions")
    total = [di * (ki - 1) for ki, di in zip(k, d, strict=True)]
    return tuple(t // 2 for t in total), tuple(t % 2 for t in total)


def check_transposed_channels(input: Tensor, weight: Tensor) -> None:
    """A transposed convolution's weight (in, out / groups, *k) against its input."""
    shape = list(input.shape) if input.ndim == weight.ndim else [1, *input.shape]
    if shape[1] != weight.shape[0]:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected "
                           f"input{shape} to have {weight.shape[0]} channels, but got "
                           f"{shape[1]} channels instead")


_AXES = {1: ("width",), 2: ("height", "width"), 3: ("depth", "height", "width")}


def conv_transpose_nd(input: Tensor, weight: Tensor, bias: Tensor | None, stride, padding,
                      output_padding, groups: int, dilation, name: str) -> Tensor:
    """The transpose of ``conv_nd`` (its vjp with respect to the input), weight
    (in, out / groups, *kernel) as PyTorch's. Computed as that vjp, recorded, so it
    differentiates in input and weight to any order."""
    n = _conv_dims(input, weight, stride, name)
    stride, padding = _conv_tuple(stride, n, "stride"), _conv_tuple(padding, n, "padding")
    dilation = _conv_tuple(dilation, n, "dilation")
    output_padding = _conv_tuple(output_padding, n, "output_padding")
    check_conv_params(stride, padding, dilation, groups, output_padding)
    unbatched = input.ndim == n + 1
    x = input.unsqueeze(0) if unbatched else input
    check_transposed_channels(x, weight)
    axes = _AXES[n]
    if any(v == 0 for v in dilation):
        raise RuntimeError("dilation should be greater than zero, but got " + ", ".join(
            f"dilation_{a}: {v}" for a, v in zip(axes, dilation, strict=True)))
    if not all(o < s or o < d for o, s, d in zip(output_padding, stride, dilation, strict=True)):
        named = [" ".join(f"{what}_{a}: {v}" for a, v in zip(axes, vals, strict=True))
                 for what, vals in (("output_padding", output_padding), ("stride", stride),
                                    ("dilation", dilation))]
        raise RuntimeError("output padding must be smaller than either stride or dilation, "
                           "but got " + " ".join(named))
    k = weight.shape[2:]
    out = tuple((e - 1) * s - 2 * p + d * (ki - 1) + op + 1 for e, s, p, d, ki, op in
                zip(x.shape[2:], stride, padding, dilation, k, output_padding, strict=True))
    if any(o <= 0 for o in out):
        raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, x.shape[2:]))})"
                           f". Calculated output size per channel: "
                           f"({' x '.join(map(str, out))}). Output size is too small")
    y = ops.convolution(x, weight, bias, stride, padding, dilation, True, output_padding,
                        groups)
    return y.squeeze(0) if unbatched else y
