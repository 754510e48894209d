"""Converters for the com.microsoft operators onnxruntime's transformer optimizer and quantization tools
write (MatMulNBits is in ``convert_quant``), and its default-domain SimplifiedLayerNormalization.

Each becomes the IR of its exact meaning in onnxruntime: the fused ``layernorm`` and ``gelu`` kernels
where they fit, else the converter a default-domain op already has (``delegate``: LayerNormalization,
RMSNormalization, Swish, MatMul, Softmax, the pools), else a few elementwise ops. The QLinear* ops
dequantize, compute in float32 and quantize again, which is how onnxruntime defines them. The attention
ops and their key/value caches are in ``convert_contrib_attention``, which shares the helpers here. What
has no exact equivalent here (packed layouts, soft-capping, quantized caches) is refused naming the
input or attribute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import NotConstant, UnsupportedOperator
from ...ir.graph import Value
from .convert_math import emit_binary
from .convert_quant import dequant_input, quant_matmul, requant
from .registry import CONVERTERS, ConvertContext, contrib_converter, converter


def delegate(ctx: ConvertContext, op_type: str, inputs: Sequence[Value | None],
             attrs: dict[str, Any] | None = None, n_outputs: int = 1, opset: int | None = None,
             tag: str | None = None) -> list[Value]:
    """Run the default-domain converter of ``op_type`` on ``inputs`` (None: an input left out) as part of
    ``ctx``'s node, so a contrib op reuses what its default-domain counterpart already does; what it
    refuses is refused naming ``ctx``'s node."""
    from onnx import helper

    tag = f"{ctx.name}/{tag or op_type}"
    names = ["" if v is None else f"{tag}:in{i}" for i, v in enumerate(inputs)]
    outs = [f"{tag}:out{i}" for i in range(n_outputs)]
    for name, v in zip(names, inputs):
        if v is not None:
            ctx.env[name] = v
    node = helper.make_node(op_type, names, outs, name=tag, **(attrs or {}))
    sub = ConvertContext(ctx.graph, ctx.env, node, ctx.opset if opset is None else opset, ctx.declared)
    try:
        CONVERTERS.get(op_type)(sub)
    except NotConstant:
        raise
    except UnsupportedOperator as exc:
        raise ctx.unsupported(f"as {op_type}: {exc}") from exc
    finally:
        for name in filter(None, names):
            del ctx.env[name]
    return [ctx.env.pop(o) for o in outs]


def refuse_set(ctx: ConvertContext, why: str, *, inputs: Sequence[int] = (), outputs: Sequence[int] = (),
               **defaults: Any) -> None:
    """Refuse the node when it feeds one of ``inputs``, asks for one of ``outputs`` or sets an attribute
    to other than its value in ``defaults``: variants ``why`` names, which this converter does not do."""
    fed = [i for i in inputs if ctx.has_input(i)]
    asked = asked_outputs(ctx, outputs)
    changed = {k: ctx.attr(k) for k, v in defaults.items() if ctx.attr(k, v) != v}
    if fed or asked or changed:
        what = [f"input {i} ({ctx.proto.input[i]!r})" for i in fed] + \
               [f"output {i} ({ctx.proto.output[i]!r})" for i in asked] + \
               [f"{k}={v!r}" for k, v in changed.items()]
        raise ctx.unsupported(f"{', '.join(what)}: {why} are not supported")


def asked_outputs(ctx: ConvertContext, outputs: Sequence[int]) -> list[int]:
    """Which of ``outputs`` the node names: the ones a model reads."""
    return [i for i in outputs if i < len(ctx.proto.output) and ctx.proto.output[i]]


def emit_reshape(ctx: ConvertContext, v: Value, shape: Sequence[int], tag: str) -> Value:
    return ctx.emit1("reshape", [v], {"shape": [int(d) for d in shape]}, name=f"{ctx.name}/{tag}")


def emit_transpose(ctx: ConvertContext, v: Value, perm: Sequence[int], tag: str) -> Value:
    return ctx.emit1("transpose", [v], {"perm": list(perm)}, name=f"{ctx.name}/{tag}")


def slice_last_axis(ctx: ConvertContext, v: Value, start: int, end: int, tag: str, step: int = 1) -> Value:
    """``v[..., start:end:step]``."""
    shape = v.type.shape
    return ctx.emit1("slice", [v], {"starts": [0] * (len(shape) - 1) + [start], "ends": [*shape[:-1], end],
                                    "steps": [1] * (len(shape) - 1) + [step]}, name=f"{ctx.name}/{tag}")


def input_of_rank(ctx: ConvertContext, i: int, ranks: Sequence[int], what: str) -> Value:
    v = ctx.input(i)
    if len(v.type.shape) not in ranks:
        raise ctx.unsupported(f"{what} (input {i}) of shape {v.type.shape}: rank "
                              f"{' or '.join(map(str, ranks))}")
    return v


# -- activations ---------------------------------------------------------------------------------------
@contrib_converter("Gelu", "BiasGelu", "FastGelu")
def gelu(ctx: ConvertContext) -> None:
    """Gelu of x (plus BiasGelu's B, FastGelu's optional bias): the erf form, FastGelu the tanh one."""
    x = ctx.input(0)
    if ctx.has_input(1):
        x = emit_binary(ctx, "add", x, ctx.input(1), name=f"{ctx.name}/biased")
    approximate = "tanh" if ctx.op_type == "FastGelu" else "none"
    ctx.set_outputs(ctx.emit1("gelu", [x], {"approximate": approximate}))


@contrib_converter("QuickGelu")
def quick_gelu(ctx: ConvertContext) -> None:
    """x * sigmoid(alpha * x): the default domain's Swish."""
    ctx.set_outputs(*delegate(ctx, "Swish", [ctx.input(0)], {"alpha": float(ctx.attr("alpha", 1.702))}))


@contrib_converter("FusedMatMul")
def fused_matmul(ctx: ConvertContext) -> None:
    """alpha * op(A) @ op(B), op transposing the last two axes where transA / transB say; a constant B
    takes alpha and its transposition at build time."""
    refuse_set(ctx, "batch transpositions", transBatchA=0, transBatchB=0)
    alpha = float(ctx.attr("alpha", 1.0))
    a, b = ctx.input(0), ctx.input(1)
    flips = []
    for v, flag in ((a, "transA"), (b, "transB")):
        rank = len(v.type.shape)
        if ctx.attr(flag, 0) and rank < 2:
            raise ctx.unsupported(f"{flag} of a rank-{rank} operand")
        swap = [*range(rank - 2), rank - 1, rank - 2]
        flips.append(emit_transpose(ctx, v, swap, flag) if ctx.attr(flag, 0) else v)
    a, b = flips
    scale = ctx.constant(np.float32(alpha), "alpha")
    if b.is_const and alpha != 1.0:
        b, alpha = emit_binary(ctx, "mul", b, scale), 1.0
    (y,) = delegate(ctx, "MatMul", [a, b])
    ctx.set_outputs(y if alpha == 1.0 else emit_binary(ctx, "mul", y, scale))


# -- normalizations ------------------------------------------------------------------------------------
@contrib_converter("SkipLayerNormalization", "SkipSimplifiedLayerNormalization")
def skip_layer_norm(ctx: ConvertContext) -> None:
    """LayerNormalization (the Simplified one: RMSNormalization) over the last axis of input + skip
    (+ bias), which is also the fourth output; the first form's mean and inv_std_var are its own."""
    simplified = ctx.op_type == "SkipSimplifiedLayerNormalization"
    x = ctx.input(0)
    total = emit_binary(ctx, "add", x, ctx.input(1), name=f"{ctx.name}/skip")
    bias = 3 if simplified else 4
    if ctx.has_input(bias):
        total = emit_binary(ctx, "add", total, ctx.input(bias), name=f"{ctx.name}/bias")
    if total.type.shape != x.type.shape:
        raise ctx.unsupported(f"skip or bias widens input {x.type.shape} to {total.type.shape}")
    eps = float(ctx.attr("epsilon", 1e-12))
    stats = [ctx.proto.output[i] if i < len(ctx.proto.output) else "" for i in (1, 2)]
    if simplified:
        refuse_set(ctx, "statistics outputs of the simplified form", outputs=(1, 2))
        normed = delegate(ctx, "RMSNormalization", [total, ctx.input(2)], {"epsilon": eps})
    else:
        params = [total, ctx.input(2), ctx.input(3) if ctx.has_input(3) else None]
        normed = delegate(ctx, "LayerNormalization", params, {"epsilon": eps}, n_outputs=1 + 2 * any(stats))
    ctx.set_outputs(*normed, *[None] * (3 - len(normed)), total)


@converter("SimplifiedLayerNormalization")
def simplified_layer_norm(ctx: ConvertContext) -> None:
    """onnxruntime's default-domain RMS norm (its optimizer writes it for T5 and Llama): RMSNormalization;
    its inv_std_var output (training) is refused."""
    refuse_set(ctx, "statistics outputs", outputs=(1,))
    attrs = {k: ctx.attr(k, d) for k, d in (("axis", -1), ("epsilon", 1e-5), ("stash_type", 1))}
    ctx.set_outputs(*delegate(ctx, "RMSNormalization", [ctx.input(0), ctx.input(1)], attrs))


def _count_ones(ctx: ConvertContext, mask: Value) -> Value:
    """Per row of a [B, S] int32 mask, how many entries are 1 (int32 [B]): BERT's mask_index."""
    one = ctx.emit1("compare", [mask, ctx.constant(np.int32(1), "one")], {"kind": "eq"},
                    name=f"{ctx.name}/ones")
    flags = ctx.emit1("cast", [one], {"to": "float32"}, name=f"{ctx.name}/ones_f32")
    count = ctx.emit1("reduce", [flags], {"kind": "sum", "axes": [1], "keepdims": False},
                      name=f"{ctx.name}/count")
    return ctx.emit1("cast", [count], {"to": "int32"}, name=f"{ctx.name}/mask_index")


@contrib_converter("EmbedLayerNormalization")
def embed_layer_norm(ctx: ConvertContext) -> None:
    """LayerNormalization of word_embedding[input_ids] + position_embedding[position_ids, else 0..S-1]
    (+ segment_embedding[segment_ids]); mask_index counts each row's ones of the mask (0 without one)
    and embedding_sum is the sum before the normalization."""
    ids = input_of_rank(ctx, 0, (2,), "input_ids")
    b, s = ids.type.shape
    if ctx.has_input(1) != ctx.has_input(4):
        raise ctx.unsupported("segment_ids and segment_embedding come together")
    if int(ctx.attr("mask_index_type", 1)) not in (0, 1):
        raise ctx.unsupported(f"mask_index_type={ctx.attr('mask_index_type')}")
    gather = [(0, 2)] + [(1, 4)] * ctx.has_input(1)
    parts = [ctx.emit1("gather", [ctx.input(table), ctx.input(i)], {"axis": 0}, name=f"{ctx.name}/embed{i}")
             for i, table in gather]
    pos = ctx.input(3)
    if ctx.has_input(8):
        parts.append(ctx.emit1("gather", [pos, ctx.input(8)], {"axis": 0}, name=f"{ctx.name}/positions"))
    elif pos.type.shape[0] < s:
        raise ctx.unsupported(f"{pos.type.shape[0]} position embeddings for {s} positions")
    else:
        first = {"starts": [0, 0], "ends": [s, pos.type.shape[1]], "steps": [1, 1]}
        parts.append(ctx.emit1("slice", [pos], first, name=f"{ctx.name}/positions"))
    total = parts[0]
    for i, p in enumerate(parts[1:]):
        total = emit_binary(ctx, "add", total, p, name=f"{ctx.name}/sum{i}")
    (y,) = delegate(ctx, "LayerNormalization", [total, ctx.input(5), ctx.input(6)],
                    {"epsilon": float(ctx.attr("epsilon", 1e-12))})
    mask_index = None
    if len(ctx.proto.output) > 1 and ctx.proto.output[1]:
        mask_index = _count_ones(ctx, ctx.input(7)) if ctx.has_input(7) else \
            ctx.constant(np.zeros(b, np.int32), "mask_index")
    ctx.set_outputs(y, mask_index, total)


# -- rotary ------------------------------------------------------------------------------------------
@contrib_converter("RotaryEmbedding")
def rotary_embedding(ctx: ConvertContext) -> None:
    """RoPE on [B, S, N*H] or [B, N, S, H]: the first rotary_embedding_dim (default H) of each head's
    values turned by cos_cache / sin_cache at position_ids ([B, S], or [1]: the first position), as halves
    or, ``interleaved``, as pairs."""
    refuse_set(ctx, "packed batching and a scale", is_packed_batching=0, scale=1.0)
    x = input_of_rank(ctx, 0, (3, 4), "input")
    cos, sin = input_of_rank(ctx, 2, (2,), "cos_cache"), input_of_rank(ctx, 3, (2,), "sin_cache")
    half, heads = cos.type.shape[1], int(ctx.attr("num_heads", 0))
    dim = int(ctx.attr("rotary_embedding_dim", 0))
    if len(x.type.shape) == 4:
        b, heads, s, head = x.type.shape
    else:
        b, s, hidden = x.type.shape
        heads = heads or hidden // max(2 * half, 1)
        head = hidden // max(heads, 1)
    dim = dim or head
    if heads * head != math.prod(x.type.shape[1:]) // s or dim != 2 * half or dim > head or \
            sin.type.shape != cos.type.shape:
        raise ctx.unsupported(f"input {x.type.shape}, num_heads={heads}, rotary_embedding_dim={dim} and "
                              f"caches {cos.type.shape}, {sin.type.shape} do not agree")
    view, cache_shape = (x, [b, 1, s, half]) if len(x.type.shape) == 4 else \
        (emit_reshape(ctx, x, [b, s, heads, head], "heads"), [b, s, 1, half])
    pos = ctx.input(1)
    if pos.type.size == 1:  # the first position: the sequence counts on from it
        ramp = ctx.constant(np.arange(s, dtype=pos.type.dtype).reshape(1, s), "ramp")
        pos = emit_binary(ctx, "add", ramp, emit_reshape(ctx, pos, [], "first"), name=f"{ctx.name}/positions")
        cache_shape[0] = 1
    elif pos.type.shape != (b, s):
        raise ctx.unsupported(f"position_ids of shape {pos.type.shape}: [B, S] or [1]")
    cos, sin = (emit_reshape(ctx, ctx.emit1("gather", [c, pos], {"axis": 0}, name=f"{ctx.name}/{tag}_at"),
                             cache_shape, tag) for c, tag in ((cos, "cos"), (sin, "sin")))
    interleaved = bool(ctx.attr("interleaved", 0))
    x1, x2 = (slice_last_axis(ctx, view, i, dim, f"x{i}", 2) if interleaved else
              slice_last_axis(ctx, view, i * half, (i + 1) * half, f"x{i}") for i in (0, 1))

    def turned(a: Value, c: Value, b_: Value, d: Value, kind: str, tag: str) -> Value:
        ac = emit_binary(ctx, "mul", a, c, name=f"{ctx.name}/{tag}_a")
        bd = emit_binary(ctx, "mul", b_, d, name=f"{ctx.name}/{tag}_b")
        return emit_binary(ctx, kind, ac, bd, name=f"{ctx.name}/{tag}")

    y1, y2 = turned(x1, cos, x2, sin, "sub", "y1"), turned(x2, cos, x1, sin, "add", "y2")
    if interleaved:
        pairs = [emit_reshape(ctx, y, [*y.type.shape, 1], f"{tag}_pair")
                 for y, tag in ((y1, "y1"), (y2, "y2"))]
        parts = [emit_reshape(ctx, ctx.emit1("concat", pairs, {"axis": 4}, name=f"{ctx.name}/pairs"),
                              [*y1.type.shape[:3], dim], "interleaved")]
    else:
        parts = [y1, y2]
    if dim < head:
        parts.append(slice_last_axis(ctx, view, dim, head, "kept"))
    y = ctx.emit1("concat", parts, {"axis": 3}, name=f"{ctx.name}/rotated")
    ctx.set_outputs(emit_reshape(ctx, y, x.type.shape, "out"))


# -- quantized ---------------------------------------------------------------------------------------
@contrib_converter("DynamicQuantizeMatMul")
def dynamic_quantize_matmul(ctx: ConvertContext) -> None:
    """A quantized to uint8 at run time (DynamicQuantizeLinear's scale and zero point), times B
    dequantized with b_scale and b_zero_point (per tensor or per column), + bias: as MatMulInteger,
    each product exact, summed in float32."""
    a = ctx.emit("quantize_dyn", [ctx.input(0)], name=f"{ctx.name}/quantize_a", n_outputs=3)
    a_real = ctx.emit1("dequantize", a, {"axis": 1}, name=f"{ctx.name}/a")
    b_axis = len(ctx.input(1).type.shape) - 1
    y = quant_matmul(ctx, a_real, dequant_input(ctx, 1, 2, 3 if ctx.has_input(3) else None, b_axis))
    ctx.set_outputs(emit_binary(ctx, "add", y, ctx.input(4)) if ctx.has_input(4) else y)


@contrib_converter("QLinearAdd", "QLinearMul")
def qlinear_binary(ctx: ConvertContext) -> None:
    a, b = dequant_input(ctx, 0, 1, 2, 1), dequant_input(ctx, 3, 4, 5, 1)
    kind = "add" if ctx.op_type == "QLinearAdd" else "mul"
    requant(ctx, emit_binary(ctx, kind, a, b, name=f"{ctx.name}/{kind}"), 6, 7)


@contrib_converter("QLinearSigmoid", "QLinearLeakyRelu")
def qlinear_activation(ctx: ConvertContext) -> None:
    x = dequant_input(ctx, 0, 1, 2, 1)
    act = ("sigmoid", 0.0, 0.0) if ctx.op_type == "QLinearSigmoid" else \
        ("leakyrelu", float(ctx.attr("alpha", 0.01)), 0.0)
    requant(ctx, ctx.emit1("epilogue_act", [x], {"act": act}, name=f"{ctx.name}/{act[0]}"), 3, 4)


@contrib_converter("QLinearConcat")
def qlinear_concat(ctx: ConvertContext) -> None:
    """Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input."""
    if (ctx.n_inputs - 2) % 3 or ctx.n_inputs < 5:
        raise ctx.unsupported(f"{ctx.n_inputs} inputs: Y_scale, Y_zero_point and a triple per tensor")
    xs = [dequant_input(ctx, i, i + 1, i + 2, 1) for i in range(2, ctx.n_inputs, 3)]
    (y,) = delegate(ctx, "Concat", xs, {"axis": int(ctx.attr("axis"))})
    requant(ctx, y, 0, 1)


@contrib_converter("QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSoftmax")
def qlinear_float_op(ctx: ConvertContext) -> None:
    """The default domain's op (the same attributes; Softmax at the node's ``opset``) on the dequantized
    input; a ``channels_last`` pool reads and writes NHWC through transposes."""
    x = dequant_input(ctx, 0, 1, 2, 1)
    op = ctx.op_type.removeprefix("QLinear")
    if op == "Softmax":
        (y,) = delegate(ctx, op, [x], {"axis": int(ctx.attr("axis", -1))}, opset=int(ctx.attr("opset")))
        requant(ctx, y, 3, 4)
        return
    last = bool(ctx.attr("channels_last", 0))
    rank = len(x.type.shape)
    if last:
        x = emit_transpose(ctx, x, [0, rank - 1, *range(1, rank - 1)], "nchw")
    names = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
    attrs = {k: ctx.attr(k) for k in names if ctx.attr(k) is not None}
    (y,) = delegate(ctx, op, [x], attrs)
    if last:
        y = emit_transpose(ctx, y, [0, *range(2, rank), 1], "nhwc")
    requant(ctx, y, 3, 4)
