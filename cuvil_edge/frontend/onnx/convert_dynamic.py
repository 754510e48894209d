"""NonZero, Unique, Compress and NonMaxSuppression -> ``nonzero``, ``unique``, ``compress``, ``nms``
(``ops/dynamic.py``): outputs whose size depends on the data.

Each such output is allocated for its bound (the largest size the static input shapes allow) and its
real length is known at run time; a model output among them gets a ``<name>:length`` output and is zero
past it, as a Loop's scan outputs are (``importer.mark_padded``; docs/ONNX.md, "Data-dependent output
sizes"). Any other node reading one is refused. With every input a build-time constant the node folds to
its exact result, and a Compress whose condition is a constant is a Gather of the kept indices: no
padding either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ir.graph import Value
from ...ops.dynamic import PADDED
from .importer import mark_padded
from .registry import ConvertContext, converter


def _emit_padded(ctx: ConvertContext, op: str, inputs: list[Value], attrs: dict[str, Any],
                 n_outputs: int) -> list[Value]:
    """``op``'s outputs but its length: a folded node's cut to that length (the exact result), a run-time
    node's padded ones marked so that the importer gives them ``:length`` outputs."""
    *outs, length = ctx.emit(op, inputs, attrs, n_outputs=n_outputs + 1)
    axes = PADDED[op](attrs)
    if length.is_const:
        n = int(length.const)
        return [ctx.constant(np.take(v.const, np.arange(n), axis=axes[i]), f"exact{i}") if i in axes else v
                for i, v in enumerate(outs)]
    for i in axes:
        mark_padded(ctx, outs[i], length)
    return outs


def _axis_attr(ctx: ConvertContext, x: Value) -> int | None:
    """The node's ``axis`` attribute as a non-negative axis of ``x``; None (flatten) when it is absent."""
    axis = ctx.attr("axis")
    return None if axis is None else ctx.axis(axis, len(x.type.shape))


@converter("NonZero")
def nonzero(ctx: ConvertContext) -> None:
    ctx.set_outputs(*_emit_padded(ctx, "nonzero", [ctx.input(0)], {}, 1))


@converter("Unique")
def unique(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    if x.type.size == 0:
        raise ctx.unsupported(f"its input {x.type} is empty")
    attrs = {"axis": _axis_attr(ctx, x), "sorted": bool(ctx.attr("sorted", 1))}
    ctx.set_outputs(*_emit_padded(ctx, "unique", [x], attrs, 4))


@converter("Compress")
def compress(ctx: ConvertContext) -> None:
    x, cond = ctx.input(0), ctx.input(1)
    axis = _axis_attr(ctx, x)
    if cond.type.dtype != "bool" or len(cond.type.shape) != 1:
        raise ctx.unsupported(f"the condition must be a 1-D bool tensor, got {cond.type}")
    if cond.is_const and not x.is_const:  # the kept slices are known: a Gather of them, exact
        data = x if axis is not None else ctx.emit1("reshape", [x], {"shape": [x.type.size]},
                                                    name=f"{ctx.name}/flat")
        kept = np.flatnonzero(cond.const[:data.type.shape[axis or 0]]).astype(np.int64)
        ctx.set_outputs(ctx.emit1("gather", [data, ctx.constant(kept, "kept")], {"axis": axis or 0}))
        return
    ctx.set_outputs(*_emit_padded(ctx, "compress", [x, cond], {"axis": axis}, 1))


@converter("NonMaxSuppression")
def non_max_suppression(ctx: ConvertContext) -> None:
    """The per-class limit and the thresholds may be run-time values: a run-time limit gives a bound
    that allows every box of every class."""
    boxes, scores = ctx.input(0), ctx.input(1)
    if boxes.type.dtype != "float32" or scores.type.dtype != "float32":
        raise ctx.unsupported(f"boxes and scores of {boxes.type.dtype} and {scores.type.dtype} (float32)")
    b, n = boxes.type.shape[:2] if len(boxes.type.shape) == 3 else (None, None)
    if boxes.type.shape != (b, n, 4) or len(scores.type.shape) != 3 or \
            (scores.type.shape[0], scores.type.shape[2]) != (b, n):
        raise ctx.unsupported(f"boxes {boxes.type.shape} and scores {scores.type.shape}: want "
                              "[batches, boxes, 4] and [batches, classes, boxes]")
    center = int(ctx.attr("center_point_box", 0))
    if center not in (0, 1):
        raise ctx.unsupported(f"center_point_box={center} (0 or 1)")
    limit = _optional_scalar(ctx, 2, "max_output_boxes_per_class", "int64", 0)
    iou = _optional_scalar(ctx, 3, "iou_threshold", "float32", 0.0)
    if iou.is_const and not 0.0 <= float(iou.const.reshape(-1)[0]) <= 1.0:
        raise ctx.unsupported(f"iou_threshold {float(iou.const.reshape(-1)[0])} is outside [0, 1]")
    score = [_optional_scalar(ctx, 4, "score_threshold", "float32", 0.0)] if ctx.has_input(4) else []
    per_class = n if not limit.is_const else min(max(int(limit.const.reshape(-1)[0]), 0), n)
    attrs = {"center": center, "per_class": per_class}
    ctx.set_outputs(*_emit_padded(ctx, "nms", [boxes, scores, limit, iou, *score], attrs, 1))


def _optional_scalar(ctx: ConvertContext, i: int, what: str, dtype: str, default: float) -> Value:
    """Input ``i``, one ``dtype`` value (constant or run time), or ``default`` when it is left out."""
    if not ctx.has_input(i):
        return ctx.constant(np.array(default, dtype), what)
    v = ctx.input(i)
    if v.type.dtype != dtype or v.type.size != 1:
        raise ctx.unsupported(f"{what} must be one {dtype}, got {v.type}")
    return v
