"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR on NCHW, their TF coordinate flags mapped onto the IR
``resize`` modes (the same ones the ONNX converter uses)."""

from __future__ import annotations

from .convert_tensor import int_values
from .layout import NCHW
from .registry import TflContext, converter


def _resize(ctx: TflContext, mode: str, coord: str, nearest: str) -> None:
    x = ctx.nchw(0)
    size = int_values(ctx.const(1))
    if len(size) != 2 or min(*size, *x.type.shape) < 1:
        raise ctx.unsupported(f"size {size} for input {x.type.shape}: two sizes, no empty dims")
    sizes = [*x.type.shape[:2], *size]
    scales = [o / i for o, i in zip(sizes, x.type.shape)]
    ctx.set_output(ctx.emit1("resize", [x], {"sizes": sizes, "scales": scales, "mode": mode, "coord": coord,
                                             "nearest": nearest, "cubic_a": -0.75, "exclude_outside": False}),
                   NCHW)


@converter("RESIZE_BILINEAR")
def resize_bilinear(ctx: TflContext) -> None:
    o = ctx.options
    coord = "align_corners" if o.get("AlignCorners") else "half_pixel" if o.get("HalfPixelCenters") \
        else "asymmetric"
    _resize(ctx, "linear", coord, "floor")


@converter("RESIZE_NEAREST_NEIGHBOR")
def resize_nearest(ctx: TflContext) -> None:
    """TF rounds half away from zero with align_corners and floors otherwise; half-pixel centers
    sample at (out + 0.5) / scale without the -0.5 (``tf_half_pixel_for_nearest``)."""
    o = ctx.options
    if o.get("AlignCorners"):
        _resize(ctx, "nearest", "align_corners", "round_prefer_ceil")
    elif o.get("HalfPixelCenters"):
        _resize(ctx, "nearest", "tf_half_pixel_for_nearest", "floor")
    else:
        _resize(ctx, "nearest", "asymmetric", "floor")
