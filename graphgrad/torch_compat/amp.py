"""Layer ``torch_compat``: the ``torch.amp`` namespace (GradScaler, autocast)."""

from __future__ import annotations

from .autocast import autocast, is_autocast_available
from .grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "is_autocast_available"]
