"""Layer ``torch_compat``: the deprecated ``torch.cuda.amp`` spellings, with PyTorch's
FutureWarning, then the ``"cuda"`` GradScaler/autocast (disabled with a warning on a
CPU-only build)."""

from __future__ import annotations

import warnings

from graphgrad import backend

from ..autocast import autocast as _Autocast
from ..grad_scaler import GradScaler as _GradScaler

__all__ = ["GradScaler", "autocast"]


class GradScaler(_GradScaler):
    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


class autocast(_Autocast):  # noqa: N801 - PyTorch's name
    def __init__(self, enabled: bool = True, dtype=backend.float16,
                 cache_enabled: bool = True) -> None:
        warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
