"""Layer ``onnx``: the errors of ONNX export, with ``torch.onnx.errors``' names."""

from __future__ import annotations

__all__ = ["OnnxExporterError", "UnsupportedOperatorError"]


class OnnxExporterError(RuntimeError):
    """Export failed: the model cannot be captured or the ONNX file would be invalid."""


class UnsupportedOperatorError(OnnxExporterError):
    """An op of the captured graph has no ONNX mapping (PyTorch's wording)."""

    def __init__(self, name: str, version: int, reason: str = ""):
        self.name, self.version = name, version
        detail = f" {reason}" if reason else (
            " Add a mapping for it to graphgrad/onnx (a function registered with "
            "@onnx_mapping for the op's class name).")
        super().__init__(f"Exporting the operator '{name}' to ONNX opset version {version} "
                         f"is not supported.{detail}")
