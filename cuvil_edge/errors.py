"""One error hierarchy for the host packager: every failure a user can cause is a ``CuvilError``."""

from __future__ import annotations


class CuvilError(Exception):
    """Base class of every error raised by the host packager."""


class ModelFormatError(CuvilError):
    """The model file is not a readable, well-formed model."""


class UnsupportedOperator(CuvilError):
    """The model uses an operator (or an attribute of one) that cuvil-edge cannot compile."""

    def __init__(self, op_type: str, node: str, opset: int | None = None, detail: str = "") -> None:
        self.op_type, self.node, self.opset = op_type, node, opset
        where = f"node {node!r}" + (f" (opset {opset})" if opset is not None else "")
        super().__init__(f"unsupported operator {op_type!r} at {where}" + (f": {detail}" if detail else ""))


class ShapeError(CuvilError):
    """Shapes cannot be made static, or do not agree between producer and consumer."""


class GraphVerificationError(CuvilError):
    """The IR broke an invariant; raised by the verifier with the failing node and pass named."""


class InputError(CuvilError, ValueError):
    """Inputs given to ``predict`` do not match the model signature (name, dtype, shape)."""


class ToolchainError(CuvilError):
    """The kernel compiler is missing or rejected the generated code."""


class TargetError(CuvilError):
    """The build was asked for an unknown device profile, or for both explicit targets and profiles."""
