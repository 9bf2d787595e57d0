"""Layer ``nn``: ``DataParallel`` as a CPU-only PyTorch build makes it: with no GPU it is a
wrapper that calls the module (its parameters appear under ``module.`` in the state dict).
Data parallelism across processes is ``DistributedDataParallel``."""

from __future__ import annotations

from typing import Any

from ..modules.module import Module

__all__ = ["DataParallel"]


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
