"""Converters for Resize (opsets 10-19) and Upsample (7-9), normalised to one ``resize`` IR op.

Resize-10 and Upsample use the old rules: asymmetric coordinates, nearest truncating ("simple").
Scales and sizes must be build-time constants (they set the output shape).
"""

from __future__ import annotations

import numpy as np

from .registry import ConvertContext, converter

MODES = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "cubic": "cubic"}


def _full(values: np.ndarray | None, axes: list[int] | None, base: list[float]) -> list[float] | None:
    """Spread per-axis values over all axes (opset 18 ``axes``); other axes keep ``base``."""
    if values is None:
        return None
    values = [float(v) for v in np.asarray(values).reshape(-1)]
    if axes is None:
        return values
    out = list(base)
    for a, v in zip(axes, values):
        out[a] = v
    return out


@converter("Resize", "Upsample")
def resize(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    shape = list(x.type.shape)
    r = len(shape)
    mode = MODES.get(ctx.attr("mode", "nearest"))
    if mode is None:
        raise ctx.unsupported(f"mode={ctx.attr('mode')!r} (nearest, linear and cubic are supported)")
    sizes, crop, antialias = None, {}, False
    if ctx.op_type == "Upsample" or ctx.opset < 11:
        scales = ctx.attr("scales") if ctx.op_type == "Upsample" and ctx.opset < 9 else ctx.const(1)
        scales, coord, nearest = _full(scales, None, []), "asymmetric", "simple"
    else:
        coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
        nearest = ctx.attr("nearest_mode", "round_prefer_floor")
        antialias = bool(ctx.attr("antialias", 0))
        if mode == "nearest" and (coord == "tf_crop_and_resize" or antialias):
            what = "antialias=1" if antialias else "coordinate_transformation_mode='tf_crop_and_resize'"
            raise ctx.unsupported(f"{what} with mode='nearest' (linear and cubic only)")
        axes = ctx.attr("axes")
        axes = None if axes is None else [int(a) % r for a in axes]
        if coord == "tf_crop_and_resize":
            roi = ctx.const(1)
            n = len(axes or range(r))
            if roi is None or roi.size != 2 * n:
                raise ctx.unsupported(f"tf_crop_and_resize needs a constant roi of {2 * n} values")
            crop = {"roi": list(zip(_full(roi[:n], axes, [0.0] * r), _full(roi[n:], axes, [1.0] * r))),
                    "extrapolation": float(ctx.attr("extrapolation_value", 0.0))}
            if not np.isfinite(crop["extrapolation"]):
                raise ctx.unsupported(f"extrapolation_value={crop['extrapolation']}")
        scales = ctx.const(2) if ctx.has_input(2) else None
        scales = None if scales is None or scales.size == 0 else _full(scales, axes, [1.0] * r)
        sizes = ctx.const(3) if ctx.has_input(3) else None
        sizes = None if sizes is None or sizes.size == 0 else _full(sizes, axes, [float(d) for d in shape])
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if sizes is not None and not all(np.isfinite(d) and d >= 0 for d in sizes):
            raise ctx.unsupported(f"sizes {list(sizes)} must be finite and non-negative")
        if sizes is not None and policy != "stretch":
            if any(shape[a] == 0 for a in axes or range(r)):
                raise ctx.unsupported(f"keep_aspect_ratio_policy={policy!r} on an empty axis of {shape}")
            # one scale for every resized axis; sizes round half up (as onnxruntime and the spec do),
            # and the sampling grid uses that scale, not out/in per axis
            pick = min if policy == "not_larger" else max
            resized = set(axes or range(r))
            s = pick(sizes[a] / shape[a] for a in resized)
            sizes = [float(int(s * d + 0.5)) if a in resized else d for a, d in enumerate(shape)]
            scales = [s if a in resized else 1.0 for a in range(r)]
    if scales is not None and not all(np.isfinite(v) and v > 0 for v in scales):
        raise ctx.unsupported(f"scales {list(scales)} must be finite and positive")
    if sizes is not None:
        out = [int(d) for d in sizes]
        if scales is None or len(scales) != r:
            scales = [float(np.float32(o) / np.float32(d)) for o, d in zip(out, shape)]
    elif scales is not None and len(scales) == r:
        with np.errstate(over="ignore"):  # in float32, as onnxruntime sizes them
            wide = [np.floor(np.float32(d) * np.float32(s)) for d, s in zip(shape, scales)]
        if not all(np.isfinite(w) for w in wide):
            raise ctx.unsupported(f"scales {list(scales)} make an output size past float32's range")
        out = [int(w) for w in wide]
    else:
        raise ctx.unsupported(f"needs scales or sizes for all {r} axes")
    ctx.set_outputs(ctx.emit1("resize", [x], {
        "sizes": out, "scales": scales, "mode": mode, "coord": coord, "nearest": nearest,
        "cubic_a": float(ctx.attr("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(ctx.attr("exclude_outside", 0)),
        "antialias": antialias and min(scales) < 1, **crop}))
