"""Ops whose output sizes depend on the data: ``nonzero``, ``unique``, ``compress`` and ``nms`` (ONNX
NonZero, Unique, Compress and NonMaxSuppression).

Every shape is static, so such an output is allocated for its bound, the largest size the input shapes
allow, and the op's last output ``length`` (int64 scalar) says how many entries along the output's
padded axis are real; entries past it are zero. ``PADDED`` says which outputs are padded and along which
axis. The folds give that padded form too (each pads the exact ONNX result); the converters
(``frontend/onnx/convert_dynamic.py``) cut a folded result to its length and give a model output that is
padded at run time a ``<name>:length`` output, as for a Loop's scan outputs. Each op is C loops on
thread 0 with every shape a constant; ``unique`` and ``nms`` sort ids in their scratch with a stable
bottom-up merge sort (``merge_sort``).

- ``nonzero``: x (any type) -> int64 ``[rank, size]``: the C-order coordinates of the non-zero elements
  (NaN counts as non-zero; a scalar as rank 1, as onnxruntime does), padded along the last axis.
- ``unique`` (attrs ``axis``: None flattens; ``sorted``): x -> y (x's shape, or ``[size]``), first
  indices, inverse indices (static: one per slice), counts. Slices compare lexicographically; NaNs
  equal each other and sort last (numpy's rule). ``sorted=False`` keeps the order of first occurrence.
- ``compress`` (attr ``axis``: None flattens): x, bool condition -> the slices whose condition is true,
  among the first ``min(len(condition), dim)`` (onnxruntime ignores a longer condition's tail).
- ``nms`` (attrs ``center``, ``per_class``: the bound per class): boxes ``[B, N, 4]``, scores
  ``[B, C, N]``, the int64 per-class limit (clamped to ``[0, per_class]``), the IoU threshold and, if
  given, the score threshold (float32 scalars; an IoU threshold outside [0, 1] traps, as onnxruntime
  fails) -> int64 ``[B * C * per_class, 3]`` rows (batch, class, box) in onnxruntime's order: per batch
  and class, candidates above the score threshold by descending score (ties: lower index first), each
  kept unless its IoU with one kept before exceeds the threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType, Value
from .common import CTYPES
from .logic import outer_inner
from .movement import strides_of
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

LENGTH = TensorType((), "int64")
#: op -> its attrs -> {output index: the axis it is padded along}
PADDED: dict[str, Callable[[dict[str, Any]], dict[int, int]]] = {
    "nonzero": lambda attrs: {0: 1},
    "unique": lambda attrs: {0: attrs["axis"] or 0, 1: 0, 3: 0},
    "compress": lambda attrs: {0: attrs["axis"] or 0},
    "nms": lambda attrs: {0: 0},
}
_FLOATS = ("float32", "float64")


def merge_sort(ids: str, tmp: str, n: str, before: Callable[[str, str], str]) -> list[str]:
    """C lines sorting the ``n`` int64 ids at ``ids`` stably, bottom-up through ``tmp`` (as many; no
    recursion, O(n log n)). ``before(p, q)``: C statements setting ``int lt`` to whether id ``p`` goes
    strictly before id ``q``."""
    return [
        "{",
        f"  int64_t *ms_src = {ids}, *ms_dst = {tmp};",
        f"  for (int64_t ms_w = 1; ms_w < {n}; ms_w *= 2) {{",
        f"    for (int64_t ms_lo = 0; ms_lo < {n}; ms_lo += 2 * ms_w) {{",
        f"      int64_t ms_a = ms_lo, ms_mid = ms_lo + ms_w < {n} ? ms_lo + ms_w : {n};",
        f"      int64_t ms_b = ms_mid, ms_hi = ms_lo + 2 * ms_w < {n} ? ms_lo + 2 * ms_w : {n};",
        "      int64_t ms_t = ms_lo;",
        "      while (ms_a < ms_mid && ms_b < ms_hi) {",
        "        int lt = 0;",
        f"        {before('ms_src[ms_b]', 'ms_src[ms_a]')}",
        "        ms_dst[ms_t++] = lt ? ms_src[ms_b++] : ms_src[ms_a++];",
        "      }",
        "      while (ms_a < ms_mid) ms_dst[ms_t++] = ms_src[ms_a++];",
        "      while (ms_b < ms_hi) ms_dst[ms_t++] = ms_src[ms_b++];",
        "    }",
        "    int64_t *ms_swap = ms_src; ms_src = ms_dst; ms_dst = ms_swap;",
        "  }",
        f"  if (ms_src != {ids}) memcpy({ids}, ms_src, (size_t)({n}) * sizeof(int64_t));",
        "}"]


def _zero_tail(ctx: EmitContext, v: Value, axis: int, n: str) -> str:
    """C zeroing ``v``'s entries ``n`` (a C expression) and on along ``axis``: the padding past its length."""
    outer, bound, inner = outer_inner(v.type.shape, axis)
    row = inner * v.type.itemsize
    return (f"for (size_t o = 0; o < {outer}; o++) memset({ctx.ptr(v, 'uint8_t')} + (o * {bound} + "
            f"(size_t)({n})) * {row}, 0, (size_t)({bound} - ({n})) * {row});")


def _pad(a: np.ndarray, axis: int, bound: int) -> np.ndarray:
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, bound - a.shape[axis])
    return np.pad(a, widths)


def _register(name: str, infer: Callable[[Node], list[TensorType]],
              exact: Callable[[Node, Sequence[np.ndarray]], list[np.ndarray]],
              emit: Callable[[Node, EmitContext], str], scratch: Callable[[Node], int] | None = None) -> None:
    """Register op ``name`` whose fold pads ``exact`` (the ONNX result) to the bounds ``infer`` gives."""
    def fold(node: Node, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        outs, types, axes = exact(node, args), infer(node), PADDED[name](node.attrs)
        first = next(iter(axes))
        padded = [_pad(a, axes[i], t.shape[axes[i]]) if i in axes else a
                  for i, (a, t) in enumerate(zip(outs, types))]
        return [*padded, np.array(outs[first].shape[axes[first]], np.int64)]

    register(OpDef(name, infer, fold, emit, scratch=scratch))


# -- nonzero -------------------------------------------------------------------------------------------
def _nonzero_infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    return [TensorType((max(len(x.shape), 1), x.size), "int64"), LENGTH]


def _nonzero_exact(node: Node, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    x = args[0].reshape(args[0].shape or (1,))
    return [np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1)]


def _nonzero_emit(node: Node, ctx: EmitContext) -> str:
    x, (y, length) = node.inputs[0], node.outputs
    shape, size = x.type.shape or (1,), x.type.size
    ctx.use_kernel(f"{dtype_code(x.type.dtype)}-nonzero")
    yp = ctx.ptr(y)
    coords = [f"      {yp}[{d * size} + n] = (int64_t)(k / {s} % {dim});"
              for d, (s, dim) in enumerate(zip(strides_of(shape), shape))]
    return "\n".join([
        "{",
        "  int64_t n = 0;",
        f"  for (size_t k = 0; k < {size}; k++)",
        f"    if ({ctx.ptr(x)}[k] != 0) {{",
        *coords,
        "      n++;",
        "    }",
        "  " + _zero_tail(ctx, y, 1, "n"),
        f"  *{ctx.ptr(length)} = n;",
        "}"])


_register("nonzero", _nonzero_infer, _nonzero_exact, _nonzero_emit)


# -- unique --------------------------------------------------------------------------------------------
def _slices(node: Node) -> tuple[int, int, int]:
    """(outer, slices, inner) of unique's input: its slices are what it compares."""
    x, axis = node.inputs[0].type, node.attrs["axis"]
    return (1, x.size, 1) if axis is None else outer_inner(x.shape, axis)


def _unique_infer(node: Node) -> list[TensorType]:
    x, axis = node.inputs[0].type, node.attrs["axis"]
    if axis is not None and not 0 <= axis < len(x.shape):
        raise ShapeError(f"{node.name}: unique along axis {axis} of {x}")
    m = _slices(node)[1]
    y = TensorType((m,) if axis is None else x.shape, x.dtype)
    return [y, *(TensorType((m,), "int64") for _ in range(3)), LENGTH]


def _unique_exact(node: Node, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    axis = node.attrs["axis"]
    x = args[0] if axis is not None else args[0].reshape(-1)
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                          axis=axis)
    inverse = inverse.reshape(-1)
    if not node.attrs["sorted"]:  # in order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y, first, counts, inverse = np.take(y, order, axis=axis or 0), first[order], counts[order], \
            rank[inverse]
    return [y, *(a.astype(np.int64) for a in (first, inverse, counts))]


def _slice_cmp(node: Node, ctx: EmitContext, p: str, q: str) -> str:
    """C setting ``int c`` to -1, 0 or 1 as slice ``p`` of unique's input is before, equal to or after
    slice ``q`` (lexicographic; NaNs equal each other and go last)."""
    x = node.inputs[0]
    outer, m, inner = _slices(node)
    ct = CTYPES[x.type.dtype]
    less = "(u < v || (v != v && u == u))" if x.type.dtype in _FLOATS else "(u < v)"
    more = less.replace("u", "w").replace("v", "u").replace("w", "v")
    return (f"c = 0; for (size_t j = 0; j < {outer * inner} && c == 0; j++) {{ "
            f"size_t e = j / {inner} * {m * inner} + j % {inner}; "
            f"{ct} u = {ctx.ptr(x)}[e + (size_t)({p}) * {inner}], "
            f"v = {ctx.ptr(x)}[e + (size_t)({q}) * {inner}]; "
            f"c = {less} ? -1 : {more} ? 1 : 0; }}")


def _unique_emit(node: Node, ctx: EmitContext) -> str:
    """Sort slice ids, group equal neighbours (a stable sort leaves each group's first occurrence at its
    head), rank the groups (sorted, or by first occurrence), then write the outputs by rank."""
    x = node.inputs[0]
    y, first, inverse, counts, length = node.outputs
    outer, m, inner = _slices(node)
    row = inner * x.type.itemsize
    ctx.use_kernel(f"{dtype_code(x.type.dtype)}-unique")
    order = ["  for (int64_t g = 0; g < u; g++) rank[g] = g;"] if node.attrs["sorted"] else [
        f"  for (int64_t k = 0; k < {m}; k++) tmp[k] = -1;",
        "  for (int64_t g = 0; g < u; g++) tmp[gfirst[g]] = g;",
        f"  for (int64_t k = 0, r = 0; k < {m}; k++) if (tmp[k] >= 0) rank[tmp[k]] = r++;"]
    return "\n".join([
        "{",
        f"  int64_t *ord = {ctx.scratch('int64_t', shared=True)}, *tmp = ord + {m}, *gfirst = tmp + {m};",
        f"  int64_t *gcount = gfirst + {m}, *rank = gcount + {m}, *inv = {ctx.ptr(inverse)}, u = 0;",
        f"  for (int64_t k = 0; k < {m}; k++) ord[k] = k;",
        *("  " + line for line in merge_sort(
            "ord", "tmp", str(m), lambda p, q: f"{{ int c; {_slice_cmp(node, ctx, p, q)} lt = c < 0; }}")),
        f"  for (int64_t t = 0; t < {m}; t++) {{",
        "    int c = 1;",
        f"    if (t > 0) {{ {_slice_cmp(node, ctx, 'ord[t - 1]', 'ord[t]')} }}",
        "    if (c != 0) { gfirst[u] = ord[t]; gcount[u] = 0; u++; }",
        "    inv[ord[t]] = u - 1; gcount[u - 1]++;",
        "  }",
        *order,
        "  for (int64_t g = 0; g < u; g++) {",
        f"    {ctx.ptr(first)}[rank[g]] = gfirst[g]; {ctx.ptr(counts)}[rank[g]] = gcount[g];",
        f"    for (size_t o = 0; o < {outer}; o++)",
        f"      memcpy({ctx.ptr(y, 'uint8_t')} + (o * {m} + (size_t)rank[g]) * {row}, "
        f"{ctx.ptr(x, 'uint8_t')} + (o * {m} + (size_t)gfirst[g]) * {row}, {row});",
        "  }",
        f"  for (int64_t k = 0; k < {m}; k++) inv[k] = rank[inv[k]];",
        *("  " + _zero_tail(ctx, v, axis, "u") for v, axis in ((y, node.attrs["axis"] or 0), (first, 0),
                                                               (counts, 0))),
        f"  *{ctx.ptr(length)} = u;",
        "}"])


_register("unique", _unique_infer, _unique_exact, _unique_emit,
          scratch=lambda node: 5 * _slices(node)[1] * 8)


# -- compress ------------------------------------------------------------------------------------------
def _compress_dims(node: Node) -> tuple[int, int, int, int]:
    """(outer, dim, inner, kept bound) of compress: the condition's first ``bound`` entries choose."""
    x, cond, axis = node.inputs[0].type, node.inputs[1].type, node.attrs["axis"]
    outer, dim, inner = (1, x.size, 1) if axis is None else outer_inner(x.shape, axis)
    return outer, dim, inner, min(cond.size, dim)


def _compress_infer(node: Node) -> list[TensorType]:
    x, cond, axis = node.inputs[0].type, node.inputs[1].type, node.attrs["axis"]
    if cond.dtype != "bool" or len(cond.shape) != 1 or axis is not None and not 0 <= axis < len(x.shape):
        raise ShapeError(f"{node.name}: compress of {x} by {cond} along axis {axis}")
    m = _compress_dims(node)[3]
    return [TensorType((m,) if axis is None else (*x.shape[:axis], m, *x.shape[axis + 1:]), x.dtype), LENGTH]


def _compress_exact(node: Node, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, cond, axis = args[0], args[1], node.attrs["axis"]
    kept = np.flatnonzero(cond[:_compress_dims(node)[3]])
    return [np.take(x.reshape(-1) if axis is None else x, kept, axis=axis or 0)]


def _compress_emit(node: Node, ctx: EmitContext) -> str:
    x, cond = node.inputs
    y, length = node.outputs
    outer, dim, inner, m = _compress_dims(node)
    row = inner * x.type.itemsize
    ctx.use_kernel(f"{dtype_code(x.type.dtype)}-compress")
    return "\n".join([
        "{",
        "  int64_t n = 0;",
        f"  for (size_t k = 0; k < {m}; k++)",
        f"    if ({ctx.ptr(cond)}[k]) {{",
        f"      for (size_t o = 0; o < {outer}; o++)",
        f"        memcpy({ctx.ptr(y, 'uint8_t')} + (o * {m} + (size_t)n) * {row}, "
        f"{ctx.ptr(x, 'uint8_t')} + (o * {dim} + k) * {row}, {row});",
        "      n++;",
        "    }",
        "  " + _zero_tail(ctx, y, node.attrs["axis"] or 0, "n"),
        f"  *{ctx.ptr(length)} = n;",
        "}"])


_register("compress", _compress_infer, _compress_exact, _compress_emit)


# -- nms -----------------------------------------------------------------------------------------------
def _nms_infer(node: Node) -> list[TensorType]:
    boxes, scores, limit, *thresholds = (v.type for v in node.inputs)
    k = node.attrs["per_class"]
    if (len(boxes.shape) != 3 or boxes.shape[2] != 4 or len(scores.shape) != 3
            or (scores.shape[0], scores.shape[2]) != boxes.shape[:2]
            or {boxes.dtype, scores.dtype} != {"float32"} or limit.dtype != "int64" or limit.size != 1
            or len(thresholds) not in (1, 2) or any(t.dtype != "float32" or t.size != 1 for t in thresholds)
            or not 0 <= k <= boxes.shape[1]):
        raise ShapeError(f"{node.name}: non-max suppression of boxes {boxes}, scores {scores}, limit "
                         f"{limit}, thresholds {[str(t) for t in thresholds]}, at most {k} per class")
    return [TensorType((boxes.shape[0] * scores.shape[1] * k, 3), "int64"), LENGTH]


def _corners(box: np.ndarray, center: int) -> tuple[Any, Any, Any, Any]:
    """(x_min, x_max, y_min, y_max) of one box, in float32 as onnxruntime computes them."""
    if center:
        half_w, half_h = box[2] / np.float32(2), box[3] / np.float32(2)
        return box[0] - half_w, box[0] + half_w, box[1] - half_h, box[1] + half_h
    return (*sorted((box[1], box[3])), *sorted((box[0], box[2])))


def _suppresses(a: np.ndarray, b: np.ndarray, center: int, iou: np.float32) -> bool:
    """Whether kept box ``b`` suppresses candidate ``a`` (onnxruntime's ``SuppressByIOU``)."""
    ax0, ax1, ay0, ay1 = _corners(a, center)
    bx0, bx1, by0, by1 = _corners(b, center)
    ix0, ix1, iy0, iy1 = max(ax0, bx0), min(ax1, bx1), max(ay0, by0), min(ay1, by1)
    if ix1 <= ix0 or iy1 <= iy0:
        return False
    inter, area_a, area_b = (ix1 - ix0) * (iy1 - iy0), (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if inter <= 0 or area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(inter / union > iou)


def _nms_exact(node: Node, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    boxes, scores, limit, iou, *score = args
    center, iou, above = node.attrs["center"], iou.reshape(-1)[0], score[0].reshape(-1)[0] if score else None
    k = min(max(int(limit.reshape(-1)[0]), 0), node.attrs["per_class"])
    rows = []
    for b, c in np.ndindex(scores.shape[0], scores.shape[1]):
        s = scores[b, c]
        cand = [j for j in range(s.size) if above is None or s[j] > above]
        kept: list[int] = []
        for j in sorted(cand, key=lambda j: -s[j]):  # stable: equal scores keep the lower index first
            if len(kept) == k:
                break
            if not any(_suppresses(boxes[b, j], boxes[b, q], center, iou) for q in kept):
                kept.append(j)
                rows.append((b, c, j))
    return [np.array(rows, np.int64).reshape(-1, 3)]


def _box_corners(box: str, center: int) -> str:
    """C declaring ``float <box>x0, <box>x1, <box>y0, <box>y1`` from ``const float *<box>``."""
    if center:
        return (f"float {box}x0 = {box}[0] - {box}[2] / 2, {box}x1 = {box}[0] + {box}[2] / 2, "
                f"{box}y0 = {box}[1] - {box}[3] / 2, {box}y1 = {box}[1] + {box}[3] / 2;")
    return (f"float {box}x0 = {box}[1] >= {box}[3] ? {box}[3] : {box}[1], "
            f"{box}x1 = {box}[1] >= {box}[3] ? {box}[1] : {box}[3], "
            f"{box}y0 = {box}[0] >= {box}[2] ? {box}[2] : {box}[0], "
            f"{box}y1 = {box}[0] >= {box}[2] ? {box}[0] : {box}[2];")


def _nms_emit(node: Node, ctx: EmitContext) -> str:
    """Per batch and class: candidates by descending score (a stable sort of box ids), then greedy
    suppression against the boxes kept so far, comparisons written as onnxruntime's (NaNs alike)."""
    boxes, scores, limit, iou, *score = node.inputs
    sel, length = node.outputs
    center, (nb, n), nc = node.attrs["center"], boxes.type.shape[:2], scores.type.shape[1]
    k = node.attrs["per_class"]
    ctx.use_kernel("f32-nms")
    if k == 0:
        return f"*{ctx.ptr(length)} = 0;"
    passes = f"sc[j] > *{ctx.ptr(score[0])}" if score else "1"
    return "\n".join([
        "{",
        f"  const float iou = *{ctx.ptr(iou)};",
        "  if (!(iou >= 0 && iou <= 1)) __builtin_trap();",
        f"  int64_t *cand = {ctx.scratch('int64_t', shared=True)}, *tmp = cand + {n}, *kept = tmp + {n};",
        f"  int64_t *out = {ctx.ptr(sel)}, total = 0, limit = *{ctx.ptr(limit)};",
        f"  limit = limit < 0 ? 0 : limit > {k} ? {k} : limit;",
        f"  for (int64_t b = 0; b < {nb}; b++)",
        f"    for (int64_t c = 0; c < {nc}; c++) {{",
        f"      const float *bx = {ctx.ptr(boxes)} + b * {n * 4};",
        f"      const float *sc = {ctx.ptr(scores)} + (b * {nc} + c) * {n};",
        "      int64_t ncand = 0, nk = 0;",
        f"      for (int64_t j = 0; j < {n}; j++) if ({passes}) cand[ncand++] = j;",
        *("      " + line for line in merge_sort("cand", "tmp", "ncand",
                                                lambda p, q: f"lt = sc[{p}] > sc[{q}];")),
        "      for (int64_t t = 0; t < ncand && nk < limit; t++) {",
        "        const float *p = bx + cand[t] * 4;",
        f"        {_box_corners('p', center)}",
        "        int keep = 1;",
        "        for (int64_t s = 0; s < nk && keep; s++) {",
        "          const float *q = bx + kept[s] * 4;",
        f"          {_box_corners('q', center)}",
        "          float ix0 = px0 < qx0 ? qx0 : px0, ix1 = qx1 < px1 ? qx1 : px1;",
        "          float iy0 = py0 < qy0 ? qy0 : py0, iy1 = qy1 < py1 ? qy1 : py1;",
        "          if (ix1 <= ix0 || iy1 <= iy0) continue;",
        "          float inter = (ix1 - ix0) * (iy1 - iy0);",
        "          float pa = (px1 - px0) * (py1 - py0), qa = (qx1 - qx0) * (qy1 - qy0);",
        "          float uni = pa + qa - inter;",
        "          if (inter <= 0 || pa <= 0 || qa <= 0 || uni <= 0) continue;",
        "          keep = !(inter / uni > iou);",
        "        }",
        "        if (keep) {",
        "          kept[nk++] = cand[t];",
        "          out[total * 3] = b; out[total * 3 + 1] = c; out[total * 3 + 2] = cand[t]; total++;",
        "        }",
        "      }",
        "    }",
        "  " + _zero_tail(ctx, sel, 0, "total"),
        f"  *{ctx.ptr(length)} = total;",
        "}"])


_register("nms", _nms_infer, _nms_exact, _nms_emit,
          scratch=lambda node: (2 * node.inputs[0].type.shape[1] + node.attrs["per_class"]) * 8)
