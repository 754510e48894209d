"""Registers every ONNX converter family (imported lazily by ``converters()``)."""

from . import convert_core, convert_nn  # noqa: F401
