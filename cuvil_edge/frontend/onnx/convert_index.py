"""Converters for index-driven writes and reads: OneHot -> ``onehot``, ScatterElements / Scatter ->
``scatter_elements``, ScatterND -> ``scatter_nd``, GatherElements -> ``gather_elements``. Axes are
normalised to non-negative here; OneHot's depth sets the output shape, so it must be known at build
time."""

from __future__ import annotations

from ...ops.scatter import REDUCTIONS
from .registry import ConvertContext, converter


@converter("OneHot")
def onehot(ctx: ConvertContext) -> None:
    ind, values = ctx.input(0), ctx.input(2)
    depth = ctx.const(1)
    if depth.size != 1:
        raise ctx.unsupported(f"depth must be one value, got shape {depth.shape}")
    rank = len(ind.type.shape) + 1
    axis = int(ctx.attr("axis", -1))
    if not -rank <= axis < rank:
        raise ctx.unsupported(f"axis {axis} is out of range for rank-{rank} output")
    attrs = {"axis": axis % rank, "depth": int(depth.reshape(-1)[0])}
    ctx.set_outputs(ctx.emit1("onehot", [ind, values], attrs))


@converter("ScatterElements", "Scatter")
def scatter_elements(ctx: ConvertContext) -> None:
    data, ind, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    rank = len(data.type.shape)
    axis, reduction = int(ctx.attr("axis", 0)), ctx.attr("reduction", "none")
    if not -rank <= axis < rank:
        raise ctx.unsupported(f"axis {axis} is out of range for rank {rank}")
    if reduction not in REDUCTIONS:
        raise ctx.unsupported(f"reduction={reduction!r}")
    attrs = {"axis": axis % rank, "reduction": reduction}
    ctx.set_outputs(ctx.emit1("scatter_elements", [data, ind, upd], attrs))


@converter("GatherElements")
def gather_elements(ctx: ConvertContext) -> None:
    data, ind = ctx.input(0), ctx.input(1)
    rank = len(data.type.shape)
    axis = int(ctx.attr("axis", 0))
    if not -rank <= axis < rank:
        raise ctx.unsupported(f"axis {axis} for rank {rank}")
    ctx.set_outputs(ctx.emit1("gather_elements", [data, ind], {"axis": axis % rank}))


@converter("ScatterND")
def scatter_nd(ctx: ConvertContext) -> None:
    data, ind, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    reduction = ctx.attr("reduction", "none")
    if reduction not in REDUCTIONS:
        raise ctx.unsupported(f"reduction {reduction!r}")
    if ind.type.dtype != "int64":
        raise ctx.unsupported(f"indices of {ind.type.dtype} (int64)")
    ctx.set_outputs(ctx.emit1("scatter_nd", [data, ind, upd], {"reduction": reduction}))
