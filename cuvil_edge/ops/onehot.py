"""``onehot``: ONNX OneHot. Inputs: indices (any numeric type, run time), values ``[off, on]``.

attrs: ``axis`` (non-negative, where the depth dim is inserted), ``depth``. An index in
``[-depth, depth)`` (negative counts from the end) marks one position; any other index marks none, as
ONNX specifies. Emitted as one C loop: a decoder's one-hot row is small, so it runs on thread 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _infer(node: Node) -> list[TensorType]:
    ind, values = node.inputs[0].type, node.inputs[1].type
    axis, depth = node.attrs["axis"], node.attrs["depth"]
    if values.size != 2 or not 0 <= axis <= len(ind.shape) or depth < 1:
        raise ShapeError(f"{node.name}: one-hot of {ind} with values {values}, axis {axis}, depth {depth}")
    return [TensorType((*ind.shape[:axis], depth, *ind.shape[axis:]), values.dtype)]


def _fold(node: Node, args) -> list[np.ndarray]:
    ind, values = args
    axis, depth = node.attrs["axis"], node.attrs["depth"]
    idx = ind.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    off, on = values.reshape(-1)
    # written in place: no temporary of the depth's size (a huge depth over empty indices costs nothing)
    out = np.full((*ind.shape[:axis], depth, *ind.shape[axis:]), off, values.dtype)
    valid = (idx >= 0) & (idx < depth)
    np.put_along_axis(out, np.expand_dims(np.where(valid, idx, 0), axis),
                      np.expand_dims(np.where(valid, on, off).astype(values.dtype), axis), axis)
    return [out]


def _emit(node: Node, ctx: EmitContext) -> str:
    ind, values, y = node.inputs[0], node.inputs[1], node.outputs[0]
    axis, depth = node.attrs["axis"], node.attrs["depth"]
    outer, inner = math.prod(ind.type.shape[:axis]), math.prod(ind.type.shape[axis:])
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-onehot")
    v = ctx.ptr(values)
    return "\n".join([
        f"for (int o = 0; o < {outer}; o++)",
        f"  for (int i = 0; i < {inner}; i++) {{",
        f"    int64_t j = (int64_t){ctx.ptr(ind)}[o * {inner} + i];",
        f"    j = j < 0 ? j + {depth} : j;",
        f"    for (int d = 0; d < {depth}; d++)",
        f"      {ctx.ptr(y)}[((size_t)o * {depth} + d) * {inner} + i] = {v}[d == j];",
        "  }",
    ])


register(OpDef("onehot", _infer, _fold, _emit))
