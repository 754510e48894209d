"""``cast``: element type conversion, and ``round_f16``: float32 rounded to the nearest float16.

Constant inputs fold (any dtype numpy knows, float16 included); run-time casts between float32, int32,
int64, int8, uint8 and bool, and between float32 and float16, use the f32-cast kernels. fp16 graphs
compute in float32 with ``round_f16`` after each op (see ``frontend/onnx/float16.py``), so float16
tensors exist at run time only at the graph's edges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import same_type
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

#: dtype -> kernel name part; bool reads as uint8 (0/1) and writes through its own "!= 0" kernels
_CODES = {"float32": "f32", "int32": "i32", "int64": "i64", "int8": "i8", "uint8": "u8", "bool": "b"}
#: float16 converts to and from float32 only ("h": IEEE half, see the f32-cast template)
_HALF = "h"

RUNTIME_CASTS = frozenset({(s, d) for s in _CODES for d in _CODES if s != d and (s, d) != ("bool", "uint8")}
                          | {("float32", "float16"), ("float16", "float32")})


def _code(dtype: str) -> str:
    return _HALF if dtype == "float16" else _CODES[dtype]


def _infer(node: Node) -> list[TensorType]:
    return [TensorType(node.inputs[0].type.shape, node.attrs["to"])]


def _fold(node: Node, args) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [args[0].astype(node.attrs["to"])]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    src = "u8" if x.type.dtype == "bool" else _code(x.type.dtype)
    fn = f"{src}_{_code(y.type.dtype)}_vcvt"
    ctx.use_kernel(fn.replace("_", "-"))
    return f"{fn}({x.type.size}, {ctx.ptr(x)}, {ctx.ptr(y)});"


register(OpDef("cast", _infer, _fold, _emit, kernels=("f32-cast",), inplace=True))


def _round_infer(node: Node) -> list[TensorType]:
    if node.inputs[0].type.dtype != "float32":
        raise ShapeError(f"{node.name}: round_f16 takes float32, not {node.inputs[0].type.dtype}")
    return same_type(node)


def _round_fold(node: Node, args) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [args[0].astype(np.float16).astype(np.float32)]


def _round_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    ctx.use_kernel("f32-vroundh")
    return f"f32_vroundh({x.type.size}, {ctx.ptr(x)}, {ctx.ptr(y)});"


register(OpDef("round_f16", _round_infer, _round_fold, _round_emit, kernels=("f32-cast",), inplace=True))
