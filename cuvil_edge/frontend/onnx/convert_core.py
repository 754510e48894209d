"""Converters for constants, identities, Shape and Size, and the reshape family (all free at run time)."""

from __future__ import annotations

import numpy as np

from ...ir.graph import Value
from .importer import tensor_array
from .registry import ConvertContext, converter, int_list


@converter("Constant")
def constant(ctx: ConvertContext) -> None:
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        v = ctx.attr(key)
        if v is None:
            continue
        if key == "value":
            arr = tensor_array(v, ctx.op_type, ctx.name, ctx.opset)
        elif key.startswith("value_float"):
            arr = np.asarray(v, np.float32)
        else:
            arr = np.asarray(v, np.int64)
        ctx.set_outputs(ctx.constant(arr, "value"))
        return
    raise ctx.unsupported("Constant needs value, value_float(s) or value_int(s)")


@converter("Identity", "Dropout")
def identity(ctx: ConvertContext) -> None:
    # Dropout is the identity at inference (its ratio and seed change nothing then), and in training mode
    # with a ratio of 0; its optional mask output is all ones. training_mode and that ratio must be known at
    # build time (``NotConstant``: bind them); a ratio above 0 in training drops at random and is refused.
    if ctx.op_type == "Dropout":
        ctx.attr("seed")
        training = ctx.has_input(2) and bool(np.asarray(ctx.const(2)).any())
        ratio = ctx.attr("ratio", 0.5)  # an attribute before opset 12, then input 1 (default 0.5)
        if training and float(np.asarray(ctx.const(1, ratio)).reshape(-1)[0]) != 0.0:
            raise ctx.unsupported("training_mode true with a ratio above 0 drops at random (a training "
                                  "graph): inference needs training_mode false")
    elif not isinstance(ctx.item(0), Value):  # Identity passes a sequence or an optional on as it is
        ctx.set_outputs(ctx.item(0))
        return
    x = ctx.input(0)
    outs = [x]
    if len(ctx.proto.output) > 1 and ctx.proto.output[1]:
        ctx.materialise(x.type.size)
        outs.append(ctx.constant(np.ones(x.type.shape, bool), "mask"))
    ctx.set_outputs(*outs)


@converter("Shape")
def shape(ctx: ConvertContext) -> None:
    dims = np.array(ctx.input(0).type.shape, np.int64)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    ctx.set_outputs(ctx.constant(dims[start:end], "shape"))


@converter("Size")
def size(ctx: ConvertContext) -> None:
    ctx.set_outputs(ctx.constant(np.array(ctx.input(0).type.size, np.int64), "size"))


def _reshape_to(ctx: ConvertContext, shape: list[int]) -> None:
    ctx.set_outputs(ctx.emit1("reshape", [ctx.input(0)], {"shape": [int(d) for d in shape]}))


@converter("Reshape")
def reshape(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    given = ctx.attr("shape") if ctx.opset < 5 else ctx.const(1)
    if given is None:
        raise ctx.unsupported("the target shape is required")
    target = int_list(given, f"{ctx.name}: the target shape")
    allowzero = ctx.attr("allowzero", 0)
    if not allowzero and 0 in target[len(x.type.shape):]:
        raise ctx.unsupported(f"shape {target} copies a dim (0) the rank-{len(x.type.shape)} input lacks")
    out = [x.type.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise ctx.unsupported(f"shape {target} has more than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        out[out.index(-1)] = x.type.size // max(known, 1)
    _reshape_to(ctx, out)


@converter("Flatten")
def flatten(ctx: ConvertContext) -> None:
    s = ctx.input(0).type.shape
    axis = ctx.attr("axis", 1)
    axis = axis + len(s) if axis < 0 else axis
    _reshape_to(ctx, [int(np.prod(s[:axis])), int(np.prod(s[axis:]))])


def _axes(ctx: ConvertContext) -> list[int] | None:
    axes = ctx.attr("axes") if ctx.opset < 13 else ctx.const(1)
    return None if axes is None else int_list(axes, f"{ctx.name}: axes")


@converter("Squeeze")
def squeeze(ctx: ConvertContext) -> None:
    s = list(ctx.input(0).type.shape)
    axes = _axes(ctx)
    axes = [i for i, d in enumerate(s) if d == 1] if axes is None else [ctx.axis(a, len(s)) for a in axes]
    if any(s[a] != 1 for a in axes):
        raise ctx.unsupported(f"cannot squeeze axes {axes} of shape {s}")
    _reshape_to(ctx, [d for i, d in enumerate(s) if i not in axes])


@converter("Unsqueeze")
def unsqueeze(ctx: ConvertContext) -> None:
    s = list(ctx.input(0).type.shape)
    axes = _axes(ctx) or []
    rank = len(s) + len(axes)
    for a in sorted(ctx.axis(x, rank) for x in axes):
        s.insert(a, 1)
    _reshape_to(ctx, s)
