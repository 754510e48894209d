"""Converters for MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool (1D, 2D and 3D, NCHW)."""

from __future__ import annotations

from ...ir.graph import Value
from .convert_nn import conv_pads
from .registry import ConvertContext, converter


def pool(ctx: ConvertContext, kind: str, x: Value, name: str | None = None) -> Value:
    """An IR ``pool`` of ``x`` with the node's window attributes (LpPool's sum pool shares them)."""
    n = len(x.type.shape) - 2
    if n not in (1, 2, 3):
        raise ctx.unsupported(f"{n}D pooling (1D, 2D and 3D are supported)")
    if ctx.attr("kernel_shape") is None:
        raise ctx.unsupported("kernel_shape is required")
    kernel = ctx.positive_ints("kernel_shape", [], n)
    strides = ctx.positive_ints("strides", [1] * n, n)
    dilations = ctx.positive_ints("dilations", [1] * n, n)
    pads = conv_pads(ctx, list(x.type.shape[2:]), list(kernel), strides, dilations)
    return ctx.emit1("pool", [x], dict(
        kind=kind, kernel=list(kernel), strides=strides, dilations=dilations, pads=pads,
        ceil_mode=int(ctx.attr("ceil_mode", 0)), count_include_pad=int(ctx.attr("count_include_pad", 0))),
        name=name)


@converter("MaxPool")
def maxpool(ctx: ConvertContext) -> None:
    if len(ctx.proto.output) > 1 and ctx.proto.output[1]:
        raise ctx.unsupported("the Indices output (argmax positions) is not supported")
    ctx.set_outputs(pool(ctx, "max", ctx.input(0)))


@converter("AveragePool")
def avgpool(ctx: ConvertContext) -> None:
    ctx.set_outputs(pool(ctx, "avg", ctx.input(0)))


@converter("GlobalMaxPool", "GlobalAveragePool")
def global_pool(ctx: ConvertContext) -> None:
    kind = "max" if ctx.op_type == "GlobalMaxPool" else "avg"
    ctx.set_outputs(ctx.emit1("global_pool", [ctx.input(0)], {"kind": kind}))
