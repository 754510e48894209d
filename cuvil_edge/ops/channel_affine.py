"""``channel_affine``: the per-channel affine y = a[c] * x + b[c] (axis 1), with a fused activation.

BatchNormalization (and the scale and bias after Instance/GroupNormalization) is converted to this form
at import, and ``canonicalize_affine`` turns per-channel constant mul/add/sub/div into it; the fold pass
merges it into a preceding conv/gemm, and what remains runs as one pass over the data. a and b may be
run-time tensors (a norm's scale and bias given as graph inputs): the kernel reads them from memory
either way, only the merging needs constants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import act_c, act_numpy, split_rows
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _infer(node: Node) -> list[TensorType]:
    """x's type, once a and b hold one float per channel (axis 1): the kernel indexes them by channel."""
    x, a, b = (v.type for v in node.inputs)
    if len(x.shape) < 2 or a.size != x.shape[1] or b.size != x.shape[1] or {a.dtype, b.dtype} != {x.dtype}:
        raise ShapeError(f"{node.name}: channel_affine of {x} by {a} and {b} (one value per channel)")
    return [x]


def _fold(node: Node, args) -> list[np.ndarray]:
    x, a, b = args
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return [act_numpy(x * a.reshape(shape) + b.reshape(shape), node.attrs.get("act")).astype(np.float32)]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, a, b = node.inputs
    s = x.type.shape
    inner = int(np.prod(s[2:])) if len(s) > 2 else 1
    ctx.use_kernel("f32-vaffinec-4")
    if s[0] != 1:
        return (f"f32_channel_affine({ctx.ptr(x)}, {ctx.ptr(node.outputs[0])}, {s[0]}, {s[1]}, {inner}, "
                f"{ctx.ptr(a)}, {ctx.ptr(b)}, {act_c(node)});")
    y = ctx.ptr(node.outputs[0])
    return split_rows(ctx, s[1], x.type.size, lambda c, i: (  # one image: threads split the channels
        f"f32_channel_affine({ctx.ptr(x)} + (size_t){i} * {inner}, {y} + (size_t){i} * {inner}, 1, {c}, "
        f"{inner}, {ctx.ptr(a)} + {i}, {ctx.ptr(b)} + {i}, {act_c(node)});"),
        by_row=(x, node.outputs[0], *(v for v in (a, b) if v.type.size == s[1])))


register(OpDef("channel_affine", _infer, _fold, _emit, kernels=("f32-norm",), inplace=True, dtypes=F32))
