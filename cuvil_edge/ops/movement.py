"""Data movement: transpose, depth_to_space / space_to_depth, concat, slice, split, pad, expand, tile,
gather, and the copy primitives they share (``copy_nd``, ``gather_nd``, ``fill``; ``strides_of`` and
``gather_nd`` serve other families too).

Run-time kernels move 32-bit elements by size (``x32-movement``), so one kernel serves f32 and i32;
8-byte elements move as pairs of 32-bit words, 1- and 2-byte ones through the byte kernels (``x8_*``).
Every op is reduced at build time to a strided N-d copy, a 2-D block transpose or a gather through
per-dim offset tables, after merging dims that stay contiguous: most real transposes/slices end up
rank 2 or 3. The fold-only shape ops (``constant_of_shape``, ``range``), which never run, are in
``fold_only``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError, UnsupportedOperator
from ..ir.graph import Node, TensorType, Value
from .attrs import INT, Attr, declare
from .common import broadcast_shape, cint_list, split_rows
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

KERNELS = ("x32-movement",)
MAX_RANK = 8  # idx[] in the C kernels


def strides_of(shape: Sequence[int]) -> list[int]:
    """Contiguous element strides of ``shape``."""
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= int(d)
    return out[::-1]


def merge_dims(shape: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and fuse neighbours that are contiguous in every stride list (rank >= 1)."""
    keep = [i for i, d in enumerate(shape) if d != 1]
    dims = [int(shape[i]) for i in keep] or [1]
    sts = [[int(s[i]) for i in keep] or [1] for s in strides]
    d = len(dims) - 2
    while d >= 0:
        if all(s[d] == s[d + 1] * dims[d + 1] for s in sts):
            dims[d:d + 2] = [dims[d] * dims[d + 1]]
            for s in sts:
                s[d:d + 2] = [s[d + 1]]
        d -= 1
    return dims, sts


def _unit(v: Value) -> tuple[str, int]:
    """Kernel prefix and words per element: 4/8-byte elements move as 32-bit words, others as bytes."""
    size = v.type.itemsize
    return ("x32", size // 4) if size % 4 == 0 else ("x8", size)


def _u32(node: Node, *values: Value) -> None:
    """Run-time movement takes any element size the kernels can move (1, 2, 4, 8 bytes)."""
    for v in values:
        if v.type.itemsize not in (1, 2, 4, 8):
            raise UnsupportedOperator(node.op, node.name, None, f"run-time {node.op} of {v.type.dtype} "
                                      f"({v.name!r})")


def _ptr(ctx: EmitContext, v: Value, offset: int = 0) -> str:
    """Pointer to element ``offset`` of v, typed as the words its kernel moves."""
    prefix, k = _unit(v)
    p = ctx.ptr(v, "uint32_t" if prefix == "x32" else "uint8_t")
    return f"({p} + {offset * k})" if offset else p


def copy_nd(ctx: EmitContext, x: Value, y: Value, shape: Sequence[int], xs: Sequence[int],
            ys: Sequence[int], x_off: int = 0, y_off: int = 0, split: bool = False) -> str:
    """One strided box copy (element strides, may be 0 or negative), dims merged first. ``split``: big
    copies are shared by the threads along the outer dim (only for nodes whose code is such copies)."""
    if 0 in shape:
        return ""
    prefix, k = _unit(x)
    if k > 1:  # an element is k words: one more (contiguous) dim
        shape, xs, ys = [*shape, k], [s * k for s in xs] + [1], [s * k for s in ys] + [1]
    dims, (xs2, ys2) = merge_dims(shape, xs, ys)
    if len(dims) > MAX_RANK:
        raise ShapeError(f"{ctx.node.name if ctx.node else '?'}: copy of rank {len(dims)} > {MAX_RANK}")
    def call(count: str, first: str) -> str:
        return (f"{prefix}_copy_nd({_ptr(ctx, x, x_off)}{_rows_on(first, xs2[0])}, "
                f"{_ptr(ctx, y, y_off)}{_rows_on(first, ys2[0])}, {len(dims)}, "
                f"(const int[]){{{', '.join([count, *map(str, dims[1:])])}}}, "
                f"(const int[]){{{cint_list(xs2)}}}, (const int[]){{{cint_list(ys2)}}});")

    return _outer_split(ctx, dims, call, split)


def _rows_on(first: str, stride: int) -> str:
    """Pointer advance to row ``first`` (a C expression) of an outer dim of ``stride`` elements."""
    return "" if first == "0" else f" + (ptrdiff_t){first} * {stride}"


def _outer_split(ctx: EmitContext, dims: Sequence[int], call: Callable[[str, str], str], split: bool) -> str:
    """``call(count, first)`` over the outer dim, shared by the threads when ``split`` and big enough (a
    lone dim in 16-element units). Copies write each element once, so any split gives the same bits."""
    if not split:
        return call(str(dims[0]), "0")
    return split_rows(ctx, dims[0], math.prod(dims), call, unit=16 if len(dims) == 1 else 1)


def gather_nd(ctx: EmitContext, x: Value, y: Value, index: Sequence[np.ndarray | None],
              split: bool = False) -> str:
    """y[i0, .., ik] = x[index0[i0], .., indexk[ik]]; ``None`` = identity along a dim of equal size.

    ``y`` is read as contiguous with dim d of size len(index[d]) (or x's size for None), so callers
    may index a reshaped view. Identity neighbours are merged, size-1 output dims fold into the base
    offset, and each remaining dim becomes a table of element offsets in the weights blob (a
    contiguous last dim needs none). ``split`` as for ``copy_nd``.
    """
    prefix, k = _unit(x)
    xshape = list(x.type.shape) + ([k] if k > 1 else [])
    index = list(index) + ([None] if k > 1 else [])
    oshape = [xshape[d] if idx is None else len(idx) for d, idx in enumerate(index)]
    if 0 in oshape:
        return ""
    xst = strides_of(xshape)
    dims: list[int] = []
    tabs: list[np.ndarray | None] = []  # None: identity with stride xst
    steps: list[int] = []
    base = 0
    for d, idx in enumerate(index):
        if idx is not None and len(idx) == 1:
            base += int(idx[0]) * xst[d]
        elif idx is None and dims and tabs[-1] is None and steps[-1] == xst[d] * oshape[d]:
            dims[-1] *= oshape[d]
            steps[-1] = xst[d]
        elif idx is None and oshape[d] == 1:
            continue
        else:
            dims.append(oshape[d])
            tabs.append(None if idx is None else np.asarray(idx, np.int64) * xst[d])
            steps.append(xst[d])
    if not dims:
        dims, tabs, steps = [1], [None], [1]
    if len(dims) > MAX_RANK:
        raise ShapeError(f"{y.name}: gather of rank {len(dims)} > {MAX_RANK}")
    ptrs = []
    for i, (n, t, s) in enumerate(zip(dims, tabs, steps)):
        if t is None and i == len(dims) - 1 and s == 1:
            ptrs.append("0")
        else:
            t = np.arange(n, dtype=np.int64) * s if t is None else t
            ptrs.append(ctx.weight(t.astype(np.int32), "int32_t"))

    def call(count: str, first: str) -> str:  # rows of y are contiguous; x's row offsets come from tab 0
        xp, tab0 = (_rows_on(first, 1), "0") if ptrs[0] == "0" else ("", ptrs[0] + _rows_on(first, 1))
        return (f"{prefix}_gather_nd({_ptr(ctx, x, base // k)}{xp}, {_ptr(ctx, y)}"
                f"{_rows_on(first, math.prod(dims[1:]))}, {len(dims)}, "
                f"(const int[]){{{', '.join([count, *map(str, dims[1:])])}}}, "
                f"(const int32_t* const[]){{{', '.join([tab0, *ptrs[1:]])}}});")

    return _outer_split(ctx, dims, call, split)


def fill(ctx: EmitContext, y: Value, value: float) -> str:
    """Fill y with ``value``: one memset for a 1-byte element (a quantized tensor's zero point), 32-bit
    words when the element's bytes repeat per word, else byte stores."""
    raw = np.asarray(value, y.type.dtype).reshape(1).view(np.uint8)
    if raw.size == 1:
        return f"memset({ctx.ptr(y, 'uint8_t')}, {int(raw[0])}, {y.type.size});"
    if raw.size % 4 == 0 and np.all(raw.reshape(-1, 4) == raw[:4]):
        bits = int(raw[:4].view(np.uint32)[0])
        return f"x32_fill({ctx.ptr(y, 'uint32_t')}, {bits}u, {y.type.nbytes // 4});"
    elems = ", ".join(str(int(b)) for b in raw)
    return (f"for (size_t i = 0; i < {y.type.size}; i++) "
            f"memmove({ctx.ptr(y, 'uint8_t')} + i * {raw.size}, (const uint8_t[]){{{elems}}}, {raw.size});")


def _axis(node: Node, rank: int) -> int:
    a = int(node.attrs["axis"])
    if not -rank <= a < max(rank, 1):
        raise ShapeError(f"{node.name}: axis {a} out of range for rank {rank}")
    return a % max(rank, 1)


# -- transpose --------------------------------------------------------------------------------------
def _transpose_infer(node: Node) -> list[TensorType]:
    t, perm = node.inputs[0].type, list(node.attrs["perm"])
    if sorted(perm) != list(range(len(t.shape))):
        raise ShapeError(f"{node.name}: perm {perm} is not a permutation of rank {len(t.shape)}")
    return [TensorType(tuple(t.shape[p] for p in perm), t.dtype)]


def _permute(ctx: EmitContext, x: Value, y: Value, view: Sequence[int],
             perm: Sequence[int]) -> tuple[str, str]:
    """y = x read as ``view`` with its dims permuted by ``perm``, in one pass: the 2-D block transpose
    when the dims merge into one, else a strided copy. Returns the code and the transpose's kernel label."""
    xst = strides_of(view)
    shape, xs = [view[p] for p in perm], [xst[p] for p in perm]
    dims, (mxs, _) = merge_dims(shape, xs, strides_of(shape))
    # after merging, a real transpose is y[b][c][r] = x[b][r][c]: xs = (R*C,) 1, C
    if _unit(x) == ("x32", 1) and len(dims) in (2, 3) and mxs[-2] == 1 and mxs[-1] == dims[-2] and \
            (len(dims) == 2 or mxs[0] == dims[1] * dims[2]):
        b = dims[0] if len(dims) == 3 else 1
        return (f"x32_transpose({_ptr(ctx, x)}, {_ptr(ctx, y)}, {b}, {dims[-1]}, {dims[-2]});",
                "x32-transpose-4x4")
    return (copy_nd(ctx, x, y, shape, xs, strides_of(shape), split=True),
            f"{_unit(x)[0]}-copynd" + ("" if mxs[-1] == 1 else "-strided"))


def _transpose_emit(node: Node, ctx: EmitContext) -> str:
    x = node.inputs[0]
    _u32(node, x)
    code, label = _permute(ctx, x, node.outputs[0], x.type.shape, node.attrs["perm"])
    ctx.use_kernel(label)
    return code


register(OpDef("transpose", _transpose_infer, lambda n, a: [np.transpose(a[0], n.attrs["perm"])],
               _transpose_emit, kernels=KERNELS))


# -- depth_to_space / space_to_depth: one permutation of the NCHW input's 6-D block view -------------------
# blocksize k; depth_to_space's mode: DCR (output pixel (i, j) of a block reads depth (i * k + j) * C + c:
# ONNX's default and TFLite's order) or CRD (c * k * k + i * k + j); channels_last: the output is written
# NHWC, what a following move to channels-last becomes (``passes/absorb_transposes.py``). The op the model
# asked for stays one node (``inspect`` shows it, not a layout transpose) and runs as one pass.
def block_view(node: Node) -> tuple[list[int], list[int], tuple[int, ...]]:
    """The input's 6-D view, the permutation of it that is the output, and the output's shape."""
    shape, k = node.inputs[0].type.shape, node.attrs["blocksize"]
    if len(shape) != 4 or k < 1:
        raise ShapeError(f"{node.name}: {node.op} needs a 4-D input and a block size >= 1, got "
                         f"{list(shape)} and {k}")
    n, c, h, w = shape
    if node.op == "space_to_depth":
        if h % k or w % k:
            raise ShapeError(f"{node.name}: space_to_depth block {k} does not divide {h}x{w}")
        view, perm = [n, c, h // k, k, w // k, k], [0, 3, 5, 1, 2, 4]
        groups = [[0], [1, 2, 3], [4], [5]]  # [n, k, k, c, h/k, w/k]: N, C*k*k, H, W
    else:
        mode = node.attrs["mode"]
        if mode not in ("DCR", "CRD") or c % (k * k):
            raise ShapeError(f"{node.name}: depth_to_space mode {mode!r} with block {k} on {c} channels")
        view, perm = ([n, k, k, c // (k * k), h, w], [0, 3, 4, 1, 5, 2]) if mode == "DCR" else \
            ([n, c // (k * k), k, k, h, w], [0, 1, 4, 2, 5, 3])
        groups = [[0], [1], [2, 3], [4, 5]]  # [n, c, h, k, w, k]: N, C, H*k, W*k
    if node.attrs.get("channels_last", False):
        groups = [groups[0], groups[2], groups[3], groups[1]]
    out = tuple(math.prod(view[perm[d]] for d in g) for g in groups)
    return view, [perm[d] for g in groups for d in g], out


def _block_infer(node: Node) -> list[TensorType]:
    return [TensorType(block_view(node)[2], node.inputs[0].type.dtype)]


def _block_fold(node: Node, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    view, perm, out = block_view(node)
    return [np.transpose(args[0].reshape(view), perm).reshape(out)]


def _block_emit(node: Node, ctx: EmitContext) -> str:
    x = node.inputs[0]
    _u32(node, x)
    view, perm, _ = block_view(node)
    code, _ = _permute(ctx, x, node.outputs[0], view, perm)
    ctx.use_kernel(f"{_unit(x)[0]}-{node.op.replace('_', '-')}")
    return code


register(OpDef("depth_to_space", _block_infer, _block_fold, _block_emit, kernels=KERNELS))
register(OpDef("space_to_depth", _block_infer, _block_fold, _block_emit, kernels=KERNELS))
declare("depth_to_space", {"blocksize": Attr(INT), "mode": Attr(str),
                          "channels_last": Attr(bool, required=False)})
declare("space_to_depth", {"blocksize": Attr(INT), "channels_last": Attr(bool, required=False)})


# -- concat / split -----------------------------------------------------------------------------------
def _concat_infer(node: Node) -> list[TensorType]:
    ts = [v.type for v in node.inputs]
    if not ts or not ts[0].shape:
        raise ShapeError(f"{node.name}: concat needs inputs of rank 1 or more, got {[str(t) for t in ts]}")
    ax = _axis(node, len(ts[0].shape))
    for t in ts[1:]:
        if len(t.shape) != len(ts[0].shape) or t.dtype != ts[0].dtype or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if i != ax):
            raise ShapeError(f"{node.name}: cannot concat {[str(u) for u in ts]} on axis {ax}")
    shape = list(ts[0].shape)
    shape[ax] = sum(t.shape[ax] for t in ts)
    return [TensorType(tuple(shape), ts[0].dtype)]


def _concat_emit(node: Node, ctx: EmitContext) -> str:
    y = node.outputs[0]
    _u32(node, y)
    ax = _axis(node, len(y.type.shape))
    ys = strides_of(y.type.shape)
    lines, off = [], 0
    for x in node.inputs:
        lines.append(copy_nd(ctx, x, y, x.type.shape, strides_of(x.type.shape), ys, y_off=off * ys[ax],
                             split=True))
        off += x.type.shape[ax]
    ctx.use_kernel("x32-copynd")
    return "\n".join(lines)


register(OpDef("concat", _concat_infer,
               lambda n, a: [np.concatenate(a, axis=_axis(n, a[0].ndim))], _concat_emit, kernels=KERNELS))


def _split_infer(node: Node) -> list[TensorType]:
    t = node.inputs[0].type
    ax, sizes = _axis(node, len(t.shape)), list(node.attrs["sizes"])
    if sum(sizes) != t.shape[ax] or min(sizes, default=0) < 0:
        raise ShapeError(f"{node.name}: split sizes {sizes} do not cover dim {t.shape[ax]}")
    return [TensorType(t.shape[:ax] + (s,) + t.shape[ax + 1:], t.dtype) for s in sizes]


def _split_fold(node: Node, args) -> list[np.ndarray]:
    return np.split(args[0], np.cumsum(node.attrs["sizes"])[:-1], axis=_axis(node, args[0].ndim))


def _split_emit(node: Node, ctx: EmitContext) -> str:
    x = node.inputs[0]
    _u32(node, x)
    ax = _axis(node, len(x.type.shape))
    xs = strides_of(x.type.shape)
    lines, off = [], 0
    for y in node.outputs:
        lines.append(copy_nd(ctx, x, y, y.type.shape, xs, strides_of(y.type.shape), x_off=off * xs[ax],
                             split=True))
        off += y.type.shape[ax]
    ctx.use_kernel("x32-copynd")
    return "\n".join(lines)


register(OpDef("split", _split_infer, _split_fold, _split_emit, kernels=KERNELS))


# -- slice: normalised per-axis starts/ends/steps (python range semantics, ends may be -1) -------------
def _slice_infer(node: Node) -> list[TensorType]:
    t = node.inputs[0].type
    a = node.attrs
    if not len(a["starts"]) == len(a["ends"]) == len(a["steps"]) == len(t.shape):
        raise ShapeError(f"{node.name}: slice attrs must cover all {len(t.shape)} axes")
    if 0 in a["steps"]:
        raise ShapeError(f"{node.name}: slice step 0")
    shape = tuple(len(range(s, e, st)) for s, e, st in zip(a["starts"], a["ends"], a["steps"]))
    for n, s, st, dim in zip(shape, a["starts"], a["steps"], t.shape):  # every element read is inside x
        if n and not (0 <= s < dim and 0 <= s + (n - 1) * st < dim):
            raise ShapeError(f"{node.name}: slice {a['starts']}:{a['ends']}:{a['steps']} reads outside "
                             f"{t.shape}")
    return [TensorType(shape, t.dtype)]


def _slice_fold(node: Node, args) -> list[np.ndarray]:
    a = node.attrs
    idx = tuple(slice(s, e if e >= 0 else None, st) for s, e, st in zip(a["starts"], a["ends"], a["steps"]))
    return [args[0][idx]]


def _slice_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    _u32(node, x)
    xst = strides_of(x.type.shape)
    starts, steps = node.attrs["starts"], node.attrs["steps"]
    ctx.use_kernel("x32-copynd")
    return copy_nd(ctx, x, y, y.type.shape, [s * st for s, st in zip(xst, steps)], strides_of(y.type.shape),
                   x_off=sum(s * b for s, b in zip(xst, starts)), split=True)


register(OpDef("slice", _slice_infer, _slice_fold, _slice_emit, kernels=KERNELS))


# -- pad: pads = [begins..., ends...] (negative crops), mode constant/reflect/edge/wrap ------------------
PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_infer(node: Node) -> list[TensorType]:
    t, pads = node.inputs[0].type, list(node.attrs["pads"])
    r = len(t.shape)
    if len(pads) != 2 * r or node.attrs["mode"] not in PAD_MODES:
        raise ShapeError(f"{node.name}: pads {pads} / mode {node.attrs['mode']!r} do not fit rank {r}")
    shape = tuple(d + pads[i] + pads[i + r] for i, d in enumerate(t.shape))
    if min(shape, default=0) < 0:
        raise ShapeError(f"{node.name}: pads {pads} crop {t.shape} below zero")
    if node.attrs["mode"] != "constant" and any(
            d == 0 and (pads[i] > 0 or pads[i + r] > 0) for i, d in enumerate(t.shape)):
        raise ShapeError(f"{node.name}: {node.attrs['mode']} pad of an empty dim")
    return [TensorType(shape, t.dtype)]


def pad_source_index(n: int, before: int, out: int, mode: str) -> np.ndarray:
    """Input index read by each output index along one dim (non-constant modes)."""
    j = np.arange(out) - before
    if mode == "edge":
        return np.clip(j, 0, n - 1)
    if mode == "wrap":
        return j % n
    if n == 1:
        return np.zeros_like(j)
    period = 2 * (n - 1)
    j = j % period
    return np.where(j < n, j, period - j)


def _pad_fold(node: Node, args) -> list[np.ndarray]:
    x = args[0]
    r, pads, mode = x.ndim, node.attrs["pads"], node.attrs["mode"]
    if mode != "constant" or not r:  # a scalar: nothing to pad (numpy's pad refuses its empty widths)
        idx = [pad_source_index(x.shape[i], pads[i], x.shape[i] + pads[i] + pads[i + r], mode)
               for i in range(r)]
        return [x[np.ix_(*idx)]] if r else [x.copy()]
    crop = tuple(slice(max(-pads[i], 0), x.shape[i] - max(-pads[i + r], 0)) for i in range(r))
    widths = [(max(pads[i], 0), max(pads[i + r], 0)) for i in range(r)]
    return [np.pad(x[crop], widths, constant_values=np.asarray(node.attrs["value"], x.dtype))]


def _pad_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    _u32(node, x)
    shape, pads, mode = x.type.shape, node.attrs["pads"], node.attrs["mode"]
    r = len(shape)
    if mode != "constant":
        ctx.use_kernel("x32-gathernd")
        return gather_nd(ctx, x, y, [
            None if pads[i] == pads[i + r] == 0 else pad_source_index(d, pads[i], y.type.shape[i], mode)
            for i, d in enumerate(shape)])
    ctx.use_kernel("x32-copynd")
    xst, yst = strides_of(shape), strides_of(y.type.shape)
    box = [max(d - max(-pads[i], 0) - max(-pads[i + r], 0), 0) for i, d in enumerate(shape)]
    interior = copy_nd(ctx, x, y, box, xst, yst,
                       x_off=sum(max(-pads[i], 0) * s for i, s in enumerate(xst)),
                       y_off=sum(max(pads[i], 0) * s for i, s in enumerate(yst)))
    border = fill(ctx, y, node.attrs["value"]) if y.type.size != int(np.prod(box)) else ""
    return "\n".join(filter(None, (border, interior)))


register(OpDef("pad", _pad_infer, _pad_fold, _pad_emit, kernels=KERNELS))


# -- expand / tile -------------------------------------------------------------------------------------
# attrs: ``shape``. An optional second input is the shape given at run time (int64, static length): the
# output then has ``shape`` (the model's declared output) and the module traps unless the run-time
# shape broadcasts to exactly that.
def _expand_infer(node: Node) -> list[TensorType]:
    t = node.inputs[0].type
    out = broadcast_shape([t.shape, node.attrs["shape"]], node.name)
    if len(node.inputs) > 1:
        (n,) = node.inputs[1].type.shape
        if n > len(out) or out != tuple(node.attrs["shape"]):
            raise ShapeError(f"{node.name}: {t.shape} cannot expand to {tuple(node.attrs['shape'])} "
                             f"by a run-time shape of length {n}")
    return [TensorType(out, t.dtype)]


def _expand_check(node: Node, ctx: EmitContext) -> str:
    """C that traps unless the run-time shape s broadcasts x to y: each s[i] (right-aligned) is y's dim,
    or 1 where x already has y's dim; dims left of s come from x alone."""
    x, s, y = node.inputs[0], node.inputs[1], node.outputs[0]
    out = y.type.shape
    xshape = (1,) * (len(out) - len(x.type.shape)) + x.type.shape
    lead = len(out) - s.type.shape[0]
    if xshape[:lead] != out[:lead]:
        raise ShapeError(f"{node.name}: dims {out[:lead]} left of the run-time shape must come from x")
    conds = []
    for i, (xd, yd) in enumerate(zip(xshape[lead:], out[lead:])):
        ok = [yd] + ([1] if xd == yd != 1 else [])
        conds.append(" && ".join(f"{ctx.ptr(s)}[{i}] != {v}" for v in ok))
    return f"if ({' || '.join(f'({c})' for c in conds)}) __builtin_trap();" if conds else ""


def _expand_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    _u32(node, x)
    out = y.type.shape
    xshape = (1,) * (len(out) - len(x.type.shape)) + x.type.shape
    xs = [0 if d == 1 else s for d, s in zip(xshape, strides_of(xshape))]
    ctx.use_kernel("x32-copynd")
    check = _expand_check(node, ctx) if len(node.inputs) > 1 else ""
    return "\n".join(filter(None, (check, copy_nd(ctx, x, y, out, xs, strides_of(out)))))


def _expand_fold(node: Node, args) -> list[np.ndarray]:
    shape = _expand_infer(node)[0].shape
    if len(args) > 1 and broadcast_shape([args[0].shape, tuple(int(d) for d in args[1])], node.name) != shape:
        raise ShapeError(f"{node.name}: shape {list(args[1])} does not expand {args[0].shape} to {shape}")
    return [np.broadcast_to(args[0], shape).copy()]


register(OpDef("expand", _expand_infer, _expand_fold, _expand_emit, kernels=KERNELS))


def _tile_infer(node: Node) -> list[TensorType]:
    t, reps = node.inputs[0].type, list(node.attrs["repeats"])
    if len(reps) != len(t.shape) or min(reps, default=0) < 0:
        raise ShapeError(f"{node.name}: repeats {reps} do not fit shape {t.shape}")
    return [TensorType(tuple(d * k for d, k in zip(t.shape, reps)), t.dtype)]


def _tile_emit(node: Node, ctx: EmitContext) -> str:
    # y viewed as [r0, d0, r1, d1, ...] is contiguous; x is read with stride 0 along every r
    x, y = node.inputs[0], node.outputs[0]
    _u32(node, x)
    shape, xs = [], []
    for d, k, s in zip(x.type.shape, node.attrs["repeats"], strides_of(x.type.shape)):
        shape += [k, d]
        xs += [0, s]
    ctx.use_kernel("x32-copynd")
    return copy_nd(ctx, x, y, shape, xs, strides_of(shape))


register(OpDef("tile", _tile_infer, lambda n, a: [np.tile(a[0], n.attrs["repeats"])], _tile_emit,
               kernels=KERNELS))


# -- gather (axis): build-time indices become offset tables, run-time ones index rows -----------------
def _gather_infer(node: Node) -> list[TensorType]:
    x, i = node.inputs[0].type, node.inputs[1].type
    ax = _axis(node, len(x.shape))
    if not x.shape or not i.dtype.startswith(("int", "uint")):
        raise ShapeError(f"{node.name}: gather from {x} by {i.dtype} indices (a tensor, integer indices)")
    if node.inputs[1].is_const and node.inputs[1].const.size:  # build-time indices: in range, or refused
        idx = node.inputs[1].const
        if idx.min() < -x.shape[ax] or idx.max() >= x.shape[ax]:
            raise ShapeError(f"{node.name}: gather indices [{idx.min()}, {idx.max()}] outside an axis of "
                             f"{x.shape[ax]}")
    return [TensorType(x.shape[:ax] + i.shape + x.shape[ax + 1:], x.dtype)]


def _gather_fold(node: Node, args) -> list[np.ndarray]:
    return [np.take(args[0], args[1].astype(np.int64), axis=_axis(node, args[0].ndim))]


def _gather_runtime(node: Node, ctx: EmitContext, ax: int) -> str:
    """Run-time indices (embedding lookups): one row copy of ``inner`` elements per index, in C."""
    x, ind, y = node.inputs[0], node.inputs[1], node.outputs[0]
    s = x.type.shape
    outer, dim, inner, n = math.prod(s[:ax]), s[ax], math.prod(s[ax + 1:]) * x.type.itemsize, ind.type.size
    ctx.use_kernel("x8-gather-rows")
    xp, yp = ctx.ptr(x, "uint8_t"), ctx.ptr(y, "uint8_t")
    return (f"for (int o = 0; o < {outer}; o++)\n"
            f"  for (int i = 0; i < {n}; i++) {{\n"
            f"    int64_t j = (int64_t){ctx.ptr(ind)}[i];\n"
            f"    j = j < 0 ? j + {dim} : j;\n"
            f"    j = j < 0 ? 0 : j >= {dim} ? {dim - 1} : j;\n"
            f"    memmove({yp} + ((size_t)o * {n} + i) * {inner}, {xp} + ((size_t)o * {dim} + j) * {inner}, "
            f"{inner});\n  }}")


def _gather_emit(node: Node, ctx: EmitContext) -> str:
    x, ind, y = node.inputs[0], node.inputs[1], node.outputs[0]
    ax = _axis(node, len(x.type.shape))
    if not ind.is_const:
        return _gather_runtime(node, ctx, ax)
    _u32(node, x)
    idx = ind.const.astype(np.int64).reshape(-1)
    idx = np.where(idx < 0, idx + x.type.shape[ax], idx)
    ctx.use_kernel("x32-gathernd")
    return gather_nd(ctx, x, y, [idx if d == ax else None for d in range(len(x.type.shape))])


register(OpDef("gather", _gather_infer, _gather_fold, _gather_emit, kernels=KERNELS))
