"""Layer ``torch_compat``: ``torch.onnx`` importable (programs import it at the top, e.g.
PyTorch's word_language_model example); ``export`` raises until graphgrad has ONNX
export."""

from __future__ import annotations

from typing import Any

__all__ = ["export", "is_in_onnx_export"]


def export(*args: Any, **kwargs: Any) -> None:
    raise NotImplementedError("torch.onnx.export: ONNX export is not in graphgrad yet")


def is_in_onnx_export() -> bool:
    return False
