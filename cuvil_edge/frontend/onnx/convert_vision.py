"""Converters for vision-head ops: DepthToSpace/SpaceToDepth (one node each), Instance and Group
normalisation (layernorm over the group, then a per-channel affine), PRelu and the
activations with parameters (kernel family ``f32-act-param``)."""

from __future__ import annotations

import math

import numpy as np

from ...ir.graph import Value
from ...ops.prelu import channel_slope
from .registry import ConvertContext, converter


def _reshape(ctx: ConvertContext, v: Value, shape: list[int], tag: str) -> Value:
    return ctx.emit1("reshape", [v], {"shape": [int(d) for d in shape]}, name=f"{ctx.name}/{tag}")


@converter("DepthToSpace", "SpaceToDepth")
def depth_space(ctx: ConvertContext) -> None:
    """One ``depth_to_space`` / ``space_to_depth`` node (``ops/movement.py``), which checks the shape.
    SpaceToDepth's CRD mode (opset 28: depth c * k * k + i * k + j) is the 6-D block view's transpose."""
    k = int(ctx.attr("blocksize"))
    mode = ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise ctx.unsupported(f"mode {mode!r}")
    x = ctx.input(0)
    if ctx.op_type == "DepthToSpace":
        ctx.set_outputs(ctx.emit1("depth_to_space", [x], {"blocksize": k, "mode": mode}))
    elif mode == "DCR":
        ctx.set_outputs(ctx.emit1("space_to_depth", [x], {"blocksize": k}))
    else:
        if len(x.type.shape) != 4 or k < 1 or x.type.shape[2] % k or x.type.shape[3] % k:
            raise ctx.unsupported(f"SpaceToDepth block {k} on an input of shape {list(x.type.shape)}")
        n, c, h, w = x.type.shape
        blocks = _reshape(ctx, x, [n, c, h // k, k, w // k, k], "blocks")
        moved = ctx.emit1("transpose", [blocks], {"perm": [0, 1, 3, 5, 2, 4]}, name=f"{ctx.name}/crd")
        ctx.set_outputs(ctx.emit1("reshape", [moved], {"shape": [n, c * k * k, h // k, w // k]}))


def _channel_param(ctx: ConvertContext, i: int, channels: int, groups: int) -> Value:
    """Input ``i`` (a scale or bias) as one float32 per channel: a constant (one per group, as
    GroupNormalization-18 had them, repeated over the group's channels) or a run-time tensor."""
    v = ctx.input(i)
    if v.is_const and v.type.size in {channels, groups}:
        per_channel = np.repeat(v.const.astype(np.float32).reshape(-1), channels // v.type.size)
        return ctx.constant(per_channel, f"p{i}")
    if v.type.size != channels or v.type.dtype != "float32":
        raise ctx.unsupported(f"input {i} of type {v.type} for {channels} channels")
    return _reshape(ctx, v, [channels], f"p{i}")


def _group_norm(ctx: ConvertContext, x: Value, groups: int, eps: float) -> Value:
    """layernorm over each (n, group) block, then y = scale[c] * y + bias[c] (inputs 1 and 2)."""
    s = x.type.shape
    if len(s) < 2 or groups < 1 or s[1] % groups:
        raise ctx.unsupported(f"input of shape {s} does not split into {groups} channel groups")
    inner = math.prod(s[1:]) // groups
    flat = _reshape(ctx, x, [s[0] * groups, inner], "groups")
    ctx.materialise(8 * inner)
    ln = ctx.emit1("layernorm", [flat, ctx.constant(np.ones(inner, np.float32), "ones"),
                                 ctx.constant(np.zeros(inner, np.float32), "zeros")],
                   {"axis": 1, "eps": eps}, name=f"{ctx.name}/norm")
    y = _reshape(ctx, ln, list(s), "back")
    return ctx.emit1("channel_affine", [y, *(_channel_param(ctx, i, s[1], groups) for i in (1, 2))])


@converter("InstanceNormalization")
def instance_norm(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    if len(x.type.shape) < 2:
        raise ctx.unsupported(f"input of shape {x.type.shape} (N, C, ...) is required")
    ctx.set_outputs(_group_norm(ctx, x, x.type.shape[1], float(ctx.attr("epsilon", 1e-5))))


@converter("GroupNormalization")
def group_norm(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    if len(x.type.shape) < 2 or ctx.attr("num_groups") is None:
        raise ctx.unsupported(f"input of shape {x.type.shape} (N, C, ...) and num_groups are required")
    ctx.set_outputs(_group_norm(ctx, x, int(ctx.attr("num_groups")), float(ctx.attr("epsilon", 1e-5))))


@converter("PRelu")
def prelu(ctx: ConvertContext) -> None:
    """One ``prelu`` node when the slope is a float constant per channel (or one for all); else
    max(x, 0) + slope * min(x, 0)."""
    x, slope = ctx.input(0), ctx.input(1)
    r = len(x.type.shape)
    if slope.is_const and r > 2 and slope.type.shape == (x.type.shape[1],) != (x.type.shape[-1],):
        # a [C] slope that cannot broadcast from the right is per channel (PRelu before opset 7)
        slope = ctx.constant(slope.const.reshape([-1] + [1] * (r - 2)), "slope")
    per_channel = channel_slope(x.type.shape, slope.const) if slope.is_const and \
        x.type.dtype == "float32" else None
    if per_channel is not None:
        axis, flat = per_channel
        ctx.set_outputs(ctx.emit1("prelu", [x, ctx.constant(flat, "slope")], {"axis": axis}))
        return
    zero = ctx.constant(np.zeros((), x.type.dtype), "zero")
    pos = ctx.emit1("binary_f32", [x, zero], {"kind": "max"}, name=f"{ctx.name}/pos")
    neg = ctx.emit1("binary_f32", [x, zero], {"kind": "min"}, name=f"{ctx.name}/neg")
    neg = ctx.emit1("binary_f32", [neg, slope], {"kind": "mul"}, name=f"{ctx.name}/scaled")
    ctx.set_outputs(ctx.emit1("binary_f32", [pos, neg], {"kind": "add"}))


#: ONNX op -> (f32-act-param kind, attr a and its default, attr b and its default)
_PARAM_ACTS = {"Softplus": ("softplus", None, None), "Mish": ("mish", None, None),
         "Softsign": ("softsign", None, None), "Elu": ("elu", ("alpha", 1.0), None),
         "Celu": ("celu", ("alpha", 1.0), None),
         "Selu": ("selu", ("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
         "ThresholdedRelu": ("thresholdedrelu", ("alpha", 1.0), None),
         "Shrink": ("shrink", ("lambd", 0.5), ("bias", 0.0))}


@converter(*_PARAM_ACTS)
def param_act(ctx: ConvertContext) -> None:
    kind, a, b = _PARAM_ACTS[ctx.op_type]
    attrs = {"kind": kind, "a": float(ctx.attr(*a)) if a else 0.0, "b": float(ctx.attr(*b)) if b else 0.0}
    ctx.set_outputs(ctx.emit1("standalone_act", [ctx.input(0)], attrs))
