"""Resize (ONNX Resize/Upsample after normalisation at import): nearest on any axes, bilinear and
bicubic on the last two.

attrs: ``sizes`` (output shape), ``scales`` (per-axis scale as the coordinate transform uses it),
``mode`` (nearest | linear | cubic), ``coord`` (coordinate_transformation_mode) and ``nearest``
(nearest_mode, or "simple" for the pre-opset-11 rule); cubic also ``cubic_a`` (cubic_coeff_a) and
``exclude_outside``; optional ``antialias`` (linear/cubic filters stretched by 1/scale on downsampled
axes). Source coordinates are computed at build time, in float32 as onnxruntime does, into index/weight
tables in the weights blob: nearest is a table gather (``x32_gather_nd``), linear a gather + lerp, cubic
and antialiased filters K taps per axis (edge-clamped, or dropped and renormalised with exclude_outside).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .movement import gather_nd
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nearest", "tf_crop_and_resize")
#: tf_crop_and_resize samples a box (attr ``roi``: [start, end] per axis, as fractions of the input) and
#: writes ``extrapolation`` where it reads outside the input: supported with linear and cubic weights
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


def source_coords(n_out: int, n_in: int, scale: float, coord: str,
                  roi: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """Input coordinate (float32) of each output index along one axis (``roi`` for tf_crop_and_resize)."""
    o, s = np.arange(n_out, dtype=np.float32), np.float32(scale)
    half = np.float32(0.5)
    if coord == "tf_crop_and_resize":
        start, end, span = np.float32(roi[0]), np.float32(roi[1]), np.float32(n_in - 1)
        if n_out > 1:
            return start * span + o * (end - start) * span / np.float32(n_out - 1)
        return np.full_like(o, half * (start + end) * span)
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


def _filter(d: np.ndarray, mode: str, a: float) -> np.ndarray:
    """The triangle (linear) or cubic convolution (coefficient ``a``) kernel at distances ``d`` >= 0."""
    if mode == "linear":
        return np.clip(1 - d, 0, None)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0))


def filter_taps(x: np.ndarray, n_in: int, mode: str, scale: float = 1.0, a: float = -0.75,
                exclude_outside: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Input indices and weights ([n_out, K], float32) of the linear or cubic kernel around each
    coordinate, normalised to sum 1. ``scale`` < 1 (antialias on a downsampled axis) stretches the kernel
    by 1/scale, as the ONNX reference does, so K grows to cover it; scale 1 gives 2 (linear) or the
    usual 4 cubic taps. Out-of-range taps clamp to the edge, or with ``exclude_outside`` get weight 0."""
    s = min(scale, 1.0)
    start = int(np.floor(-(1 if mode == "linear" else 2) / s)) + 1
    idx = np.floor(x).astype(np.int64)[:, None] + np.arange(start, 2 - start)[None, :]
    w = _filter(np.abs(idx - x[:, None].astype(np.float64)) * s, mode, a)
    if exclude_outside:
        w = np.where((idx >= 0) & (idx < n_in), w, 0)
    total = w.sum(axis=1, keepdims=True)  # 0 only where crop extrapolates the whole window
    w = np.divide(w, total, out=np.zeros_like(w), where=total != 0)
    return np.clip(idx, 0, n_in - 1), w.astype(np.float32)


def outside_input(x: np.ndarray, n_in: int) -> np.ndarray:
    """Coordinates tf_crop_and_resize extrapolates at (off the input's first or last sample)."""
    return (x < 0) | (x > n_in - 1)


def _is_identity(node: Node, d: int) -> bool:
    """A scale-1 axis maps one to one whatever the coordinate mode (as in onnxruntime): no table."""
    return node.attrs["sizes"][d] == node.inputs[0].type.shape[d] and node.attrs["scales"][d] == 1.0


def _infer(node: Node) -> list[TensorType]:
    x, a = node.inputs[0].type, node.attrs
    if len(a["sizes"]) != len(x.shape) or len(a["scales"]) != len(x.shape):
        raise ShapeError(f"{node.name}: resize sizes/scales must cover all {len(x.shape)} axes")
    if a["mode"] not in ("nearest", "linear", "cubic") or a["coord"] not in COORD_MODES or \
            a["nearest"] not in NEAREST_MODES:
        raise ShapeError(f"{node.name}: resize mode {a['mode']}/{a['coord']}/{a['nearest']} is not supported")
    if a["mode"] != "nearest" and not all(_is_identity(node, d) for d in range(len(x.shape) - 2)):
        raise ShapeError(f"{node.name}: {a['mode']} resize runs on the last two axes only")
    if a["mode"] == "nearest" and (a["coord"] == "tf_crop_and_resize" or a.get("antialias")):
        raise ShapeError(f"{node.name}: tf_crop_and_resize and antialias run with linear or cubic weights")
    return [TensorType(tuple(int(d) for d in a["sizes"]), x.dtype)]


def _nearest_tables(node: Node) -> list[np.ndarray | None]:
    x, a = node.inputs[0].type.shape, node.attrs
    return [None if _is_identity(node, d) else nearest_index(
        source_coords(a["sizes"][d], n, a["scales"][d], a["coord"]), n, a["scales"][d], a["nearest"])
        for d, n in enumerate(x)]


def _hw_coords(node: Node) -> list[tuple[np.ndarray, int, float]]:
    """(source coordinates, input size, scale) for the H and W axes (H = 1 with coordinate 0 for rank 1)."""
    x, a = node.inputs[0].type.shape, node.attrs
    roi = a.get("roi") or [(0.0, 1.0)] * len(x)
    return [(np.zeros(1, np.float32), 1, 1.0) if d < 0 else
            (source_coords(a["sizes"][d], x[d], a["scales"][d], a["coord"], roi[d]), x[d], a["scales"][d])
            for d in (len(x) - 2, len(x) - 1)]


def _linear_tables(node: Node) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(i0, i1, weight) for the H and W axes."""
    return [linear_taps(c, n) for c, n, _ in _hw_coords(node)]


def _uses_taps(node: Node) -> bool:
    """Cubic and antialiased resizes run as K-tap filters; plain linear as the 2x2 lerp."""
    return node.attrs["mode"] == "cubic" or bool(node.attrs.get("antialias"))


def _tap_tables(node: Node) -> list[tuple[np.ndarray, np.ndarray]]:
    """(indices, weights), each [n_out, K], for the H and W axes."""
    a = node.attrs
    return [filter_taps(c, n, a["mode"], s if a.get("antialias") else 1.0, a["cubic_a"], a["exclude_outside"])
            for c, n, s in _hw_coords(node)]


def _extrapolated(node: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows, columns) tf_crop_and_resize fills with the extrapolation value; None when there are none."""
    if node.attrs["coord"] != "tf_crop_and_resize":
        return None
    (ys, h, _), (xs, w, _) = _hw_coords(node)
    rows, cols = np.flatnonzero(outside_input(ys, h)), np.flatnonzero(outside_input(xs, w))
    return (rows, cols) if rows.size or cols.size else None


def _planes(x: np.ndarray) -> np.ndarray:
    """x as [planes, H, W] (H = 1 for rank 1)."""
    return x.reshape(-1, x.shape[-2] if x.ndim > 1 else 1, x.shape[-1])


def _hw(node: Node) -> tuple[int, int]:
    """(H, W) of the planes the linear and cubic kernels resize."""
    s = node.inputs[0].type.shape
    return (s[-2], s[-1]) if len(s) > 1 else (1, s[-1])


def _fold(node: Node, args) -> list[np.ndarray]:
    x = args[0]
    if node.attrs["mode"] == "nearest":
        idx = [np.arange(n) if t is None else t for t, n in zip(_nearest_tables(node), x.shape)]
        return [x[np.ix_(*idx)]]
    p = _planes(x)
    if _uses_taps(node):
        (iy, wy), (ix, wx) = _tap_tables(node)
        y = np.einsum("wk,powk->pow", wx, np.einsum("ok,pokw->pow", wy, p[:, iy])[:, :, ix])
    else:
        (h0, h1, lh), (w0, w1, lw) = _linear_tables(node)
        top = p[:, h0][:, :, w0] + (p[:, h0][:, :, w1] - p[:, h0][:, :, w0]) * lw
        bot = p[:, h1][:, :, w0] + (p[:, h1][:, :, w1] - p[:, h1][:, :, w0]) * lw
        y = top + (bot - top) * lh[:, None]
    fill = _extrapolated(node)
    if fill is not None:
        y[:, fill[0], :] = y[:, :, fill[1]] = node.attrs["extrapolation"]
    return [y.reshape(node.attrs["sizes"]).astype(x.dtype)]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    if node.attrs["mode"] == "nearest":
        ctx.use_kernel("x32-gathernd")
        return gather_nd(ctx, x, y, _nearest_tables(node), split=True)
    H, W = _hw(node)
    planes = x.type.size // max(H * W, 1)

    def itab(a: np.ndarray, mul: int = 1) -> str:
        return ctx.weight(np.ascontiguousarray(a * mul).astype(np.int32), "int32_t")

    if _uses_taps(node):
        (iy, wy), (ix, wx) = _tap_tables(node)
        ctx.use_kernel("f32-resize-antialias-4" if node.attrs.get("antialias") else "f32-resize-bicubic-4")
        oh, ow = iy.shape[0], ix.shape[0]
        code = (f"f32_resize_taps({ctx.ptr(x)}, {ctx.ptr(y)}, {planes}, {H}, {W}, {oh}, {ow}, "
                f"{iy.shape[1]}, {itab(iy, W)}, {ctx.weight(wy)}, "
                f"{ix.shape[1]}, {itab(ix.T)}, {ctx.weight(np.ascontiguousarray(wx.T))}, {ctx.scratch()});")
    else:
        (h0, h1, lh), (w0, w1, lw) = _linear_tables(node)
        ctx.use_kernel("f32-resize-bilinear-4")
        oh, ow = h0.size, w0.size
        code = (f"f32_resize_bilinear({ctx.ptr(x)}, {ctx.ptr(y)}, {planes}, {H}, {W}, {oh}, {ow}, "
                f"{itab(h0, W)}, {itab(h1, W)}, {ctx.weight(lh)}, {itab(w0)}, {itab(w1)}, {ctx.weight(lw)});")
    fill = _extrapolated(node)
    if fill is None:
        return code
    mask = np.zeros((oh, ow), np.uint8)
    mask[fill[0], :] = mask[:, fill[1]] = 1
    return (f"{code}\nfor (size_t i = 0; i < {planes * oh * ow}; i++)\n"
            f"  if ({ctx.weight(mask, 'uint8_t')}[i % {oh * ow}]) "
            f"{ctx.ptr(y)}[i] = {float(np.float32(node.attrs['extrapolation']))!r}f;")


def _scratch(node: Node) -> int:
    """One row of W floats for the K-tap kernel's vertical pass."""
    return 4 * _hw(node)[1] if _uses_taps(node) else 0


register(OpDef("resize", _infer, _fold, _emit, kernels=("f32-resize", "x32-movement"), scratch=_scratch))
