"""Converters for data movement and shape-chain ops: Transpose, Concat, Slice, Split, Pad, Expand,
Tile, Gather, ConstantOfShape, Range.

Every opset's attribute-vs-input form is normalised here (full-rank, non-negative axes, python-range
slice bounds), so the IR ops see one form. Shape chains fold as they are built: ``ctx.emit1`` folds a
node whose inputs are all constant.
"""

from __future__ import annotations

import numpy as np

from ...ops.movement import PAD_MODES
from .registry import ConvertContext, converter


def _ints(v) -> list[int]:
    return [int(a) for a in np.asarray(v).reshape(-1)]


@converter("Transpose")
def transpose(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    perm = ctx.attr("perm") or list(range(len(x.type.shape)))[::-1]
    ctx.set_outputs(ctx.emit1("transpose", [x], {"perm": [int(p) for p in perm]}))


@converter("Concat")
def concat(ctx: ConvertContext) -> None:
    ctx.set_outputs(ctx.emit1("concat", ctx.inputs(), {"axis": int(ctx.attr("axis", 0))}))


@converter("Slice")
def slice_(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    shape = x.type.shape
    if ctx.opset < 10:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    else:
        starts, ends, axes, steps = ctx.const(1), ctx.const(2), ctx.const(3), ctx.const(4)
    starts, ends = _ints(starts), _ints(ends)
    axes = list(range(len(starts))) if axes is None else _ints(axes)
    steps = [1] * len(starts) if steps is None else _ints(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.unsupported(f"starts/ends/axes/steps lengths differ: {starts} {ends} {axes} {steps}")
    norm = [(0, d, 1) for d in shape]
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise ctx.unsupported("slice step 0")
        a %= len(shape)
        norm[a] = slice(s, e, st).indices(shape[a])  # ONNX clamping is python's
    ctx.set_outputs(ctx.emit1("slice", [x], {"starts": [n[0] for n in norm], "ends": [n[1] for n in norm],
                                             "steps": [n[2] for n in norm]}))


@converter("Split")
def split(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    axis = int(ctx.attr("axis", 0)) % len(x.type.shape)
    dim = x.type.shape[axis]
    sizes = ctx.attr("split") if ctx.opset < 13 else ctx.const(1)
    if sizes is None:
        n = int(ctx.attr("num_outputs", len(ctx.proto.output)))
        chunk = -(-dim // n)  # opset 18: the last chunk takes what is left
        sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
        if ctx.opset < 18 and dim % n:
            raise ctx.unsupported(f"dim {dim} does not split evenly into {n} outputs")
    sizes = _ints(sizes)
    ctx.set_outputs(*ctx.emit("split", [x], {"axis": axis, "sizes": sizes}, n_outputs=len(sizes)))


@converter("Pad")
def pad(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    r = len(x.type.shape)
    mode = ctx.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise ctx.unsupported(f"mode={mode!r}")
    if ctx.opset < 11:
        pads, value, axes = _ints(ctx.attr("pads")), float(ctx.attr("value", 0.0)), None
    else:
        pads = _ints(ctx.const(1))
        cv = ctx.const(2)
        value = 0.0 if cv is None or cv.size == 0 else np.asarray(cv).reshape(-1)[0].item()
        axes = ctx.const(3)
    if axes is not None:
        axes = [a % r for a in _ints(axes)]
        full = [0] * (2 * r)
        for i, a in enumerate(axes):
            full[a], full[a + r] = pads[i], pads[i + len(axes)]
        pads = full
    if len(pads) != 2 * r:
        raise ctx.unsupported(f"pads {pads} do not match rank {r}")
    ctx.set_outputs(ctx.emit1("pad", [x], {"pads": pads, "mode": mode, "value": value}))


@converter("Expand")
def expand(ctx: ConvertContext) -> None:
    """A run-time shape (static rank) takes the output shape the model declares; the module checks the
    shape it is given against it."""
    x, shape = ctx.input(0), ctx.input(1)
    if shape.is_const:
        ctx.set_outputs(ctx.emit1("expand", [x], {"shape": _ints(shape.const)}))
        return
    out = ctx.declared_shape()
    if out is None:
        raise ctx.unsupported("the shape is a run-time input and the model declares no static shape for "
                              f"output {ctx.proto.output[0]!r}, so its size is unknown at build time")
    if shape.type.dtype != "int64" or len(shape.type.shape) != 1:
        raise ctx.unsupported(f"shape input of type {shape.type}")
    ctx.set_outputs(ctx.emit1("expand", [x, shape], {"shape": list(out)}))


@converter("Tile")
def tile(ctx: ConvertContext) -> None:
    ctx.set_outputs(ctx.emit1("tile", [ctx.input(0)], {"repeats": _ints(ctx.const(1))}))


@converter("Gather")
def gather(ctx: ConvertContext) -> None:
    ctx.set_outputs(ctx.emit1("gather", [ctx.input(0), ctx.input(1)], {"axis": int(ctx.attr("axis", 0))}))


@converter("ConstantOfShape")
def constant_of_shape(ctx: ConvertContext) -> None:
    from onnx import numpy_helper

    t = ctx.attr("value")
    value = np.zeros(1, np.float32) if t is None else numpy_helper.to_array(t)
    ctx.const(0)  # the output shape must be known at build time
    ctx.set_outputs(ctx.emit1("constant_of_shape", [ctx.input(0)],
                              {"value": value.reshape(-1)[0].item(), "dtype": str(value.dtype)}))


@converter("Range")
def range_(ctx: ConvertContext) -> None:
    for i in range(3):
        ctx.const(i)  # the output length must be known at build time
    ctx.set_outputs(ctx.emit1("range", ctx.inputs()))
