"""Layer ``torch_compat``: ``torch.backends.mps`` of a build without Metal: not built, not
available."""

from __future__ import annotations

__all__ = ["is_available", "is_built"]


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
