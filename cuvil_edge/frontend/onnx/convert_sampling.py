"""Converters for the sampling and vision ops of ``ops/sampling.py`` and ``ops/rearrange.py``: GridSample,
AffineGrid, RoiAlign, Col2Im, DeformConv, MaxUnpool and ReverseSequence, one IR node each.

A shape these ops take as an input (AffineGrid's size, Col2Im's image_shape, MaxUnpool's output_shape)
sets the output's shape, so it must be known at build time: a constant, or a run-time input whose output
the model declares statically (as Expand's run-time shape); the module then checks the value it is given
against that shape and traps on another."""

from __future__ import annotations

from ...ir.graph import Value
from ...ops.sampling import FLOATS
from .registry import ConvertContext, converter, int_list

#: GridSample's mode names before opset 20, and from it on -> the IR's
_GRID_MODES = {16: {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"},
               20: {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}}


def _shape_input(ctx: ConvertContext, i: int, what: str, declared: tuple[int, ...] | None) -> list[int]:
    """The shape input ``i`` gives: its constant value, else ``declared`` (what the model declares the
    output's shape to be, which the module checks the run-time value against)."""
    v = ctx.input(i)
    if v.type.dtype != "int64" or len(v.type.shape) != 1:
        raise ctx.unsupported(f"{what} (input {i}) of type {v.type}: int64[n] expected")
    if v.is_const:
        return int_list(v.const, f"{ctx.name}: {what}")
    if declared is None:
        raise ctx.not_constant(i, f"the model declares no static shape for output {ctx.proto.output[0]!r}, "
                                  f"so the {what} sets its size")
    return list(declared)


def _floats(ctx: ConvertContext, *values: Value) -> None:
    """Refuse, naming the dtype, inputs the float kernels do not take (float16 ones run as float32)."""
    bad = sorted({v.type.dtype for v in values} - FLOATS)
    if bad:
        raise ctx.unsupported(f"{', '.join(bad)} tensors (float32, float64 and float16 are supported)")


def _spatial_ints(ctx: ConvertContext, name: str, default: int, r: int, least: int) -> list[int]:
    """An int-list attribute with one value per spatial axis (pads: two), each at least ``least``."""
    n = 2 * r if name == "pads" else r
    got = [int(v) for v in ctx.attr(name, [default] * n)]
    if len(got) != n or any(v < least for v in got):
        raise ctx.unsupported(f"{name}={got}: needs {n} values, each at least {least}")
    return got


@converter("GridSample")
def grid_sample(ctx: ConvertContext) -> None:
    x, grid = ctx.input(0), ctx.input(1)
    _floats(ctx, x, grid)
    names = _GRID_MODES[20 if ctx.opset >= 20 else 16]
    mode, padding = ctx.attr("mode", next(iter(names))), ctx.attr("padding_mode", "zeros")
    if mode not in names:
        raise ctx.unsupported(f"mode {mode!r} (opset {ctx.opset} names {sorted(names)})")
    if padding not in ("zeros", "border", "reflection"):
        raise ctx.unsupported(f"padding_mode {padding!r}")
    r = len(x.type.shape) - 2
    if r < 1 or ctx.opset < 20 and r != 2:
        raise ctx.unsupported(f"input of rank {r + 2} (opset {ctx.opset} samples 4-D inputs"
                              f"{'' if ctx.opset < 20 else ' and N-D ones of rank 3 and up'})")
    ctx.set_outputs(ctx.emit1("grid_sample", [x, grid], {
        "mode": names[mode], "padding": padding, "align_corners": bool(ctx.attr("align_corners", 0))}))


@converter("AffineGrid")
def affine_grid(ctx: ConvertContext) -> None:
    theta = ctx.input(0)
    _floats(ctx, theta)
    r = theta.type.shape[1] if len(theta.type.shape) == 3 else 0
    if r not in (2, 3):
        raise ctx.unsupported(f"theta of shape {theta.type.shape}: (N, 2, 3) or (N, 3, 4) expected")
    declared = ctx.declared_shape()
    size = _shape_input(ctx, 1, "size", None if declared is None else (declared[0], 0, *declared[1:-1]))
    if len(size) != r + 2:
        raise ctx.unsupported(f"size {size} for a {r}-D theta of shape {theta.type.shape}")
    ctx.set_outputs(ctx.emit1("affine_grid", [theta, ctx.input(1)], {
        "size": size[2:], "align_corners": bool(ctx.attr("align_corners", 0))}))


@converter("RoiAlign")
def roi_align(ctx: ConvertContext) -> None:
    """Before opset 16 RoiAlign had no coordinate_transformation_mode and sampled as output_half_pixel
    does."""
    legacy = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    coord = ctx.attr("coordinate_transformation_mode", legacy)
    mode = ctx.attr("mode", "avg")
    if coord not in ("half_pixel", "output_half_pixel"):
        raise ctx.unsupported(f"coordinate_transformation_mode {coord!r}")
    if mode not in ("avg", "max"):
        raise ctx.unsupported(f"mode {mode!r}")
    ins = [ctx.input(0), ctx.input(1), ctx.input(2)]
    _floats(ctx, *ins[:2])
    if ins[2].type.dtype != "int64":
        raise ctx.unsupported(f"batch_indices of {ins[2].type.dtype} (int64 expected)")
    ctx.set_outputs(ctx.emit1("roi_align", ins, {
        "mode": mode, "half_pixel": coord == "half_pixel", "height": int(ctx.attr("output_height", 1)),
        "width": int(ctx.attr("output_width", 1)), "sampling_ratio": int(ctx.attr("sampling_ratio", 0)),
        "spatial_scale": float(ctx.attr("spatial_scale", 1.0))}))


@converter("Col2Im")
def col2im(ctx: ConvertContext) -> None:
    """The channel count comes from a constant block_shape, else from the declared output shape."""
    data = ctx.input(0)
    declared = ctx.declared_shape()
    image = _shape_input(ctx, 1, "image_shape", None if declared is None else declared[2:])
    block = ctx.input(2)
    r = len(image)
    if r < 1 or len(data.type.shape) != 3 or block.type.shape != (r,):
        raise ctx.unsupported(f"input {data.type} with image_shape {image} and block_shape {block.type}")
    if block.is_const:
        k = 1
        for b in int_list(block.const, f"{ctx.name}: block_shape"):
            k *= max(b, 1)
        channels = data.type.shape[1] // k
    elif declared is not None and len(declared) == r + 2:
        channels = declared[1]
    else:
        raise ctx.not_constant(2, "the model declares no static output shape to take the channel count from")
    ctx.set_outputs(ctx.emit1("col2im", [data, ctx.input(1), block], {
        "image": image, "channels": channels, "strides": _spatial_ints(ctx, "strides", 1, r, 1),
        "dilations": _spatial_ints(ctx, "dilations", 1, r, 1), "pads": _spatial_ints(ctx, "pads", 0, r, 0)}))


@converter("DeformConv")
def deform_conv(ctx: ConvertContext) -> None:
    x, w, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    r = len(x.type.shape) - 2
    if r != 2 or len(w.type.shape) != 4:
        raise ctx.unsupported(f"{r}-D input {x.type} (2-D is supported)")
    kernel = ctx.positive_ints("kernel_shape", w.type.shape[2:], 2)
    if tuple(kernel) != w.type.shape[2:]:
        raise ctx.unsupported(f"kernel_shape {kernel} differs from the weights' {w.type.shape[2:]}")
    ins: list[Value] = [x, w, offset] + [ctx.input(i) for i in (3, 4) if ctx.has_input(i)]
    _floats(ctx, *ins)
    ctx.set_outputs(ctx.emit1("deform_conv", ins, {
        "strides": ctx.positive_ints("strides", [1, 1], 2),
        "dilations": ctx.positive_ints("dilations", [1, 1], 2), "pads": _spatial_ints(ctx, "pads", 0, 2, 0),
        "group": int(ctx.attr("group", 1)), "offset_group": int(ctx.attr("offset_group", 1)),
        "bias": ctx.has_input(3), "mask": ctx.has_input(4)}))


@converter("MaxUnpool")
def max_unpool(ctx: ConvertContext) -> None:
    """The indices address the shape the pooling geometry gives; an output_shape (a constant, or declared)
    may add room after it along each axis."""
    x, ind = ctx.input(0), ctx.input(1)
    _floats(ctx, x)
    r = len(x.type.shape) - 2
    if r < 1 or ind.type.dtype != "int64":
        raise ctx.unsupported(f"input {x.type} with indices {ind.type} (N, C, spatial... and int64)")
    if ctx.attr("kernel_shape") is None:
        raise ctx.unsupported("kernel_shape is required")
    kernel = ctx.positive_ints("kernel_shape", [], r)
    strides = ctx.positive_ints("strides", [1] * r, r)
    pads = _spatial_ints(ctx, "pads", 0, r, 0)
    inferred = [*x.type.shape[:2], *((x.type.shape[2 + d] - 1) * strides[d] - pads[d] - pads[d + r]
                                     + kernel[d] for d in range(r))]
    if min(inferred[2:]) < 1:
        raise ctx.unsupported(f"kernel {kernel}, strides {strides}, pads {pads}: {x.type} unpools to "
                              f"{inferred}")
    ins = [x, ind]
    shape = inferred
    if ctx.has_input(2):
        shape = _shape_input(ctx, 2, "output_shape", ctx.declared_shape())
        ins.append(ctx.input(2))
        if len(shape) != r + 2 or any(s < i for s, i in zip(shape, inferred)) or shape[:2] != inferred[:2]:
            raise ctx.unsupported(f"output_shape {shape} smaller than the unpooled shape {inferred}")
    ctx.set_outputs(ctx.emit1("max_unpool", ins, {"shape": shape, "inferred": inferred}))


@converter("ReverseSequence")
def reverse_sequence(ctx: ConvertContext) -> None:
    x, lens = ctx.input(0), ctx.input(1)
    rank = len(x.type.shape)
    if rank < 2:
        raise ctx.unsupported(f"input of rank {rank} (2 or more)")
    axes = [ctx.axis(int(ctx.attr(name, default)), 2, name) for name, default in (("batch_axis", 1),
                                                                                  ("time_axis", 0))]
    if axes[0] == axes[1] or lens.type.dtype != "int64":
        raise ctx.unsupported(f"batch_axis {axes[0]} and time_axis {axes[1]} with sequence_lens {lens.type}")
    ctx.set_outputs(ctx.emit1("reverse_sequence", [x, lens], {"batch_axis": axes[0], "time_axis": axes[1]}))
