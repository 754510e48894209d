"""Converters for pre-quantized ONNX: QuantizeLinear/DequantizeLinear (QDQ), QLinearConv,
QLinearMatMul, ConvInteger, MatMulInteger, DynamicQuantizeLinear and com.microsoft MatMulNBits.

Each op becomes its exact float meaning over run-time quantize/dequantize ops (``ops/qlinear.py``):
dequantize -> conv/gemm (-> quantize), weights dequantized at build time. Each quantized tensor whose
scale and zero point are constants gets its ``QuantParams`` (``Value.quant``): a weight's says which
integers its real values are, so ``quant/qdq.py`` can fuse dequantize -> conv/gemm into qconv/qgemm at
the end of import (what does not fuse still computes the right answer in f32), and all of them are what
``inspect`` shows of the model's quantization. Quantized run-time tensors are held as uint8 (ONNX int8
ones shifted by +128 together with their zero points, ``held_int8.py``). Blocked scales (``block_size``)
run in float32 ops, each scale and zero point gathered over its block. MatMulNBits goes straight to
qb4gemm.
"""

from __future__ import annotations

import numpy as np

from runtime_wasm.spec import STORED_RANGES

from ...ir.graph import QuantParams, Value
from ...ops.cast import FLOAT8, HELD
from ...ops.qlinear import ActQuant
from .convert_math import emit_binary
from .convert_nn import conv_pads
from .float16 import stored_type_of
from .held_int8 import flip_sign
from .importer import np_dtype_of_onnx
from .registry import ConvertContext, contrib_converter, converter


def _scale(ctx: ConvertContext, i: int) -> Value:
    s = ctx.input(i)
    if s.type.dtype == "float32":
        return s
    if not s.is_const:
        raise ctx.unsupported(f"run-time {s.type.dtype} scale")
    return ctx.constant(s.const.astype(np.float32), f"scale{i}")


def _held(ctx: ConvertContext, v: Value, what: str) -> Value:
    """``v`` as a tensor held as uint8: an int8 one shifted by +128 (at run time too), a uint8 one as is."""
    if v.type.dtype == "uint8":
        return v
    if v.type.dtype != "int8":
        raise ctx.unsupported(f"{v.type.dtype} {what}" + ("" if v.is_const else " at run time"))
    return flip_sign(ctx.graph, v, "uint8", f"{ctx.name}/{what.replace(' ', '_')}_held")


def _zero_point(ctx: ConvertContext, i: int, uint8_domain: bool) -> Value:
    """Zero point input ``i`` (default 0); for a tensor held as uint8 an int8 one shifts by +128."""
    if not ctx.has_input(i):
        return ctx.constant(np.zeros(1, np.uint8), f"zero_point{i}")
    return _held(ctx, ctx.input(i), "zero point") if uint8_domain else ctx.input(i)


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
    if not x.is_const:
        x = _held(ctx, x, "quantized tensor")
    z = _zero_point(ctx, zp, x.type.dtype == "uint8")
    y = ctx.emit1("dequantize", [x, s, z], {"axis": axis}, name=name)
    rank = len(x.type.shape)
    if y.is_const:
        y.quant = _params(ctx, s, zp, axis, rank, x.type.dtype)
    elif not x.is_const:
        x.quant = _params(ctx, s, zp, axis, rank)
    return y


def dequant_input(ctx: ConvertContext, i: int, scale: Value | int, zp: int | None, axis: int) -> Value:
    """Dequantize input ``i`` with the scale at input ``scale`` (or the given Value) and the zero point
    at input ``zp`` (None: 0)."""
    s = scale if isinstance(scale, Value) else _scale(ctx, scale)
    return _dequant(ctx, ctx.input(i), s, ctx.n_inputs if zp is None else zp, axis, f"{ctx.name}/dq{i}")


def requant(ctx: ConvertContext, y: Value, scale: int, zp: int) -> None:
    ctx.set_outputs(_quantize(ctx, y, scale, zp, 1))


def _conv(ctx: ConvertContext, x: Value, w: Value, bias: list[Value]) -> Value:
    """The float conv of dequantized x and w; run-time weights (dequantized at run time) take the direct
    ``f32-conv-rt`` kernel, constant ones fold and may fuse into ``qconv``."""
    kernel = list(ctx.attr("kernel_shape", w.type.shape[2:]))
    n = len(kernel)
    strides, dilations = list(ctx.attr("strides", [1] * n)), list(ctx.attr("dilations", [1] * n))
    pads = conv_pads(ctx, list(x.type.shape[2:]), kernel, strides, dilations)
    return ctx.emit1("conv", [x, w, *bias], dict(strides=strides, dilations=dilations, pads=pads,
                                                  group=int(ctx.attr("group", 1))), name=f"{ctx.name}/conv")


def quant_matmul(ctx: ConvertContext, a: Value, b: Value) -> Value:
    if len(a.type.shape) < 2:
        raise ctx.unsupported("1-D matmul operand")
    op = "gemm" if b.is_const and len(b.type.shape) == 2 else "matmul"
    return ctx.emit1(op, [a, b], name=f"{ctx.name}/matmul")


def _unit(ctx: ConvertContext) -> Value:
    """A scale of 1 (under a zero point per tensor or per channel)."""
    return ctx.constant(np.ones(1, np.float32), "unit_scale")


def _along(ctx: ConvertContext, i: int, x: Value, axis: int, what: str) -> Value:
    """Scale or zero point input ``i`` in float32, shaped to broadcast against ``x``: one value, one per
    channel of ``axis``, or (``block_size``) one per block of that many channels along ``axis`` in a
    tensor of x's rank, repeated over its block."""
    p, shape = _as_f32(ctx, ctx.input(i), f"{what}_f32"), list(x.type.shape)
    block = int(ctx.attr("block_size", 0))
    axis %= max(len(shape), 1)
    if block:
        blocks = [-(-n // block) if d == axis else n for d, n in enumerate(shape)]
        if block < 0 or list(p.type.shape) != blocks:
            raise ctx.unsupported(f"a {what} of shape {list(p.type.shape)} for blocks of {block} along axis "
                                  f"{axis} of {shape} (ONNX: {blocks})")
        of_block = ctx.constant(np.arange(shape[axis], dtype=np.int64) // block, f"{what}_blocks")
        return ctx.emit1("gather", [p, of_block], {"axis": axis}, name=f"{ctx.name}/{what}")
    along = [] if p.type.size == 1 else [p.type.size] + [1] * (len(shape) - 1 - axis)
    return ctx.emit1("reshape", [p], {"shape": along}, name=f"{ctx.name}/{what}")


def _as_f32(ctx: ConvertContext, v: Value, what: str) -> Value:
    if v.type.dtype == "float32":
        return v
    return ctx.emit1("cast", [v], {"to": "float32"}, name=f"{ctx.name}/{what}")


def _quantize_f32(ctx: ConvertContext, x: Value, to: str, axis: int) -> Value:
    """QuantizeLinear to a type the ``quantize`` kernel does not make (int16, uint16, int8 without a zero
    point, the stored types: int4, uint4, int2, uint2, the float8s, float4), or under blocked scales, in
    float32 ops, as ONNX defines it: integers round(x / scale) + zero point clamped to the type's range,
    float8 x / scale cast with ``saturate`` (no zero point), float4 x / scale + zero point cast
    (saturating). A stored-type result is widened by the importer."""
    y = ctx.emit1("binary_f32", [x, _along(ctx, 1, x, axis, "scale")], {"kind": "div"},
                  name=f"{ctx.name}/scaled")
    lo_hi = None if to in HELD and to not in STORED_RANGES else STORED_RANGES.get(to) or (
        int(np.iinfo(to).min), int(np.iinfo(to).max))
    if lo_hi is not None:
        y = ctx.emit1("unary", [y], {"kind": "round"}, name=f"{ctx.name}/rounded")
    if ctx.has_input(2) and to not in FLOAT8:
        y = ctx.emit1("binary_f32", [y, _along(ctx, 2, x, axis, "zero_point")], {"kind": "add"},
                      name=f"{ctx.name}/shifted")
    if lo_hi is not None:
        y = ctx.emit1("epilogue_act", [y], {"act": ("clip", *map(float, lo_hi))}, name=f"{ctx.name}/clamped")
    return ctx.emit1("cast", [y], {"to": to, "saturate": bool(ctx.attr("saturate", 1))})


def _dequant_f32(ctx: ConvertContext, x: Value, axis: int) -> Value:
    """DequantizeLinear in float32 ops of an x the ``dequantize`` kernel does not read: a run-time one of
    another type than uint8 (int4 held as int8, int16, ...), a float8 or float4 held as float32, or any x
    under blocked scales: (x - zero point) * scale; the float8s and float4 have no zero point (ONNX
    ignores it)."""
    y = _as_f32(ctx, x, "x_f32")
    if ctx.has_input(2) and x.type.dtype != "float32":
        y = ctx.emit1("binary_f32", [y, _along(ctx, 2, x, axis, "zero_point")], {"kind": "sub"},
                      name=f"{ctx.name}/steps")
    return ctx.emit1("binary_f32", [y, _along(ctx, 1, x, axis, "scale")], {"kind": "mul"})


#: the types QuantizeLinear makes (its schema's T2 at opset 25)
QUANTIZED = frozenset({"int8", "uint8", "int16", "uint16", *STORED_RANGES, *FLOAT8, "float4_e2m1fn"})


@converter("QuantizeLinear")
def quantize_linear(ctx: ConvertContext) -> None:
    """To uint8, and int8 with a zero point, on the ``quantize`` kernel; to the other types (the zero
    point's, else ``output_dtype``'s) and with blocked scales in float32 ops."""
    x = ctx.input(0)
    if x.type.dtype != "float32":
        raise ctx.unsupported(f"{x.type.dtype} input")
    out_dtype = int(ctx.attr("output_dtype", 0))
    zp = ctx.input(2) if ctx.has_input(2) else None
    if zp is not None:
        to = stored_type_of(ctx.graph, zp) or zp.type.dtype
    else:
        to = np_dtype_of_onnx(out_dtype, ctx.op_type, ctx.name, ctx.opset) if out_dtype else "uint8"
    if to not in QUANTIZED:  # the checker does not look at types: a float32 zero point gets here
        raise ctx.unsupported(f"a {to} zero point or output_dtype (QuantizeLinear makes "
                              f"{', '.join(sorted(QUANTIZED))})")
    if (to == "uint8" or to == "int8" and zp is not None) and not ctx.attr("block_size", 0):
        ctx.set_outputs(_quantize(ctx, x, 1, 2, int(ctx.attr("axis", 1))))
    else:
        ctx.set_outputs(_quantize_f32(ctx, x, to, int(ctx.attr("axis", 1))))


@converter("DequantizeLinear")
def dequantize_linear(ctx: ConvertContext) -> None:
    """uint8 at run time and constants on the ``dequantize`` kernel (folded), other run-time types, the
    stored types held as float32 (float8, float4) and blocked scales in float32 ops."""
    x, axis = ctx.input(0), int(ctx.attr("axis", 1))
    stored = stored_type_of(ctx.graph, x)
    f32 = x.type.dtype == "float32" and stored is not None or not x.is_const and x.type.dtype != "uint8"
    if f32 or ctx.attr("block_size", 0):
        ctx.set_outputs(_dequant_f32(ctx, x, axis))
        return
    ctx.set_outputs(_dequant(ctx, x, _scale(ctx, 1), 2, axis, ctx.name))


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: ConvertContext) -> None:
    ctx.set_outputs(*ctx.emit("quantize_dyn", [ctx.input(0)], n_outputs=3))


@converter("QLinearConv")
def qlinear_conv(ctx: ConvertContext) -> None:
    """Bias is int32 at scale x_scale * w_scale (per output channel); with a scale known only at run time
    it is cast to float and scaled there."""
    x, w = dequant_input(ctx, 0, 1, 2, 1), dequant_input(ctx, 3, 4, 5, 0)
    bias = []
    xs, ws = _scale(ctx, 1), _scale(ctx, 4)
    if ctx.has_input(8) and xs.is_const and ws.is_const:
        bs = (xs.const * ws.const).reshape(-1)
        bias = [dequant_input(ctx, 8, ctx.constant(bs, "bias_scale"), None, 0)]
    elif ctx.has_input(8):
        scale = emit_binary(ctx, "mul", ws, xs, name=f"{ctx.name}/bias_scale")
        b = ctx.emit1("cast", [ctx.input(8)], {"to": "float32"}, name=f"{ctx.name}/bias_f32")
        bias = [emit_binary(ctx, "mul", b, scale, name=f"{ctx.name}/bias")]
    requant(ctx, _conv(ctx, x, w, bias), 6, 7)


@converter("QLinearMatMul")
def qlinear_matmul(ctx: ConvertContext) -> None:
    b = ctx.input(3)
    a = dequant_input(ctx, 0, 1, 2, 1)
    requant(ctx, quant_matmul(ctx, a, dequant_input(ctx, 3, 4, 5, len(b.type.shape) - 1)), 6, 7)


@converter("ConvInteger")
def conv_integer(ctx: ConvertContext) -> None:
    x, w = dequant_input(ctx, 0, _unit(ctx), 2, 1), dequant_input(ctx, 1, _unit(ctx), 3, 0)
    ctx.set_outputs(ctx.emit1("cast", [_conv(ctx, x, w, [])], {"to": "int32"}))


@converter("MatMulInteger")
def matmul_integer(ctx: ConvertContext) -> None:
    b = ctx.input(1)
    a = dequant_input(ctx, 0, _unit(ctx), 2, 1)
    y = quant_matmul(ctx, a, dequant_input(ctx, 1, _unit(ctx), 3, len(b.type.shape) - 1))
    ctx.set_outputs(ctx.emit1("cast", [y], {"to": "int32"}))


@contrib_converter("MatMulNBits")
def matmul_nbits(ctx: ConvertContext) -> None:
    """com.microsoft 4-bit weights: B [N, K/bs, bs/2] bytes (low nibble first), scales [N, K/bs],
    zero points packed two blocks a byte (default 8) or float; activations int8-dynamic per row (what
    ``accuracy_level``, a floor on onnxruntime's own activation precision, leaves open)."""
    ctx.attr("accuracy_level")
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
