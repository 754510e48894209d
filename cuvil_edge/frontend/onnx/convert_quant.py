"""Converters for pre-quantized ONNX: QuantizeLinear/DequantizeLinear (QDQ), QLinearConv,
QLinearMatMul, ConvInteger, MatMulInteger, DynamicQuantizeLinear and com.microsoft MatMulNBits.

Each op becomes its exact float meaning over run-time quantize/dequantize ops (``ops/qlinear.py``):
dequantize -> conv/gemm (-> quantize), weights dequantized at build time. Each quantized tensor whose
scale and zero point are constants gets its ``QuantParams`` (``Value.quant``): a weight's says which
integers its real values are, so ``quant/qdq.py`` can fuse dequantize -> conv/gemm into qconv/qgemm at
the end of import (what does not fuse still computes the right answer in f32), and all of them are what
``inspect`` shows of the model's quantization. Quantized run-time tensors are held as uint8 (ONNX int8
ones shifted by +128 together with their zero points). MatMulNBits goes straight to qb4gemm.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import QuantParams, Value
from ...ops.qlinear import ActQuant
from .convert_nn import conv_pads
from .registry import ConvertContext, converter


def _scale(ctx: ConvertContext, i: int) -> Value:
    s = ctx.input(i)
    if s.type.dtype == "float32":
        return s
    if not s.is_const:
        raise ctx.unsupported(f"run-time {s.type.dtype} scale")
    return ctx.constant(s.const.astype(np.float32), f"scale{i}")


def _zero_point(ctx: ConvertContext, i: int, uint8_domain: bool) -> Value:
    """Zero point input ``i`` (default 0); for a tensor held as uint8 an int8 one shifts by +128."""
    if not ctx.has_input(i):
        return ctx.constant(np.zeros(1, np.uint8), f"zero_point{i}")
    z = ctx.input(i)
    if not uint8_domain or z.type.dtype == "uint8":
        return z
    if z.type.dtype != "int8" or not z.is_const:
        raise ctx.unsupported(f"{z.type.dtype} zero point" + ("" if z.is_const else " at run time"))
    return ctx.constant((z.const.astype(np.int16) + 128).astype(np.uint8), f"zero_point{i}")


def _params(ctx: ConvertContext, s: Value, zp: int, axis: int, rank: int, dtype: str | None = None
            ) -> QuantParams | None:
    """A quantized tensor's record from its scale ``s`` and zero point input ``zp`` (absent: 0), None when
    either is computed at run time. ``dtype``: its integers' type where known (a constant's), else the
    zero point's (ONNX's rule; uint8 without one)."""
    z = ctx.input(zp) if ctx.has_input(zp) else None
    if not s.is_const or (z is not None and not z.is_const):
        return None
    kind = dtype or (z.type.dtype if z is not None else "uint8")
    return QuantParams(s.const, np.zeros(1, np.int64) if z is None else z.const, axis % max(rank, 1), kind)


def _quantize(ctx: ConvertContext, x: Value, scale: int, zp: int, axis: int) -> Value:
    """x quantized with the scale and zero point at those inputs: a run-time value holding uint8."""
    s = _scale(ctx, scale)
    y = ctx.emit1("quantize", [x, s, _zero_point(ctx, zp, True)], {"axis": axis})
    if not y.is_const:
        y.quant = _params(ctx, s, zp, axis, len(x.type.shape))
    return y


def _dequant(ctx: ConvertContext, x: Value, s: Value, zp: int, axis: int, name: str) -> Value:
    """x's float value: a folded constant or a run-time dequantize, with the scale ``s`` and the zero
    point at input ``zp`` (absent: 0). The constant, or the run-time x, gets its ``QuantParams``."""
    if not x.is_const and x.type.dtype != "uint8":
        raise ctx.unsupported(f"run-time {x.type.dtype} quantized tensor (uint8 or QuantizeLinear output)")
    z = _zero_point(ctx, zp, x.type.dtype == "uint8")
    y = ctx.emit1("dequantize", [x, s, z], {"axis": axis}, name=name)
    rank = len(x.type.shape)
    if y.is_const:
        y.quant = _params(ctx, s, zp, axis, rank, x.type.dtype)
    elif not x.is_const:
        x.quant = _params(ctx, s, zp, axis, rank)
    return y


def _dequant_input(ctx: ConvertContext, i: int, scale: Value | int, zp: int | None, axis: int) -> Value:
    """Dequantize input ``i`` with the scale at input ``scale`` (or the given Value) and the zero point
    at input ``zp`` (None: 0)."""
    s = scale if isinstance(scale, Value) else _scale(ctx, scale)
    return _dequant(ctx, ctx.input(i), s, ctx.n_inputs if zp is None else zp, axis, f"{ctx.name}/dq{i}")


def _requant(ctx: ConvertContext, y: Value, scale: int, zp: int) -> None:
    ctx.set_outputs(_quantize(ctx, y, scale, zp, 1))


def _conv(ctx: ConvertContext, x: Value, w: Value, bias: list[Value]) -> Value:
    if not w.is_const:
        raise ctx.unsupported("weights must be constant")
    kernel = list(ctx.attr("kernel_shape", w.type.shape[2:]))
    n = len(kernel)
    strides, dilations = list(ctx.attr("strides", [1] * n)), list(ctx.attr("dilations", [1] * n))
    pads = conv_pads(ctx, list(x.type.shape[2:]), kernel, strides, dilations)
    return ctx.emit1("conv", [x, w, *bias], dict(strides=strides, dilations=dilations, pads=pads,
                                                  group=int(ctx.attr("group", 1))), name=f"{ctx.name}/conv")


def _matmul(ctx: ConvertContext, a: Value, b: Value) -> Value:
    if len(a.type.shape) < 2:
        raise ctx.unsupported("1-D matmul operand")
    op = "gemm" if b.is_const and len(b.type.shape) == 2 else "matmul"
    return ctx.emit1(op, [a, b], name=f"{ctx.name}/matmul")


def _unit(ctx: ConvertContext) -> Value:
    return ctx.constant(np.ones(1, np.float32), "unit_scale")


@converter("QuantizeLinear")
def quantize_linear(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    if x.type.dtype != "float32" or ctx.attr("block_size", 0):
        raise ctx.unsupported(f"{x.type.dtype} input" if x.type.dtype != "float32" else "blocked scales")
    ctx.set_outputs(_quantize(ctx, x, 1, 2, int(ctx.attr("axis", 1))))


@converter("DequantizeLinear")
def dequantize_linear(ctx: ConvertContext) -> None:
    if ctx.attr("block_size", 0):
        raise ctx.unsupported("blocked scales")
    ctx.set_outputs(_dequant(ctx, ctx.input(0), _scale(ctx, 1), 2, int(ctx.attr("axis", 1)), ctx.name))


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: ConvertContext) -> None:
    ctx.set_outputs(*ctx.emit("quantize_dyn", [ctx.input(0)], n_outputs=3))


@converter("QLinearConv")
def qlinear_conv(ctx: ConvertContext) -> None:
    """Bias is int32 at scale x_scale * w_scale (per output channel)."""
    x, w = _dequant_input(ctx, 0, 1, 2, 1), _dequant_input(ctx, 3, 4, 5, 0)
    bias = []
    if ctx.has_input(8):
        bs = (ctx.const(1).astype(np.float32) * ctx.const(4).astype(np.float32)).reshape(-1)
        bias = [_dequant_input(ctx, 8, ctx.constant(bs, "bias_scale"), None, 0)]
    _requant(ctx, _conv(ctx, x, w, bias), 6, 7)


@converter("QLinearMatMul")
def qlinear_matmul(ctx: ConvertContext) -> None:
    b = ctx.input(3)
    a = _dequant_input(ctx, 0, 1, 2, 1)
    _requant(ctx, _matmul(ctx, a, _dequant_input(ctx, 3, 4, 5, len(b.type.shape) - 1)), 6, 7)


@converter("ConvInteger")
def conv_integer(ctx: ConvertContext) -> None:
    x, w = _dequant_input(ctx, 0, _unit(ctx), 2, 1), _dequant_input(ctx, 1, _unit(ctx), 3, 0)
    ctx.set_outputs(ctx.emit1("cast", [_conv(ctx, x, w, [])], {"to": "int32"}))


@converter("MatMulInteger")
def matmul_integer(ctx: ConvertContext) -> None:
    b = ctx.input(1)
    a = _dequant_input(ctx, 0, _unit(ctx), 2, 1)
    y = _matmul(ctx, a, _dequant_input(ctx, 1, _unit(ctx), 3, len(b.type.shape) - 1))
    ctx.set_outputs(ctx.emit1("cast", [y], {"to": "int32"}))


@converter("MatMulNBits")
def matmul_nbits(ctx: ConvertContext) -> None:
    """com.microsoft 4-bit weights: B [N, K/bs, bs/2] bytes (low nibble first), scales [N, K/bs],
    zero points packed two blocks a byte (default 8) or float; activations int8-dynamic per row."""
    k, n, bs = int(ctx.attr("K")), int(ctx.attr("N")), int(ctx.attr("block_size"))
    if int(ctx.attr("bits", 4)) != 4 or bs % 32 or k % bs or ctx.has_input(4):
        raise ctx.unsupported("only 4 bits, block size a multiple of 32 dividing K, no g_idx")
    nb = k // bs
    b = ctx.const(1).reshape(n, -1)
    q = np.stack([b & 15, b >> 4], -1).reshape(n, -1)[:, :k]
    zp = np.full((n, nb), 8, np.int32)
    if ctx.has_input(3):
        z = ctx.const(3)
        if z.dtype == np.uint8:
            zp = np.stack([z.reshape(n, -1) & 15, z.reshape(n, -1) >> 4], -1).reshape(n, -1)[:, :nb]
        elif np.array_equal(z, np.rint(z)):
            zp = z.reshape(n, nb)
        else:
            raise ctx.unsupported("fractional zero points")
    ins = [ctx.input(0), ctx.constant(q.astype(np.uint8), "q4"),
           ctx.constant(ctx.const(2).reshape(n, nb).astype(np.float32), "scale"),
           ctx.constant(zp.astype(np.int32), "zero_point")]
    if ctx.has_input(5):
        ins.append(ctx.input(5))
    ctx.set_outputs(ctx.emit1("qb4gemm", ins, {"xq": ActQuant.dynamic(127, per_row=True)}))
