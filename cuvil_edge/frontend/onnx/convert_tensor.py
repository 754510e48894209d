"""Converters for data movement and shape-chain ops: Transpose, Concat, Slice, Split, Pad, Expand,
Tile, Gather, ConstantOfShape, Range.

Every opset's attribute-vs-input form is normalised here (full-rank, non-negative axes, python-range
slice bounds), so the IR ops see one form. Shape chains fold as they are built: ``ctx.emit1`` folds a
node whose inputs are all constant.

A Slice or Range whose start is a run-time value (a decoder loop's step) keeps a static length when its
end is provably ``start + c`` (through casts, reshapes, constant adds and a ``Min`` with a constant, which
only clamps): it becomes ``slice_rt`` / ``range_rt``, which check that length at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ir.graph import Graph, Value
from ...ops.movement import PAD_MODES
from .importer import tensor_array
from .registry import ConvertContext, converter, int_list


def _ints(v: Any) -> list[int]:
    return int_list(v, "a build-time index input")


@converter("Transpose")
def transpose(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    perm = ctx.attr("perm") or list(range(len(x.type.shape)))[::-1]
    ctx.set_outputs(ctx.emit1("transpose", [x], {"perm": [int(p) for p in perm]}))


@converter("Concat")
def concat(ctx: ConvertContext) -> None:
    ctx.set_outputs(ctx.emit1("concat", ctx.inputs(), {"axis": int(ctx.attr("axis", 0))}))


def _affine(graph: Graph, v: Value) -> tuple[Value, int]:
    """``(root, c)`` with ``v == root + c`` for every run-time value of ``root`` (up to a clamping ``Min``
    with a constant, which the run-time length check catches): walks casts, reshapes and constant adds."""
    producers = graph.producers()
    total = 0
    while (node := producers.get(id(v))) is not None:
        if node.op in ("cast", "reshape") and node.inputs[0].type.size == 1:
            v = node.inputs[0]
            continue
        if node.op not in ("binary_loop", "binary_f32") or node.attrs["kind"] not in ("add", "sub", "min"):
            break
        a, b = node.inputs
        if a.is_const and node.attrs["kind"] != "sub":
            a, b = b, a
        if not b.is_const or b.type.size != 1 or a.is_const:
            break
        c = b.const.reshape(-1)[0]
        if c != int(c):
            break
        total += {"add": int(c), "sub": -int(c), "min": 0}[node.attrs["kind"]]
        v = a
    return v, total


def offset_from(graph: Graph, v: Value, base: Value) -> int | None:
    """``c`` when ``v == base + c`` (see ``_affine``), else None."""
    (root, c), (base_root, b) = _affine(graph, v), _affine(graph, base)
    return c - b if root is base_root else None


def _run_time_length(ctx: ConvertContext, start: Value, end: Value, step: int,
                     inputs: tuple[int, int]) -> int:
    """The static element count of a run-time ``range(start, end, step)``; ``inputs``: the node's inputs
    that hold the start and the end (the one not known at build time is named when it must be)."""
    if start.is_const:
        raise ctx.not_constant(inputs[1], "the end is known only at run time, so the output length is "
                               "unknown at build time")
    c = offset_from(ctx.graph, end, start)
    if c is None:
        raise ctx.not_constant(inputs[0], "the start is known only at run time and the end is not the start "
                               "plus a constant, so the output length is unknown at build time")
    return max(-(-c // step), 0)


def _slice_run_time(ctx: ConvertContext, x: Value) -> Value:
    axes, steps = ctx.const(3), ctx.const(4)
    start, end = ctx.input(1), ctx.input(2)
    axis = [0] if axes is None else _ints(axes)
    step = [1] if steps is None else _ints(steps)
    if start.type.size != 1 or end.type.size != 1 or len(axis) != 1 or step[0] < 1:
        raise ctx.not_constant(1 if not start.is_const else 2, "run-time bounds are supported on one axis "
                               f"with a positive step (starts {start.type}, ends {end.type}, axes {axis}, "
                               f"steps {step})")
    n = _run_time_length(ctx, start, end, step[0], (1, 2))
    return ctx.emit1("slice_rt", [x, start, end],
                     {"axis": ctx.axis(axis[0], len(x.type.shape)), "step": step[0], "length": n})


@converter("Slice")
def slice_(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    shape = x.type.shape
    if ctx.opset >= 10 and not (ctx.input(1).is_const and ctx.input(2).is_const):
        ctx.set_outputs(_slice_run_time(ctx, x))
        return
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
        a = ctx.axis(a, len(shape))
        norm[a] = slice(s, e, st).indices(shape[a])  # ONNX clamping is python's
    ctx.set_outputs(ctx.emit1("slice", [x], {"starts": [n[0] for n in norm], "ends": [n[1] for n in norm],
                                             "steps": [n[2] for n in norm]}))


@converter("Split")
def split(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    axis = ctx.axis(ctx.attr("axis", 0), len(x.type.shape))
    dim = x.type.shape[axis]
    sizes = ctx.attr("split") if ctx.opset < 13 else ctx.const(1)
    if sizes is None:
        n = int(ctx.attr("num_outputs", len(ctx.proto.output)))
        if not 1 <= n <= len(ctx.proto.output):
            raise ctx.unsupported(f"num_outputs={n} for {len(ctx.proto.output)} outputs")
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
        axes = [ctx.axis(a, r) for a in _ints(axes)]
        if len(pads) != 2 * len(axes):
            raise ctx.unsupported(f"pads {pads} do not match axes {axes}")
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
        raise ctx.not_constant(1, "the model declares no static shape for output "
                               f"{ctx.proto.output[0]!r}, so its size is unknown at build time")
    if shape.type.dtype != "int64" or len(shape.type.shape) != 1:
        raise ctx.unsupported(f"shape input of type {shape.type}")
    ctx.set_outputs(ctx.emit1("expand", [x, shape], {"shape": list(out)}))


@converter("Tile")
def tile(ctx: ConvertContext) -> None:
    x, reps = ctx.input(0), ctx.const(1)
    if reps.size != len(x.type.shape):  # before reading them: a folded repeats input may be huge
        raise ctx.unsupported(f"{reps.size} repeats for an input of rank {len(x.type.shape)}")
    ctx.set_outputs(ctx.emit1("tile", [x], {"repeats": _ints(reps)}))


@converter("Gather")
def gather(ctx: ConvertContext) -> None:
    ctx.set_outputs(ctx.emit1("gather", [ctx.input(0), ctx.input(1)], {"axis": int(ctx.attr("axis", 0))}))


@converter("ConstantOfShape")
def constant_of_shape(ctx: ConvertContext) -> None:
    t = ctx.attr("value")
    value = np.zeros(1, np.float32) if t is None else tensor_array(t, ctx.op_type, ctx.name, ctx.opset)
    if value.size != 1:
        raise ctx.unsupported(f"value holds {value.size} elements, not one")
    ctx.const(0)  # the output shape must be known at build time
    ctx.set_outputs(ctx.emit1("constant_of_shape", [ctx.input(0)],
                              {"value": value.reshape(-1)[0].item(), "dtype": str(value.dtype)}))


@converter("Range")
def range_(ctx: ConvertContext) -> None:
    start, limit, delta = ctx.input(0), ctx.input(1), ctx.input(2)
    if start.is_const and limit.is_const:
        ctx.const(2)  # the output length must be known at build time
        ctx.set_outputs(ctx.emit1("range", [start, limit, delta]))
        return
    step = ctx.scalar(2, "delta")
    if step != int(step) or step == 0:
        raise ctx.unsupported(f"a run-time range needs a non-zero integer delta, got {step}")
    n = _run_time_length(ctx, start, limit, int(step), (0, 1)) if step > 0 else _run_time_length(
        ctx, limit, start, -int(step), (1, 0))
    ctx.set_outputs(ctx.emit1("range_rt", [start, limit, delta], {"length": n}))


@converter("Trilu")
def trilu(ctx: ConvertContext) -> None:
    """Keep the upper (or lower) triangle of the last two dims from diagonal k, on any element type
    (exporters write it for causal masks): ``where`` with a mask that folds to a constant when k is one,
    else compares each element's column - row with the run-time k."""
    x = ctx.input(0)
    if len(x.type.shape) < 2:
        raise ctx.unsupported(f"input of rank {len(x.type.shape)} (at least 2)")
    rows, cols = x.type.shape[-2:]
    ctx.materialise((rows * cols + rows + cols) * 8)  # the offsets and the two ranges they come from
    offset = ctx.constant(np.arange(cols, dtype=np.int64)[None, :] - np.arange(rows, dtype=np.int64)[:, None],
                          "col_minus_row")
    k = ctx.input(1) if ctx.has_input(1) else ctx.constant(np.int64(0), "k")
    if k.type.dtype != "int64" or k.type.size != 1:
        raise ctx.unsupported(f"k of type {k.type} (an int64 scalar)")
    if k.type.shape:
        k = ctx.emit1("reshape", [k], {"shape": []}, name=f"{ctx.name}/k")
    keep = ctx.emit1("compare", [offset, k], {"kind": "ge" if ctx.attr("upper", 1) else "le"},
                     name=f"{ctx.name}/mask")
    zero = ctx.constant(np.zeros((), x.type.dtype), "zero")
    ctx.set_outputs(ctx.emit1("where", [keep, x, zero]))


@converter("EyeLike")
def eye_like(ctx: ConvertContext) -> None:
    """Ones on diagonal k of a 2-D tensor shaped like the input: a build-time constant."""
    from .importer import np_dtype_of_onnx

    x = ctx.input(0)
    if len(x.type.shape) != 2:
        raise ctx.unsupported(f"input of rank {len(x.type.shape)} (EyeLike takes 2)")
    dtype = np_dtype_of_onnx(int(ctx.attr("dtype"))) if ctx.attr("dtype") is not None else x.type.dtype
    ctx.materialise(x.type.size * np.dtype(dtype).itemsize)
    ctx.set_outputs(ctx.constant(np.eye(*x.type.shape, k=int(ctx.attr("k", 0)), dtype=dtype), "eye"))
