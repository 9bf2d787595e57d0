"""Layer ``onnx``: export to ONNX (``torch.onnx``'s API) from graphgrad's IR.

``export(model, args, f, ...)`` traces the model into a ``graphgrad.graph.Graph``, runs
the graph passes and maps each op to ONNX operators (``mapping.py`` holds the table;
``map_*.py`` the mappings), building the file with the ``onnx`` package (the optional
extra ``graphgrad[onnx]``). Run the result with onnxruntime.
"""

from .errors import OnnxExporterError, UnsupportedOperatorError
from .export import DEFAULT_OPSET, SUPPORTED_OPSETS, export, is_in_onnx_export
from .mapping import MAPPINGS, onnx_mapping

__all__ = ["export", "is_in_onnx_export", "OnnxExporterError", "UnsupportedOperatorError",
           "MAPPINGS", "onnx_mapping", "DEFAULT_OPSET", "SUPPORTED_OPSETS"]
