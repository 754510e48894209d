"""cuvil-edge host packager: ONNX -> IR -> passes -> WASM-SIMD modules for the edge runtime."""

from .codegen.toolchain import ALL_TARGETS, Target
from .compiler import CompiledModel, compile_graph, optimize_graph
from .errors import (
    AmbiguousPretrainedModel,
    CuvilError,
    GraphVerificationError,
    InputError,
    MissingPretrainedFile,
    ModelFormatError,
    NotInCache,
    PretrainedError,
    ShapeError,
    TargetError,
    ToolchainError,
    UnknownTask,
    UnsupportedOperator,
    VocabularyMismatch,
)
from .model import CuvilModel

__all__ = [
    "ALL_TARGETS", "AmbiguousPretrainedModel", "CompiledModel", "CuvilError", "CuvilModel",
    "GraphVerificationError", "InputError", "MissingPretrainedFile", "ModelFormatError", "NotInCache",
    "PretrainedError", "ShapeError", "Target", "TargetError", "ToolchainError", "UnknownTask",
    "UnsupportedOperator", "VocabularyMismatch", "compile_graph", "optimize_graph",
]
