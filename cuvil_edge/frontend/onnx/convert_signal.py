"""Converters for the signal ops: DFT (opset 17: axis attribute; 20: axis input), STFT (frames gathered,
windowed, transformed), MelWeightMatrix and the Hann, Hamming and Blackman windows (constants made here:
their sizes are build-time inputs), and the Lp ops: LpNormalization (a reduction and a division) and
LpPool (a sum pool between powers); plus Det."""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedOperator
from ...ir.graph import Value
from ...ir.limits import check_shape
from .convert_math import emit_binary
from .convert_pool import pool
from .importer import np_dtype_of_onnx
from .registry import ConvertContext, converter

#: window name -> its samples from n / N (numpy float64), N the size (periodic) or size - 1 (symmetric)
WINDOWS = {
    "HannWindow": lambda r: np.sin(np.pi * r) ** 2,
    "HammingWindow": lambda r: 25 / 46 - 21 / 46 * np.cos(2 * np.pi * r),
    "BlackmanWindow": lambda r: 0.42 - 0.5 * np.cos(2 * np.pi * r) + 0.08 * np.cos(4 * np.pi * r),
}


def _int_input(ctx: ConvertContext, i: int, what: str, least: int) -> int:
    """Input i's one build-time integer, at least ``least`` (a length, a step, a count)."""
    v = ctx.scalar(i, what)
    if np.asarray(v).dtype.kind not in "iu" or int(v) < least:
        raise ctx.unsupported(f"the {what} (input {i}) is {v!r}: an integer of at least {least} is needed")
    return int(v)


def _output_dtype(ctx: ConvertContext) -> str:
    """The ``output_datatype`` attribute (default float) as an IR dtype."""
    code = int(ctx.attr("output_datatype", 1))
    try:
        return np_dtype_of_onnx(code)
    except UnsupportedOperator:
        raise ctx.unsupported(f"output_datatype={code}") from None


def _transform(ctx: ConvertContext, x: Value, axis: int, length: int, inverse: bool, onesided: bool) -> Value:
    """One IR ``dft`` of ``x`` ([..., 1 or 2]) along ``axis`` (its element types: ``dft``'s ``dtypes``),
    refused by name for another last dim, and for a one-sided forward transform of a complex signal
    (whose bins mirror nothing: ONNX defines it for real input only)."""
    if len(x.type.shape) < 2 or x.type.shape[-1] not in (1, 2):
        raise ctx.unsupported(f"input of shape {x.type.shape}: the last dim must be 1 (real) or 2 (complex)")
    if onesided and not inverse and x.type.shape[-1] == 2:
        raise ctx.unsupported("onesided=1 on a complex signal (one-sided output is for real input only)")
    ctx.materialise(2 * length * 8)  # the double cos and sin tables the emitter packs
    return ctx.emit1("dft", [x], {"axis": axis, "length": length, "inverse": inverse, "onesided": onesided})


@converter("DFT")
def dft(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    rank = len(x.type.shape)
    if ctx.opset < 20:
        axis = ctx.attr("axis", 1)
    else:
        axis = ctx.scalar(2, "axis") if ctx.has_input(2) else -2
    axis = ctx.axis(axis, rank)
    if axis == rank - 1:
        raise ctx.unsupported(f"axis {axis} is the last (real/imaginary) dim")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    n = x.type.shape[axis]
    if ctx.has_input(1):
        length = _int_input(ctx, 1, "dft_length", 1)
    else:  # an inverse one-sided DFT of n bins is a real signal of 2 (n - 1) points
        length = 2 * (n - 1) if inverse and onesided else n
        if length < 1:
            raise ctx.unsupported(f"a DFT of length {length} (axis {axis} of {x.type.shape})")
    ctx.set_outputs(_transform(ctx, x, axis, length, inverse, onesided))


@converter("STFT")
def stft(ctx: ConvertContext) -> None:
    """[batch, signal, 1 or 2] -> [batch, frames, bins, 2]: frame f is points f * step .. + frame_length - 1
    (one gather by build-time indices), times the window, through a DFT of the frame length."""
    x = ctx.input(0)
    if len(x.type.shape) != 3:
        raise ctx.unsupported(f"signal of shape {x.type.shape} (needs [batch, length, 1 or 2])")
    step = _int_input(ctx, 1, "frame_step", 1)
    window = ctx.input(2) if ctx.has_input(2) else None
    if window is not None and len(window.type.shape) != 1:
        raise ctx.unsupported(f"window of shape {window.type.shape} (needs one dim)")
    if ctx.has_input(3):
        length = _int_input(ctx, 3, "frame_length", 1)
    else:
        length = x.type.shape[1] if window is None else window.type.shape[0]
    if window is not None and window.type.shape[0] != length:
        raise ctx.unsupported(f"window of {window.type.shape[0]} points for frames of {length}")
    frames = (x.type.shape[1] - length) // step + 1
    if length < 1 or frames < 1:
        raise ctx.unsupported(f"frames of {length} points from a signal of {x.type.shape[1]}")
    check_shape((frames, length), f"node {ctx.name!r}: frame indices")
    ctx.materialise(frames * length * 8)
    starts = np.arange(frames, dtype=np.int64)[:, None] * step
    at = ctx.constant(starts + np.arange(length, dtype=np.int64)[None, :], "frames")
    framed = ctx.emit1("gather", [x, at], {"axis": 1}, name=f"{ctx.name}/frames")
    if window is not None:
        column = ctx.emit1("reshape", [window], {"shape": [length, 1]}, name=f"{ctx.name}/window")
        framed = emit_binary(ctx, "mul", framed, column, name=f"{ctx.name}/windowed")
    ctx.set_outputs(_transform(ctx, framed, 2, length, False, bool(ctx.attr("onesided", 1))))


@converter("MelWeightMatrix")
def mel_weight_matrix(ctx: ConvertContext) -> None:
    """A constant [dft_length / 2 + 1, num_mel_bins] of triangles, as the ONNX reference makes it: every
    input must be known at build time."""
    mels = _int_input(ctx, 0, "num_mel_bins", 1)
    dft_length = _int_input(ctx, 1, "dft_length", 1)
    rate = _int_input(ctx, 2, "sample_rate", 1)
    lower, upper = ctx.scalar(3, "lower_edge_hertz"), ctx.scalar(4, "upper_edge_hertz")
    dtype = _output_dtype(ctx)
    bins = dft_length // 2 + 1
    check_shape((bins, mels), f"node {ctx.name!r}")
    ctx.materialise(bins * mels * 8)
    with np.errstate(all="ignore"):  # edges below -700 Hz or past float range: refused below
        low, high = (2595 * np.log1p(f / 700) / np.log(10) for f in (lower, upper))
        points = np.arange(mels + 2) * ((high - low) / (mels + 2)) + low
        at = ((dft_length + 1) * (700 * np.expm1(points / 2595 * np.log(10)))) // rate
    if not np.isfinite(at).all() or at.min() < 0 or at.max() >= bins:
        raise ctx.unsupported(f"mel edges from {lower} to {upper} Hz fall outside the {bins} bins of a "
                              f"{dft_length}-point DFT at {rate} Hz")
    edges = at.astype(np.int64)
    out = np.zeros((bins, mels))
    for i, (left, centre, right) in enumerate(zip(edges, edges[1:], edges[2:])):
        if centre == left:
            out[centre, i] = 1
        else:
            out[left:centre + 1, i] = (np.arange(left, centre + 1) - left) / (centre - left)
        if right > centre:
            out[centre:right, i] = (right - np.arange(centre, right)) / (right - centre)
    ctx.set_outputs(ctx.constant(out.astype(dtype), "mel"))


@converter(*WINDOWS)
def window(ctx: ConvertContext) -> None:
    """A constant window of ``size`` (a build-time input) points; periodic (default) divides by the size,
    symmetric by size - 1."""
    size = _int_input(ctx, 0, "size", 1)
    periodic = bool(ctx.attr("periodic", 1))
    if size == 1 and not periodic:
        raise ctx.unsupported("a symmetric window of one point (it divides by size - 1 = 0)")
    dtype = _output_dtype(ctx)
    check_shape((size,), f"node {ctx.name!r}")
    ctx.materialise(size * 8)
    ramp = np.arange(size, dtype=np.float64) / (size if periodic else size - 1)
    ctx.set_outputs(ctx.constant(WINDOWS[ctx.op_type](ramp).astype(dtype), "window"))


@converter("Det")
def det(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    if len(x.type.shape) < 2 or x.type.shape[-1] != x.type.shape[-2]:
        raise ctx.unsupported(f"input of shape {x.type.shape} (needs [..., M, M])")
    ctx.set_outputs(ctx.emit1("det", [x]))


def _float32(ctx: ConvertContext, x: Value) -> None:
    """The Lp ops run on the float32 kernels (a constant input folds whatever its type)."""
    if x.type.dtype != "float32" and not x.is_const:
        raise ctx.unsupported(f"{ctx.op_type} of {x.type.dtype} at run time (float32 only)")


@converter("LpNormalization")
def lp_normalization(ctx: ConvertContext) -> None:
    """x / ||x||_p along the axis (p 1 or 2); a zero norm gives zeros, as onnxruntime and the reference do
    (x is then all zeros, divided by 1)."""
    x = ctx.input(0)
    _float32(ctx, x)
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.unsupported(f"p={p} (1 and 2 are defined)")
    axis = ctx.axis(ctx.attr("axis", -1), len(x.type.shape))
    norm = ctx.emit1("reduce", [x], {"kind": f"l{p}", "axes": [axis], "keepdims": True},
                     name=f"{ctx.name}/norm")
    zero = ctx.emit1("compare", [norm, ctx.constant(np.zeros((), x.type.dtype), "zero")], {"kind": "eq"},
                     name=f"{ctx.name}/zero")
    safe = ctx.emit1("where", [zero, ctx.constant(np.ones((), x.type.dtype), "one"), norm],
                     name=f"{ctx.name}/divisor")
    ctx.set_outputs(emit_binary(ctx, "div", x, safe))


@converter("LpPool")
def lp_pool(ctx: ConvertContext) -> None:
    """(sum over the window of |x|^p)^(1/p): padding adds nothing, so a sum pool (the average kernel with
    divisors of one) between the two powers."""
    x = ctx.input(0)
    _float32(ctx, x)
    p = float(ctx.attr("p", 2))
    if not p > 0 or not math.isfinite(p):
        raise ctx.unsupported(f"p={p} (needs a positive number)")
    powered = x if p == 2 else ctx.emit1("unary", [x], {"kind": "abs"}, name=f"{ctx.name}/abs")
    if p != 1:
        exponent = ctx.constant(np.asarray(p, x.type.dtype), "p")
        powered = emit_binary(ctx, "pow", powered, exponent, name=f"{ctx.name}/pow")
    total = pool(ctx, "sum", powered, name=None if p == 1 else f"{ctx.name}/sum")
    if p == 2:
        total = ctx.emit1("unary", [total], {"kind": "sqrt"})
    elif p != 1:
        total = emit_binary(ctx, "pow", total, ctx.constant(np.asarray(1 / p, x.type.dtype), "inv_p"))
    ctx.set_outputs(total)
