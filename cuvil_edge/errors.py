"""One error hierarchy for the host packager: every failure a user can cause is a ``CuvilError``.

A ``ValueError`` or ``TypeError`` that is not a ``CuvilError`` is a bug in the calling code (an argument no
user typed), and the ``cuvil-edge`` CLI lets it end in a traceback; ``CuvilError`` ends in one line and
exit code 2 (see ``cuvil_edge.cli.EXIT_CODES``).
"""

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


class NotConstant(UnsupportedOperator):
    """An input an op needs at build time (an axis, a shape, pads: what sizes its output) is fed or
    computed at run time. ``input_name`` names it; ``model_inputs`` the model inputs its value comes from
    (itself when it is one), whose values ``CuvilModel.load(bind=...)`` (``--bind``) can fix at build
    time; empty when it comes from none."""

    def __init__(self, op_type: str, node: str, opset: int | None, index: int, input_name: str,
                 model_inputs: tuple[str, ...] = (), why: str = "") -> None:
        self.index, self.input_name, self.model_inputs = index, input_name, model_inputs
        detail = (f"{why}: " if why else "") + f"input {index} ({input_name!r}) must be a build-time constant"
        binds = ", ".join(f"{n!r}: ..." for n in model_inputs)
        flags = " ".join(f"--bind {n}=..." for n in model_inputs)
        if model_inputs == (input_name,):
            detail += f"; it is a model input: fix its value at build time with bind={{{binds}}} ({flags})"
        elif model_inputs:
            detail += (f"; it is computed from model input(s) {', '.join(map(repr, model_inputs))}: fix "
                       f"them at build time with bind={{{binds}}} ({flags})")
        super().__init__(op_type, node, opset, detail)


class ShapeError(CuvilError):
    """Shapes cannot be made static (an ``--input-shape`` that does not parse or fit included), or do not
    agree between producer and consumer."""


class GraphVerificationError(CuvilError):
    """The IR broke an invariant; raised by the verifier with the failing node and pass named."""


class InputError(CuvilError, ValueError):
    """Inputs given to ``predict`` do not match the model signature (name, dtype, shape)."""


class ToolchainError(CuvilError):
    """The kernel compiler is missing or rejected the generated code."""


class TargetError(CuvilError):
    """The build was asked for an unknown target or device profile, or for both targets and profiles."""


class QuantizationError(CuvilError, ValueError):
    """A precision, observer or option the quantizer does not know, or calibration data that is missing,
    unreadable or does not fit the model's inputs (a ``ValueError`` too, as before it had a class)."""


class ExportError(ModelFormatError):
    """A PyTorch module or checkpoint could not be exported to an ONNX graph this importer takes: the
    message names each exporter tried and why it failed."""


class PretrainedError(CuvilError):
    """A Hugging Face-layout model directory or hub id cannot be turned into a model with processing."""


class MissingPretrainedFile(PretrainedError, ModelFormatError):
    """The directory lacks a file the task needs (config.json, the ONNX export, tokenizer.json, ...)."""


class AmbiguousPretrainedModel(PretrainedError):
    """The directory holds several models and nothing names the one to build (several ``.tflite``)."""


class UnknownTask(PretrainedError):
    """The task was neither given nor inferable from config.json, or is not one cuvil-edge processes."""


class NotInCache(PretrainedError):
    """A hub id is not in the local Hugging Face cache and could not be downloaded (offline)."""


class VocabularyMismatch(PretrainedError):
    """The tokenizer can emit ids past the end of the model's embedding table."""
