"""Layer ``utils``: helpers above the core; ``utils.data`` holds datasets and loaders."""

from . import data

__all__ = ["data"]
