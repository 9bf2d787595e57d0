"""Layer ``torch_compat``: ``torch.backends.cuda`` of a CPU-only build: not built; the
``matmul`` precision flags keep PyTorch's defaults and can be set."""

from __future__ import annotations

from .flags import FlagNamespace

__all__ = ["is_built", "matmul"]


def is_built() -> bool:
    return False


class cuBLASModule(FlagNamespace):  # noqa: N801 - PyTorch's name
    _FLAGS = {
        "allow_tf32": (RuntimeError, "set_allow_tf32_cublas expects a bool, but got {type}"),
        "allow_fp16_reduced_precision_reduction": (
            TypeError, "allow_fp16_reduced_precision_reduction expects a bool or a tuple/list "
                       "of bools, but got {cls}"),
        "allow_bf16_reduced_precision_reduction": (
            TypeError, "allow_bf16_reduced_precision_reduction expects a bool or a tuple/list "
                       "of bools, but got {cls}"),
    }


matmul = cuBLASModule(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                      allow_bf16_reduced_precision_reduction=True)
