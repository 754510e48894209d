"""TFLite models written by ``tflite_builder`` (no TensorFlow): a float CNN (fp16 weights too), batch
matmul with strided slices, an op zoo, an int8 per-channel CNN with its softmax tail, int8 pad and pool,
fused activations. ``tests/integration/test_tflite.py`` checks each against LiteRT; the TFLite fuzz
target seeds from them and ``benchmarks/bench_tflite.py`` times them."""

from __future__ import annotations

import numpy as np

from tests.support.tflite_builder import TfliteBuilder

RNG = np.random.default_rng(12)
RELU, RELU_N1_TO_1, RELU6 = 1, 2, 3
SAME, VALID = 0, 1


def _w(*shape: int, scale: float = 0.3) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def cnn(fp16_weights: bool = False) -> bytes:
    """conv (RELU6) -> depthwise (RELU) -> concat with its sigmoid -> 1x1 conv -> hard-swish -> pad ->
    max pool -> avg pool (SAME) -> mul/sub/div with channel constants -> mean -> FC (RELU) -> softmax;
    and a flatten -> FC head (its weights re-laid, not the activations)."""
    b = TfliteBuilder()

    def weight(name: str, array: np.ndarray) -> int:
        if not fp16_weights:
            return b.const(name, array)
        half = b.const(name + "_fp16", array.astype(np.float16))
        real = b.tensor(name, array.shape)
        b.op("DEQUANTIZE", [half], [real])
        return real

    x = b.tensor("image", (1, 16, 16, 3))
    c1 = b.tensor("c1", (1, 8, 8, 8))
    b.op("CONV_2D", [x, weight("w1", _w(8, 3, 3, 3)), b.const("b1", _w(8))], [c1],
         ("Conv2DOptions", {"Padding": SAME, "StrideH": 2, "StrideW": 2, "FusedActivationFunction": RELU6}))
    d1 = b.tensor("d1", (1, 8, 8, 8))
    b.op("DEPTHWISE_CONV_2D", [c1, weight("wd", _w(1, 3, 3, 8)), b.const("bd", _w(8))], [d1],
         ("DepthwiseConv2DOptions", {"Padding": SAME, "StrideH": 1, "StrideW": 1, "DepthMultiplier": 1,
                                     "FusedActivationFunction": RELU}))
    s1 = b.tensor("s1", (1, 8, 8, 8))
    b.op("LOGISTIC", [d1], [s1])
    cat = b.tensor("cat", (1, 8, 8, 16))
    b.op("CONCATENATION", [d1, s1], [cat], ("ConcatenationOptions", {"Axis": 3}))
    c2 = b.tensor("c2", (1, 8, 8, 12))
    b.op("CONV_2D", [cat, weight("w2", _w(12, 1, 1, 16)), b.const("b2", _w(12))], [c2],
         ("Conv2DOptions", {"Padding": VALID, "StrideH": 1, "StrideW": 1}))
    hs = b.tensor("hs", (1, 8, 8, 12))
    b.op("HARD_SWISH", [c2], [hs])
    padded = b.tensor("padded", (1, 10, 9, 12))
    b.op("PAD", [hs, b.const("pads", np.array([[0, 0], [1, 1], [0, 1], [0, 0]], np.int32))], [padded])
    mp = b.tensor("mp", (1, 5, 4, 12))
    b.op("MAX_POOL_2D", [padded], [mp], ("Pool2DOptions", {"Padding": VALID, "StrideH": 2, "StrideW": 2,
                                                             "FilterHeight": 2, "FilterWidth": 2}))
    ap = b.tensor("ap", (1, 5, 4, 12))
    b.op("AVERAGE_POOL_2D", [mp], [ap], ("Pool2DOptions", {"Padding": SAME, "StrideH": 1, "StrideW": 1,
                                                             "FilterHeight": 3, "FilterWidth": 3}))
    scaled = b.tensor("scaled", (1, 5, 4, 12))
    b.op("MUL", [ap, b.const("gamma", _w(12) + 1)], [scaled], ("MulOptions", {"FusedActivationFunction": 0}))
    shifted = b.tensor("shifted", (1, 5, 4, 12))
    b.op("SUB", [scaled, b.const("beta", _w(12))], [shifted], ("SubOptions", {"FusedActivationFunction": 0}))
    th = b.tensor("th", (1, 5, 4, 12))
    b.op("TANH", [shifted], [th])
    div = b.tensor("div", (1, 5, 4, 12))
    b.op("DIV", [th, b.const("denom", np.abs(_w(12)) + 0.5)], [div], ("DivOptions", {}))
    gap = b.tensor("gap", (1, 12))
    b.op("MEAN", [div, b.const("axes", np.array([1, 2], np.int32))], [gap],
         ("ReducerOptions", {"KeepDims": False}))
    fc = b.tensor("fc", (1, 10))
    b.op("FULLY_CONNECTED", [gap, weight("wfc", _w(10, 12)), b.const("bfc", _w(10))], [fc],
         ("FullyConnectedOptions", {"FusedActivationFunction": RELU}))
    probs = b.tensor("probs", (1, 10))
    b.op("SOFTMAX", [fc], [probs], ("SoftmaxOptions", {"Beta": 1.0}))
    feat = b.tensor("features", (1, 5, 4, 12))
    b.op("RELU", [div], [feat])
    flat = b.tensor("flat", (1, 240))
    b.op("RESHAPE", [feat, b.const("flat_shape", np.array([1, 240], np.int32))], [flat])
    head = b.tensor("head", (1, 6))
    b.op("FULLY_CONNECTED", [flat, weight("whead", _w(6, 240, scale=0.1))], [head],
         ("FullyConnectedOptions", {}))
    return b.build([x], [probs, feat, head])


def matmul_slices() -> bytes:
    """BATCH_MATMUL (adj_y, then a constant right side), STRIDED_SLICE with masks and a shrink axis,
    TRANSPOSE, RESHAPE, SQUEEZE."""
    b = TfliteBuilder()
    a, k = b.tensor("a", (2, 4, 6)), b.tensor("k", (2, 3, 6))
    att = b.tensor("att", (2, 4, 3))
    b.op("BATCH_MATMUL", [a, k], [att], ("BatchMatMulOptions", {"AdjX": False, "AdjY": True}))
    proj = b.tensor("proj", (2, 4, 5))
    b.op("BATCH_MATMUL", [att, b.const("wp", _w(3, 5))], [proj], ("BatchMatMulOptions", {}))
    every_other = b.tensor("every_other", (2, 2, 3))
    b.op("STRIDED_SLICE", [proj, *(b.const(n, np.array(v, np.int32)) for n, v in
                                   (("begin", [0, 1, 1]), ("end", [0, 4, -1]), ("strides", [1, 2, 1])))],
         [every_other], ("StridedSliceOptions", {"BeginMask": 1, "EndMask": 1}))
    last = b.tensor("last", (4, 5))
    b.op("STRIDED_SLICE", [proj, *(b.const(n + "2", np.array(v, np.int32)) for n, v in
                                   (("begin", [-1, 0, 0]), ("end", [0, 4, 5]), ("strides", [1, 1, 1])))],
         [last], ("StridedSliceOptions", {"ShrinkAxisMask": 1}))
    t = b.tensor("t", (5, 4))
    b.op("TRANSPOSE", [last, b.const("perm", np.array([1, 0], np.int32))], [t])
    r = b.tensor("r", (1, 20, 1))
    b.op("RESHAPE", [t, b.const("shape", np.array([1, -1, 1], np.int32))], [r])
    flat = b.tensor("flat", (20,))
    b.op("SQUEEZE", [r], [flat], ("SqueezeOptions", {"SqueezeDims": [0, 2]}))
    return b.build([a, k], [every_other, flat])


def op_zoo() -> bytes:
    """Every other converter, on a tensor the layout change made NCHW, so each axis remap is exercised."""
    b = TfliteBuilder()

    def op(code: str, ins: list[int], shape: tuple[int, ...], options: tuple | None = None) -> int:
        out = b.tensor(f"{code.lower()}_{len(b.ops)}", shape)
        b.op(code, ins, [out], options)
        return out

    def ints(*v: int) -> int:
        return b.const(f"i{len(b.tensors)}", np.array(v, np.int32))

    nhwc = (1, 8, 8, 6)
    x = b.tensor("x", (1, 8, 8, 4))
    c = op("CONV_2D", [x, b.const("w", _w(6, 1, 1, 4, scale=1.0)), b.const("b", _w(6))], nhwc,
           ("Conv2DOptions", {"Padding": VALID, "StrideH": 1, "StrideW": 1}))
    lr = op("LEAKY_RELU", [c], nhwc, ("LeakyReluOptions", {"Alpha": 0.1}))
    el = op("ELU", [op("PRELU", [c, b.const("alpha", _w(6))], nhwc)], nhwc)
    mx = op("MAXIMUM", [lr, op("RELU6", [el], nhwc)], nhwc)
    mn = op("MINIMUM", [mx, op("RELU_N1_TO_1", [c], nhwc)], nhwc)
    ab1 = op("ADD", [op("ABS", [mn], nhwc), b.const("one", np.ones(1, np.float32))], nhwc,
             ("AddOptions", {"FusedActivationFunction": 0}))
    lg, sq, rs = (op(k, [ab1], nhwc) for k in ("LOG", "SQRT", "RSQRT"))
    m = op("ADD", [lg, sq], nhwc, ("AddOptions", {"FusedActivationFunction": RELU}))
    m = op("MUL", [m, op("EXP", [op("NEG", [lg], nhwc)], nhwc)], nhwc, ("MulOptions", {}))
    m = op("SUB", [m, op("SQUARE", [rs], nhwc)], nhwc, ("SubOptions", {}))
    halves = [b.tensor("half0", (1, 8, 8, 3)), b.tensor("half1", (1, 8, 8, 3))]
    b.op("SPLIT", [ints(3), m], halves, ("SplitOptions", {"NumSplits": 2}))
    parts = op("MAXIMUM", halves, (1, 8, 8, 3))
    rows = [b.tensor("rows0", (1, 2, 8, 6)), b.tensor("rows1", (1, 6, 8, 6))]
    b.op("SPLIT_V", [m, ints(2, -1), ints(1)], rows, ("SplitVOptions", {"NumSplits": 2}))
    sl = op("SLICE", [m, ints(0, 1, 2, 0), ints(1, 4, -1, 3)], (1, 4, 6, 3))
    widths = b.const("widths", np.array([[0, 0], [1, 0], [0, 2], [1, 1]], np.int32))
    pv = op("PADV2", [sl, widths, b.const("pv", np.array([-0.5], np.float32))],
            (1, 5, 8, 5))
    rb = op("RESIZE_BILINEAR", [pv, ints(10, 16)], (1, 10, 16, 5),
            ("ResizeBilinearOptions", {"HalfPixelCenters": True}))
    rn = op("RESIZE_NEAREST_NEIGHBOR", [pv, ints(7, 12)], (1, 7, 12, 5), ("ResizeNearestNeighborOptions", {}))
    tc = op("TRANSPOSE_CONV", [ints(1, 16, 16, 2), b.const("wt", _w(2, 3, 3, 6)), m], (1, 16, 16, 2),
            ("TransposeConvOptions", {"Padding": SAME, "StrideH": 2, "StrideW": 2}))
    g = op("GATHER", [m, ints(2, 0, 5)], (1, 8, 8, 3), ("GatherOptions", {"Axis": 3}))
    rmax = op("REDUCE_MAX", [g, ints(3)], (1, 8, 8, 1), ("ReducerOptions", {"KeepDims": True}))
    rmin = op("REDUCE_MIN", [g, ints(1, 2)], (1, 1, 1, 3), ("ReducerOptions", {"KeepDims": True}))
    rprod = op("REDUCE_PROD", [g, ints(3)], (1, 8, 8), ("ReducerOptions", {"KeepDims": False}))
    ls = op("LOG_SOFTMAX", [op("SUM", [g, ints(1)], (1, 8, 3), ("ReducerOptions", {"KeepDims": False}))],
            (1, 8, 3))
    ed = op("EXPAND_DIMS", [ls, ints(0)], (1, 1, 8, 3))
    chans = [b.tensor(f"chan{i}", (1, 8, 8)) for i in range(3)]
    b.op("UNPACK", [halves[0]], chans, ("UnpackOptions", {"Num": 3, "Axis": 3}))
    pk = op("PACK", chans, (1, 3, 8, 8), ("PackOptions", {"ValuesCount": 3, "Axis": 1}))
    ro = op("ROUND", [op("ADD", [op("FLOOR", [m], nhwc), op("CEIL", [m], nhwc)], nhwc, ("AddOptions", {}))],
            nhwc)
    flat = op("RESHAPE", [m, ints(1, -1)], (1, 384))  # a flatten read by no FC: TFLite order at the output
    dw = op("DEPTHWISE_CONV_2D", [m, b.const("wdw", _w(1, 3, 3, 12)), b.const("bdw", _w(12))], (1, 4, 4, 12),
            ("DepthwiseConv2DOptions", {"Padding": VALID, "StrideH": 1, "StrideW": 1, "DepthMultiplier": 2,
                                        "DilationHFactor": 2, "DilationWFactor": 2}))
    return b.build([x], [parts, rows[1], pv, rb, rn, tc, rmax, rmin, rprod, ed, pk, ro, flat, dw])


def _per_channel(w: np.ndarray, axis: int) -> tuple[np.ndarray, list[float]]:
    """Symmetric int8 weights with one scale per slice along ``axis``."""
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    scales = np.abs(moved).max(axis=1) / 127
    shape = [-1 if d == axis else 1 for d in range(w.ndim)]
    return np.clip(np.rint(w / scales.reshape(shape)), -127, 127).astype(np.int8), [float(x) for x in scales]


S_LOGITS = 24 / 255


def int8_cnn() -> bytes:
    """Full-int8, per-channel weights: int8 input -> conv (RELU) -> depthwise -> avg pool -> concat ->
    reshape -> FC -> softmax -> QUANTIZE to a uint8 output."""
    b = TfliteBuilder()
    s_in, s_c1, s_d1, s_fc = 4 / 255, 6 / 255, 8 / 255, S_LOGITS

    def layer(name: str, w: np.ndarray, axis: int, s_x: float) -> tuple[int, int]:
        q, scales = _per_channel(w, axis)
        wq = b.const(name + "_w", q, (scales, [0] * len(scales), axis))
        bias_scales = [s_x * s for s in scales]
        bias = np.rint(_w(len(scales)) / np.asarray(bias_scales)).astype(np.int32)
        return wq, b.const(name + "_b", bias, (bias_scales, [0] * len(scales), 0))

    x = b.tensor("image", (1, 8, 8, 3), "int8", ([s_in], [0], 0))
    c1 = b.tensor("c1", (1, 8, 8, 8), "int8", ([s_c1], [-128], 0))
    b.op("CONV_2D", [x, *layer("c1", _w(8, 3, 3, 3), 0, s_in)], [c1],
         ("Conv2DOptions", {"Padding": SAME, "StrideH": 1, "StrideW": 1, "FusedActivationFunction": RELU}))
    d1 = b.tensor("d1", (1, 8, 8, 8), "int8", ([s_d1], [3], 0))
    b.op("DEPTHWISE_CONV_2D", [c1, *layer("d1", _w(1, 3, 3, 8), 3, s_c1)], [d1],
         ("DepthwiseConv2DOptions", {"Padding": SAME, "StrideH": 1, "StrideW": 1, "DepthMultiplier": 1}))
    ap = b.tensor("ap", (1, 4, 4, 8), "int8", ([s_d1], [3], 0))
    b.op("AVERAGE_POOL_2D", [d1], [ap], ("Pool2DOptions", {"Padding": VALID, "StrideH": 2, "StrideW": 2,
                                                             "FilterHeight": 2, "FilterWidth": 2}))
    twice = b.tensor("twice", (1, 4, 4, 16), "int8", ([s_d1], [3], 0))
    b.op("CONCATENATION", [ap, ap], [twice], ("ConcatenationOptions", {"Axis": 3}))
    flat = b.tensor("flat", (1, 256), "int8", ([s_d1], [3], 0))
    b.op("RESHAPE", [twice, b.const("shape", np.array([1, 256], np.int32))], [flat])
    fc = b.tensor("fc", (1, 10), "int8", ([s_fc], [0], 0))
    b.op("FULLY_CONNECTED", [flat, *layer("fc", _w(10, 256, scale=0.07), 0, s_d1)], [fc],
         ("FullyConnectedOptions", {}))
    probs = softmax_tail(b, fc)
    return b.build([x], [probs, d1, fc])


def softmax_tail(b: TfliteBuilder, logits: int) -> int:
    """int8 SOFTMAX, then QUANTIZE to uint8 (scale 1/256)."""
    sm = b.tensor("sm", (1, 10), "int8", ([1 / 256], [-128], 0))
    b.op("SOFTMAX", [logits], [sm], ("SoftmaxOptions", {"Beta": 1.0}))
    probs = b.tensor("probs", (1, 10), "uint8", ([1 / 256], [0], 0))
    b.op("QUANTIZE", [sm], [probs])
    return probs


def int8_pad_pool() -> bytes:
    """int8 PAD (the zero point) and PADV2 (a constant) around MAX_POOL_2D at strides 1 and 2 and wide
    enough for the 16-column steps, one PAD feeding a per-channel conv (the pad then runs NCHW)."""
    b = TfliteBuilder()
    q = ([0.05], [-7], 0)
    x = b.tensor("x", (1, 9, 40, 4), "int8", q)
    padded = b.tensor("padded", (1, 11, 42, 4), "int8", q)
    b.op("PAD", [x, b.const("pads", np.array([[0, 0], [1, 1], [2, 0], [0, 0]], np.int32))], [padded])
    wide = b.tensor("wide", (1, 5, 20, 4), "int8", q)
    b.op("MAX_POOL_2D", [padded], [wide], ("Pool2DOptions", {"Padding": VALID, "StrideH": 2, "StrideW": 2,
                                                              "FilterHeight": 3, "FilterWidth": 3}))
    filled = b.tensor("filled", (1, 10, 43, 4), "int8", q)
    b.op("PADV2", [x, b.const("pads2", np.array([[0, 0], [0, 1], [1, 2], [0, 0]], np.int32)),
                   b.const("fill", np.array([-100], np.int8), q)], [filled])
    same = b.tensor("same", (1, 10, 43, 4), "int8", q)
    b.op("MAX_POOL_2D", [filled], [same], ("Pool2DOptions", {"Padding": SAME, "StrideH": 1, "StrideW": 1,
                                                              "FilterHeight": 2, "FilterWidth": 3}))
    for_conv = b.tensor("for_conv", (1, 11, 42, 4), "int8", q)
    b.op("PAD", [x, b.const("pads3", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))], [for_conv])
    wq, scales = _per_channel(_w(3, 3, 3, 4), 0)
    conv = b.tensor("conv", (1, 9, 40, 3), "int8", ([0.04], [2], 0))
    bias_scales = [0.05 * s for s in scales]
    b.op("CONV_2D", [for_conv, b.const("w", wq, (scales, [0] * 3, 0)),
                     b.const("b", np.zeros(3, np.int32), (bias_scales, [0] * 3, 0))], [conv],
         ("Conv2DOptions", {"Padding": VALID, "StrideH": 1, "StrideW": 1}))
    return b.build([x], [wide, same, conv])


def fused_activations() -> bytes:
    """The fused activations conv / depthwise / FC / ADD (above) do not cover: on SUB, MUL, DIV, both
    pools and TRANSPOSE_CONV. (CONCATENATION's has no LiteRT meaning to compare with: its builtin kernels
    refuse one, its XNNPACK delegate ignores it; ours applies it, as the schema says.)"""
    b = TfliteBuilder()
    shape = (1, 6, 6, 4)
    x, y = b.tensor("x", shape), b.tensor("y", shape)

    def op(code: str, ins: list[int], out_shape: tuple[int, ...], options: str, act: int, **attrs) -> int:
        out = b.tensor(f"{code.lower()}_{len(b.ops)}", out_shape)
        b.op(code, ins, [out], (options, {"FusedActivationFunction": act, **attrs}))
        return out

    sub = op("SUB", [x, y], shape, "SubOptions", RELU6)
    mul = op("MUL", [x, y], shape, "MulOptions", RELU_N1_TO_1)
    div = op("DIV", [x, b.const("d", np.abs(_w(4)) + 0.2)], shape, "DivOptions", RELU)
    cat = op("CONCATENATION", [sub, mul, div], (1, 6, 6, 12), "ConcatenationOptions", 0, Axis=3)
    pool = {"Padding": SAME, "StrideH": 2, "StrideW": 2, "FilterHeight": 3, "FilterWidth": 3}
    mp = op("MAX_POOL_2D", [op("MUL", [cat, b.const("k", np.float32([3]))], (1, 6, 6, 12), "MulOptions", 0)],
            (1, 3, 3, 12), "Pool2DOptions", RELU_N1_TO_1, **pool)
    ap = op("AVERAGE_POOL_2D", [x], (1, 3, 3, 4), "Pool2DOptions", RELU, **pool)
    out_shape = b.const("out_shape", np.array([1, 6, 6, 2], np.int32))
    tc = op("TRANSPOSE_CONV", [out_shape, b.const("wt", _w(2, 3, 3, 4)), ap], (1, 6, 6, 2),
            "TransposeConvOptions", RELU6, Padding=SAME, StrideH=2, StrideW=2)
    return b.build([x, y], [cat, mp, tc])
