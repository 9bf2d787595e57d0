"""Layer ``torch_compat``: ``torch.backends.cudnn`` of a CPU-only build: cuDNN is not
there; its flags keep PyTorch's defaults and can be set (they change nothing on the CPU)."""

from __future__ import annotations

import sys

from .flags import FlagModule


class CudnnModule(FlagModule):
    _FLAGS = {
        "enabled": (RuntimeError, "set_enabled_cudnn expects a bool, but got {type}"),
        "benchmark": (RuntimeError, "set_benchmark_cudnn expects a bool, but got {type}"),
        "deterministic": (RuntimeError,
                          "set_deterministic_cudnn expects a bool, but got {type}"),
        # PyTorch 2.13 names the cuBLAS setter here, and so do we
        "allow_tf32": (RuntimeError, "set_allow_tf32_cublas expects a bool, but got {type}"),
    }


enabled = True
benchmark = False
deterministic = False
allow_tf32 = True
benchmark_limit = None


def is_available() -> bool:
    return False


def version() -> None:
    return None


def is_acceptable(tensor) -> bool:
    return False


sys.modules[__name__].__class__ = CudnnModule
