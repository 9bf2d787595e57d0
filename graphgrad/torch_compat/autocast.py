"""Layer ``torch_compat``: ``torch.autocast`` / ``torch.amp.autocast`` as a context manager
and decorator. graphgrad has no mixed-precision dispatch, so it does what it can honestly:
``enabled=False`` is a no-op; ``"cuda"`` is disabled with PyTorch's warning, as on a
CPU-only build; devices graphgrad holds no tensors on (``"mps"``, ``"xpu"``) leave every
CPU op as it is, as PyTorch does; an enabled CPU autocast raises, because PyTorch would
compute in bfloat16/float16 there and graphgrad must not silently compute something
else."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

from graphgrad import backend
from graphgrad.tensor.device import device

__all__ = ["autocast", "is_autocast_available"]

# PyTorch's get_autocast_dtype(device_type) defaults
_DEFAULT_DTYPE = {"cpu": "bfloat16", "cuda": backend.float16, "mps": backend.float16,
                  "xpu": backend.float16}


def is_autocast_available(device_type: str) -> bool:
    return device_type in _DEFAULT_DTYPE


class autocast:  # noqa: N801 - PyTorch's name
    """``autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: "
                             f"`{type(device_type)}`")
        device(device_type)  # an unknown device string raises PyTorch's RuntimeError
        if not is_autocast_available(device_type):
            raise RuntimeError(f"User specified an unsupported autocast device_type "
                               f"'{device_type}'")
        self.device = device_type
        self.fast_dtype = _DEFAULT_DTYPE[device_type] if dtype is None else dtype
        self._cache_enabled = True if cache_enabled is None else cache_enabled
        if enabled and device_type == "cuda":
            warnings.warn("CUDA is not available or torch_xla is imported. Disabling autocast.",
                          stacklevel=2)
            enabled = False
        elif enabled and device_type == "cpu":
            enabled = self._refuse_cpu()
        self._enabled = enabled

    def _refuse_cpu(self) -> bool:
        """Raise for the dtypes PyTorch would compute in; else PyTorch's warning and
        False (disabled)."""
        if self.fast_dtype == "bfloat16" or getattr(self.fast_dtype, "name", "") == "bfloat16":
            raise NotImplementedError(
                "torch.autocast('cpu') runs ops in bfloat16, and graphgrad has no bfloat16 "
                "yet; pass enabled=False (or leave autocast out) to compute in float32")
        if self.fast_dtype == backend.float16:
            raise NotImplementedError(
                "CPU autocast to float16 is not in graphgrad yet (graphgrad would compute in "
                "float32, not what PyTorch computes); pass enabled=False to compute in float32")
        warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling "
                      "autocast.\nCPU Autocast only supports dtypes of torch.bfloat16, "
                      "torch.float16 currently.", stacklevel=3)
        return False

    def __enter__(self) -> autocast:
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> bool:
        return False

    def __call__(self, func: Callable) -> Callable:
        if not callable(func):
            raise TypeError(f"autocast()(func) requires a callable, but got "
                            f"{type(func).__name__}. Did you mean to use autocast as a context "
                            f"manager? For example:\n    with torch.autocast(device_type=...):\n"
                            f"        output = model(input)")

        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return decorate_autocast
