"""``reduce`` (attrs ``kind``, sorted ``axes``, ``keepdims``): ReduceMean/Sum/Max/Min/Prod/SumSquare/L1/L2.

At build time the input's dims are grouped into runs of reduced and kept axes (size-1 dims dropped);
each reduced run is one [outer][r][inner] kernel pass, innermost first, through scratch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

#: kind -> (first-pass kernel, later-pass kernel, numpy reference)
KINDS = {
    "mean": ("sum", "sum", lambda x, ax: np.mean(x, axis=ax, keepdims=True)),
    "sum": ("sum", "sum", lambda x, ax: np.sum(x, axis=ax, keepdims=True)),
    "max": ("max", "max", lambda x, ax: np.max(x, axis=ax, keepdims=True)),
    "min": ("min", "min", lambda x, ax: np.min(x, axis=ax, keepdims=True)),
    "prod": ("prod", "prod", lambda x, ax: np.prod(x, axis=ax, keepdims=True)),
    "sumsquare": ("sumsq", "sum", lambda x, ax: np.sum(x * x, axis=ax, keepdims=True)),
    "l1": ("sumabs", "sum", lambda x, ax: np.sum(np.abs(x), axis=ax, keepdims=True)),
    "l2": ("sumsq", "sum", lambda x, ax: np.sqrt(np.sum(x * x, axis=ax, keepdims=True))),
}


def reduced_shape(node: Node) -> tuple[int, ...]:
    """The output shape of a reduction node (``axes``, ``keepdims``): ``reduce`` and ``reduce_loop``."""
    s, axes = node.inputs[0].type.shape, set(node.attrs["axes"])
    if node.attrs["keepdims"]:
        return tuple(1 if i in axes else d for i, d in enumerate(s))
    return tuple(d for i, d in enumerate(s) if i not in axes)


def _infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    if node.attrs["kind"] not in KINDS or any(not 0 <= a < len(x.shape) for a in node.attrs["axes"]):
        raise ShapeError(f"{node.name}: bad reduce {node.attrs['kind']!r} over axes {node.attrs['axes']} "
                         f"of {x.shape}")
    return [TensorType(reduced_shape(node), x.dtype)]


def _fold(node: Node, args) -> list[np.ndarray]:
    y = KINDS[node.attrs["kind"]][2](args[0], tuple(node.attrs["axes"]))
    return [y.astype(args[0].dtype).reshape(reduced_shape(node))]


def reduce_groups(shape: tuple[int, ...], axes: list[int]) -> list[tuple[int, bool]]:
    """(size, reduced?) runs of adjacent dims of one class; size-1 dims dropped."""
    groups: list[tuple[int, bool]] = []
    for i, d in enumerate(shape):
        if d == 1:
            continue
        red = i in axes
        if groups and groups[-1][1] == red:
            groups[-1] = (groups[-1][0] * d, red)
        else:
            groups.append((d, red))
    return groups


def _passes(node: Node) -> list[tuple[int, int, int]]:
    """(outer, r, inner) of each kernel pass, innermost reduced run first."""
    groups = reduce_groups(node.inputs[0].type.shape, node.attrs["axes"])
    out = []
    while any(red for _, red in groups):
        g = max(i for i, (_, red) in enumerate(groups) if red)
        sizes = [d for d, _ in groups]
        out.append((math.prod(sizes[:g]), sizes[g], math.prod(sizes[g + 1:])))
        del groups[g]
    return out


def _scratch(node: Node) -> int:
    return sum(outer * inner for outer, _, inner in _passes(node)[:-1]) * 4


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    kind = node.attrs["kind"]
    passes = _passes(node)
    if not passes:  # every reduced axis has size 1
        ctx.use_kernel("f32-copy-4")
        return f"copy_f32({ctx.ptr(y)}, {ctx.ptr(x)}, {y.type.size});"
    first, later, _ = KINDS[kind]
    ctx.use_kernel(f"f32-r{first}-4")
    lines, src, off = [], ctx.ptr(x), 0
    for i, (outer, r, inner) in enumerate(passes):
        dst = ctx.ptr(y) if i == len(passes) - 1 else f"({ctx.scratch()} + {off})"
        scale = f"{1.0 / r!r}f" if kind == "mean" else "1.0f"
        lines.append(f"f32_r{first if i == 0 else later}({outer}, {r}, {inner}, {src}, {dst}, {scale});")
        src, off = dst, off + outer * inner
    if kind == "l2":
        lines.append(f"f32_vsqrt({y.type.size}, {ctx.ptr(y)}, {ctx.ptr(y)}, (Act){{ACT_NONE, 0.0f, 0.0f}});")
    return "\n".join(lines)


register(OpDef("reduce", _infer, _fold, _emit, kernels=("f32-unary", "f32-reduce"), inplace=True,
               scratch=_scratch, dtypes=F32))
