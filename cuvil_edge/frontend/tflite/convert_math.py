"""Converters for elementwise math, activations, softmax and reductions: all keep the layout they are
given (axes remapped), so they never add a transpose."""

from __future__ import annotations

import numpy as np

from ...ir.graph import Value
from ...ops.logic import REDUCE_LOOP, REDUCE_LOOP_DTYPES
from ...ops.prelu import channel_slope
from ..onnx.convert_math import emit_binary
from .layout import NCHW, Perm, dropped
from .registry import TflContext, converter

#: the StableHLO elementwise ops LiteRT runs (equal shapes, no fused activation) are the same math
_BINARY = {"ADD": "add", "SUB": "sub", "MUL": "mul", "DIV": "div", "MAXIMUM": "max", "MINIMUM": "min",
           "POW": "pow", "STABLEHLO_ADD": "add", "STABLEHLO_MULTIPLY": "mul", "STABLEHLO_MAXIMUM": "max",
           "STABLEHLO_MINIMUM": "min"}


def _operands(ctx: TflContext) -> tuple[Value, Value, Perm]:
    """Inputs 0 and 1 of a broadcasting op, in one layout."""
    (a, b), perm = ctx.aligned([0, 1])
    return a, b, perm


@converter(*_BINARY)
def binary(ctx: TflContext) -> None:
    """float32 on the vector kernels, integers at run time on ``binary_loop`` (the ONNX import's rule)."""
    a, b, perm = _operands(ctx)
    ctx.set_output(ctx.fused(emit_binary(ctx, _BINARY[ctx.op.op], a, b)), perm)


@converter("ADD_N")
def add_n(ctx: TflContext) -> None:
    """A left fold of ADDs (the inputs have one shape)."""
    vals, perm = ctx.aligned(range(len(ctx.op.inputs)))
    total = vals[0]
    for i, v in enumerate(vals[1:], 1):
        total = emit_binary(ctx, "add", total, v, None if i == len(vals) - 1 else f"{ctx.name}/{i}")
    ctx.set_output(total, perm)


@converter("SQUARED_DIFFERENCE")
def squared_difference(ctx: TflContext) -> None:
    a, b, perm = _operands(ctx)
    d = emit_binary(ctx, "sub", a, b, f"{ctx.name}/diff")
    ctx.set_output(emit_binary(ctx, "mul", d, d), perm)


@converter("FLOOR_MOD")
def floor_mod(ctx: TflContext) -> None:
    a, b, perm = _operands(ctx)
    ctx.set_output(_floor_mod(ctx, a, b), perm)


def _floor_mod(ctx: TflContext, a: Value, b: Value, name: str | None = None) -> Value:
    """a - floor(a / b) * b, the sign of the divisor: ``mod`` on integers; on floats C's fmod moved by b
    where it is non-zero and of the other sign (the IR's float ``mod`` is fmod only)."""
    if a.type.dtype != "float32":
        return ctx.emit1("mod", [a, b], {"fmod": 0}, name)
    r = ctx.emit1("mod", [a, b], {"fmod": 1}, f"{ctx.name}/fmod")
    zero = ctx.constant(np.float32(0), "zero")
    signs = [ctx.emit1("compare", [v, zero], {"kind": "lt"}, f"{ctx.name}/{tag}_neg")
             for v, tag in ((r, "r"), (b, "b"))]
    other = ctx.emit1("logic", signs, {"kind": "xor"}, f"{ctx.name}/other_sign")
    nonzero = ctx.emit1("logic", [ctx.emit1("compare", [r, zero], {"kind": "eq"}, f"{ctx.name}/r_zero")],
                        {"kind": "not"}, f"{ctx.name}/r_nonzero")
    move = ctx.emit1("logic", [other, nonzero], {"kind": "and"}, f"{ctx.name}/move")
    moved = emit_binary(ctx, "add", r, b, f"{ctx.name}/moved")
    return ctx.emit1("where", [move, moved, r], name=name)


@converter("FLOOR_DIV")
def floor_div(ctx: TflContext) -> None:
    """floor(a / b) on floats; on integers (a - floor_mod(a, b)) / b, which C's division then gives
    exactly."""
    a, b, perm = _operands(ctx)
    if a.type.dtype == "float32":
        q = emit_binary(ctx, "div", a, b, f"{ctx.name}/div")
        ctx.set_output(ctx.emit1("unary", [q], {"kind": "floor"}), perm)
        return
    m = _floor_mod(ctx, a, b, f"{ctx.name}/mod")
    ctx.set_output(emit_binary(ctx, "div", emit_binary(ctx, "sub", a, m, f"{ctx.name}/sub"), b), perm)


_ACT = {"RELU": ("relu", 0.0, 0.0), "RELU6": ("clip", 0.0, 6.0), "RELU_N1_TO_1": ("clip", -1.0, 1.0),
        "RELU_0_TO_1": ("clip", 0.0, 1.0), "LOGISTIC": ("sigmoid", 0.0, 0.0), "TANH": ("tanh", 0.0, 0.0),
        "HARD_SWISH": ("hardswish", 0.0, 0.0)}


@converter(*_ACT)
def activation(ctx: TflContext) -> None:
    x = ctx.laid(0)
    ctx.set_output(ctx.emit1("epilogue_act", [x.value], {"act": _ACT[ctx.op.op]}), x.perm)


@converter("LEAKY_RELU")
def leaky_relu(ctx: TflContext) -> None:
    x = ctx.laid(0)
    act = ("leakyrelu", float(ctx.options.get("Alpha", 0.2)), 0.0)
    ctx.set_output(ctx.emit1("epilogue_act", [x.value], {"act": act}), x.perm)


@converter("ELU")
def elu(ctx: TflContext) -> None:
    x = ctx.laid(0)
    ctx.set_output(ctx.emit1("standalone_act", [x.value], {"kind": "elu", "a": 1.0, "b": 0.0}), x.perm)


@converter("PRELU")
def prelu(ctx: TflContext) -> None:
    """One ``prelu`` node in x's layout when alpha is a constant per channel (or one for all); else
    max(x, 0) + alpha * min(x, 0), alpha broadcast like a binary operand."""
    src = ctx.laid(0)
    per_channel = channel_slope(src.shape, ctx.const(1)) if ctx.laid(1).value.is_const else None
    if per_channel is not None:
        axis, slope = per_channel
        y = ctx.emit1("prelu", [src.value, ctx.constant(slope, "slope")], {"axis": src.ir_axis(axis)})
        ctx.set_output(y, src.perm)
        return
    (x, alpha), perm = ctx.aligned([0, 1])
    pos = ctx.emit1("epilogue_act", [x], {"act": ("relu", 0.0, 0.0)}, f"{ctx.name}/pos")
    neg = ctx.emit1("binary_f32", [x, ctx.constant(np.float32(0), "zero")], {"kind": "min"},
                    f"{ctx.name}/neg")
    scaled = ctx.emit1("binary_f32", [neg, alpha], {"kind": "mul"}, f"{ctx.name}/scaled")
    ctx.set_output(ctx.emit1("binary_f32", [pos, scaled], {"kind": "add"}), perm)


_UNARY = {"EXP": ["exp"], "LOG": ["log"], "SQRT": ["sqrt"], "RSQRT": ["sqrt", "reciprocal"], "ABS": ["abs"],
          "NEG": ["neg"], "FLOOR": ["floor"], "CEIL": ["ceil"], "ROUND": ["round"], "SQUARE": ["square"],
          "SIN": ["sin"], "COS": ["cos"], "SIGN": ["sign"]}


@converter(*_UNARY)
def unary(ctx: TflContext) -> None:
    x = ctx.laid(0)
    kinds = _UNARY[ctx.op.op]
    y = x.value
    for i, kind in enumerate(kinds):
        y = ctx.emit1("unary", [y], {"kind": kind}, None if i == len(kinds) - 1 else f"{ctx.name}/{kind}")
    ctx.set_output(y, x.perm)


@converter("ATAN2")
def atan2(ctx: TflContext) -> None:
    """atan2(y, x) as std::atan2: atan(y / x) (x = +-0 gives +-inf, so +-pi/2), then +-pi (y's sign) where
    x is negative, signs read from the bits (a ``bitcast`` view: -0 counts); y = +-0 is kept as it is
    before that move, so the signed zeros and +-pi come out as std::atan2's. Both operands infinite give
    NaN (std::atan2: a multiple of pi/4). float32: the unary kernels' type."""
    (y, x), perm = ctx.aligned([0, 1])
    if {y.type.dtype, x.type.dtype} != {"float32"}:
        raise ctx.unsupported(f"ATAN2 of {y.type.dtype} and {x.type.dtype} (float32 only)")
    zero = ctx.constant(np.float32(0), "zero")

    def negative(v: Value, tag: str) -> Value:
        bits = ctx.emit1("bitcast", [v], {"to": "int32"}, f"{ctx.name}/{tag}_bits")
        return ctx.emit1("compare", [bits, ctx.constant(np.int32(0), "zero_bits")], {"kind": "lt"},
                         f"{ctx.name}/{tag}_negative")

    angle = ctx.emit1("unary", [emit_binary(ctx, "div", y, x, f"{ctx.name}/ratio")], {"kind": "atan"},
                      f"{ctx.name}/atan")
    y_zero = [ctx.emit1("compare", [y, zero], {"kind": "eq"}, f"{ctx.name}/y_zero"),
              ctx.emit1("compare", [x, x], {"kind": "eq"}, f"{ctx.name}/x_number")]  # NaN stays NaN
    angle = ctx.emit1("where", [ctx.emit1("logic", y_zero, {"kind": "and"}, f"{ctx.name}/keep_y"), y, angle],
                      name=f"{ctx.name}/signed_zero")
    turn = ctx.emit1("where", [negative(y, "y"), ctx.constant(np.float32(-np.pi), "minus_pi"),
                               ctx.constant(np.float32(np.pi), "pi")], name=f"{ctx.name}/turn")
    moved = emit_binary(ctx, "add", angle, turn, f"{ctx.name}/moved")
    ctx.set_output(ctx.emit1("where", [negative(x, "x"), moved, angle]), perm)


@converter("SOFTMAX", "LOG_SOFTMAX")
def softmax(ctx: TflContext) -> None:
    """Over the last TFLite axis, wherever the layout put it; ``beta`` scales the logits first."""
    x = ctx.laid(0)
    v = x.value
    beta = float(ctx.options.get("Beta", 1.0))
    if beta != 1.0:
        v = ctx.emit1("binary_f32", [v, ctx.constant(np.float32(beta), "beta")], {"kind": "mul"},
                      f"{ctx.name}/beta")
    y = ctx.emit1("softmax", [v], {"axis": x.ir_axis(-1), "log": ctx.op.op == "LOG_SOFTMAX"})
    ctx.set_output(y, x.perm)


#: REDUCE_ANY / REDUCE_ALL are max / min of bools
_REDUCE = {"MEAN": "mean", "SUM": "sum", "REDUCE_MAX": "max", "REDUCE_MIN": "min", "REDUCE_PROD": "prod",
           "REDUCE_ANY": "max", "REDUCE_ALL": "min"}


@converter(*_REDUCE)
def reduce(ctx: TflContext) -> None:
    """float32 on the vector ``reduce`` kernels; integers and bools at run time on ``reduce_loop``."""
    x = ctx.laid(0)
    rank = len(x.perm)
    axes = sorted({int(a) % max(rank, 1) for a in ctx.const(1).reshape(-1)})
    keep = bool(ctx.options.get("KeepDims", False))
    kind, dtype = _REDUCE[ctx.op.op], x.value.type.dtype
    op = "reduce"
    if dtype != "float32" and not x.value.is_const:
        if kind not in REDUCE_LOOP or dtype not in REDUCE_LOOP_DTYPES:
            raise ctx.unsupported(f"{ctx.op.op} on {dtype} at run time")
        op = "reduce_loop"
    y = ctx.emit1(op, [x.value], {"kind": kind, "keepdims": keep, "axes": sorted(x.ir_axis(a) for a in axes)})
    ctx.set_output(y, x.perm if keep else dropped(x.perm, axes))


@converter("GELU")
def gelu(ctx: TflContext) -> None:
    x = ctx.laid(0)
    approx = "tanh" if ctx.options.get("Approximate") else "none"
    ctx.set_output(ctx.emit1("gelu", [x.value], {"approximate": approx}), x.perm)


@converter("L2_NORMALIZATION")
def l2_normalization(ctx: TflContext) -> None:
    """x / sqrt(max(sum(x^2), 1e-6)) over the last axis, LiteRT's epsilon."""
    x = ctx.laid(0)
    axis = x.ir_axis(-1)
    sq = ctx.emit1("reduce", [x.value], {"kind": "sumsquare", "keepdims": True, "axes": [axis]},
                   f"{ctx.name}/sumsq")
    floor = ctx.emit1("binary_f32", [sq, ctx.constant(np.float32(1e-6), "eps")], {"kind": "max"},
                      f"{ctx.name}/eps")
    norm = ctx.emit1("unary", [floor], {"kind": "sqrt"}, f"{ctx.name}/norm")
    ctx.set_output(ctx.fused(emit_binary(ctx, "div", x.value, norm)), x.perm)


@converter("LOCAL_RESPONSE_NORMALIZATION")
def local_response_normalization(ctx: TflContext) -> None:
    """Over NHWC channels on NCHW: TFLite sums 2 * radius + 1 channels and scales by alpha itself, the IR
    (ONNX's LRN) by alpha / size."""
    o = ctx.options
    size = 2 * int(o["Radius"]) + 1
    y = ctx.emit1("lrn", [ctx.nchw(0)], {"size": size, "alpha": float(o["Alpha"]) * size,
                                          "beta": float(o["Beta"]), "bias": float(o["Bias"])})
    ctx.set_output(y, NCHW)


def fake_quant_nudged(lo: float, hi: float, num_bits: int) -> tuple[float, float, float]:
    """(scale, nudged min, nudged max) as LiteRT's kernel computes them, in float32: the range moved so
    that zero is one of the levels."""
    f32 = np.float32
    qmin, qmax = f32(0), f32((1 << num_bits) - 1)
    scale = (f32(hi) - f32(lo)) / (qmax - qmin)
    zero_from_min = qmin - f32(lo) / scale
    down = np.floor(zero_from_min)
    rounded = down + f32(zero_from_min - down >= f32(0.5))  # std::round: halves away from zero
    zero = qmin if zero_from_min < qmin else qmax if zero_from_min > qmax else rounded
    return float(scale), float((qmin - zero) * scale), float((qmax - zero) * scale)


@converter("FAKE_QUANT")
def fake_quant(ctx: TflContext) -> None:
    """x clamped to the nudged range and rounded to its 2^num_bits levels (training-time quantization
    kept in a float model): round(shifted / scale) * scale + nudged min, the rounding half away from
    zero as LiteRT's (the shifted value is never negative, so floor plus one where the fraction is at
    least a half; the IR's ``round`` rounds half to even); NaN gives
    the nudged min, as std::max does there."""
    x = ctx.laid(0)
    if x.value.type.dtype != "float32":
        raise ctx.unsupported(f"FAKE_QUANT of {x.value.type.dtype} (float32 only)")
    bits = int(ctx.options["NumBits"])
    lo, hi = float(ctx.options["Min"]), float(ctx.options["Max"])
    if not 2 <= bits <= 16 or not np.isfinite([lo, hi]).all() or not lo < hi:
        raise ctx.unsupported(f"num_bits {bits} (2-16) and range [{lo}, {hi}] (finite, min < max)")
    if ctx.options.get("NarrowRange", False):  # LiteRT refuses it too (weights only)
        raise ctx.unsupported("narrow_range (LiteRT runs FAKE_QUANT without it only)")
    scale, nmin, nmax = fake_quant_nudged(lo, hi, bits)
    n = ctx.name

    def const(v: float, tag: str) -> Value:
        return ctx.constant(np.float32(v), tag)

    def exact(kind: str, a: Value, b: Value, tag: str | None) -> Value:
        """One rounding step as LiteRT's, which no pass merges into an affine with its neighbour."""
        return ctx.emit1("binary_f32", [a, b], {"kind": kind, "exact": True}, tag and f"{n}/{tag}")

    number = ctx.emit1("compare", [x.value, x.value], {"kind": "eq"}, f"{n}/number")
    real = ctx.emit1("where", [number, x.value, const(nmin, "nan_to")], {}, f"{n}/real")
    clamped = ctx.emit1("epilogue_act", [real], {"act": ("clip", nmin, nmax)}, f"{n}/clamped")
    shifted = exact("sub", clamped, const(nmin, "nudged_min"), "shifted")
    levels = exact("mul", shifted, const(1.0 / np.float32(scale), "inv_scale"), "levels")
    down = ctx.emit1("unary", [levels], {"kind": "floor"}, f"{n}/floor")
    frac = emit_binary(ctx, "sub", levels, down, f"{n}/frac")
    up = ctx.emit1("compare", [frac, const(0.5, "half")], {"kind": "ge"}, f"{n}/up")
    rounded = emit_binary(ctx, "add", down, ctx.cast(up, "float32", "up_f32"), f"{n}/rounded")
    scaled = exact("mul", rounded, const(scale, "scale"), "scaled")
    ctx.set_output(exact("add", scaled, const(nmin, "nudged_min"), None), x.perm)
