"""Fold-only shape ops: ``constant_of_shape`` (ConstantOfShape) and ``range`` (Range) with build-time
inputs. They exist only to fold shape chains and weight builders at import (the ONNX zoo's light models
make their weights with ConstantOfShape), need no kernel and never run: a node left unfolded is refused
at emit. Run-time ranges are ``range_rt`` (``runtime_slice``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError, UnsupportedOperator
from ..ir import limits
from ..ir.graph import Node, TensorType
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _fold_only(node: Node, ctx: EmitContext) -> str:
    raise UnsupportedOperator(node.op, node.name, None, "it only folds at build time and has no kernel")


def _cos_infer(node: Node) -> list[TensorType]:
    v = node.inputs[0]
    if not v.is_const:
        raise ShapeError(f"{node.name}: the shape must be known at build time (it sets the output shape)")
    if v.const.size > limits.MAX_RANK:  # before a tuple of millions of dimensions is made to refuse it
        raise ShapeError(f"{node.name}: a shape of {v.const.size} dimensions, over the limit of "
                         f"{limits.MAX_RANK}")
    shape = tuple(int(d) for d in v.const.reshape(-1))
    return [TensorType(shape, node.attrs["dtype"])]


def _cos_fold(node: Node, args) -> list[np.ndarray]:
    return [np.full(tuple(int(d) for d in args[0].reshape(-1)), node.attrs["value"], node.attrs["dtype"])]


register(OpDef("constant_of_shape", _cos_infer, _cos_fold, _fold_only))


def _range_len(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> int:
    return max(math.ceil((float(limit) - float(start)) / float(delta)), 0)


def _range_infer(node: Node) -> list[TensorType]:
    if not all(v.is_const for v in node.inputs):
        raise ShapeError(f"{node.name}: range start/limit/delta must be known at build time")
    if len(node.inputs) != 3 or any(v.const.size != 1 for v in node.inputs):
        raise ShapeError(f"{node.name}: range start/limit/delta must be one value each")
    start, limit, delta = (v.const.reshape(()) for v in node.inputs)
    if float(delta) == 0 or not np.isfinite((float(limit) - float(start)) / float(delta)):
        raise ShapeError(f"{node.name}: range({start}, {limit}, {delta}) has no finite length")
    return [TensorType((_range_len(start, limit, delta),), str(start.dtype))]


def _range_fold(node: Node, args) -> list[np.ndarray]:
    start, limit, delta = (a.reshape(()) for a in args)
    n = _range_len(start, limit, delta)
    if start.dtype.kind in "iu":  # exact in one pass (a 100M-value Range took 22 s in four)
        return [np.arange(int(start), int(start) + n * int(delta), int(delta), dtype=start.dtype)[:n]]
    return [(start + np.arange(n) * delta).astype(start.dtype)]


register(OpDef("range", _range_infer, _range_fold, _fold_only))
