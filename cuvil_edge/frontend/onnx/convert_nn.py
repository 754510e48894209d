"""Converters for the NN core: Conv, ConvTranspose, Gemm, MatMul, BatchNormalization, activations."""

from __future__ import annotations

import numpy as np

from ...ir.graph import Value
from ...ops.common import is_row_bias
from ..padding import same_pads
from .convert_math import emit_binary
from .registry import ConvertContext, converter


def conv_pads(ctx: ConvertContext, spatial: list[int], kernel: list[int], strides: list[int],
              dilations: list[int]) -> list[int]:
    """Explicit [begins..., ends...] pads for every auto_pad mode (conv, pooling and their integer forms)."""
    n = len(spatial)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0] * 2 * n))
        if len(pads) != 2 * n:
            raise ctx.unsupported(f"pads {pads} do not match {n} spatial dims")
        return pads
    if auto == "VALID":
        return [0] * 2 * n
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return same_pads(spatial, kernel, strides, dilations, odd_at_end=auto == "SAME_UPPER")
    raise ctx.unsupported(f"auto_pad={auto!r}")


def _conv_common(ctx: ConvertContext) -> tuple[list, int, list[int], list[int], list[int]]:
    """Inputs and the attrs Conv and ConvTranspose share: (inputs, spatial rank, kernel, strides,
    dilations). Weights and bias may be run-time tensors (the ``f32-conv-rt`` kernels read them in
    place), of the input's element type."""
    x, w = ctx.input(0), ctx.input(1)
    n = len(w.type.shape) - 2
    if n not in (1, 2, 3):
        raise ctx.unsupported(f"{n}D {ctx.op_type} (1D, 2D and 3D are supported)")
    kernel = ctx.positive_ints("kernel_shape", w.type.shape[2:], n)
    strides = ctx.positive_ints("strides", [1] * n, n)
    dilations = ctx.positive_ints("dilations", [1] * n, n)
    if len(x.type.shape) != n + 2:
        raise ctx.unsupported(f"input of shape {x.type.shape} for {n}D weights {w.type.shape}")
    ins = [x, w] + ([ctx.input(2)] if ctx.has_input(2) else [])
    if any(not v.is_const and v.type.dtype != x.type.dtype for v in ins[1:]):
        raise ctx.unsupported(f"run-time weights or bias of another type than the {x.type.dtype} input")
    m = w.type.shape[0] if ctx.op_type == "Conv" else w.type.shape[1] * _group(ctx)
    if len(ins) > 2 and ins[2].type.shape != (m,):
        raise ctx.unsupported(f"bias of shape {ins[2].type.shape} for {m} output channels")
    return ins, n, kernel, strides, dilations


def _group(ctx: ConvertContext) -> int:
    """The ``group`` attribute, refused when not at least 1 (channels are divided by it)."""
    group = int(ctx.attr("group", 1))
    if group < 1:
        raise ctx.unsupported(f"group={group}")
    return group


@converter("Conv")
def conv(ctx: ConvertContext) -> None:
    ins, _, kernel, strides, dilations = _conv_common(ctx)
    pads = conv_pads(ctx, list(ins[0].type.shape[2:]), kernel, strides, dilations)
    ctx.set_outputs(ctx.emit1("conv", ins, dict(strides=strides, dilations=dilations, pads=pads,
                                                group=_group(ctx))))


@converter("ConvTranspose")
def conv_transpose(ctx: ConvertContext) -> None:
    """Explicit pads from pads / output_shape / auto_pad, split the way onnxruntime splits them."""
    ins, n, kernel, strides, dilations = _conv_common(ctx)
    spatial = list(ins[0].type.shape[2:])
    out_pad = list(ctx.attr("output_padding", [0] * n))
    auto = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    out_shape = list(ctx.attr("output_shape", []))[-n:] if ctx.attr("output_shape") else None
    if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise ctx.unsupported(f"auto_pad={auto!r}")
    if out_shape is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [size * s for size, s in zip(spatial, strides)]
    if out_shape is not None:
        begins, ends = [], []
        for size, k, s, d, op, want in zip(spatial, kernel, strides, dilations, out_pad, out_shape):
            total = s * (size - 1) + op + (k - 1) * d + 1 - want  # negative: output grows
            # onnxruntime's split (probed): SAME_UPPER puts the odd unit at the end (its half
            # rounds toward zero), NOTSET and SAME_LOWER at the start (half rounded up)
            head = int(total / 2) if auto == "SAME_UPPER" else -(-total // 2)
            begins.append(head)
            ends.append(total - head)
        pads = begins + ends
    elif auto == "VALID":
        pads = [0] * 2 * n
    else:
        pads = list(ctx.attr("pads", [0] * 2 * n))
        if len(pads) != 2 * n:
            raise ctx.unsupported(f"pads {pads} do not match {n} spatial dims")
    ctx.set_outputs(ctx.emit1("conv_transpose", ins, dict(
        strides=strides, dilations=dilations, pads=pads, output_padding=out_pad,
        group=_group(ctx))))


def _scaled(ctx: ConvertContext, v: Value, factor: float, what: str) -> Value:
    """``v * factor`` as a Value of v's type (folded when v is constant)."""
    if factor == 1.0:
        return v
    return emit_binary(ctx, "mul", v, ctx.constant(np.asarray(factor, v.type.dtype), what),
                       name=f"{ctx.name}/{what}")


@converter("Gemm")
def gemm(ctx: ConvertContext) -> None:
    """float32 with constant B: the packed ``gemm`` (alpha and a row bias folded in); otherwise (a run-time
    B, or float64) ``matmul``, then alpha and C as elementwise ops."""
    a, b = ctx.input(0), ctx.input(1)
    packed = b.is_const and a.type.dtype == "float32"
    if len(a.type.shape) != 2 or len(b.type.shape) != 2:
        raise ctx.unsupported(f"Gemm multiplies matrices, got shapes {a.type.shape} and {b.type.shape}")
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if ctx.attr("transA", 0):
        a = ctx.emit1("transpose", [a], {"perm": [1, 0]}, name=f"{ctx.name}/transA")
    if packed:
        lay = np.transpose if ctx.attr("transB", 0) else np.asarray
        w = ctx.constant(np.ascontiguousarray(lay(b.const.astype(np.float32)) * np.float32(alpha)), "w")
        if b.quant is not None and alpha == 1.0:  # the same numbers re-laid: still quantized weights
            w.quant = b.quant.relaid(b.type.shape, lay)
        ins, post_alpha = [a, w], 1.0
    else:
        if ctx.attr("transB", 0):
            b = ctx.emit1("transpose", [b], {"perm": [1, 0]}, name=f"{ctx.name}/transB")
        ins, post_alpha = [a, b], alpha
    n = ins[1].type.shape[1]
    c = ctx.input(2) if ctx.has_input(2) and beta != 0.0 else None
    if c is not None and packed and c.is_const and is_row_bias(c.type.shape, n):
        bias = np.broadcast_to(c.const.astype(np.float32).reshape(-1) * np.float32(beta), (n,))
        ins.append(ctx.constant(bias.copy(), "bias"))
        c = None
    y = ctx.emit1("gemm" if packed else "matmul", ins, name=ctx.name if c is None else f"{ctx.name}/mm")
    y = _scaled(ctx, y, post_alpha, "alpha")
    if c is not None:
        y = emit_binary(ctx, "add", y, _scaled(ctx, c, beta, "beta"))
    ctx.set_outputs(y)


@converter("MatMul")
def matmul(ctx: ConvertContext) -> None:
    a, b = ctx.input(0), ctx.input(1)
    squeeze_front = len(a.type.shape) == 1
    squeeze_back = len(b.type.shape) == 1
    if squeeze_front:
        a = ctx.emit1("reshape", [a], {"shape": [1, a.type.shape[0]]}, name=f"{ctx.name}/a2d")
    if squeeze_back:
        b = ctx.emit1("reshape", [b], {"shape": [b.type.shape[0], 1]}, name=f"{ctx.name}/b2d")
    if b.is_const and len(b.type.shape) == 2 and a.type.dtype == "float32":  # float64: matmul
        w = ctx.constant(b.const.astype(np.float32), "w")
        w.quant = b.quant  # quantized weights stay quantized (``quant/qdq.py`` fuses them)
        y = ctx.emit1("gemm", [a, w])
    else:
        y = ctx.emit1("matmul", [a, b])
    shape = list(y.type.shape)
    if squeeze_front:
        del shape[-2]
    if squeeze_back:
        del shape[-1]
    if squeeze_front or squeeze_back:
        y = ctx.emit1("reshape", [y], {"shape": shape}, name=f"{ctx.name}/out")
    ctx.set_outputs(y)


@converter("BatchNormalization")
def batchnorm(ctx: ConvertContext) -> None:
    """Inference: the statistics fold into one affine per channel, at build time when all four are
    constants, else computed per run over the C values and read by the one data pass. ``training_mode``
    1 (opset 14 on) normalises by the batch's own mean and population variance (every axis but the
    channels) and outputs the running statistics moved toward them by ``momentum``."""
    x = ctx.input(0)
    momentum = float(ctx.attr("momentum", 0.9))
    training = ctx.opset >= 14 and bool(ctx.attr("training_mode", 0))
    if any(ctx.proto.output[1:]) and not training:
        raise ctx.unsupported("running-statistics outputs outside training_mode")
    if ctx.opset < 9 and ctx.attr("spatial", 1) != 1:
        raise ctx.unsupported("spatial=0")
    params = [ctx.input(i) for i in range(1, 5)]
    channels = x.type.shape[1] if len(x.type.shape) > 1 else None
    if any(p.type.shape != (channels,) for p in params):
        raise ctx.unsupported(f"scale, bias, mean and var of shapes {[p.type.shape for p in params]} "
                              f"for input {x.type.shape} (one value per channel)")
    if any(not p.is_const and p.type.dtype != "float32" for p in params):
        raise ctx.unsupported(f"run-time statistics of types {[p.type.dtype for p in params]} (float32 only)")
    eps = float(ctx.attr("epsilon", 1e-5))
    if all(p.is_const for p in params) and not training:
        scale, bias, mean, var = (p.const.astype(np.float64) for p in params)
        a = scale / np.sqrt(var + eps)
        b = bias - mean * a
        ctx.set_outputs(ctx.emit1("channel_affine", [x, ctx.constant(a.astype(np.float32), "a"),
                                                ctx.constant(b.astype(np.float32), "b")]))
        return
    scale, bias, mean, var = (p if not p.is_const else ctx.constant(p.const.astype(np.float32), p.name)
                              for p in params)
    running: list[Value] = []
    if training:
        stats = _batch_stats(ctx, x)
        running = [_running(ctx, tag, old, new, momentum)
                   for tag, old, new in zip(("mean", "var"), (mean, var), stats)]
        mean, var = stats
    std = ctx.emit1("unary", [emit_binary(ctx, "add", var, ctx.constant(np.float32(eps), "eps"),
                                      name=f"{ctx.name}/var_eps")], {"kind": "sqrt"}, name=f"{ctx.name}/std")
    a = emit_binary(ctx, "div", scale, std, name=f"{ctx.name}/a")
    mean_a = emit_binary(ctx, "mul", mean, a, name=f"{ctx.name}/mean_a")
    b = emit_binary(ctx, "sub", bias, mean_a, name=f"{ctx.name}/b")
    ctx.set_outputs(ctx.emit1("channel_affine", [x, a, b]), *running)


def _batch_stats(ctx: ConvertContext, x: Value) -> list[Value]:
    """x's mean and population variance over every axis but the channels (axis 1), one per channel."""
    keep = {"axes": [0, *range(2, len(x.type.shape))], "keepdims": True}
    mean = ctx.emit1("reduce", [x], {"kind": "mean", **keep}, name=f"{ctx.name}/batch_mean")
    centred = emit_binary(ctx, "sub", x, mean, name=f"{ctx.name}/centred")
    square = ctx.emit1("unary", [centred], {"kind": "square"}, name=f"{ctx.name}/square")
    var = ctx.emit1("reduce", [square], {"kind": "mean", **keep}, name=f"{ctx.name}/batch_var")
    return [ctx.emit1("reshape", [v], {"shape": [x.type.shape[1]]}, name=f"{ctx.name}/{tag}")
            for tag, v in (("saved_mean", mean), ("saved_var", var))]


def _running(ctx: ConvertContext, tag: str, old: Value, new: Value, momentum: float) -> Value:
    """A running statistic after one training step: old * momentum + new * (1 - momentum)."""
    kept = emit_binary(ctx, "mul", old, ctx.constant(np.float32(momentum), "momentum"),
                   name=f"{ctx.name}/{tag}_kept")
    moved = emit_binary(ctx, "mul", new, ctx.constant(np.float32(1 - momentum), "rate"),
                    name=f"{ctx.name}/{tag}_new")
    return emit_binary(ctx, "add", kept, moved, name=f"{ctx.name}/running_{tag}")


def _act(ctx: ConvertContext, kind: str, a: float = 0.0, b: float = 0.0) -> None:
    ctx.set_outputs(ctx.emit1("epilogue_act", [ctx.input(0)], {"act": (kind, float(a), float(b))}))


@converter("Relu")
def relu(ctx: ConvertContext) -> None:
    _act(ctx, "relu")


@converter("Sigmoid")
def sigmoid(ctx: ConvertContext) -> None:
    _act(ctx, "sigmoid")


@converter("Tanh")
def tanh(ctx: ConvertContext) -> None:
    _act(ctx, "tanh")


@converter("HardSigmoid")
def hardsigmoid(ctx: ConvertContext) -> None:
    _act(ctx, "hardsigmoid", ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5))


@converter("HardSwish")
def hardswish(ctx: ConvertContext) -> None:
    _act(ctx, "hardswish")


@converter("LeakyRelu")
def leakyrelu(ctx: ConvertContext) -> None:
    _act(ctx, "leakyrelu", ctx.attr("alpha", 0.01))


@converter("Clip")
def clip(ctx: ConvertContext) -> None:
    """Constant bounds on float32 are a fused ``clip`` activation; bounds known only at run time, or an
    integer tensor, take an elementwise max with the lower bound, then a min with the upper one (each
    one value, broadcast): so min > max gives max everywhere, as ONNX says."""
    x = ctx.input(0)
    if ctx.opset < 11:
        _act(ctx, "clip", float(ctx.attr("min", -np.inf)), float(ctx.attr("max", np.inf)))
        return
    bounds = [(i, kind, ctx.input(i)) for i, kind in ((1, "max"), (2, "min")) if ctx.has_input(i)]
    for i, _, b in bounds:
        if b.type.size != 1:
            raise ctx.unsupported(f"input {i} is a bound of shape {b.type.shape}, not one value")
    if x.type.dtype == "float32" and all(b.is_const for _, _, b in bounds):
        const = {kind: float(b.const.reshape(())) for _, kind, b in bounds}
        _act(ctx, "clip", const.get("max", -np.inf), const.get("min", np.inf))
        return
    y = x
    for n, (i, kind, b) in enumerate(bounds, 1):
        if b.type.shape:
            b = ctx.emit1("reshape", [b], {"shape": []}, name=f"{ctx.name}/bound{i}")
        y = emit_binary(ctx, kind, y, b, name=None if n == len(bounds) else f"{ctx.name}/{kind}")
    ctx.set_outputs(y)
