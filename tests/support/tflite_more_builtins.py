"""Small TFLite models (``tflite_builder``, no TensorFlow) for ATAN2, SPARSE_TO_DENSE, CONV_3D_TRANSPOSE,
BITCAST and the data-dependent WHERE, UNIQUE and NON_MAX_SUPPRESSION_V4 / V5, each with seeded inputs:
``tests/unit/test_tflite_more_builtins.py`` checks them against LiteRT, and ``test_tflite.py`` counts them
among the models every converter must be run by."""

from __future__ import annotations

import numpy as np

from tests.support.tflite_builtins import INT64, SAME, VALID, Case, Ops


def atan2() -> Case:
    """Every quadrant, the axes and both signed zeros of each operand."""
    o = Ops()
    shape = (4, 8)
    y, x = o.b.tensor("y", shape), o.b.tensor("x", shape)
    out = o.op("ATAN2", [y, x], shape)
    rng = np.random.default_rng(11)
    yv, xv = (rng.uniform(-4, 4, shape).astype(np.float32) for _ in range(2))
    yv[0, :8] = [1.5, -1.5, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0]
    xv[0, :8] = [-0.0, 0.0, 2.0, 2.0, -2.0, -2.0, -0.0, -0.0]
    yv[1, :2], xv[1, :2] = [1e-30, -3.0], [-5.0, 1e-30]
    return Case(o.b.build([y, x], [out]), [yv, xv])


def sparse_to_dense() -> Case:
    """Run-time values and default at [n, 2] indices, (1, 2) repeated (the last value stays); a constant
    scalar value at 1-D indices."""
    o = Ops()
    vals, default = o.b.tensor("vals", (4,)), o.b.tensor("default", ())
    idx = o.const(np.array([[0, 1], [1, 2], [2, 0], [1, 2]], np.int32))
    dense = o.op("SPARSE_TO_DENSE", [idx, o.ints(3, 4), vals, default], (3, 4))
    ones = o.op("SPARSE_TO_DENSE", [o.ints(4, 0, 2), o.ints(6), o.const(np.array(7, np.int32)),
                                    o.const(np.array(-1, np.int32))], (6,), "int32")
    rng = np.random.default_rng(12)
    return Case(o.b.build([vals, default], [dense, ones]),
                [rng.standard_normal(4).astype(np.float32), np.array(0.25, np.float32)])


def conv_3d_transpose(padding: int = SAME, strides: tuple[int, ...] = (2, 2, 2),
                      dilations: tuple[int, ...] = (1, 1, 1)) -> Case:
    """Weights [KD, KH, KW, O, I], a bias and a fused RELU, to the output size the options give."""
    rng = np.random.default_rng(13)
    x_shape, k, cin, cout = (1, 3, 4, 3, 2), (2, 3, 3), 2, 3
    spatial = [(i - 1) * s + (kk - 1) * d + 1 if padding == VALID else i * s
               for i, s, kk, d in zip(x_shape[1:4], strides, k, dilations)]
    o = Ops()
    x = o.b.tensor("x", x_shape)
    out_shape = (1, *spatial, cout)
    w = o.const(rng.standard_normal((*k, cout, cin)).astype(np.float32))
    bias = o.const(rng.standard_normal(cout).astype(np.float32))
    options = {"Padding": padding, "FusedActivationFunction": 1,
               **{f"Stride{a}": s for a, s in zip("DHW", strides)},
               **{f"Dilation{a}Factor": d for a, d in zip("DHW", dilations)}}
    y = o.op("CONV_3D_TRANSPOSE", [o.ints(*out_shape), w, x, bias], out_shape,
             options=("Conv3DOptions", options))
    return Case(o.b.build([x], [y]), [rng.standard_normal(x_shape).astype(np.float32)])


def bitcasts() -> Case:
    """float32 <-> int32 (a view); int32 -> int8 [.., 4] and int64 -> int32 [.., 2] split; uint8 [.., 4]
    -> float32 joined."""
    o = Ops()
    f, i, b, w = (o.b.tensor("f", (2, 3)), o.b.tensor("i", (2, 3), "int32"), o.b.tensor("b", (3, 4), "uint8"),
                  o.b.tensor("w", (5,), "int64"))
    out = [o.op("BITCAST", [f], (2, 3), "int32"), o.op("BITCAST", [i], (2, 3, 4), "int8"),
           o.op("BITCAST", [b], (3,), "float32"), o.op("BITCAST", [w], (5, 2), "int32"),
           o.op("BITCAST", [i], (2, 3), "float32")]
    rng = np.random.default_rng(14)
    iv = rng.integers(-2**31, 2**31 - 1, (2, 3), dtype=np.int64).astype(np.int32)
    iv[0, 0] = 0x3F800000  # 1.0 as float32
    bv = np.frombuffer(rng.standard_normal(3).astype(np.float32).tobytes(), np.uint8).reshape(3, 4).copy()
    return Case(o.b.build([f, i, b, w], out), [rng.standard_normal((2, 3)).astype(np.float32), iv, bv,
                                               rng.integers(-2**62, 2**62, 5, dtype=np.int64)])


def where() -> Case:
    """The coordinates of a bool mask's and a float tensor's non-zeros (outputs ``where_0``, ``where_1``)."""
    o = Ops()
    m, v = o.b.tensor("m", (3, 4), "bool"), o.b.tensor("v", (2, 3, 2))
    out = [o.op("WHERE", [m], (12, 2), "int64"), o.op("WHERE", [v], (12, 3), "int64")]
    rng = np.random.default_rng(15)
    vv = np.where(rng.random((2, 3, 2)) < 0.5, 0, rng.standard_normal((2, 3, 2))).astype(np.float32)
    return Case(o.b.build([m, v], out), [rng.random((3, 4)) < 0.4, vv])


def unique(dtype: str = "int32", idx_type: str = "int32") -> Case:
    """Outputs ``y`` (the distinct values) and ``idx``."""
    o = Ops()
    x = o.b.tensor("x", (10,), dtype)
    y, idx = o.b.tensor("y", (10,), dtype), o.b.tensor("idx", (10,), idx_type)
    o.b.op("UNIQUE", [x], [y, idx], ("UniqueOptions", {"IdxOutType": 2 if idx_type == "int32" else INT64}))
    xv = np.array([3, -1, 3, 7, 0, -1, 7, 7, 2, 3]) * (0.5 if dtype == "float32" else 1)
    return Case(o.b.build([x], [y, idx]), [xv.astype(dtype)])


def nms(version: str = "V5", iou: float = 0.5, limit: int = 40) -> Case:
    """24 boxes [n, 4] (y1, x1, y2, x2; box 3's corners swapped), boxes 0 and 1 at IoU exactly 0.5, distinct
    scores (LiteRT's heap breaks ties its own way), a run-time score threshold; outputs ``selected``, V5's
    ``selected_scores`` (soft_nms_sigma 0) and ``valid``."""
    n = 24
    o = Ops()
    boxes, scores, thr = o.b.tensor("boxes", (n, 4)), o.b.tensor("scores", (n,)), o.b.tensor("thr", ())
    ins = [boxes, scores, o.const(np.array(limit, np.int32)), o.const(np.array(iou, np.float32)), thr]
    outs = [o.b.tensor("selected", (limit,), "int32")]
    if version == "V5":
        ins.append(o.const(np.array(0.0, np.float32)))
        outs.append(o.b.tensor("selected_scores", (limit,)))
    outs.append(o.b.tensor("valid", (), "int32"))
    o.b.op(f"NON_MAX_SUPPRESSION_{version}", ins, outs)
    rng = np.random.default_rng(16)
    lo = rng.uniform(0, 8, (n, 2))
    bv = np.concatenate([lo, lo + rng.uniform(0.5, 4, (n, 2))], 1)
    bv[3] = bv[3, [2, 3, 0, 1]]
    bv[:2] = [[0, 0, 2, 3], [0, 1, 2, 4]]  # areas 6 and 6, intersection 4: IoU 4 / 8
    sv = rng.permutation(n).astype(np.float32) / n
    sv[:2] = [0.99, 0.98]
    return Case(o.b.build([boxes, scores, thr], outs), [bv.astype(np.float32), sv, np.array(0.2, np.float32)])


def more_models() -> list[bytes]:
    """One model of each (for the converter-coverage check)."""
    return [make().model for make in (atan2, sparse_to_dense, conv_3d_transpose, bitcasts, where, unique,
                                      lambda: nms("V4"), nms)]
