"""``lrn`` (attrs size, alpha, beta, bias): ONNX LRN across channels of NC... data (AlexNet, GoogLeNet)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import same_type
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _infer(node: Node) -> list[TensorType]:
    if len(node.inputs[0].type.shape) < 2 or node.attrs["size"] < 1:
        raise ShapeError(f"{node.name}: LRN needs an N,C,... input and size >= 1")
    return same_type(node)


def _fold(node: Node, args) -> list[np.ndarray]:
    x = args[0].astype(np.float64)
    a = node.attrs
    lo, hi = (a["size"] - 1) // 2, a["size"] // 2
    c = x.shape[1]
    sq = np.pad(x * x, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    s = sum(sq[:, i:i + c] for i in range(a["size"]))
    return [(x / (a["bias"] + a["alpha"] / a["size"] * s) ** a["beta"]).astype(args[0].dtype)]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    s, a = x.type.shape, node.attrs
    ctx.use_kernel("f32-lrn-4")
    return (f"f32_lrn({s[0]}, {s[1]}, {math.prod(s[2:])}, {ctx.ptr(x)}, {ctx.ptr(y)}, {a['size']}, "
            f"{a['alpha'] / a['size']!r}f, {float(a['beta'])!r}f, {float(a['bias'])!r}f);")


register(OpDef("lrn", _infer, _fold, _emit, kernels=("f32-unary", "f32-lrn"), dtypes=F32))
