"""The StableHLO builtins the ai-edge-torch and JAX paths write, onto IR ops the other imports use: pads
with interior padding (STABLEHLO_PAD, DILATE: a reshape that gives each element a trailing axis, a pad
of that axis, a reshape back), windowed reductions (REDUCE_WINDOW, STABLEHLO_REDUCE_WINDOW: one strided
``slice`` per window position and axis, folded by the body's op), gathers and scatters whose dimension
numbers take whole slices at each index tuple (``gather_nd`` / ``scatter_nd`` between transposes) and
STABLEHLO_COMPOSITE (its decomposition inlined). Everything runs in TFLite order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...ir.graph import Value
from ..onnx.convert_math import emit_binary
from .convert_control import call_subgraph
from .convert_tensor import int_values
from .layout import inverse
from .registry import TflContext, converter

#: a reduction body's one op -> the IR's combining kind (LiteRT's ``GetBodyFunction``)
_BODY = {"ADD": "add", "STABLEHLO_ADD": "add", "MUL": "mul", "STABLEHLO_MULTIPLY": "mul",
         "MAXIMUM": "max", "STABLEHLO_MAXIMUM": "max", "MINIMUM": "min", "STABLEHLO_MINIMUM": "min",
         "LOGICAL_AND": "and", "STABLEHLO_AND": "and", "LOGICAL_OR": "or", "STABLEHLO_OR": "or"}
#: REDUCE_WINDOW's ReduceWindowFunction -> kind
_FUNCTION = {1: "add", 2: "mul", 3: "min", 4: "max", 5: "and", 6: "or"}
#: a scatter's update computation (its one op; none: the update replaces) -> ``scatter_nd`` reduction
_SCATTER = {"STABLEHLO_ADD": "add", "STABLEHLO_MULTIPLY": "mul", "STABLEHLO_MAXIMUM": "max",
            "STABLEHLO_MINIMUM": "min"}
#: the most window taps, summed over the axes, a reduce_window unrolls (each one slice node)
MAX_WINDOW_TAPS = 1024


def _scalar(ctx: TflContext, i: int) -> float | int | bool:
    """Constant input i's one value (a pad's fill, a reduction's init)."""
    v = ctx.const(i).reshape(-1)
    if v.size != 1:
        raise ctx.unsupported(f"input {i} must be one value, got {v.size}")
    return v[0].item()


def _const_ints(ctx: TflContext, i: int) -> list[int]:
    """Constant input i's values, which must be integers (a window's shape, strides, dilations)."""
    v = ctx.const(i)
    if v.dtype.kind not in "iu":
        raise ctx.unsupported(f"input {i} is {v.dtype}, not integers")
    return [int(x) for x in v.reshape(-1)]


def _ints(ctx: TflContext, key: str, n: int, default: int) -> list[int]:
    """Option ``key``: ``n`` integers, ``default`` each when the model leaves it out."""
    v = [int(x) for x in ctx.options.get(key) or [default] * n]
    if len(v) != n:
        raise ctx.unsupported(f"{key} {v} for a rank-{n} input")
    return v


# -- pads -------------------------------------------------------------------------------------------------
def padded(ctx: TflContext, x: Value, low: Sequence[int], high: Sequence[int], interior: Sequence[int],
           value: float, tag: str = "pad") -> Value:
    """StableHLO's pad: ``interior`` fills between neighbours first, then ``low``/``high`` at the edges
    (negative ones crop)."""
    shape, r = x.type.shape, len(x.type.shape)
    if min(interior, default=0) < 0:
        raise ctx.unsupported(f"interior padding {list(interior)} must not be negative")
    gaps = [k if n > 1 else 0 for k, n in zip(interior, shape)]
    if any(gaps):  # each element of a gapped axis gets a trailing axis, padded by the gap, then merged back
        split = [d for n, k in zip(shape, gaps) for d in ((n, 1) if k else (n,))]
        wide = [e for g in gaps for e in ((0, g) if g else (0,))]
        x = ctx.emit1("reshape", [x], {"shape": split}, f"{ctx.name}/{tag}_split")
        x = ctx.emit1("pad", [x], {"pads": [0] * len(split) + wide, "mode": "constant", "value": value},
                      f"{ctx.name}/{tag}_interior")
        x = ctx.emit1("reshape", [x], {"shape": [n * (k + 1) for n, k in zip(shape, gaps)]},
                      f"{ctx.name}/{tag}_merged")
    pads = [*low, *(h - k for h, k in zip(high, gaps))]  # the last element's gap is not StableHLO's
    if not any(pads):
        return x
    if any(n + a + b < 0 for n, a, b in zip(x.type.shape, pads[:r], pads[r:])):
        raise ctx.unsupported(f"edge padding {list(low)}/{list(high)} crops {shape} below zero")
    return ctx.emit1("pad", [x], {"pads": pads, "mode": "constant", "value": value}, f"{ctx.name}/{tag}")


@converter("STABLEHLO_PAD")
def stablehlo_pad(ctx: TflContext) -> None:
    x = ctx.input(0)
    r = len(x.type.shape)
    low, high, interior = (_ints(ctx, k, r, 0)
                           for k in ("EdgePaddingLow", "EdgePaddingHigh", "InteriorPadding"))
    ctx.set_output(padded(ctx, x, low, high, interior, _scalar(ctx, 1)))


@converter("DILATE")
def dilate(ctx: TflContext) -> None:
    """Inputs: the tensor, its dilations (int32, one per axis, each >= 1) and the fill."""
    x = ctx.input(0)
    dilations = int_values(ctx.const(1))
    if len(dilations) != len(x.type.shape) or min(dilations, default=1) < 1:
        raise ctx.unsupported(f"dilations {dilations} for a rank-{len(x.type.shape)} input")
    zeros = [0] * len(dilations)
    ctx.set_output(padded(ctx, x, zeros, zeros, [d - 1 for d in dilations], _scalar(ctx, 2), "dilate"))


# -- windowed reductions ----------------------------------------------------------------------------------
def _combine(ctx: TflContext, kind: str, a: Value, b: Value, name: str) -> Value:
    if kind in ("and", "or"):
        if a.type.dtype != "bool":
            raise ctx.unsupported(f"a logical {kind} window over {a.type.dtype}")
        return ctx.emit1("logic", [a, b], {"kind": kind}, name)
    return emit_binary(ctx, kind, a, b, name)


def _identity(kind: str, dtype: str) -> float | int | bool:
    """The value ``kind`` leaves its other operand unchanged with."""
    if kind in ("and", "or"):
        return kind == "and"
    if kind in ("add", "mul"):
        return int(kind == "mul")
    info = np.finfo(dtype) if np.dtype(dtype).kind == "f" else np.iinfo(dtype)
    big = np.inf if np.dtype(dtype).kind == "f" else info.max
    return -big if kind == "max" else big


def reduce_window(ctx: TflContext, x: Value, kind: str, init: float | int | bool, window: list[int],
                  strides: list[int], dilations: list[int]) -> Value:
    """``init`` combined with each window's elements: one axis at a time (the reductions are associative
    and commutative, so a box window is separable), a strided slice per window position."""
    if min([*window, *strides, *dilations], default=1) < 1:
        raise ctx.unsupported(f"window {window}, strides {strides}, dilations {dilations} must be positive")
    if sum(window) > MAX_WINDOW_TAPS:  # one slice node per tap: a hostile window must not make millions
        raise ctx.unsupported(f"window {window}: more than {MAX_WINDOW_TAPS} taps over all axes")
    for d, (w, s, r) in enumerate(zip(window, strides, dilations)):
        n, span = x.type.shape[d], (w - 1) * r + 1
        if n < span:
            raise ctx.unsupported(f"a window spanning {span} over an axis of {n} (an empty output)")
        if w == s == 1:
            continue
        out, acc = (n - span) // s + 1, None
        for j in range(w):
            starts = [j * r if a == d else 0 for a in range(len(window))]
            ends = [j * r + (out - 1) * s + 1 if a == d else m for a, m in enumerate(x.type.shape)]
            piece = ctx.emit1("slice", [x], {"starts": starts, "ends": ends,
                                             "steps": [s if a == d else 1 for a in range(len(window))]},
                              f"{ctx.name}/w{d}_{j}")
            acc = piece if acc is None else _combine(ctx, kind, acc, piece, f"{ctx.name}/w{d}_{j}_{kind}")
        x = acc
    if init == _identity(kind, x.type.dtype):
        return x
    return _combine(ctx, kind, x, ctx.constant(np.asarray(init, x.type.dtype), "init"), f"{ctx.name}/init")


def body_kind(ctx: TflContext, index: int, kinds: dict[str, str], what: str) -> str | None:
    """The kind of the one op a region subgraph holds (None: it has none); others are refused naming
    its ops."""
    subgraphs = ctx.state.variables.model.subgraphs
    if not 0 <= index < len(subgraphs):
        raise ctx.unsupported(f"{what} subgraph {index} (the model has {len(subgraphs)})")
    ops = [op.op for op in subgraphs[index].operators]
    if not ops:
        return None
    if len(ops) != 1 or ops[0] not in kinds:
        raise ctx.unsupported(f"{what} subgraph {index} runs {ops}; supported: one of {sorted(kinds)}")
    return kinds[ops[0]]


@converter("STABLEHLO_REDUCE_WINDOW")
def stablehlo_reduce_window(ctx: TflContext) -> None:
    """Dilate and pad with the init value, then reduce windows (LiteRT's order)."""
    if len(ctx.op.inputs) != 2 or len(ctx.op.outputs) != 1:
        raise ctx.unsupported(f"{len(ctx.op.inputs) // 2} operands (variadic reduce_window)")
    kind = body_kind(ctx, int(ctx.options["BodySubgraphIndex"]), _BODY, "body")
    if kind is None:
        raise ctx.unsupported("its body subgraph is empty")
    x, init = ctx.input(0), _scalar(ctx, 1)
    r = len(x.type.shape)
    pads = _ints(ctx, "Padding", 2 * r, 0)
    x = padded(ctx, x, pads[0::2], pads[1::2], [b - 1 for b in _ints(ctx, "BaseDilations", r, 1)], init)
    ctx.set_output(reduce_window(ctx, x, kind, init, _ints(ctx, "WindowDimensions", r, 1),
                                 _ints(ctx, "WindowStrides", r, 1), _ints(ctx, "WindowDilations", r, 1)))


@converter("REDUCE_WINDOW")
def tfl_reduce_window(ctx: TflContext) -> None:
    """Inputs: the tensor, init, and int64 window shape, strides and dilations (no padding)."""
    code = int(ctx.options["ReduceFunction"])
    if code not in _FUNCTION:
        raise ctx.unsupported(f"reduce function {code}")
    x = ctx.input(0)
    window, strides, dilations = (_const_ints(ctx, i) for i in (2, 3, 4))
    if not len(window) == len(strides) == len(dilations) == len(x.type.shape):
        raise ctx.unsupported(f"window {window}, strides {strides}, dilations {dilations} for rank "
                              f"{len(x.type.shape)}")
    ctx.set_output(reduce_window(ctx, x, _FUNCTION[code], _scalar(ctx, 1), window, strides, dilations))


# -- gather / scatter -------------------------------------------------------------------------------------
def _index_tuples(ctx: TflContext, i: int, vector_dim: int, k: int) -> Value:
    """Index input i as int64 tuples on its last axis (its ``index_vector_dim`` moved there, or a
    trailing axis of 1 added when that is past its rank)."""
    ind = ctx.cast(ctx.input(i), "int64", f"indices{i}")
    shape = list(ind.type.shape)
    if vector_dim == len(shape):
        ind = ctx.emit1("reshape", [ind], {"shape": [*shape, 1]}, f"{ctx.name}/tuples")
    elif 0 <= vector_dim < len(shape) - 1:
        rest = [d for d in range(len(shape)) if d != vector_dim]
        ind = ctx.emit1("transpose", [ind], {"perm": [*rest, vector_dim]}, f"{ctx.name}/tuples")
    elif vector_dim != len(shape) - 1:
        raise ctx.unsupported(f"index_vector_dim {vector_dim} for indices of rank {len(shape)}")
    if ind.type.shape[-1] != k:
        raise ctx.unsupported(f"index tuples of {ind.type.shape[-1]} for {k} indexed dims")
    return ind


def _transposed(ctx: TflContext, x: Value, perm: Sequence[int], tag: str) -> Value:
    if list(perm) == sorted(perm):
        return x
    return ctx.emit1("transpose", [x], {"perm": list(perm)}, f"{ctx.name}/{tag}")


def _bounds(ctx: TflContext, shape: Sequence[int], dims: Sequence[int], tag: str) -> Value:
    return ctx.constant(np.array([shape[d] for d in dims], np.int64), tag)


def _refuse_numbers(ctx: TflContext, keys: Sequence[str], why: str) -> None:
    numbers = ", ".join(f"{k}={ctx.options.get(k)}" for k in keys)
    raise ctx.unsupported(f"dimension numbers {numbers}: {why}")


def _check_dims(ctx: TflContext, keys: Sequence[str], dims: Sequence[int], rank: int, of: str) -> None:
    """Dimension numbers come from the file: each must name a dim of ``of`` before anything indexes by it."""
    if any(not 0 <= d < rank for d in dims):
        _refuse_numbers(ctx, keys, f"a dim outside the rank-{rank} {of}")


_GATHER_KEYS = ("OffsetDims", "CollapsedSliceDims", "StartIndexMap", "IndexVectorDim", "SliceSizes")
_WHOLE = "only whole slices at each index tuple (take, index, embedding) map onto gather_nd"


@converter("STABLEHLO_GATHER")
def stablehlo_gather(ctx: TflContext) -> None:
    """Whole slices at each index tuple: ``gather_nd`` over the operand with its indexed dims first;
    indices are clamped into range first, as LiteRT does."""
    x = ctx.input(0)
    shape, o = x.type.shape, ctx.options
    start, collapsed, offset = (list(o[k]) for k in ("StartIndexMap", "CollapsedSliceDims", "OffsetDims"))
    sizes, rest = list(o["SliceSizes"]), [d for d in range(len(shape)) if d not in o["StartIndexMap"]]
    _check_dims(ctx, _GATHER_KEYS, [*start, *collapsed], len(shape), "operand")
    if min(offset, default=0) < 0:
        _refuse_numbers(ctx, _GATHER_KEYS, "a negative offset dim")
    if (len(sizes) != len(shape) or len(set(start)) != len(start) or not set(collapsed) <= set(start)
            or any(sizes[d] != 1 for d in start) or any(sizes[d] != shape[d] for d in rest) or not start):
        _refuse_numbers(ctx, _GATHER_KEYS, _WHOLE)
    ind = _index_tuples(ctx, 1, int(o["IndexVectorDim"]), len(start))
    zero = ctx.constant(np.zeros((), np.int64), "zero")
    ind = emit_binary(ctx, "max", ind, zero, f"{ctx.name}/clamp_low")
    last = ctx.constant(np.array([shape[d] - 1 for d in start], np.int64), "last")
    ind = emit_binary(ctx, "min", ind, last, f"{ctx.name}/clamp_high")
    rows = ctx.emit1("gather_nd", [_transposed(ctx, x, [*start, *rest], "indexed_first"), ind],
                     {"batch_dims": 0}, f"{ctx.name}/rows")
    kept = [d for d in range(len(shape)) if d not in collapsed]
    batch = list(ind.type.shape[:-1])
    if len(offset) != len(kept) or sorted(offset) != offset or max(offset, default=-1) >= len(batch) + len(
            kept):
        _refuse_numbers(ctx, _GATHER_KEYS, f"offset_dims must place the {len(kept)} slice dims")
    rows = ctx.emit1("reshape", [rows], {"shape": [*batch, *(sizes[d] for d in kept)]}, f"{ctx.name}/slices")
    batches = iter(range(len(batch)))
    perm = [len(batch) + offset.index(p) if p in offset else next(batches)
            for p in range(len(batch) + len(kept))]
    ctx.set_output(_transposed(ctx, rows, perm, "placed"))


_SCATTER_KEYS = ("UpdateWindowDims", "InsertedWindowDims", "ScatterDimsToOperandDims", "IndexVectorDim")


@converter("STABLEHLO_SCATTER")
def stablehlo_scatter(ctx: TflContext) -> None:
    """Whole-slice updates at each index tuple: ``scatter_nd`` into the operand with its indexed dims
    first, grown by one row per indexed dim where out-of-range tuples land (LiteRT skips them), which is
    sliced off after."""
    reduction = body_kind(ctx, int(ctx.options["UpdateComputationSubgraphIndex"]), _SCATTER,
                          "update computation") or "none"
    x, upd, o = ctx.input(0), ctx.input(2), ctx.options
    shape = x.type.shape
    smap, inserted, window = (list(o[k]) for k in ("ScatterDimsToOperandDims", "InsertedWindowDims",
                                                   "UpdateWindowDims"))
    _check_dims(ctx, _SCATTER_KEYS, [*smap, *inserted], len(shape), "operand")
    _check_dims(ctx, _SCATTER_KEYS, window, len(upd.type.shape), "updates")
    rest = [d for d in range(len(shape)) if d not in smap]
    kept = [d for d in range(len(shape)) if d not in inserted]
    scatter = [d for d in range(len(upd.type.shape)) if d not in window]
    win = [upd.type.shape[d] for d in window] if len(window) == len(kept) else None
    if (win is None or len(set(smap)) != len(smap) or not set(inserted) <= set(smap) or not smap
            or any(w != (1 if d in smap else shape[d]) for w, d in zip(win, kept))
            or sorted(window) != window):
        _refuse_numbers(ctx, _SCATTER_KEYS, "only whole-slice updates at each index tuple map onto "
                                            "scatter_nd")
    ind = _index_tuples(ctx, 1, int(o["IndexVectorDim"]), len(smap))
    if list(ind.type.shape[:-1]) != [upd.type.shape[d] for d in scatter]:
        _refuse_numbers(ctx, _SCATTER_KEYS, f"updates {upd.type.shape} do not match indices {ind.type.shape}")
    k, order = len(smap), [*smap, *rest]
    size = _bounds(ctx, shape, smap, "size")
    outside = ctx.emit1("logic", [ctx.emit1("compare", [ind, size], {"kind": "ge"}, f"{ctx.name}/past_end"),
                                  ctx.emit1("compare", [ind, ctx.constant(np.zeros((), np.int64), "zero")],
                                            {"kind": "lt"}, f"{ctx.name}/negative")],
                        {"kind": "or"}, f"{ctx.name}/outside")
    ind = ctx.emit1("where", [outside, size, ind], name=f"{ctx.name}/spare_row")
    upd = _transposed(ctx, upd, [*scatter, *window], "updates")
    upd = ctx.emit1("reshape", [upd], {"shape": [*ind.type.shape[:-1], *(shape[d] for d in rest)]},
                    f"{ctx.name}/update_rows")
    data = _transposed(ctx, x, order, "indexed_first")
    grown = ctx.emit1("pad", [data], {"pads": [0] * len(shape) + [1] * k + [0] * len(rest),
                                      "mode": "constant", "value": 0}, f"{ctx.name}/spare")
    out = ctx.emit1("scatter_nd", [grown, ind, upd], {"reduction": reduction}, f"{ctx.name}/scatter")
    out = ctx.emit1("slice", [out], {"starts": [0] * len(shape), "ends": list(data.type.shape),
                                     "steps": [1] * len(shape)}, f"{ctx.name}/in_range")
    ctx.set_output(_transposed(ctx, out, inverse(tuple(order)), "placed"))


# -- composite --------------------------------------------------------------------------------------------
@converter("STABLEHLO_COMPOSITE")
def stablehlo_composite(ctx: TflContext) -> None:
    """A named group of ops (``odml.rms_norm``, ...): its decomposition subgraph inlined."""
    index = int(ctx.options["DecompositionSubgraphIndex"])
    outs = call_subgraph(ctx, index, ctx.graph, [ctx.laid(k) for k in range(len(ctx.op.inputs))],
                         "decomposition")
    if len(outs) != len(ctx.op.outputs):
        raise ctx.unsupported(f"its decomposition returns {len(outs)} values for {len(ctx.op.outputs)} "
                              "outputs")
    for i, v in enumerate(outs):
        ctx.set_output(v, None, i)
