"""Converters for the NN core: CONV_2D, CONV_3D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, CONV_3D_TRANSPOSE,
FULLY_CONNECTED, BATCH_MATMUL, pooling (L2 too). Spatial ops run NCHW (NCDHW); their NHWC weights are re-laid
here, at build time."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...ir.graph import Value
from ..padding import same_pads
from .convert_tensor import int_values
from .layout import NCHW, flat_order
from .registry import TflContext, converter

#: tflite Padding enum
SAME, VALID = 0, 1


def _pads(ctx: TflContext, spatial: tuple[int, ...], kernel: list[int], strides: list[int],
          dilations: list[int], padding: int | None = None) -> list[int]:
    """Explicit [begins..., ends...]: TFLite SAME puts the odd unit at the end. ``padding`` defaults to
    the operator's ``Padding`` option."""
    if padding is None:
        padding = int(ctx.options.get("Padding", VALID))
    if padding == VALID:
        return [0] * 2 * len(spatial)
    if padding != SAME:
        raise ctx.unsupported(f"padding {padding}")
    return same_pads(spatial, kernel, strides, dilations)


def _at_least_1(ctx: TflContext, *keys: str, required: bool = False) -> list[int]:
    """Options that divide or size (strides, dilations, filter sizes): each at least 1 (1 when absent,
    unless ``required``), else refused."""
    got = [int(ctx.options[k] if required else ctx.options.get(k, 1)) for k in keys]
    if min(got) < 1:
        raise ctx.unsupported(f"{dict(zip(keys, got))}: each must be at least 1")
    return got


def _strides(ctx: TflContext) -> list[int]:
    return _at_least_1(ctx, "StrideH", "StrideW")


def _dilations(ctx: TflContext) -> list[int]:
    return _at_least_1(ctx, "DilationHFactor", "DilationWFactor")


def _const_rank(ctx: TflContext, i: int, rank: int) -> np.ndarray:
    """Constant input i (weights), which must have ``rank`` dims."""
    w = ctx.const(i)
    if w.ndim != rank:
        raise ctx.unsupported(f"input {i} has shape {w.shape}, not {rank}D")
    return w


def _conv(ctx: TflContext, to_oihw: Callable[[np.ndarray], np.ndarray], group: int) -> None:
    x = ctx.nchw(0)
    w = ctx.weight(1, to_oihw, "w")
    ins = [x, w]
    if ctx.has_input(2):
        ins.append(ctx.input(2))
    kernel, strides, dilations = list(w.type.shape[2:]), _strides(ctx), _dilations(ctx)
    y = ctx.emit1("conv", ins, dict(strides=strides, dilations=dilations, group=group,
                                    pads=_pads(ctx, x.type.shape[2:], kernel, strides, dilations)))
    ctx.set_output(ctx.fused(y), NCHW)


@converter("CONV_2D")
def conv(ctx: TflContext) -> None:
    w = _const_rank(ctx, 1, 4)  # [O, KH, KW, I/groups]
    cin = ctx.nchw(0).type.shape[1]
    if not w.shape[3] or cin % w.shape[3]:
        raise ctx.unsupported(f"{cin} input channels do not split into groups of {w.shape[3]}")
    _conv(ctx, lambda a: a.transpose(0, 3, 1, 2), cin // w.shape[3])


@converter("DEPTHWISE_CONV_2D")
def depthwise_conv(ctx: TflContext) -> None:
    w = _const_rank(ctx, 1, 4)  # [1, KH, KW, C * multiplier]
    cin = ctx.nchw(0).type.shape[1]
    if not cin or w.shape[3] % cin:
        raise ctx.unsupported(f"{w.shape[3]} output channels are not a multiple of {cin} input channels")
    _conv(ctx, lambda a: a.transpose(3, 0, 1, 2), cin)


@converter("TRANSPOSE_CONV")
def transpose_conv(ctx: TflContext) -> None:
    """Inputs: output shape, weights [O, KH, KW, I], x, optional bias."""
    deconv(ctx, x=2, w=1, bias=3, out_shape=int_values(ctx.const(0)), strides=_strides(ctx),
           padding=int(ctx.options.get("Padding", VALID)))


@converter("CONV_3D_TRANSPOSE")
def conv_3d_transpose(ctx: TflContext) -> None:
    """Inputs: output shape, weights [KD, KH, KW, O, I], x, optional bias (Conv3DOptions)."""
    deconv(ctx, x=2, w=1, bias=3, out_shape=int_values(ctx.const(0)),
           strides=_at_least_1(ctx, "StrideD", "StrideH", "StrideW"),
           padding=int(ctx.options.get("Padding", VALID)),
           dilations=_at_least_1(ctx, "DilationDFactor", "DilationHFactor", "DilationWFactor"))


#: NDHWC tensor -> NCDHW value
NCDHW = (0, 4, 1, 2, 3)
#: by rank: the channels-first layout a deconvolution runs in, and its TFLite weights -> the IR's [I, O, k...]
#: (TRANSPOSE_CONV's [O, KH, KW, I], CONV_3D_TRANSPOSE's [KD, KH, KW, O, I])
_DECONV = {4: (NCHW, (3, 0, 1, 2)), 5: (NCDHW, (4, 3, 0, 1, 2))}


def deconv(ctx: TflContext, x: int, w: int, bias: int, out_shape: list[int], strides: list[int],
           padding: int, dilations: list[int] | None = None) -> None:
    """A TFLite-style deconvolution (inputs ``x``, weights and an optional ``bias`` by index) to the
    channels-last ``out_shape`` (4-D or 5-D); SAME pads split as in _pads. Shared with custom ops of the
    same meaning (MediaPipe's ``Convolution2DTransposeBias``)."""
    if len(out_shape) not in _DECONV or len(ctx.laid(x).perm) != len(out_shape):
        raise ctx.unsupported(f"output shape {out_shape} for input {ctx.laid(x).shape}: both NHWC or NDHWC")
    layout, order = _DECONV[len(out_shape)]
    kernel = list(_const_rank(ctx, w, len(out_shape)).transpose(order).shape[2:])
    dilations = dilations or [1] * len(kernel)
    xv = ctx.input(x, layout)
    pads = _pads(ctx, tuple(out_shape[1:-1]), kernel, strides, dilations, padding)
    # output_padding makes the deconvolution reach exactly the declared output size
    n = len(kernel)
    extra = [o - ((i - 1) * s + (k - 1) * d + 1 - p0 - p1) for o, i, s, k, d, p0, p1 in
             zip(out_shape[1:-1], xv.type.shape[2:], strides, kernel, dilations, pads[:n], pads[n:])]
    if any(e < 0 for e in extra):
        raise ctx.unsupported(f"output shape {out_shape} is smaller than the deconvolution gives")
    ins = [xv, ctx.weight(w, lambda a: a.transpose(order), "w")]
    if ctx.has_input(bias):
        ins.append(ctx.input(bias))
    y = ctx.emit1("conv_transpose", ins, dict(strides=strides, dilations=dilations, pads=pads,
                                              output_padding=extra, group=1))
    ctx.set_output(ctx.fused(y), layout)


@converter("FULLY_CONNECTED")
def fully_connected(ctx: TflContext) -> None:
    """y = x @ W.T + b over the last axis (x flattened to rows of W's width unless keep_num_dims)."""
    w = _const_rank(ctx, 1, 2)  # [O, I]
    n_in = w.shape[1]
    held = ctx.held(0, flat_ok=True)
    if held.flat_of is not None and held.value.type.shape[1] == n_in:  # a flatten kept in IR order
        order = flat_order(held.flat_of)
        x = ctx.real(0, held)
        wt = ctx.weight(1, lambda a: a[:, order].T, "w")
    else:
        x = ctx.input(0)
        wt = ctx.weight(1, lambda a: a.T, "w")
    if not n_in or x.type.size % n_in:
        raise ctx.unsupported(f"input {x.type.shape} does not split into rows of {n_in}")
    rows = x if x.type.shape == (x.type.size // n_in, n_in) else \
        ctx.emit1("reshape", [x], {"shape": [x.type.size // n_in, n_in]}, f"{ctx.name}/rows")
    ins = [rows, wt]
    if ctx.has_input(2):
        ins.append(ctx.constant(ctx.const(2).astype(np.float32), "bias"))
    y = ctx.fused(ctx.emit1("gemm", ins, name=f"{ctx.name}/gemm"))
    if ctx.options.get("KeepNumDims"):
        y = ctx.emit1("reshape", [y], {"shape": [*x.type.shape[:-1], w.shape[0]]})
    ctx.set_output(y)


@converter("BATCH_MATMUL")
def batch_matmul(ctx: TflContext) -> None:
    """A constant 2-D B applied over the channels of a channels-first value (a conv output) is a 1x1
    convolution, which keeps that layout; else in TFLite order."""
    src = ctx.laid(0)
    rank = len(src.perm)
    if rank in (3, 4) and src.perm[:2] == (0, rank - 1) and not ctx.options.get("AdjX") and \
            ctx.laid(1).value.is_const and len(ctx.laid(1).perm) == 2:
        spatial = rank - 2
        out_in = (lambda m: m) if ctx.options.get("AdjY") else (lambda m: m.T)  # B as [N, K]
        w = ctx.weight(1, lambda m: out_in(m).reshape(*out_in(m).shape, *[1] * spatial), "w")
        y = ctx.emit1("conv", [src.value, w], dict(strides=[1] * spatial, dilations=[1] * spatial, group=1,
                                                   pads=[0] * 2 * spatial))
        ctx.set_output(y, src.perm)
        return
    a, b = ctx.input(0), ctx.input(1)
    if ctx.options.get("AdjX"):
        a = ctx.emit1("transpose", [a], {"perm": _swap_last(a.type.shape)}, f"{ctx.name}/adj_x")
    adj_y = bool(ctx.options.get("AdjY"))
    if adj_y and b.is_const:
        b = ctx.emit1("transpose", [b], {"perm": _swap_last(b.type.shape)}, f"{ctx.name}/adj_y")
    if b.is_const and len(b.type.shape) == 2:
        batch = a.type.shape[:-1]
        rows = ctx.emit1("reshape", [a], {"shape": [math.prod(batch), a.type.shape[-1]]}, f"{ctx.name}/rows")
        y = ctx.emit1("gemm", [rows, b], name=f"{ctx.name}/gemm")
        y = ctx.emit1("reshape", [y], {"shape": [*batch, b.type.shape[1]]})
    else:
        y = ctx.emit1("matmul", [a, b], {"trans_b": adj_y and not b.is_const})
    ctx.set_output(y)


def _swap_last(shape: tuple[int, ...]) -> list[int]:
    r = len(shape)
    return [*range(r - 2), r - 1, r - 2]


def _pool(ctx: TflContext, kind: str) -> None:
    ctx.set_output(ctx.fused(_window(ctx, ctx.nchw(0), kind)), NCHW)


def _window(ctx: TflContext, x: Value, kind: str, name: str | None = None) -> Value:
    """The operator's pooling windows over NCHW ``x`` (padding never counted in an average)."""
    kernel = _at_least_1(ctx, "FilterHeight", "FilterWidth", required=True)
    strides = _strides(ctx)
    return ctx.emit1("pool", [x], dict(kind=kind, kernel=kernel, strides=strides, dilations=[1, 1],
                                       pads=_pads(ctx, x.type.shape[2:], kernel, strides, [1, 1]),
                                       ceil_mode=0, count_include_pad=0), name)


@converter("MAX_POOL_2D")
def max_pool(ctx: TflContext) -> None:
    _pool(ctx, "max")


@converter("AVERAGE_POOL_2D")
def average_pool(ctx: TflContext) -> None:
    _pool(ctx, "avg")


@converter("L2_POOL_2D")
def l2_pool(ctx: TflContext) -> None:
    """The root of each window's mean square."""
    sq = ctx.emit1("unary", [ctx.nchw(0)], {"kind": "square"}, f"{ctx.name}/square")
    mean = _window(ctx, sq, "avg", f"{ctx.name}/mean")
    ctx.set_output(ctx.fused(ctx.emit1("unary", [mean], {"kind": "sqrt"})), NCHW)


@converter("CONV_3D")
def conv_3d(ctx: TflContext) -> None:
    """On NCDHW; weights [KD, KH, KW, I/groups, O] re-laid to OIDHW at build time."""
    w = _const_rank(ctx, 1, 5)
    if len(ctx.laid(0).perm) != 5:
        raise ctx.unsupported(f"input 0 must be 5D (NDHWC), got shape {ctx.laid(0).shape}")
    x = ctx.input(0, NCDHW)
    cin = x.type.shape[1]
    if not w.shape[3] or cin % w.shape[3]:
        raise ctx.unsupported(f"{cin} input channels do not split into groups of {w.shape[3]}")
    ins = [x, ctx.weight(1, lambda a: a.transpose(4, 3, 0, 1, 2), "w")]
    if ctx.has_input(2):
        ins.append(ctx.input(2))
    strides = _at_least_1(ctx, "StrideD", "StrideH", "StrideW")
    dilations = _at_least_1(ctx, "DilationDFactor", "DilationHFactor", "DilationWFactor")
    kernel = list(w.shape[:3])
    y = ctx.emit1("conv", ins, dict(strides=strides, dilations=dilations, group=cin // w.shape[3],
                                    pads=_pads(ctx, x.type.shape[2:], kernel, strides, dilations)))
    ctx.set_output(ctx.fused(y), NCDHW)
