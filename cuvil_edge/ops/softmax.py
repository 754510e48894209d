"""``softmax`` (attrs ``axis``, ``log``): Softmax / LogSoftmax over one axis.

The converter maps opset < 13's "flatten to 2D at axis" onto one axis through reshapes. The kernel walks
contiguous rows when the axis is innermost and 4 columns at a time otherwise (channel softmax of NCHW);
float64 runs the double-precision ``f64_softmax`` (``float64.py``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import split_rows
from .float64 import emit_softmax_f64
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    if not 0 <= node.attrs["axis"] < max(len(x.shape), 1):
        raise ShapeError(f"{node.name}: softmax axis {node.attrs['axis']} out of range for {x.shape}")
    return [x]


def _fold(node: Node, args) -> list[np.ndarray]:
    x = args[0].astype(np.float64)
    ax = node.attrs["axis"]
    z = x - x.max(axis=ax, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=ax, keepdims=True))
    y = z - lse if node.attrs["log"] else np.exp(z - lse)
    return [y.astype(args[0].dtype)]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    if x.type.dtype == "float64":
        return emit_softmax_f64(ctx, node)
    s, ax = x.type.shape, node.attrs["axis"]
    outer, n, inner = math.prod(s[:ax]), s[ax] if s else 1, math.prod(s[ax + 1:])
    log = int(bool(node.attrs["log"]))
    ctx.use_kernel(f"f32-{'log' if log else ''}softmax-4")
    row = n * inner  # threads split the outer rows
    fn = f"f32_softmax_rows({{}}, {n}, " if inner == 1 else f"f32_softmax_cols({{}}, {n}, {inner}, "
    return split_rows(ctx, outer, outer * row, lambda c, i: (
        fn.format(c) + f"{ctx.ptr(x)} + (size_t){i} * {row}, {ctx.ptr(y)} + (size_t){i} * {row}, {log});"),
        by_row=(x, y))


register(OpDef("softmax", _infer, _fold, _emit,
               kernels=("f32-unary", "f32-softmax", "f64-math"), inplace=True, dtypes=F32 | {"float64"}))
