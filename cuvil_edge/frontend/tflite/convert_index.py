"""Converters for index-driven ops, onto the IR ops the ONNX import uses: ARG_MAX / ARG_MIN, TOPK_V2,
CUMSUM, ONE_HOT, GATHER_ND, SCATTER_ND, SPARSE_TO_DENSE, EMBEDDING_LOOKUP, the segment reductions
(``scatter_nd`` into the reduction's identity), REVERSE_V2 / REVERSE_SEQUENCE, MIRROR_PAD, MATRIX_DIAG /
MATRIX_SET_DIAG, BUCKETIZE and DYNAMIC_UPDATE_SLICE. TFLite's int32 indices are widened to the IR's int64
where an op takes only those, and int64 results narrowed to the declared output type."""

from __future__ import annotations

import math

import numpy as np

from ...ir.graph import Value
from ...ir.limits import check_shape
from .convert_tensor import int_values, sliced
from .layout import dropped
from .registry import TflContext, converter


@converter("ARG_MAX", "ARG_MIN")
def arg_reduce(ctx: TflContext) -> None:
    """The first index of the extreme along the axis (ties: the lower index, as LiteRT)."""
    x = ctx.laid(0)
    axis = ctx.axis(ctx.const(1), len(x.perm))
    y = ctx.emit1("argreduce", [x.value], {"kind": ctx.op.op[4:].lower(), "axis": x.ir_axis(axis),
                                           "keepdims": False, "last": False}, f"{ctx.name}/int64")
    ctx.set_output(ctx.cast(y, ctx.output_dtype()), dropped(x.perm, [axis]))


@converter("TOPK_V2")
def topk_v2(ctx: TflContext) -> None:
    """The k largest along the last axis, sorted (ties: the lower index first)."""
    x = ctx.input(0)
    k = int_values(ctx.const(1))
    if len(k) != 1:
        raise ctx.unsupported(f"k must be one value, got {k}")
    vals, idx = ctx.emit("topk", [x], {"k": k[0], "axis": len(x.type.shape) - 1, "largest": True},
                         f"{ctx.name}/topk", n_outputs=2)
    ctx.set_output(vals)
    ctx.set_output(ctx.cast(idx, ctx.output_dtype(1), "indices"), None, 1)


@converter("CUMSUM")
def cumsum(ctx: TflContext) -> None:
    x = ctx.laid(0)
    axis = ctx.axis(ctx.const(1), len(x.perm))
    y = ctx.emit1("cumulative", [x.value], {"kind": "sum", "axis": x.ir_axis(axis),
                                            "exclusive": bool(ctx.options.get("Exclusive")),
                                            "reverse": bool(ctx.options.get("Reverse"))})
    ctx.set_output(y, x.perm)


@converter("ONE_HOT")
def one_hot(ctx: TflContext) -> None:
    """Inputs indices, depth, on, off. A negative index marks no position (TF's rule; the IR's counts
    from the end, so negatives are sent past the depth first)."""
    ind = ctx.input(0)
    depth = int_values(ctx.const(1))
    rank = len(ind.type.shape) + 1
    axis = ctx.axis(ctx.options.get("Axis", -1), rank)
    if len(depth) != 1 or depth[0] < 1:
        raise ctx.unsupported(f"depth {depth} must be one positive value")
    neg = ctx.emit1("compare", [ind, ctx.constant(np.zeros((), ind.type.dtype), "zero")], {"kind": "lt"},
                    f"{ctx.name}/negative")
    ind = ctx.emit1("where", [neg, ctx.constant(np.asarray(depth[0], ind.type.dtype), "depth"), ind],
                    name=f"{ctx.name}/indices")
    on, off = (ctx.emit1("reshape", [ctx.input(i)], {"shape": [1]}, f"{ctx.name}/{tag}")
               for i, tag in ((2, "on"), (3, "off")))
    values = ctx.emit1("concat", [off, on], {"axis": 0}, f"{ctx.name}/values")
    ctx.set_output(ctx.emit1("onehot", [ind, values], {"axis": axis, "depth": depth[0]}))


def _indices(ctx: TflContext, i: int) -> Value:
    """Index input i as the IR's int64."""
    return ctx.cast(ctx.input(i), "int64", f"indices{i}")


@converter("GATHER_ND")
def gather_nd(ctx: TflContext) -> None:
    ctx.set_output(ctx.emit1("gather_nd", [ctx.input(0), _indices(ctx, 1)], {"batch_dims": 0}))


def _scatter(ctx: TflContext, into: np.ndarray, ind: Value, upd: Value, reduction: str) -> None:
    """``upd`` combined by ``reduction`` into the constant ``into`` at the index tuples ``ind``."""
    ctx.set_output(ctx.emit1("scatter_nd", [ctx.constant(into, "init"), ind, upd], {"reduction": reduction}))


def _filled(ctx: TflContext, shape: tuple[int, ...] | list[int], fill: object, dtype: np.dtype) -> np.ndarray:
    """A build-time array of ``shape`` (sized by constants the model holds) filled with ``fill``: its
    shape and bytes are checked against the import's limits before it is allocated."""
    ctx.materialise(check_shape(shape, f"{ctx.op.op}'s output") * dtype.itemsize)
    return np.full(shape, fill, dtype)


@converter("SCATTER_ND")
def scatter_nd(ctx: TflContext) -> None:
    """Inputs indices, updates, shape: updates summed into zeros (a repeated index adds up, as in TF)."""
    upd, shape = ctx.input(1), int_values(ctx.const(2))
    _scatter(ctx, _filled(ctx, shape, 0, np.dtype(upd.type.dtype)), _indices(ctx, 0), upd, "add")


#: segment reductions -> (scatter reduction, what an empty segment holds: LiteRT's initial value)
_SEGMENT = {"SEGMENT_SUM": ("add", 0), "UNSORTED_SEGMENT_SUM": ("add", 0),
            "UNSORTED_SEGMENT_PROD": ("mul", 1), "UNSORTED_SEGMENT_MAX": ("max", "lowest"),
            "UNSORTED_SEGMENT_MIN": ("min", "highest")}


@converter(*_SEGMENT)
def segment(ctx: TflContext) -> None:
    """Rows of data combined by segment id: a ``scatter_nd`` of data at [id] into the identity. The
    segment count is the constant num_segments (SEGMENT_SUM: the largest constant id + 1)."""
    data = ctx.input(0)
    ids = ctx.input(1)
    if ctx.op.op == "SEGMENT_SUM":
        count = int(ctx.const(1).max(initial=-1)) + 1
    else:
        count = int_values(ctx.const(2))[0]
    rows = data.type.shape[len(ids.type.shape):]
    if data.type.shape[:len(ids.type.shape)] != ids.type.shape:
        raise ctx.unsupported(f"segment ids of shape {ids.type.shape} for data of shape {data.type.shape}")
    reduction, fill = _SEGMENT[ctx.op.op]
    dtype = np.dtype(data.type.dtype)
    if isinstance(fill, str):
        info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
        fill = info.min if fill == "lowest" else info.max
    at = ctx.emit1("reshape", [_indices(ctx, 1)], {"shape": [*ids.type.shape, 1]}, f"{ctx.name}/at")
    _scatter(ctx, _filled(ctx, (count, *rows), fill, dtype), at, data, reduction)


@converter("SPARSE_TO_DENSE")
def sparse_to_dense(ctx: TflContext) -> None:
    """Inputs indices and output shape (build-time constants), values (one, or one per index) and the
    default value (constants or not): a ``where`` over the build-time mask of the written positions, each
    reading its value through a build-time ``gather`` map. LiteRT writes the indices in order, so a
    repeated one keeps its last value."""
    ind, shape = ctx.const(0).astype(np.int64), int_values(ctx.const(1))
    values, default = ctx.input(2), ctx.input(3)
    rows = ind.reshape(-1, 1) if ind.ndim < 2 else ind  # a scalar or a vector indexes a 1-D output
    if rows.ndim != 2 or rows.shape[1] != len(shape) or ((rows < 0) | (rows >= shape)).any() or \
            len(values.type.shape) > 1 or values.type.size not in (1, len(rows)) or default.type.size != 1:
        raise ctx.unsupported(f"indices of shape {ind.shape} (in range), values {values.type.shape} and "
                              f"default {default.type.shape} for output shape {shape}")
    ctx.materialise(math.prod(shape) * 9)
    flat = np.ravel_multi_index(tuple(rows.T), shape) if rows.size else np.zeros(0, np.int64)
    written, last_rev = np.unique(flat[::-1], return_index=True)
    source = np.full(math.prod(shape), -1, np.int64)
    source[written] = len(flat) - 1 - last_rev
    source = source.reshape(shape)
    if values.type.size == 1:
        picked = ctx.emit1("reshape", [values], {"shape": []}, f"{ctx.name}/value")
    else:
        picked = ctx.emit1("gather", [values, ctx.constant(np.maximum(source, 0), "from")], {"axis": 0},
                           f"{ctx.name}/picked")
    fill = ctx.emit1("reshape", [default], {"shape": []}, f"{ctx.name}/default")
    ctx.set_output(ctx.emit1("where", [ctx.constant(source >= 0, "written"), picked, fill]))


@converter("EMBEDDING_LOOKUP")
def embedding_lookup(ctx: TflContext) -> None:
    """Rows of the table (input 1) at the ids (input 0)."""
    ctx.set_output(ctx.emit1("gather", [ctx.input(1), ctx.input(0)], {"axis": 0}))


@converter("REVERSE_V2")
def reverse_v2(ctx: TflContext) -> None:
    """A slice with step -1 along each axis, in the input's layout."""
    x = ctx.laid(0)
    axes = {ctx.axis(a, len(x.perm)) for a in int_values(ctx.const(1))}
    sliced(ctx, x, [slice(None, None, -1 if a in axes else 1).indices(d) for a, d in enumerate(x.shape)], [])


@converter("REVERSE_SEQUENCE")
def reverse_sequence(ctx: TflContext) -> None:
    """The IR op reverses along axis 1 or 0 by batch rows of the other: other axes are moved behind."""
    x = ctx.laid(0)
    rank = len(x.perm)
    t, b = (ctx.axis(ctx.options[k], rank) for k in ("SeqDim", "BatchDim"))
    if t == b:
        raise ctx.unsupported(f"seq_dim and batch_dim are both {t}")
    front = (b, t, *(a for a in range(rank) if a not in (b, t)))
    v = ctx.relaid(x, front)
    y = ctx.emit1("reverse_sequence", [v, _indices(ctx, 1)], {"batch_axis": 0, "time_axis": 1})
    ctx.set_output(y, front)


@converter("MIRROR_PAD")
def mirror_pad(ctx: TflContext) -> None:
    """REFLECT (the edge once) is the IR pad's reflect mode; SYMMETRIC (the edge repeated) gathers each
    padded axis at build-time indices. Both in the input's layout."""
    x = ctx.laid(0)
    widths = ctx.const(1).astype(np.int64)
    if widths.shape != (len(x.perm), 2) or (widths < 0).any():
        raise ctx.unsupported(f"paddings {widths.tolist()} for a rank-{len(x.perm)} input")
    mode = int(ctx.options["Mode"])
    if mode == 0:
        pads = [int(widths[p, 0]) for p in x.perm] + [int(widths[p, 1]) for p in x.perm]
        ctx.set_output(ctx.emit1("pad", [x.value], {"pads": pads, "mode": "reflect", "value": 0.0}), x.perm)
        return
    if mode != 1:
        raise ctx.unsupported(f"mirror pad mode {mode}")
    v = x.value
    for a, (before, after) in enumerate(widths.tolist()):
        if before or after:
            n = x.shape[a]
            j = np.arange(-before, n + after) % (2 * n)
            at = ctx.constant(np.where(j < n, j, 2 * n - 1 - j).astype(np.int64), f"from{a}")
            v = ctx.emit1("gather", [v, at], {"axis": x.ir_axis(a)}, f"{ctx.name}/axis{a}")
    ctx.set_output(v, x.perm)


def _diagonal(ctx: TflContext, rows: int, cols: int) -> Value:
    return ctx.constant(np.eye(rows, cols, dtype=bool), "eye")


@converter("MATRIX_DIAG")
def matrix_diag(ctx: TflContext) -> None:
    """[..., N] -> [..., N, N] with the values on the diagonal and zeros elsewhere."""
    d = ctx.input(0)
    if not d.type.shape:
        raise ctx.unsupported("a scalar diagonal (at least rank 1)")
    n = d.type.shape[-1]
    check_shape((*d.type.shape, n), "MATRIX_DIAG's output")  # before its n x n mask is made
    row = ctx.emit1("reshape", [d], {"shape": [*d.type.shape[:-1], 1, n]}, f"{ctx.name}/row")
    zero = ctx.constant(np.zeros((), d.type.dtype), "zero")
    ctx.set_output(ctx.emit1("where", [_diagonal(ctx, n, n), row, zero]))


@converter("MATRIX_SET_DIAG")
def matrix_set_diag(ctx: TflContext) -> None:
    """Inputs [..., M, N] and its new main diagonal [..., min(M, N)]."""
    x, d = ctx.input(0), ctx.input(1)
    if len(x.type.shape) < 2 or not d.type.shape:
        raise ctx.unsupported(f"matrices of shape {x.type.shape} (at least rank 2), diagonal {d.type.shape}")
    m, n = x.type.shape[-2:]
    k = d.type.shape[-1]
    if k != min(m, n) or d.type.shape[:-1] != x.type.shape[:-2]:
        raise ctx.unsupported(f"diagonal of shape {d.type.shape} for matrices {x.type.shape}")
    rank = len(d.type.shape)
    wide = ctx.emit1("pad", [d], {"pads": [0] * rank + [0] * (rank - 1) + [n - k], "mode": "constant",
                                  "value": 0.0}, f"{ctx.name}/wide")
    row = ctx.emit1("reshape", [wide], {"shape": [*d.type.shape[:-1], 1, n]}, f"{ctx.name}/row")
    ctx.set_output(ctx.emit1("where", [_diagonal(ctx, m, n), row, x]))


@converter("BUCKETIZE")
def bucketize(ctx: TflContext) -> None:
    """The count of boundaries at or below each value (TF's upper bound), as int32."""
    bounds = np.asarray(ctx.options["Boundaries"], np.float32)
    if bounds.size == 0 or (np.diff(bounds) < 0).any():
        raise ctx.unsupported(f"boundaries {bounds.tolist()} must be sorted and not empty")
    x = ctx.input(0)
    col = ctx.emit1("reshape", [x], {"shape": [*x.type.shape, 1]}, f"{ctx.name}/col")
    at = ctx.constant(bounds.astype(x.type.dtype), "boundaries")
    past = ctx.emit1("compare", [col, at], {"kind": "ge"}, f"{ctx.name}/past")
    ones = ctx.cast(past, "int32", "ones")
    y = ctx.emit1("reduce_loop", [ones], {"kind": "sum", "axes": [len(x.type.shape)], "keepdims": False},
                  f"{ctx.name}/count")
    ctx.set_output(ctx.cast(y, ctx.output_dtype()))


@converter("DYNAMIC_UPDATE_SLICE")
def dynamic_update_slice(ctx: TflContext) -> None:
    """The update written at the start indices, clamped so it fits (TF's rule): a ``scatter_nd`` of the
    update at every position of its box plus the start, which may be known only at run time."""
    x, upd = ctx.input(0), ctx.input(1)
    rank = len(x.type.shape)
    if len(upd.type.shape) != rank or any(u > d for u, d in zip(upd.type.shape, x.type.shape)):
        raise ctx.unsupported(f"update of shape {upd.type.shape} for {x.type.shape}")
    start = _indices(ctx, 2)
    if start.type.shape != (rank,):
        raise ctx.unsupported(f"start indices of shape {start.type.shape} for rank {rank}")
    top = ctx.constant(np.asarray([d - u for d, u in zip(x.type.shape, upd.type.shape)], np.int64), "top")
    zeros = ctx.constant(np.zeros(rank, np.int64), "zeros")
    start = ctx.emit1("binary_loop", [start, zeros], {"kind": "max"}, f"{ctx.name}/above0")
    start = ctx.emit1("binary_loop", [start, top], {"kind": "min"}, f"{ctx.name}/fits")
    box = np.stack(np.meshgrid(*(np.arange(u) for u in upd.type.shape), indexing="ij"), -1).astype(np.int64)
    at = ctx.emit1("binary_loop", [ctx.constant(box, "box"), start], {"kind": "add"}, f"{ctx.name}/at")
    ctx.set_output(ctx.emit1("scatter_nd", [x, at, upd], {"reduction": "none"}))

