"""Converters for elementwise math, activations, softmax and reductions: all keep the layout they are
given (axes remapped), so they never add a transpose."""

from __future__ import annotations

import numpy as np

from ...ops.prelu import channel_slope
from .layout import dropped
from .registry import TflContext, converter

_BINARY = {"ADD": "add", "SUB": "sub", "MUL": "mul", "DIV": "div", "MAXIMUM": "max", "MINIMUM": "min"}


@converter(*_BINARY)
def binary(ctx: TflContext) -> None:
    (a, b), perm = ctx.aligned([0, 1])
    ctx.set_output(ctx.fused(ctx.emit1("binary_f32", [a, b], {"kind": _BINARY[ctx.op.op]})), perm)


_ACT = {"RELU": ("relu", 0.0, 0.0), "RELU6": ("clip", 0.0, 6.0), "RELU_N1_TO_1": ("clip", -1.0, 1.0),
        "LOGISTIC": ("sigmoid", 0.0, 0.0), "TANH": ("tanh", 0.0, 0.0), "HARD_SWISH": ("hardswish", 0.0, 0.0)}


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
          "NEG": ["neg"], "FLOOR": ["floor"], "CEIL": ["ceil"], "ROUND": ["round"], "SQUARE": ["square"]}


@converter(*_UNARY)
def unary(ctx: TflContext) -> None:
    x = ctx.laid(0)
    kinds = _UNARY[ctx.op.op]
    y = x.value
    for i, kind in enumerate(kinds):
        y = ctx.emit1("unary", [y], {"kind": kind}, None if i == len(kinds) - 1 else f"{ctx.name}/{kind}")
    ctx.set_output(y, x.perm)


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


_REDUCE = {"MEAN": "mean", "SUM": "sum", "REDUCE_MAX": "max", "REDUCE_MIN": "min", "REDUCE_PROD": "prod"}


@converter(*_REDUCE)
def reduce(ctx: TflContext) -> None:
    x = ctx.laid(0)
    rank = len(x.perm)
    axes = sorted({int(a) % max(rank, 1) for a in ctx.const(1).reshape(-1)})
    keep = bool(ctx.options.get("KeepDims", False))
    y = ctx.emit1("reduce", [x.value], {"kind": _REDUCE[ctx.op.op], "keepdims": keep,
                                        "axes": sorted(x.ir_axis(a) for a in axes)})
    ctx.set_output(y, x.perm if keep else dropped(x.perm, axes))
