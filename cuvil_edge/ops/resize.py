"""Resize (ONNX Resize/Upsample after normalisation at import): nearest on any axes, bilinear on the
last two.

attrs: ``sizes`` (output shape), ``scales`` (per-axis scale as the coordinate transform uses it),
``mode`` (nearest | linear), ``coord`` (coordinate_transformation_mode) and ``nearest``
(nearest_mode, or "simple" for the pre-opset-11 rule). Source coordinates are computed at build time,
in float32 as onnxruntime does, into index/weight tables in the weights blob: nearest is a table
gather (``x32_gather_nd``) and linear a gather + lerp.
"""

from __future__ import annotations

import numpy as np

from ..codegen.emit import EmitContext
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .movement import gather_nd
from .registry import OpDef, register

COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nearest")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


def source_coords(n_out: int, n_in: int, scale: float, coord: str) -> np.ndarray:
    """Input coordinate (float32) of each output index along one axis."""
    o, s = np.arange(n_out, dtype=np.float32), np.float32(scale)
    half = np.float32(0.5)
    if coord == "asymmetric":
        return o / s
    if coord == "tf_half_pixel_for_nearest":
        return (o + half) / s
    if coord == "align_corners":
        return o * np.float32(n_in - 1) / np.float32(n_out - 1) if n_out > 1 else np.zeros_like(o)
    if coord == "pytorch_half_pixel":
        return (o + half) / s - half if n_out > 1 else np.zeros_like(o)
    if coord == "half_pixel_symmetric":
        adjust = np.float32(n_out) / (s * np.float32(n_in))
        offset = np.float32(n_in) / 2 * (1 - adjust)
        return offset + (o + half) / s - half
    return (o + half) / s - half  # half_pixel


def nearest_index(x: np.ndarray, n_in: int, scale: float, mode: str) -> np.ndarray:
    if mode == "simple":  # Upsample / Resize-10: truncate, but ceil when downsampling
        i = np.ceil(x) if scale < 1 else np.trunc(x)
    elif mode == "floor":
        i = np.floor(x)
    elif mode == "ceil":
        i = np.ceil(x)
    else:
        tie = x == np.floor(x) + np.float32(0.5)
        i = np.where(tie, np.floor(x) if mode == "round_prefer_floor" else np.ceil(x), np.round(x))
    return np.clip(i, 0, n_in - 1).astype(np.int64)


def linear_taps(x: np.ndarray, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower/upper neighbour and weight of each coordinate, clamped to the input like onnxruntime."""
    x = np.clip(x, 0, n_in - 1)
    i0 = np.floor(x).astype(np.int64)
    return i0, np.minimum(i0 + 1, n_in - 1), (x - i0).astype(np.float32)


def _is_identity(node: Node, d: int) -> bool:
    """A scale-1 axis maps one to one whatever the coordinate mode (as in onnxruntime): no table."""
    return node.attrs["sizes"][d] == node.inputs[0].type.shape[d] and node.attrs["scales"][d] == 1.0


def _infer(node: Node) -> list[TensorType]:
    x, a = node.inputs[0].type, node.attrs
    if len(a["sizes"]) != len(x.shape) or len(a["scales"]) != len(x.shape):
        raise ShapeError(f"{node.name}: resize sizes/scales must cover all {len(x.shape)} axes")
    if a["mode"] not in ("nearest", "linear") or a["coord"] not in COORD_MODES or \
            a["nearest"] not in NEAREST_MODES:
        raise ShapeError(f"{node.name}: resize mode {a['mode']}/{a['coord']}/{a['nearest']} is not supported")
    if a["mode"] == "linear" and not all(_is_identity(node, d) for d in range(len(x.shape) - 2)):
        raise ShapeError(f"{node.name}: linear resize runs on the last two axes only")
    return [TensorType(tuple(int(d) for d in a["sizes"]), x.dtype)]


def _nearest_tables(node: Node) -> list[np.ndarray | None]:
    x, a = node.inputs[0].type.shape, node.attrs
    return [None if _is_identity(node, d) else nearest_index(
        source_coords(a["sizes"][d], n, a["scales"][d], a["coord"]), n, a["scales"][d], a["nearest"])
        for d, n in enumerate(x)]


def _linear_tables(node: Node) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(i0, i1, weight) for the H and W axes (H = 1 for rank-1 inputs)."""
    x, a = node.inputs[0].type.shape, node.attrs
    out = []
    for d in (len(x) - 2, len(x) - 1):
        if d < 0:
            out.append((np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.float32)))
        else:
            out.append(linear_taps(source_coords(a["sizes"][d], x[d], a["scales"][d], a["coord"]), x[d]))
    return out


def _fold(node: Node, args) -> list[np.ndarray]:
    x = args[0]
    if node.attrs["mode"] == "nearest":
        idx = [np.arange(n) if t is None else t for t, n in zip(_nearest_tables(node), x.shape)]
        return [x[np.ix_(*idx)]]
    (h0, h1, lh), (w0, w1, lw) = _linear_tables(node)
    x = x.reshape(-1, x.shape[-2] if x.ndim > 1 else 1, x.shape[-1])
    top = x[:, h0][:, :, w0] + (x[:, h0][:, :, w1] - x[:, h0][:, :, w0]) * lw
    bot = x[:, h1][:, :, w0] + (x[:, h1][:, :, w1] - x[:, h1][:, :, w0]) * lw
    return [(top + (bot - top) * lh[:, None]).reshape(node.attrs["sizes"])]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    if node.attrs["mode"] == "nearest":
        ctx.use_kernel("x32-gathernd")
        return gather_nd(ctx, x, y, _nearest_tables(node))
    (h0, h1, lh), (w0, w1, lw) = _linear_tables(node)
    s = x.type.shape
    H, W = (s[-2], s[-1]) if len(s) > 1 else (1, s[-1])
    planes = x.type.size // max(H * W, 1)

    def itab(a: np.ndarray, mul: int = 1) -> str:
        return ctx.weight((a * mul).astype(np.int32), "int32_t")

    ctx.use_kernel("f32-resize-bilinear-4")
    return (f"f32_resize_bilinear({ctx.ptr(x)}, {ctx.ptr(y)}, {planes}, {H}, {W}, {h0.size}, {w0.size}, "
            f"{itab(h0, W)}, {itab(h1, W)}, {ctx.weight(lh)}, {itab(w0)}, {itab(w1)}, {ctx.weight(lw)});")


register(OpDef("resize", _infer, _fold, _emit, kernels=("f32-resize", "x32-movement")))
