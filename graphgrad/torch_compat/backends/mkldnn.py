"""Layer ``torch_compat``: ``torch.backends.mkldnn`` as PyTorch's CPU wheel has it (oneDNN
built in, enabled). graphgrad computes with NumPy; the flags are kept for scripts that
set them."""

from __future__ import annotations

import sys

from .flags import FlagModule


class MkldnnModule(FlagModule):
    _FLAGS = {
        "enabled": (RuntimeError, "set_enabled_mkldnn expects a bool, but got {type}"),
        "deterministic": (RuntimeError,
                          "set_deterministic_mkldnn expects a bool, but got {type}"),
    }


enabled = True
deterministic = False


def is_available() -> bool:
    return True


sys.modules[__name__].__class__ = MkldnnModule
