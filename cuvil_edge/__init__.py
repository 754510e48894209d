"""cuvil-edge host packager: ONNX -> IR -> passes -> WASM-SIMD modules for the edge runtime."""

from .codegen.toolchain import ALL_TARGETS, Target
from .compiler import CompiledModel, compile_graph, optimize_graph
from .errors import (
    CuvilError,
    GraphVerificationError,
    InputError,
    ModelFormatError,
    ShapeError,
    TargetError,
    ToolchainError,
    UnsupportedOperator,
)
from .model import CuvilModel

__all__ = [
    "ALL_TARGETS", "CompiledModel", "CuvilError", "CuvilModel", "GraphVerificationError", "InputError",
    "ModelFormatError", "ShapeError", "Target", "TargetError", "ToolchainError", "UnsupportedOperator",
    "compile_graph", "optimize_graph",
]
