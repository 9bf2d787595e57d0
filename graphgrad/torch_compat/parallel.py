"""Layer ``torch_compat``: ``torch.nn.parallel`` of a CPU-only build, until graphgrad has
its own (DESIGN: DDP lives in nn/parallel). ``DataParallel`` with no GPU is what PyTorch
makes of it: a wrapper that calls the module (its parameters appear under ``module.``
in the state dict). ``DistributedDataParallel`` raises at construction: distributed
training is not in graphgrad yet."""

from __future__ import annotations

from typing import Any

from graphgrad.nn import Module

__all__ = ["DataParallel", "DistributedDataParallel"]


class DataParallel(Module):
    """``DataParallel(module, device_ids=None, output_device=None, dim=0)``; with no GPU
    (always, in graphgrad) ``forward`` is ``module(*inputs, **kwargs)``."""

    def __init__(self, module: Module, device_ids=None, output_device=None,
                 dim: int = 0) -> None:
        super().__init__()
        self.module = module
        self.device_ids: list[int] = []  # PyTorch keeps none when no GPU is available
        self.dim = dim
        self.output_device = None

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)


class DistributedDataParallel(Module):
    def __init__(self, module: Module, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("torch.nn.parallel.DistributedDataParallel: distributed training "
                           "is not in graphgrad yet")
