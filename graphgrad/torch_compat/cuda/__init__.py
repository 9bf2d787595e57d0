"""Layer ``torch_compat``: ``torch.cuda`` as a module (``import torch.cuda``,
``torch.cuda.amp``) of a CPU-only build. Everything graphgrad.tensor's ``cuda`` namespace
answers (is_available() False, device_count() 0, seeding a no-op...) is forwarded to it,
so that stays the one place; this adds ``amp`` and ``is_bf16_supported``."""

from __future__ import annotations

from graphgrad.tensor.device import cuda as _cuda

from . import amp

__all__ = ["amp", "is_bf16_supported"]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return False


def __getattr__(name: str):
    try:
        return getattr(_cuda, name)
    except AttributeError:
        raise AttributeError(f"module 'torch.cuda' has no attribute '{name}' (torch.cuda.{name} "
                             f"is not in graphgrad yet)") from None
