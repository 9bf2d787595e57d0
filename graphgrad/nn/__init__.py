"""Layer ``nn``: neural-network building blocks. For now ``functional``; modules come
with the nn issue."""

from . import functional

__all__ = ["functional"]
