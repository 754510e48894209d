"""WHERE (one input), UNIQUE and NON_MAX_SUPPRESSION_V4 / V5: outputs whose size depends on the data,
onto the IR's ``nonzero``, ``unique`` and ``nms`` (``ops/dynamic.py``).

WHERE's and UNIQUE's outputs are allocated for their bound and zero past their real length; such a model
output gets a ``<name>:length`` output, as the ONNX import gives NonZero's (the importer's
``add_length_outputs``; docs/ONNX.md, "Data-dependent output sizes"), and any other reader is refused.
The NMS ops need none: TFLite itself pads their selections to ``max_output_size`` with zeros and outputs
the count (``valid_outputs``), so they are static here too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ir.graph import Value
from ...ops.dynamic import PADDED
from ..onnx.importer import Padded
from .convert_tensor import int_values
from .registry import TflContext, converter


def _emit_padded(ctx: TflContext, op: str, inputs: list[Value], attrs: dict[str, Any],
                 n_outputs: int) -> tuple[list[Value], Value | None]:
    """``op``'s outputs but its length, and that length when it is known only at run time (None: the
    node folded, and its padded outputs are cut to the exact result)."""
    *outs, length = ctx.emit(op, inputs, attrs, f"{ctx.name}/{op}", n_outputs=n_outputs + 1)
    if not length.is_const:
        return outs, length
    n, axes = int(length.const), PADDED[op](attrs)
    return [ctx.constant(np.take(v.const, np.arange(n), axis=axes[i]), f"exact{i}") if i in axes else v
            for i, v in enumerate(outs)], None


def _mark_padded(ctx: TflContext, v: Value, length: Value | None) -> None:
    """``v`` holds ``length`` entries at run time: a model output gets ``<name>:length`` for it."""
    if length is None:
        return
    if not ctx.state.persistent:
        raise ctx.unsupported("its output has a run-time length, inside an IF branch or an initializer: "
                              "only model outputs may have one")
    ctx.graph.meta.setdefault("padded_scans", {})[id(v)] = Padded(length, ctx.name, ctx.op.op)


@converter("WHERE")
def where(ctx: TflContext) -> None:
    """The coordinates of the non-zero (true) elements, int64 [n, rank] (``nonzero``'s, transposed)."""
    x = ctx.input(0)
    if len(ctx.op.inputs) != 1 or not x.type.shape:
        raise ctx.unsupported(f"{len(ctx.op.inputs)} inputs of shape {x.type.shape}: one of rank 1 or more")
    (coords,), length = _emit_padded(ctx, "nonzero", [x], {}, 1)
    y = ctx.emit1("transpose", [coords], {"perm": [1, 0]})
    _mark_padded(ctx, y, length)
    ctx.set_output(y)


@converter("UNIQUE")
def unique(ctx: TflContext) -> None:
    """A 1-D input's distinct values in order of first occurrence, and each element's index among them
    (int32 or int64: the output's type). NaNs equal each other (numpy's rule; LiteRT keeps each NaN)."""
    x = ctx.input(0)
    if len(x.type.shape) != 1 or x.type.size == 0:
        raise ctx.unsupported(f"input of shape {x.type.shape}: one non-empty dim")
    (y, _, inverse, _), length = _emit_padded(ctx, "unique", [x], {"axis": None, "sorted": False}, 4)
    _mark_padded(ctx, y, length)
    ctx.set_output(y)
    ctx.set_output(ctx.cast(inverse, ctx.output_dtype(1), "idx"), None, 1)


@converter("NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5")
def non_max_suppression(ctx: TflContext) -> None:
    """Boxes [n, 4] (y1, x1, y2, x2), scores [n], a constant ``max_output_size`` and IoU threshold, the
    score threshold constant or not (V5: ``soft_nms_sigma`` must be 0, hard NMS). LiteRT keeps a candidate
    unless its IoU with a kept box is at or above the threshold, the IR's ``nms`` when it is above: the
    threshold is moved to the float just below it (below 0 every IoU suppresses: one box at most). Outputs
    the selected indices (int32, zero past the count), V5 their scores, and the count."""
    soft = ctx.op.op.endswith("V5")
    if soft and (sigma := float(ctx.const(5).reshape(-1)[0])) != 0.0:
        raise ctx.unsupported(f"soft-NMS (soft_nms_sigma {sigma}): only hard NMS (sigma 0) is supported")
    boxes, scores, score = ctx.input(0), ctx.input(1), ctx.input(4)
    n = scores.type.shape[0] if len(scores.type.shape) == 1 else -1
    limit, iou = int_values(ctx.const(2)), ctx.const(3).reshape(-1)
    dtypes = {boxes.type.dtype, scores.type.dtype, score.type.dtype}
    if boxes.type.shape != (n, 4) or dtypes != {"float32"} or score.type.size != 1 or len(limit) != 1 or \
            limit[0] < 1 or n < 1 or iou.size != 1 or not np.isfinite(iou).all():
        raise ctx.unsupported(f"boxes {boxes.type}, scores {scores.type}, max_output_size {limit}, "
                              f"iou_threshold {iou.tolist()} and score_threshold {score.type}: want [n, 4] "
                              "and [n] float32, a positive count, a finite threshold and one float32")
    at_least = float(iou[0])
    keep = min(limit[0], n, 1 if at_least <= 0 else n)
    above = np.float32(1) if at_least > 1 else max(np.nextafter(np.float32(at_least), np.float32(-1)),
                                                    np.float32(0))
    rows, count = ctx.emit("nms", [
        ctx.emit1("reshape", [boxes], {"shape": [1, n, 4]}, f"{ctx.name}/boxes"),
        ctx.emit1("reshape", [scores], {"shape": [1, 1, n]}, f"{ctx.name}/scores"),
        ctx.constant(np.int64(keep), "limit"), ctx.constant(above, "iou"),
        ctx.emit1("reshape", [score], {"shape": []}, f"{ctx.name}/score_threshold")],
        {"center": 0, "per_class": keep}, f"{ctx.name}/nms", n_outputs=2)
    box = ctx.emit1("slice", [rows], {"starts": [0, 2], "ends": [keep, 3], "steps": [1, 1]},
                    f"{ctx.name}/box")
    box = ctx.emit1("reshape", [box], {"shape": [keep]}, f"{ctx.name}/ids")

    def padded(v: Value, tag: str) -> Value:
        """``v`` zero past the kept ones, to ``max_output_size``."""
        if keep == limit[0]:
            return v
        return ctx.emit1("pad", [v], {"pads": [0, limit[0] - keep], "mode": "constant", "value": 0.0},
                         f"{ctx.name}/{tag}")

    ctx.set_output(padded(ctx.cast(box, ctx.output_dtype(0), "indices"), "indices_out"))
    if soft:
        picked = padded(ctx.emit1("gather", [scores, box], {"axis": 0}, f"{ctx.name}/picked"), "picked_out")
        real = ctx.emit1("compare", [ctx.constant(np.arange(limit[0], dtype=np.int64), "positions"), count],
                         {"kind": "lt"}, f"{ctx.name}/selected")
        ctx.set_output(ctx.emit1("where", [real, picked, ctx.constant(np.float32(0), "zero")],
                                 name=f"{ctx.name}/scores_out"), None, 1)
    ctx.set_output(ctx.cast(count, ctx.output_dtype(2 if soft else 1), "count"), None, 2 if soft else 1)
