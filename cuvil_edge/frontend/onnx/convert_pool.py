"""Converters for MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool (1D, 2D and 3D, NCHW)."""

from __future__ import annotations

from typing import Any

from ...ir.graph import Value
from .convert_nn import conv_pads
from .registry import ConvertContext, converter


def window(ctx: ConvertContext, x: Value) -> dict[str, Any]:
    """The node's pooling window attributes for an ``x`` of N, C and 1-3 spatial axes."""
    n = len(x.type.shape) - 2
    if n not in (1, 2, 3):
        raise ctx.unsupported(f"{n}D pooling (1D, 2D and 3D are supported)")
    if ctx.attr("kernel_shape") is None:
        raise ctx.unsupported("kernel_shape is required")
    kernel = ctx.positive_ints("kernel_shape", [], n)
    strides = ctx.positive_ints("strides", [1] * n, n)
    dilations = ctx.positive_ints("dilations", [1] * n, n)
    pads = conv_pads(ctx, list(x.type.shape[2:]), list(kernel), strides, dilations)
    return dict(kernel=list(kernel), strides=strides, dilations=dilations, pads=pads,
                ceil_mode=int(ctx.attr("ceil_mode", 0)))


def pool(ctx: ConvertContext, kind: str, x: Value, name: str | None = None) -> Value:
    """An IR ``pool`` of ``x`` with the node's window attributes (LpPool's sum pool shares them)."""
    return ctx.emit1("pool", [x], dict(window(ctx, x), kind=kind,
                                       count_include_pad=int(ctx.attr("count_include_pad", 0))), name=name)


@converter("MaxPool")
def maxpool(ctx: ConvertContext) -> None:
    """MaxPool; its Indices output (flat argmax positions) comes with the max from ``max_pool_argmax``."""
    order = int(ctx.attr("storage_order", 0))
    if order not in (0, 1):
        raise ctx.unsupported(f"storage_order={order} (0 row-major, 1 column-major)")
    if len(ctx.proto.output) > 1 and ctx.proto.output[1]:
        x = ctx.input(0)
        ctx.set_outputs(*ctx.emit("max_pool_argmax", [x], dict(window(ctx, x), storage_order=order),
                                  n_outputs=2))
        return
    ctx.set_outputs(pool(ctx, "max", ctx.input(0)))


@converter("AveragePool")
def avgpool(ctx: ConvertContext) -> None:
    ctx.set_outputs(pool(ctx, "avg", ctx.input(0)))


@converter("GlobalMaxPool", "GlobalAveragePool")
def global_pool(ctx: ConvertContext) -> None:
    kind = "max" if ctx.op_type == "GlobalMaxPool" else "avg"
    ctx.set_outputs(ctx.emit1("global_pool", [ctx.input(0)], {"kind": kind}))
