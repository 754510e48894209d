"""Converters for index-driven writes and reads: OneHot -> ``onehot``, ScatterElements / Scatter ->
``scatter_elements``, ScatterND -> ``scatter_nd``, GatherElements -> ``gather_elements``, GatherND ->
``gather_nd``, TensorScatter -> ``tensor_scatter``. Axes are normalised to non-negative here; OneHot's
depth sets the output shape, so it must be known at build time."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...ir.graph import Value
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
    d = depth.reshape(-1)[0]
    if not np.isfinite(d):  # depth may be any numeric type: a float one must still be a count
        raise ctx.unsupported(f"depth {d} is not a count")
    attrs = {"axis": ctx.axis(axis, rank), "depth": int(d)}
    ctx.set_outputs(ctx.emit1("onehot", [ind, values], attrs))


def _check_indices(ctx: ConvertContext, ind: Value, dims: Sequence[int]) -> None:
    """Build-time indices inside ``dims`` (one bound per index column: the last axis for ScatterND, the
    one axis otherwise; negative counts from the end): a fold would read past the data."""
    if not ind.is_const or not ind.const.size:
        return
    cols = np.asarray(ind.const).reshape(-1, len(dims))
    bound = np.asarray(dims, np.int64)
    if (cols < -bound).any() or (cols >= bound).any():
        raise ctx.unsupported(f"indices [{cols.min()}, {cols.max()}] outside dims {list(dims)}")


@converter("ScatterElements", "Scatter")
def scatter_elements(ctx: ConvertContext) -> None:
    data, ind, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    rank = len(data.type.shape)
    axis, reduction = int(ctx.attr("axis", 0)), ctx.attr("reduction", "none")
    if not -rank <= axis < rank:
        raise ctx.unsupported(f"axis {axis} is out of range for rank {rank}")
    if reduction not in REDUCTIONS:
        raise ctx.unsupported(f"reduction={reduction!r}")
    attrs = {"axis": ctx.axis(axis, rank), "reduction": reduction}
    _check_indices(ctx, ind, [data.type.shape[attrs["axis"]]])
    ctx.set_outputs(ctx.emit1("scatter_elements", [data, ind, upd], attrs))


@converter("GatherElements")
def gather_elements(ctx: ConvertContext) -> None:
    data, ind = ctx.input(0), ctx.input(1)
    rank = len(data.type.shape)
    axis = int(ctx.attr("axis", 0))
    if not -rank <= axis < rank:
        raise ctx.unsupported(f"axis {axis} for rank {rank}")
    _check_indices(ctx, ind, [data.type.shape[ctx.axis(axis, rank)]])
    ctx.set_outputs(ctx.emit1("gather_elements", [data, ind], {"axis": ctx.axis(axis, rank)}))


@converter("ScatterND")
def scatter_nd(ctx: ConvertContext) -> None:
    data, ind, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    reduction = ctx.attr("reduction", "none")
    if reduction not in REDUCTIONS:
        raise ctx.unsupported(f"reduction {reduction!r}")
    if ind.type.dtype != "int64":
        raise ctx.unsupported(f"indices of {ind.type.dtype} (int64)")
    k = ind.type.shape[-1] if ind.type.shape else 0
    if not 1 <= k <= len(data.type.shape):
        raise ctx.unsupported(f"indices of shape {ind.type.shape} for data of rank {len(data.type.shape)}")
    _check_indices(ctx, ind, data.type.shape[:k])
    ctx.set_outputs(ctx.emit1("scatter_nd", [data, ind, upd], {"reduction": reduction}))


@converter("GatherND")
def gather_nd(ctx: ConvertContext) -> None:
    data, ind = ctx.input(0), ctx.input(1)
    batch_dims = int(ctx.attr("batch_dims", 0))
    if ind.type.dtype != "int64":
        raise ctx.unsupported(f"indices of {ind.type.dtype} (int64)")
    if not 0 <= batch_dims < min(len(data.type.shape), len(ind.type.shape)):
        raise ctx.unsupported(f"batch_dims {batch_dims} for data of rank {len(data.type.shape)} and indices "
                              f"of rank {len(ind.type.shape)}")
    ctx.set_outputs(ctx.emit1("gather_nd", [data, ind], {"batch_dims": batch_dims}))


@converter("TensorScatter")
def tensor_scatter(ctx: ConvertContext) -> None:
    """A KV-cache update: ``update`` written into ``past_cache`` at each batch row's write index."""
    past, upd = ctx.input(0), ctx.input(1)
    rank, mode = len(past.type.shape), ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.unsupported(f"mode={mode!r} (linear or circular)")
    axis = ctx.axis(int(ctx.attr("axis", -2)), rank)
    if axis == 0:
        raise ctx.unsupported("axis 0: it is the batch axis the write indices are per")
    others = [(p, u) for k, (p, u) in enumerate(zip(past.type.shape, upd.type.shape)) if k != axis]
    if len(upd.type.shape) != rank or any(p != u for p, u in others):
        raise ctx.unsupported(f"update of shape {upd.type.shape} for a cache of shape {past.type.shape} "
                              f"(they may differ on axis {axis} only)")
    ind = [ctx.input(2)] if ctx.has_input(2) else []
    attrs = {"axis": axis, "circular": mode == "circular"}
    ctx.set_outputs(ctx.emit1("tensor_scatter", [past, upd, *ind], attrs))
