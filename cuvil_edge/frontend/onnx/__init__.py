"""ONNX frontend: ``import_onnx`` plus one converter module per op family."""

from .importer import MAX_OPSET, MIN_OPSET, import_onnx, load_onnx
from .registry import ConvertContext, converter

__all__ = ["MAX_OPSET", "MIN_OPSET", "ConvertContext", "converter", "import_onnx", "load_onnx"]
