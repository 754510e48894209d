"""Small TFLite models (``tflite_builder``, no TensorFlow) that run the builtins added for real models
(shape ops, integer and bool math, index ops, mirror pads, segment reductions, 3-D convs, ...), each with
seeded inputs: ``tests/unit/test_tflite_builtins.py`` checks them against LiteRT, and
``test_tflite.py`` counts them among the models every converter must be run by."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from tests.support.tflite_builder import TfliteBuilder

SAME, VALID = 0, 1
#: TensorType codes of the int32 / int64 index outputs
INT32, INT64 = 2, 4


@dataclass(frozen=True)
class Case:
    """A model and its inputs (in order)."""

    model: bytes
    feeds: list[np.ndarray]


class Ops:
    """A builder with one-line ops: ``op`` makes the output tensor, ``ints``/``floats`` constants."""

    def __init__(self) -> None:
        self.b = TfliteBuilder()

    def op(self, code: str, ins: list[int], shape: tuple[int, ...], dtype: str = "float32",
           options: tuple | None = None) -> int:
        out = self.b.tensor(f"{code.lower()}_{len(self.b.ops)}", shape, dtype)
        self.b.op(code, ins, [out], options)
        return out

    def ints(self, *v: int, dtype: type = np.int32) -> int:
        return self.b.const(f"c{len(self.b.tensors)}", np.array(v, dtype))

    def const(self, a: np.ndarray) -> int:
        """A constant of a's shape (a scalar stays one: the builder's contiguous copy makes it 1-D)."""
        t = self.b.const(f"c{len(self.b.tensors)}", a)
        self.b.tensors[t].shape = a.shape
        return t


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def shape_ops() -> Case:
    """SHAPE and RANK fold to constants that size FILL, BROADCAST_TO and a RESHAPE; ZEROS_LIKE,
    BROADCAST_ARGS, TILE and RANGE."""
    o = Ops()
    x = o.b.tensor("x", (2, 3, 4))
    y = o.b.tensor("y", (1, 3, 1))
    s = o.op("SHAPE", [x], (3,), "int32", ("ShapeOptions", {"OutType": INT32}))
    filled = o.op("FILL", [s, o.const(np.array(1.5, np.float32))], (2, 3, 4))
    plus = o.op("ADD", [x, filled], (2, 3, 4), options=("AddOptions", {}))
    rank = o.op("RANK", [x], (), "int32")
    flat_len = o.op("MUL", [rank, o.ints(8)], (1,), "int32", ("MulOptions", {}))
    flat = o.op("RESHAPE", [plus, flat_len], (24,))
    big = o.op("BROADCAST_TO", [y, s], (2, 3, 4))
    zeros = o.op("ZEROS_LIKE", [x], (2, 3, 4))
    ysh = o.op("SHAPE", [y], (3,), "int64", ("ShapeOptions", {"OutType": INT64}))
    args = o.op("BROADCAST_ARGS", [o.ints(2, 1, 4, dtype=np.int64), ysh], (3,), "int64")
    tiled = o.op("TILE", [x, o.ints(1, 2, 1)], (2, 6, 4))
    ramp = o.op("RANGE", [o.const(np.array(0.5, np.float32)), o.const(np.array(4.5, np.float32)),
                          o.const(np.array(1.0, np.float32))], (4,))
    shifted = o.op("SUB", [x, ramp], (2, 3, 4), options=("SubOptions", {}))
    rng = _rng(1)
    feeds = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (1, 3, 1))]
    return Case(o.b.build([x, y], [flat, big, zeros, args, tiled, shifted]), feeds)


def float_math() -> Case:
    """POW, SQUARED_DIFFERENCE, FLOOR_DIV, FLOOR_MOD (both signs), ADD_N, SIN, COS, SIGN, GELU (exact and
    tanh), RELU_0_TO_1, L2_NORMALIZATION and the StableHLO elementwise ops."""
    o = Ops()
    shape = (2, 3, 4)
    a, b = o.b.tensor("a", shape), o.b.tensor("b", (3, 4))
    out = [o.op("SQUARED_DIFFERENCE", [a, b], shape), o.op("FLOOR_DIV", [a, b], shape),
           o.op("FLOOR_MOD", [a, b], shape), o.op("ADD_N", [a, a, a], shape)]
    base = o.op("ABS", [a], shape)
    out.append(o.op("POW", [base, b], shape))
    out += [o.op(k, [a], shape) for k in ("SIN", "COS", "SIGN", "RELU_0_TO_1")]
    out += [o.op("GELU", [a], shape, options=("GeluOptions", {"Approximate": t})) for t in (False, True)]
    out.append(o.op("L2_NORMALIZATION", [a], shape, options=("L2NormOptions", {})))
    out += [o.op(k, [a, a], shape) for k in ("STABLEHLO_ADD", "STABLEHLO_MULTIPLY", "STABLEHLO_MAXIMUM",
                                             "STABLEHLO_MINIMUM")]
    rng = _rng(2)
    bv = rng.uniform(0.5, 2.0, (3, 4)) * rng.choice([-1, 1], (3, 4))
    return Case(o.b.build([a, b], out), [rng.uniform(-3, 3, shape).astype(np.float32), bv.astype(np.float32)])


def int_math() -> Case:
    """int32 at run time: ADD/SUB/MUL/MAXIMUM on ``binary_loop``, FLOOR_DIV, FLOOR_MOD, SQUARED_DIFFERENCE,
    ADD_N, CUMSUM, REDUCE_MAX / SUM / REDUCE_PROD on ``reduce_loop``, ARG_MAX."""
    o = Ops()
    shape = (3, 4)
    a, b = o.b.tensor("a", shape, "int32"), o.b.tensor("b", shape, "int32")
    out = [o.op(k, [a, b], shape, "int32") for k in ("ADD", "SUB", "MUL", "MAXIMUM", "FLOOR_DIV", "FLOOR_MOD",
                                                     "SQUARED_DIFFERENCE")]
    out.append(o.op("ADD_N", [a, b, a], shape, "int32"))
    out.append(o.op("CUMSUM", [a, o.ints(1)], shape, "int32", ("CumsumOptions", {"Reverse": True})))
    for k in ("REDUCE_MAX", "SUM", "REDUCE_PROD"):
        out.append(o.op(k, [a, o.ints(1)], (3,), "int32", ("ReducerOptions", {"KeepDims": False})))
    out.append(o.op("ARG_MAX", [a, o.ints(0)], (4,), "int32", ("ArgMaxOptions", {"OutputType": INT32})))
    rng = _rng(3)
    bv = rng.integers(1, 6, shape) * rng.choice([-1, 1], shape)
    return Case(o.b.build([a, b], out), [rng.integers(-20, 20, shape).astype(np.int32), bv.astype(np.int32)])


def logic_ops() -> Case:
    """NOT_EQUAL, LOGICAL_AND / OR / NOT, REDUCE_ANY / ALL on bools; BITWISE_XOR, RIGHT_SHIFT and the
    StableHLO AND / SHIFT_LEFT on int32."""
    o = Ops()
    shape = (2, 5)
    a, b = o.b.tensor("a", shape), o.b.tensor("b", shape)
    i, n = o.b.tensor("i", shape, "int32"), o.b.tensor("n", shape, "int32")
    pos = o.op("GREATER", [a, o.const(np.zeros(1, np.float32))], shape, "bool")
    neg = o.op("LESS", [b, o.const(np.zeros(1, np.float32))], shape, "bool")
    out = [o.op("NOT_EQUAL", [a, b], shape, "bool"), o.op("LOGICAL_AND", [pos, neg], shape, "bool"),
           o.op("LOGICAL_OR", [pos, neg], shape, "bool"), o.op("LOGICAL_NOT", [pos], shape, "bool"),
           o.op("STABLEHLO_AND", [pos, neg], shape, "bool")]
    out += [o.op(k, [pos, o.ints(1)], (2,), "bool", ("ReducerOptions", {"KeepDims": False}))
            for k in ("REDUCE_ANY", "REDUCE_ALL")]
    out += [o.op(k, [i, n], shape, "int32") for k in ("BITWISE_XOR", "RIGHT_SHIFT", "STABLEHLO_AND",
                                                       "STABLEHLO_SHIFT_LEFT")]
    rng = _rng(4)
    av = rng.standard_normal(shape).astype(np.float32)
    bv = np.where(rng.random(shape) < 0.3, av, rng.standard_normal(shape)).astype(np.float32)
    return Case(o.b.build([a, b, i, n], out),
                [av, bv, rng.integers(-1000, 1000, shape).astype(np.int32),
                 rng.integers(0, 12, shape).astype(np.int32)])


def index_ops() -> Case:
    """ARG_MIN, TOPK_V2, CUMSUM, REVERSE_V2, GATHER_ND, SCATTER_ND, ONE_HOT, EMBEDDING_LOOKUP, MIRROR_PAD
    (both modes), REVERSE_SEQUENCE, BUCKETIZE, DYNAMIC_UPDATE_SLICE (a run-time start, clamped)."""
    o = Ops()
    x = o.b.tensor("x", (2, 5, 6))
    ids = o.b.tensor("ids", (4,), "int32")
    upd = o.b.tensor("upd", (3, 4))
    start = o.b.tensor("start", (3,), "int32")
    box = o.b.tensor("box", (1, 2, 3))
    out = [o.op("ARG_MIN", [x, o.ints(1)], (2, 6), "int64", ("ArgMinOptions", {"OutputType": INT64}))]
    vals = o.b.tensor("top_values", (2, 5, 3))
    idx = o.b.tensor("top_indices", (2, 5, 3), "int32")
    o.b.op("TOPK_V2", [x, o.ints(3)], [vals, idx])
    out += [vals, idx]
    out.append(o.op("CUMSUM", [x, o.ints(-1)], (2, 5, 6), options=("CumsumOptions", {"Exclusive": True})))
    out.append(o.op("REVERSE_V2", [x, o.ints(1, 2)], (2, 5, 6)))
    out.append(o.op("GATHER_ND", [x, o.const(np.array([[0, 1], [1, 4], [1, 0]], np.int32))], (3, 6)))
    out.append(o.op("SCATTER_ND", [o.const(np.array([[1], [0], [1]], np.int32)), upd, o.ints(2, 4)], (2, 4)))
    on_off = [o.const(np.array(v, np.float32)) for v in (2.0, -1.0)]
    out.append(o.op("ONE_HOT", [ids, o.ints(4), *on_off], (4, 4), options=("OneHotOptions", {"Axis": -1})))
    table = o.const(_rng(50).standard_normal((6, 3)).astype(np.float32))
    safe = o.op("MAXIMUM", [ids, o.ints(0)], (4,), "int32")
    out.append(o.op("EMBEDDING_LOOKUP", [safe, table], (4, 3)))
    widths = o.const(np.array([[0, 0], [1, 2], [2, 1]], np.int32))
    out += [o.op("MIRROR_PAD", [x, widths], (2, 8, 9), options=("MirrorPadOptions", {"Mode": m}))
            for m in (0, 1)]
    out.append(o.op("REVERSE_SEQUENCE", [x, o.ints(3, 5)], (2, 5, 6),
                    options=("ReverseSequenceOptions", {"SeqDim": 1, "BatchDim": 0})))
    out.append(o.op("REVERSE_SEQUENCE", [x, o.ints(0, 6, 2, 1, 5)], (2, 5, 6),
                    options=("ReverseSequenceOptions", {"SeqDim": 2, "BatchDim": 1})))
    out.append(o.op("BUCKETIZE", [x], (2, 5, 6), "int32",
                    ("BucketizeOptions", {"Boundaries": [-1.0, 0.0, 0.5]})))
    out.append(o.op("DYNAMIC_UPDATE_SLICE", [x, box, start], (2, 5, 6)))
    rng = _rng(5)
    return Case(o.b.build([x, ids, upd, start, box], out),
                [rng.standard_normal((2, 5, 6)).astype(np.float32), np.array([2, -1, 3, 5], np.int32),
                 rng.standard_normal((3, 4)).astype(np.float32), np.array([1, 4, -2], np.int32),
                 rng.standard_normal((1, 2, 3)).astype(np.float32)])


def segment_ops() -> Case:
    """SEGMENT_SUM and the UNSORTED_SEGMENT reductions (segment 3 empty: each holds LiteRT's initial
    value), MATRIX_DIAG and MATRIX_SET_DIAG."""
    o = Ops()
    data = o.b.tensor("data", (4, 3))
    seg = o.b.tensor("seg", (4,), "int32")
    m = o.b.tensor("m", (2, 3, 4))
    out = [o.op("SEGMENT_SUM", [data, o.ints(0, 0, 1, 2)], (3, 3))]
    out += [o.op(k, [data, seg, o.ints(4)], (4, 3)) for k in ("UNSORTED_SEGMENT_SUM", "UNSORTED_SEGMENT_PROD",
                                                             "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN")]
    diag = o.op("MATRIX_DIAG", [data], (4, 3, 3))
    head = o.op("SLICE", [data, o.ints(0, 0), o.ints(2, 3)], (2, 3))
    out += [diag, o.op("MATRIX_SET_DIAG", [m, head], (2, 3, 4))]
    rng = _rng(6)
    return Case(o.b.build([data, seg, m], out),
                [rng.standard_normal((4, 3)).astype(np.float32), np.array([2, 0, 2, 1], np.int32),
                 rng.standard_normal((2, 3, 4)).astype(np.float32)])


def nn_ops() -> Case:
    """After a conv (so the tensors are held NCHW): L2_POOL_2D, LOCAL_RESPONSE_NORMALIZATION,
    SPACE_TO_BATCH_ND -> depthwise -> BATCH_TO_SPACE_ND (a dilated conv as older converters write it),
    CONV_3D."""
    o = Ops()
    rng = _rng(7)
    img = o.b.tensor("img", (1, 8, 8, 3))
    c = o.op("CONV_2D", [img, o.const(rng.standard_normal((4, 1, 1, 3)).astype(np.float32)),
                         o.const(np.zeros(4, np.float32))], (1, 8, 8, 4),
             options=("Conv2DOptions", {"Padding": VALID, "StrideH": 1, "StrideW": 1}))
    out = [o.op("L2_POOL_2D", [c], (1, 4, 4, 4), options=("Pool2DOptions", {
        "Padding": SAME, "StrideH": 2, "StrideW": 2, "FilterHeight": 3, "FilterWidth": 3}))]
    out.append(o.op("LOCAL_RESPONSE_NORMALIZATION", [c], (1, 8, 8, 4), options=(
        "LocalResponseNormalizationOptions", {"Radius": 1, "Bias": 1.0, "Alpha": 0.3, "Beta": 0.75})))
    s2b = o.op("SPACE_TO_BATCH_ND", [c, o.ints(2, 2), o.const(np.array([[2, 2], [2, 2]], np.int32))],
               (4, 6, 6, 4))
    dw = o.op("DEPTHWISE_CONV_2D", [s2b, o.const(rng.standard_normal((1, 3, 3, 4)).astype(np.float32)),
                                    o.const(np.zeros(4, np.float32))],
              (4, 4, 4, 4), options=("DepthwiseConv2DOptions", {"Padding": VALID, "StrideH": 1, "StrideW": 1,
                                                                 "DepthMultiplier": 1}))
    out.append(o.op("BATCH_TO_SPACE_ND", [dw, o.ints(2, 2), o.const(np.array([[0, 1], [1, 0]], np.int32))],
                    (1, 7, 7, 4)))
    vol = o.b.tensor("vol", (1, 4, 6, 6, 3))
    out.append(o.op("CONV_3D", [vol, o.const(rng.standard_normal((3, 3, 3, 3, 5)).astype(np.float32) * 0.3),
                                o.const(rng.standard_normal(5).astype(np.float32))], (1, 2, 3, 3, 5),
                    options=("Conv3DOptions", {"Padding": SAME, "StrideD": 2, "StrideH": 2, "StrideW": 2,
                                               "DilationDFactor": 1, "DilationHFactor": 1,
                                               "DilationWFactor": 1, "FusedActivationFunction": 1})))
    return Case(o.b.build([img, vol], out),
                [rng.standard_normal((1, 8, 8, 3)).astype(np.float32),
                 rng.standard_normal((1, 4, 6, 6, 3)).astype(np.float32)])


#: FAKE_QUANT's (min, max, num_bits) in ``fake_quant``: zero inside, at an end, outside; 2 to 16 bits
FAKE_QUANT_RANGES = ((-0.3, 2.7, 8), (0.1, 6.0, 4), (-10.0, -0.5, 16), (-2.5, 3.3, 2))


def fake_quant() -> Case:
    """FAKE_QUANT over ``FAKE_QUANT_RANGES``, on inputs that hit every rounding tie of the 8-bit range
    (nudged min + (k + 1/2) * scale), NaN, both infinities and seeded normals."""
    from cuvil_edge.frontend.tflite.convert_math import fake_quant_nudged

    o = Ops()
    x = o.b.tensor("x", (1, 320))
    outs = [o.op("FAKE_QUANT", [x], (1, 320),
                 options=("FakeQuantOptions", {"Min": lo, "Max": hi, "NumBits": n}))
            for lo, hi, n in FAKE_QUANT_RANGES]
    scale, nmin, _ = fake_quant_nudged(*FAKE_QUANT_RANGES[0])
    ties = np.float32(nmin) + (np.arange(256, dtype=np.float32) + np.float32(0.5)) * np.float32(scale)
    odd = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 2.7, -0.3], np.float32)
    noise = (_rng(8).standard_normal(320 - 256 - odd.size) * 4).astype(np.float32)
    return Case(o.b.build([x], outs), [np.concatenate([ties, odd, noise])[None]])


#: every case, by name
CASES: dict[str, Callable[[], Case]] = {f.__name__: f for f in (
    shape_ops, float_math, int_math, logic_ops, index_ops, segment_ops, nn_ops, fake_quant)}


def builtin_models() -> list[bytes]:
    """The models of every case (for the converter-coverage check)."""
    return [make().model for make in CASES.values()]


def litert(model: bytes, feeds: list[np.ndarray]) -> dict[str, np.ndarray]:
    """LiteRT's outputs (the oracle) by the tensor names ``get_output_details`` reports."""
    it = Interpreter(model_content=model, num_threads=1)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds):
        it.set_tensor(d["index"], x)
    it.invoke()
    return {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}


def assert_matches_litert(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """Every LiteRT output, by name, with its dtype and shape: floats within 1e-4, the rest equal."""
    assert sorted(got) == sorted(want)
    for name, ref in want.items():
        assert (got[name].dtype, got[name].shape) == (ref.dtype, ref.shape), name
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-4, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], ref, err_msg=name)
