"""Layer ``nn``: ``Conv1d/2d/3d`` and ``ConvTranspose1d/2d/3d`` (im2col + one matmul, see
``nn.patches``) with PyTorch's default initialisation."""

from __future__ import annotations

import math

from graphgrad.tensor import Tensor, empty

from .. import functional as F
from .. import init
from ..parameter import Parameter
from ..patches import ntuple
from .module import Module

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
           "ConvTranspose3d"]


class _ConvNd(Module):
    """What the convolutions share: the weight (out, in / groups, *kernel), the
    bias, PyTorch's initialisation and repr; ``_n`` is the number of spatial dims."""

    _n = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None, output_padding=0) -> None:
        super().__init__()
        name = type(self).__name__
        modes = {"zeros", "reflect", "replicate", "circular"}
        if padding_mode not in modes:
            raise ValueError(f"padding_mode must be one of {modes}, but got "
                             f"padding_mode='{padding_mode}'")
        if padding_mode != "zeros" and self._transposed:
            raise ValueError(f'Only "zeros" padding mode is supported for {name}')
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = self._tuple(kernel_size, "kernel_size")
        self.stride = self._tuple(stride, "stride")
        self.padding = padding if isinstance(padding, str) else self._tuple(padding, "padding")
        self.dilation = self._tuple(dilation, "dilation")
        self.output_padding = self._tuple(output_padding, "output_padding")
        self.groups = groups
        self.padding_mode = padding_mode
        # a transposed convolution's weight maps the other way: (in, out / groups, *k)
        rows, cols = (in_channels, out_channels) if self._transposed else \
            (out_channels, in_channels)
        self.weight = Parameter(empty(rows, cols // groups, *self.kernel_size, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _tuple(self, v, name: str) -> tuple:
        return ntuple(v, self._n, name)

    def _padded_conv(self, f, input: Tensor) -> Tensor:
        """``f`` (conv1d/2d/3d) with this layer's parameters after padding ``input`` in
        a mode other than zeros, as PyTorch's layers do (its "same": the extra one on the
        right). (Zero padding calls ``f`` directly in ``forward``, which capture
        frontends inline.)"""
        pads = []
        for k, d, p in zip(reversed(self.kernel_size), reversed(self.dilation),
                           reversed(self.padding if not isinstance(self.padding, str)
                                    else (None,) * self._n), strict=True):
            if p is None:
                total = d * (k - 1) if self.padding == "same" else 0
                pads += [total // 2, total - total // 2]
            else:
                pads += [p, p]
        return f(F.pad(input, tuple(pads), mode=self.padding_mode), self.weight, self.bias,
                 self.stride, 0, self.dilation, self.groups)

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight[0].numel()
            if fan_in:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv1d(_ConvNd):
    """1-D convolution over (N, C, L) inputs."""

    _n = 1

    def forward(self, input: Tensor) -> Tensor:
        if self.padding_mode != "zeros":
            return self._padded_conv(F.conv1d, input)
        return F.conv1d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class Conv2d(_ConvNd):
    """2-D convolution over (N, C, H, W) inputs."""

    def forward(self, input: Tensor) -> Tensor:
        if self.padding_mode != "zeros":
            return self._padded_conv(F.conv2d, input)
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class Conv3d(_ConvNd):
    """3-D convolution over (N, C, D, H, W) inputs."""

    _n = 3

    def forward(self, input: Tensor) -> Tensor:
        if self.padding_mode != "zeros":
            return self._padded_conv(F.conv3d, input)
        return F.conv3d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class _ConvTransposeNd(_ConvNd):
    """The transpose of a convolution (upsampling by ``stride``), weight (in, out / groups,
    *kernel); ``output_padding`` picks among the output sizes a stride allows."""

    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype, output_padding)

    def forward(self, input: Tensor) -> Tensor:
        f = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[self._n - 1]
        return f(input, self.weight, self.bias, self.stride, self.padding,
                 self.output_padding, self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    _n = 1


class ConvTranspose2d(_ConvTransposeNd):
    _n = 2


class ConvTranspose3d(_ConvTransposeNd):
    _n = 3
