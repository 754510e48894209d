"""``prelu`` (attr ``axis``): y = x < 0 ? x * slope : x, the slope a constant [C] along ``axis`` of x
(C its size, or 1 for all). One pass (``f32-vprelu-4``) where max, min, mul and add took four; both
frontends make it from their PReLU when the slope is such a constant (``channel_slope``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import split_rows
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def channel_slope(x_shape: Sequence[int], slope: np.ndarray) -> tuple[int, np.ndarray] | None:
    """(axis, slope as [C]) when ``slope``, broadcast against x numpy-style (aligned on the right), varies
    along one axis of x at most and leaves x's shape as it is; None otherwise (the caller keeps the
    elementwise form)."""
    rank, pad = len(x_shape), len(x_shape) - slope.ndim
    if pad < 0:
        return None
    if slope.size == 1:
        return max(rank - 1, 0), slope.reshape(1).astype(np.float32)
    varying = [j for j, d in enumerate(slope.shape) if d != 1]
    if len(varying) != 1 or slope.shape[varying[0]] != x_shape[pad + varying[0]]:
        return None
    return pad + varying[0], slope.reshape(-1).astype(np.float32)


def _infer(node: Node) -> list[TensorType]:
    x, slope = node.inputs
    axis = node.attrs["axis"]
    if x.type.dtype != "float32" or not 0 <= axis < max(len(x.type.shape), 1) or \
            slope.type.shape not in ((1,), (x.type.shape[axis] if x.type.shape else 1,)):
        raise ShapeError(f"{node.name}: prelu of {x.type} with slope {slope.type} along axis {axis}")
    return [x.type]


def _fold(node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
    x, slope = args
    shape = [1] * x.ndim
    if slope.size > 1:
        shape[node.attrs["axis"]] = slope.size
    s = slope.reshape(shape)
    return [np.where(x < 0, x * s, x).astype(np.float32)]


def _emit(node: Node, ctx: EmitContext) -> str:
    """A scalar slope splits the elements; else the threads split channel planes (NCHW) or, with the
    channel innermost, rows of C."""
    x, slope, y = node.inputs[0], node.inputs[1], node.outputs[0]
    shape, axis, c = x.type.shape, node.attrs["axis"], slope.type.size
    X, Y, S = ctx.ptr(x), ctx.ptr(y), ctx.ptr(slope)
    ctx.use_kernel("f32-vprelu-4")
    size, inner = x.type.size, math.prod(shape[axis + 1:])
    if c == 1:
        return split_rows(ctx, size, size, lambda n, i: (
            f"f32_prelu_planes({X} + {i}, {Y} + {i}, 0, 1, 1, {n}, {S});"), unit=16, by_row=(x, y))
    if inner == 1:
        return split_rows(ctx, size // c, size, lambda n, i: (
            f"f32_prelu_rows({X}, {Y}, {i}, {n}, {c}, {S});"), by_row=(x, y))
    return split_rows(ctx, size // inner, size, lambda n, i: (
        f"f32_prelu_planes({X}, {Y}, {i}, {n}, {c}, {inner}, {S});"), by_row=(x, y))


register(OpDef("prelu", _infer, _fold, _emit, kernels=("f32-prelu",), inplace=True, dtypes=F32))
