"""Converters for data movement: reshapes (TFLite order), and concat / pad / slice / gather / split /
transpose, which keep the layout they are given with their axes remapped (TRANSPOSE only relabels it);
depth-to-space and back as their own ops on NCHW; CAST, which keeps the layout too."""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ...ops.cast import RUNTIME_CASTS
from .layout import NCHW, Laid, compose, dropped, identity, inverse, keeps_order_flat
from .registry import TflContext, converter


def int_values(a: np.ndarray | list[int]) -> list[int]:
    """Integers of a constant (shape, axes, sizes); a NaN or infinity among them is refused."""
    a = np.asarray(a).reshape(-1)
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise ShapeError(f"{a.tolist()} are not integers")
    return [int(x) for x in a]


@converter("CAST")
def cast(ctx: TflContext) -> None:
    """A dtype change (a text model's integer attention mask to float, say), on real values only: a
    quantized CAST would convert held integers, not the values they stand for."""
    src, out = ctx.input_tensor(0), ctx.sg.tensors[ctx.output_index(0)]
    if src.quant is not None or out.quant is not None:
        raise ctx.unsupported("a CAST of quantized tensors is not supported")
    if (src.dtype, out.dtype) not in RUNTIME_CASTS and src.data is None:
        raise ctx.unsupported(f"no cast from {src.dtype} to {out.dtype}")
    x = ctx.laid(0)
    ctx.set_output(ctx.emit1("cast", [x.value], {"to": out.dtype}), x.perm)


#: the types the IR holds with TFLite's bits (float16 runs as float32, quantized int8 as shifted uint8)
_OWN_BITS = frozenset({"float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool"})


@converter("BITCAST")
def bitcast(ctx: TflContext) -> None:
    """The same bytes read as the output's type: one ``bitcast`` view (no code) when the two types have
    one size. A wider input is split into a new last dim of narrower elements, a narrower one's last dim
    joined into one wider element (TFLite's rule): little-endian bytes, by shifts and a mask on the
    unsigned types, the wider type's lanes at 0, 8 * narrow, ... bits."""
    src, out = ctx.input_tensor(0), ctx.sg.tensors[ctx.output_index(0)]
    x = ctx.input(0)
    if src.quant is not None or out.quant is not None or x.type.dtype != src.dtype or \
            not {src.dtype, out.dtype} <= _OWN_BITS:
        raise ctx.unsupported(f"from {src.dtype} to {out.dtype} (quantized, or held as another type)")
    a, b = np.dtype(src.dtype).itemsize, np.dtype(out.dtype).itemsize
    if a == b:
        ctx.set_output(ctx.emit1("bitcast", [x], {"to": out.dtype}))
        return
    wide, narrow = f"uint{8 * max(a, b)}", f"uint{8 * min(a, b)}"
    lanes = max(a, b) // min(a, b)
    at = ctx.constant((np.arange(lanes) * 8 * min(a, b)).astype(wide), "lanes")
    unsigned = wide if a > b else narrow
    ux = x if x.type.dtype == unsigned else ctx.emit1("bitcast", [x], {"to": unsigned},
                                                      f"{ctx.name}/unsigned")
    if a > b:
        col = ctx.emit1("reshape", [ux], {"shape": [*x.type.shape, 1]}, f"{ctx.name}/col")
        parts = ctx.emit1("binary_loop", [col, at], {"kind": "shr"}, f"{ctx.name}/shifted")
        mask = ctx.constant(np.asarray((1 << 8 * b) - 1, wide), "mask")
        parts = ctx.emit1("binary_loop", [parts, mask], {"kind": "bitand"}, f"{ctx.name}/masked")
        y = ctx.cast(parts, narrow, "narrow")
    else:
        if x.type.shape[-1:] != (lanes,):
            raise ctx.unsupported(f"{src.dtype} {x.type.shape} to {out.dtype}: the last dim must be {lanes}")
        parts = ctx.emit1("binary_loop", [ctx.cast(ux, wide, "widen"), at], {"kind": "shl"},
                          f"{ctx.name}/placed")
        y = ctx.emit1("reduce_loop", [parts], {"kind": "sum", "axes": [len(x.type.shape) - 1],
                                               "keepdims": False}, f"{ctx.name}/joined")
    ctx.set_output(y if y.type.dtype == out.dtype else ctx.emit1("bitcast", [y], {"to": out.dtype}))


@converter("RESHAPE")
def reshape(ctx: TflContext) -> None:
    """In TFLite order (one -1 resolved): element order is what a reshape keeps; a flatten of a re-laid
    tensor keeps the IR order instead (``Laid.flat_of``), so flatten -> FC needs no transpose."""
    src = ctx.held(0, flat_ok=True)
    size = src.value.type.size
    shape = int_values(ctx.const(1) if ctx.has_input(1) else ctx.options.get("NewShape", []))
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = size // known if known else 0
    if math.prod(shape) != size:
        raise ctx.unsupported(f"cannot reshape {src.shape} to {shape}")
    if src.flat_of is None and ctx.same_domain(0) and keeps_order_flat(src, shape):
        ctx.set_held(Laid(ctx.emit1("reshape", [src.value], {"shape": shape}), (0, 1), flat_of=src))
        return
    ctx.set_output(ctx.emit1("reshape", [ctx.input(0)], {"shape": shape}))


@converter("EXPAND_DIMS")
def expand_dims(ctx: TflContext) -> None:
    """The new size-1 dim goes last in the IR value, so the layout survives (and no element moves)."""
    x = ctx.laid(0)
    axis = int(ctx.const(1).reshape(-1)[0]) % (len(x.perm) + 1)
    y = ctx.emit1("reshape", [x.value], {"shape": [*x.value.type.shape, 1]})
    ctx.set_output(y, (*(p + (p >= axis) for p in x.perm), axis))


@converter("SQUEEZE")
def squeeze(ctx: TflContext) -> None:
    """Drops size-1 dims where they are in the layout, so the layout survives."""
    x = ctx.laid(0)
    rank = len(x.perm)
    axes = {ctx.axis(a, rank) for a in ctx.options.get("SqueezeDims", [])} or \
        {a for a, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in axes):
        raise ctx.unsupported(f"squeeze of dims {sorted(axes)} of shape {x.shape}")
    gone = {x.ir_axis(a) for a in axes}
    shape = [d for i, d in enumerate(x.value.type.shape) if i not in gone]
    ctx.set_output(ctx.emit1("reshape", [x.value], {"shape": shape}), dropped(x.perm, sorted(axes)))


@converter("TRANSPOSE")
def transpose(ctx: TflContext) -> None:
    """No node: the output is the input under another layout (``layout.compose``)."""
    x = ctx.laid(0)
    perm = int_values(ctx.const(1))
    ctx.set_output(x.value, compose(inverse(perm), x.perm))


@converter("CONCATENATION")
def concatenation(ctx: TflContext) -> None:
    vals, perm = ctx.aligned(range(len(ctx.op.inputs)))
    axis = perm.index(ctx.axis(ctx.options.get("Axis", 0), len(perm)))
    ctx.set_output(ctx.fused(ctx.emit1("concat", vals, {"axis": axis})), perm)


#: ops that read their input 0 NCHW
SPATIAL = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D"})


@converter("PAD", "PADV2")
def pad(ctx: TflContext) -> None:
    """Keeps its input's layout, except that a 4-D pad of H and W only that feeds spatial ops alone (a
    conv's explicit padding) runs NCHW: the input's transpose then sits before it (on a graph input: at
    the edge) instead of between it and the conv."""
    x = ctx.laid(0)
    widths = ctx.const(1)  # [rank, (before, after)] in TFLite order
    if widths.shape != (len(x.perm), 2):
        raise ctx.unsupported(f"paddings of shape {widths.shape} for a rank-{len(x.perm)} input")
    out = ctx.op.outputs[0]
    readers = [op for op in ctx.sg.operators if out in op.inputs]
    if len(x.perm) == 4 and x.perm != NCHW and not widths[[0, 3]].any() and readers and \
            all(op.op in SPATIAL and op.inputs[0] == out for op in readers) and out not in ctx.sg.outputs:
        x = Laid(ctx.nchw(0), NCHW)
    pads = [int(widths[p, 0]) for p in x.perm] + [int(widths[p, 1]) for p in x.perm]
    ctx.set_output(ctx.emit1("pad", [x.value], {"pads": pads, "mode": "constant", "value": _pad_value(ctx)}),
                   x.perm)


def _pad_value(ctx: TflContext) -> float:
    """The fill: PADV2's constant, else 0. On held bytes (``ctx.raw``) it is a byte, as LiteRT's int8 pad
    takes it: PADV2's integer (int8 shifted by +128), else the output's zero point."""
    if not ctx.has_input(2):
        return float(ctx.state.held_quant[ctx.op.outputs[0]][1]) if ctx.raw else 0.0
    real = float(ctx.const(2).reshape(-1)[0])  # a quantized constant was made real at import
    if not ctx.raw:
        return real
    t = ctx.sg.tensors[ctx.op.inputs[2]]
    if t.dtype not in ("int8", "uint8"):
        raise ctx.unsupported(f"a {t.dtype} pad value for a quantized tensor")
    return float(int(t.data.reshape(-1)[0]) + (128 if t.dtype == "int8" else 0))


def sliced(ctx: TflContext, x: Laid, ranges: list[tuple[int, int, int]], shrink: list[int]) -> None:
    """Slice TFLite-order ``ranges`` (python range triples) in x's layout, then drop ``shrink`` axes."""
    if len(ranges) != len(x.perm):
        raise ctx.unsupported(f"{len(ranges)} slice ranges for a rank-{len(x.perm)} input")
    ir = [ranges[p] for p in x.perm]
    y = ctx.emit1("slice", [x.value], {"starts": [r[0] for r in ir], "ends": [r[1] for r in ir],
                                       "steps": [r[2] for r in ir]},
                  name=f"{ctx.name}/slice" if shrink else None)
    if not shrink:
        ctx.set_output(y, x.perm)
        return
    gone = {x.ir_axis(a) for a in shrink}
    shape = [d for i, d in enumerate(y.type.shape) if i not in gone]
    ctx.set_output(ctx.emit1("reshape", [y], {"shape": shape}), dropped(x.perm, shrink))


@converter("STRIDED_SLICE")
def strided_slice(ctx: TflContext) -> None:
    x = ctx.laid(0)
    begin, end, strides = (int_values(ctx.const(i)) for i in (1, 2, 3))
    if not len(begin) == len(end) == len(strides) <= len(x.perm):
        raise ctx.unsupported(f"begin {begin}, end {end} and strides {strides} for a rank-{len(x.perm)} "
                              "input")
    o = ctx.options
    if o.get("EllipsisMask") or o.get("NewAxisMask"):
        raise ctx.unsupported("ellipsis_mask and new_axis_mask are not supported")
    ranges, shrink = [], []
    for a, dim in enumerate(x.shape):
        if a >= len(begin):
            ranges.append((0, dim, 1))
            continue
        b, e, s = begin[a], end[a], strides[a]
        if s == 0:
            raise ctx.unsupported("slice stride 0")
        if o.get("Offset"):
            e += b
        if o.get("ShrinkAxisMask", 0) >> a & 1:
            if not -dim <= b < dim:
                raise ctx.unsupported(f"shrinking axis {a} of {dim} at {b}")
            b %= dim
            ranges.append((b, b + 1, 1))
            shrink.append(a)
            continue
        start = None if o.get("BeginMask", 0) >> a & 1 else b
        stop = None if o.get("EndMask", 0) >> a & 1 else e
        ranges.append(slice(start, stop, s).indices(dim))
    sliced(ctx, x, ranges, shrink)


@converter("SLICE")
def slice_(ctx: TflContext) -> None:
    x = ctx.laid(0)
    begin, size = int_values(ctx.const(1)), int_values(ctx.const(2))
    sliced(ctx, x, [(b, dim if n < 0 else b + n, 1) for b, n, dim in zip(begin, size, x.shape)], [])


@converter("GATHER")
def gather(ctx: TflContext) -> None:
    """Rank-1 indices keep the data's layout; other index ranks gather in TFLite order."""
    x = ctx.laid(0)
    axis = ctx.axis(ctx.options.get("Axis", 0), len(x.perm))
    ind = ctx.input(1)
    if int(ctx.options.get("BatchDims", 0)):
        raise ctx.unsupported("batch_dims is not supported")
    if len(ind.type.shape) != 1:
        x = Laid(ctx.input(0), identity(len(x.perm)))
    y = ctx.emit1("gather", [x.value, ind], {"axis": x.ir_axis(axis)})
    ctx.set_output(y, x.perm if len(ind.type.shape) == 1 else None)


def _split(ctx: TflContext, x: Laid, axis: int, sizes: list[int]) -> None:
    outs = ctx.emit("split", [x.value], {"axis": x.ir_axis(axis), "sizes": sizes}, n_outputs=len(sizes))
    for i, v in enumerate(outs):
        ctx.set_output(v, x.perm, i)


@converter("SPLIT")
def split(ctx: TflContext) -> None:
    x = ctx.laid(1)
    axis = ctx.axis(ctx.const(0), len(x.perm))
    n = int(ctx.options.get("NumSplits", len(ctx.op.outputs)))
    if n < 1 or x.shape[axis] % n:  # NumSplits 0 from a hostile file: no modulo by zero
        raise ctx.unsupported(f"dim {x.shape[axis]} does not split into {n}")
    _split(ctx, x, axis, [x.shape[axis] // n] * n)


@converter("SPLIT_V")
def split_v(ctx: TflContext) -> None:
    x = ctx.laid(0)
    axis = ctx.axis(ctx.const(2), len(x.perm))
    sizes = int_values(ctx.const(1))
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    _split(ctx, x, axis, sizes)


@converter("PACK")
def pack(ctx: TflContext) -> None:
    """Each input gets a size-1 dim at ``axis`` (TFLite order), then one concat."""
    rank = len(ctx.laid(0).perm) + 1
    axis = ctx.axis(ctx.options.get("Axis", 0), rank)
    parts = []
    for i in range(len(ctx.op.inputs)):
        v = ctx.input(i)
        shape = list(v.type.shape)
        shape.insert(axis, 1)
        parts.append(ctx.emit1("reshape", [v], {"shape": shape}, f"{ctx.name}/{i}"))
    ctx.set_output(ctx.emit1("concat", parts, {"axis": axis}))


@converter("UNPACK")
def unpack(ctx: TflContext) -> None:
    x = ctx.laid(0)
    axis = ctx.axis(ctx.options.get("Axis", 0), len(x.perm))
    n = x.shape[axis]
    gone = x.ir_axis(axis)
    parts = ctx.emit("split", [x.value], {"axis": gone, "sizes": [1] * n}, f"{ctx.name}/split", n_outputs=n)
    for i, v in enumerate(parts):
        shape = [d for j, d in enumerate(v.type.shape) if j != gone]
        y = ctx.emit1("reshape", [v], {"shape": shape}, f"{ctx.name}/{i}")
        ctx.set_output(y, dropped(x.perm, [axis]), i)


@converter("DEQUANTIZE", "QUANTIZE", "DENSIFY")
def requantize(ctx: TflContext) -> None:
    """Real value in, real value out: the context dequantizes the input (constants were made real at
    import: fp16 widened, int8 scaled, sparse ones made dense) and quantizes the output when it is a
    quantized tensor."""
    x = ctx.laid(0)
    ctx.set_output(x.value, x.perm)


@converter("DEPTH_TO_SPACE", "SPACE_TO_DEPTH")
def depth_space(ctx: TflContext) -> None:
    """On NCHW: TF's NHWC depth index (i * k + j) * C + c is ONNX's DCR order (``ops/movement.py``)."""
    x = ctx.nchw(0)
    c, h, w = x.type.shape[1:]
    k = int(ctx.options.get("BlockSize", 0))
    if k < 1 or (c % (k * k) if ctx.op.op == "DEPTH_TO_SPACE" else h % k or w % k):
        raise ctx.unsupported(f"block size {k} for shape {ctx.laid(0).shape}")
    attrs = {"blocksize": k, "mode": "DCR"} if ctx.op.op == "DEPTH_TO_SPACE" else {"blocksize": k}
    ctx.set_output(ctx.emit1(ctx.op.op.lower(), [x], attrs), NCHW)
