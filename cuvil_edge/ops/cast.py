"""``cast``: element type conversion. Constant inputs fold (any dtype numpy knows, float16 included);
run-time casts between float32, int32, int64, int8, uint8 and bool use the f32-cast kernels."""

from __future__ import annotations

import numpy as np

from ..codegen.emit import EmitContext
from ..ir.graph import Node, TensorType
from .registry import OpDef, register

#: dtype -> kernel name part; bool reads as uint8 (0/1) and writes through its own "!= 0" kernels
_CODES = {"float32": "f32", "int32": "i32", "int64": "i64", "int8": "i8", "uint8": "u8", "bool": "b"}

RUNTIME_CASTS = frozenset((s, d) for s in _CODES for d in _CODES if s != d and (s, d) != ("bool", "uint8"))


def _infer(node: Node) -> list[TensorType]:
    return [TensorType(node.inputs[0].type.shape, node.attrs["to"])]


def _fold(node: Node, args) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [args[0].astype(node.attrs["to"])]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    src = "u8" if x.type.dtype == "bool" else _CODES[x.type.dtype]
    fn = f"{src}_{_CODES[y.type.dtype]}_vcvt"
    ctx.use_kernel(fn.replace("_", "-"))
    return f"{fn}({x.type.size}, {ctx.ptr(x)}, {ctx.ptr(y)});"


register(OpDef("cast", _infer, _fold, _emit, kernels=("f32-cast",), inplace=True))
