"""cuvil-edge host packager: ONNX -> IR -> passes -> WASM-SIMD modules for the edge runtime."""

from .codegen.toolchain import ALL_TARGETS, Target
from .compiler import CompiledModel, compile_graph, optimize_graph
from .errors import (
    AmbiguousPretrainedModel,
    CuvilError,
    ExportError,
    GraphVerificationError,
    InputError,
    MissingPretrainedFile,
    ModelFormatError,
    NotConstant,
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
from .torch_compile import compile

__all__ = [
    "ALL_TARGETS", "AmbiguousPretrainedModel", "CompiledModel", "CuvilError", "CuvilModel", "ExportError",
    "GraphVerificationError", "InputError", "MissingPretrainedFile", "ModelFormatError", "NotConstant",
    "NotInCache", "PretrainedError", "ShapeError", "Target", "TargetError", "ToolchainError", "UnknownTask",
    "UnsupportedOperator", "VocabularyMismatch", "compile", "compile_graph", "optimize_graph",
]
