"""Layer ``utils``: helpers above the core; ``utils.data`` holds datasets and loaders,
``utils.safetensors`` reads and writes safetensors files (it imports the optional
package only when used)."""

from . import data, safetensors

__all__ = ["data", "safetensors"]
