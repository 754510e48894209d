"""TFLite frontend: ``import_tflite`` plus one converter module per op family; ``custom_converter``
registers converters for custom ops (by custom code); ``entry_io`` names a model's inputs and outputs as
the import does."""

from .importer import entry_io, import_tflite
from .reader import read_tflite
from .registry import TflContext, converter, custom_converter

__all__ = ["TflContext", "converter", "custom_converter", "entry_io", "import_tflite", "read_tflite"]
