"""Layer ``torch_compat``: ``torch.accelerator`` as a CPU-only PyTorch build answers it:
there is no accelerator, so scripts that pick ``torch.accelerator.current_accelerator()``
or fall back to ``"cpu"`` take the CPU branch."""

from __future__ import annotations

__all__ = ["is_available", "current_accelerator", "device_count", "synchronize"]


def is_available() -> bool:
    return False


def current_accelerator(check_available: bool = False) -> None:
    return None


def device_count() -> int:
    return 0


def synchronize(device=None) -> None:
    # PyTorch's CPU build raises here too: there is no accelerator to wait for
    raise RuntimeError("Cannot access accelerator device when none is available.")
