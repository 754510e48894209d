"""``mod``: ONNX Mod with numpy broadcasting on float32, float64 and int8/uint8/int32/int64.

attrs: ``fmod`` (1: the sign of the dividend, C fmod; 0: the sign of the divisor, integers only as
ONNX requires before opset 28). Emitted as the broadcast C loops of the ``logic`` family around the
``<dtype>_mod`` helpers of the f32-mod template (exact float fmod, no libm in the module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import broadcast_shape
from .logic import broadcast_loop
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

#: dtype -> helper prefix in the f32-mod template
CODES = {"float32": "f32", "float64": "f64", "int8": "i8", "uint8": "u8", "int32": "i32", "int64": "i64"}


def _infer(node: Node) -> list[TensorType]:
    a, b = node.inputs[0].type, node.inputs[1].type
    if a.dtype != b.dtype or a.dtype not in CODES:
        raise ShapeError(f"{node.name}: mod of {a.dtype} by {b.dtype}")
    if not node.attrs["fmod"] and a.dtype.startswith("float"):
        raise ShapeError(f"{node.name}: mod with fmod=0 is defined on integers only")
    return [TensorType(broadcast_shape([a.shape, b.shape], node.name), a.dtype)]


def _fold(node: Node, args) -> list[np.ndarray]:
    a, b = args
    with np.errstate(all="ignore"):
        return [(np.fmod(a, b) if node.attrs["fmod"] else np.mod(a, b)).astype(a.dtype)]


def _emit(node: Node, ctx: EmitContext) -> str:
    code = CODES[node.outputs[0].type.dtype]
    ctx.use_kernel(f"{code}-mod")
    call = f"{code}_mod({{0}}, {{1}})" if code.startswith("f") else \
        f"{code}_mod({{0}}, {{1}}, {int(not node.attrs['fmod'])})"
    return broadcast_loop(ctx, node.outputs[0], node.inputs, call)


register(OpDef("mod", _infer, _fold, _emit, kernels=("f32-mod",)))
