"""Quantized 1x1 convolution (``qs8-conv1x1-gemm``: the uint8 planes packed straight into the GEMM's
activation panels, no im2col; strided unpadded ones subsample their planes first,
``qs8-conv1x1-subsample-gemm``): the kernel each geometry gets, the exact integer math in both tiers,
equality with the im2col path it replaced, and onnxruntime's QDQ and QLinearConv models within one
output step.

All cases of one test share one model (one node per case), so each tier compiles once.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import shape_inference as si

from cuvil_edge.ops import qlinear
from cuvil_edge.quant.rewrite import quantize_int8_rows
from tests.support.ort_quantized import check_ort_quantized
from tests.support.qs8 import TIERS, bit_for_bit_test, dynamic_qparams, every_tier, quantize_cases, run_cases

#: name -> (input shape, output channels, groups, clip bounds after (None: no activation), kernel).
#: Channels off multiples of 4 and 8, pixel counts off whole 16-pixel packing steps and 4-token blocks,
#: 1x1 to 56x56 planes, batch 2, groups, 1D, and a plane in two pixel chunks (the second starting at an
#: odd pixel).
CASES: dict[str, tuple[list[int], int, int, tuple[float, float] | None, str]] = {
    "c3-m5-1x1": ([1, 3, 1, 1], 5, 1, (0.0, 6.0), "qs8-conv1x1-gemm-8x1"),
    "c5-m7-3x3": ([1, 5, 3, 3], 7, 1, None, "qs8-conv1x1-gemm-8x4"),
    "c7-m13-5x9": ([1, 7, 5, 9], 13, 1, (0.0, 6.0), "qs8-conv1x1-gemm-8x4"),
    "c17-m9-batch2": ([2, 17, 6, 7], 9, 1, (-0.5, 1.5), "qs8-conv1x1-gemm-8x4"),
    "c24-m144-56x56": ([1, 24, 56, 56], 144, 1, (0.0, 6.0), "qs8-conv1x1-gemm-8x4"),
    "c96-m24-14x14": ([1, 96, 14, 14], 24, 1, None, "qs8-conv1x1-gemm-8x4"),
    "c960-m20-7x7": ([1, 960, 7, 7], 20, 1, (0.0, 6.0), "qs8-conv1x1-gemm-8x4"),
    "c10-m6-g2": ([1, 10, 9, 11], 6, 2, (0.0, 6.0), "qs8-conv1x1-gemm-8x4"),
    "c48-m11-2chunks": ([1, 48, 75, 75], 11, 1, None, "qs8-conv1x1-gemm-8x4"),
    "1d-c6-m9": ([1, 6, 30], 9, 1, (0.0, 6.0), "qs8-conv1x1-gemm-8x4"),
    # strided (STRIDES): the planes subsampled once, then the same packing; odd planes (57x57, 7x7: the
    # 16-byte de-interleave plus scalar tails), two images, groups, GEMV-sized output, 1D, stride 3x2
    "s2-c8-m6-9x9": ([1, 8, 9, 9], 6, 1, None, "qs8-conv1x1-subsample-gemm-8x4"),
    "s2-c16-m12-57x57-batch2": ([2, 16, 57, 57], 12, 1, (0.0, 6.0), "qs8-conv1x1-subsample-gemm-8x4"),
    "s2-c16-m20-56x56": ([1, 16, 56, 56], 20, 1, None, "qs8-conv1x1-subsample-gemm-8x4"),
    "s2-c40-m24-7x7": ([1, 40, 7, 7], 24, 1, (0.0, 6.0), "qs8-conv1x1-subsample-gemm-8x4"),
    "s2-c10-m6-g2-2x3": ([1, 10, 2, 3], 6, 2, None, "qs8-conv1x1-subsample-gemm-8x1"),
    "s2-1d-c6-m9": ([2, 6, 45], 9, 1, (0.0, 6.0), "qs8-conv1x1-subsample-gemm-8x4"),
    "s3x2-c8-m7-10x70": ([1, 8, 10, 70], 7, 1, None, "qs8-conv1x1-subsample-gemm-8x4"),
}
#: strides of the strided cases above (the rest stride 1), all unpadded
STRIDES = {"s2-c8-m6-9x9": [2, 2], "s2-c16-m12-57x57-batch2": [2, 2], "s2-c16-m20-56x56": [2, 2],
           "s2-c40-m24-7x7": [2, 2], "s2-c10-m6-g2-2x3": [2, 2], "s2-1d-c6-m9": [2],
           "s3x2-c8-m7-10x70": [3, 2]}
#: padded 1x1 convs keep the im2col path: name -> (shape, strides, pads, kernel)
IM2COL_CASES = {
    "s2-pad1": ([1, 8, 9, 9], [2, 2], [1, 1, 1, 1], "qs8-conv-im2col-gemm-8x4"),
    "pad1": ([1, 8, 5, 5], [1, 1], [1, 1, 1, 1], "qs8-conv-im2col-gemm-8x4"),
}


def _weights(name: str, cin: int, m: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(sum(map(ord, name)))
    return ((rng.standard_normal((m, cin // groups)) * 0.5).astype(np.float32),
            rng.standard_normal(m).astype(np.float32))


def conv_model(cases: dict[str, tuple], im2col_cases: dict[str, tuple]) -> onnx.ModelProto:
    """One 1x1 Conv (bias) per case on input ``x_<name>``, then Clip(lo, hi) when the case has bounds;
    the im2col cases (padding) follow with 6 output channels."""
    nodes, inits, ins, outs = [], [], [], []
    spec = {k: (v[0], v[1], v[2], v[3], STRIDES.get(k, [1] * (len(v[0]) - 2)), [0] * (2 * len(v[0]) - 4))
            for k, v in cases.items()}
    spec |= {k: (shape, 6, 1, None, strides, pads) for k, (shape, strides, pads, _) in im2col_cases.items()}
    for name, (shape, m, groups, clip, strides, pads) in spec.items():
        w, b = _weights(name, shape[1], m, groups)
        w = w.reshape(m, shape[1] // groups, *[1] * (len(shape) - 2))
        inits += [numpy_helper.from_array(w, f"w_{name}"), numpy_helper.from_array(b, f"b_{name}")]
        conv_out = f"c_{name}" if clip else f"y_{name}"
        nodes.append(helper.make_node("Conv", [f"x_{name}", f"w_{name}", f"b_{name}"], [conv_out],
                                      name=f"pw_{name}", group=groups, strides=strides, pads=pads))
        if clip:
            inits += [numpy_helper.from_array(np.float32(v), f"{e}_{name}") for e, v in zip("lh", clip)]
            nodes.append(helper.make_node("Clip", [conv_out, f"l_{name}", f"h_{name}"], [f"y_{name}"]))
        ins.append(helper.make_tensor_value_info(f"x_{name}", TensorProto.FLOAT, shape))
        outs.append(helper.make_tensor_value_info(f"y_{name}", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "pw", ins, outs, inits)
    return si.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def reference(name: str, x: np.ndarray, s: float, z: int) -> np.ndarray:
    """The kernel's math in numpy: 7-bit input (ONNX QuantizeLinear: scale s, zero point z), int8
    per-channel weights, exact per-group sums of w * (xq - z), then the qs8 epilogue
    f32(sum) * f32(ws * s) + bias, each an f32 rounding, and the fused Clip; strided cases subsample x."""
    shape, m, groups, clip, _ = CASES[name]
    w, b = _weights(name, shape[1], m, groups)
    x = x[(..., *(slice(None, None, st) for st in STRIDES.get(name, [])))]
    shape = [*shape[:2], *x.shape[2:]]
    n, c = shape[:2]
    xq = np.clip(np.rint(x / np.float32(s)) + z, 0, 127).astype(np.int64) - z
    xq = xq.reshape(n, groups, c // groups, -1)
    wq, ws = quantize_int8_rows(w.reshape(m, -1))
    acc = np.einsum("gmc,ngcp->ngmp", wq.astype(np.int64).reshape(groups, m // groups, -1), xq)
    y = acc.reshape(n, m, -1).astype(np.float32) * (ws * np.float32(s))[:, None] + b[:, None]
    y = np.clip(y, np.float32(clip[0]), np.float32(clip[1])) if clip else y
    return y.reshape(n, m, *shape[2:])


def _quantized(dynamic: bool = False):
    shapes = {k: v[0] for k, v in CASES.items()} | {k: v[0] for k, v in IM2COL_CASES.items()}
    return quantize_cases(conv_model(CASES, IM2COL_CASES), shapes, dynamic)


@pytest.fixture(scope="module")
def quantized():
    return _quantized()


results = every_tier()


@pytest.mark.parametrize("name", sorted(CASES) + sorted(IM2COL_CASES))
def test_kernel_choice(results, name: str) -> None:
    """1x1 stride-1 unpadded convs (any channels, groups, 1D/2D) run qs8-conv1x1-gemm, tiled 8x1 below 4
    pixels; strided unpadded ones qs8-conv1x1-subsample-gemm; padded 1x1 convs keep im2col (NAMING.md)."""
    kernels, _ = results[TIERS[0]]
    assert kernels[f"pw_{name}"] == {**CASES, **IM2COL_CASES}[name][-1]


test_matches_integer_reference_bit_for_bit = bit_for_bit_test(CASES, reference)


def test_dynamic_activations_bit_for_bit() -> None:
    """int8-dynamic: scale and zero point from the input's range at run time, then the same exact answer."""
    q, xs, _ = _quantized(dynamic=True)
    _, outs = run_cases(q, xs, TIERS[-1])
    for name in CASES:
        want = reference(name, xs[name], *dynamic_qparams(xs[name]))
        np.testing.assert_array_equal(outs[f"y_{name}"], want, err_msg=name)


@pytest.mark.parametrize("tier", TIERS)
def test_equals_the_im2col_path(quantized, results, tier: str) -> None:
    """The im2col + GEMM path the 1x1 convs ran on before gives the same bits in each tier."""
    q, xs, _ = quantized
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(qlinear, "is_pointwise", lambda g: False)
        mp.setattr(qlinear, "is_pointwise_strided", lambda g: False)
        kernels, old = run_cases(q, xs, tier)
    assert {kernels[f"pw_{name}"] for name in CASES} == {f"qs8-conv-im2col-gemm-8x{t}" for t in (1, 4)}
    _, new = results[tier]
    for name in [*CASES, *IM2COL_CASES]:
        np.testing.assert_array_equal(new[f"y_{name}"], old[f"y_{name}"], err_msg=name)


# -- onnxruntime's quantized models: 8-bit activations, the x8 kernels ----------------------------------
ORT_CASES = {k: CASES[k] for k in ("c7-m13-5x9", "c17-m9-batch2", "c24-m144-56x56", "c10-m6-g2",
                                   "s2-c16-m12-57x57-batch2")}
# QOperator only with reduce_range: without it onnxruntime has no exact reference (see test_prequantized)
ORT_FORMATS = [("QDQ", True, "QUInt8"), ("QDQ", False, "QInt8"), ("QOperator", True, "QUInt8")]


@pytest.mark.parametrize(("fmt", "reduce_range", "act"), ORT_FORMATS)
def test_onnxruntime_quantized_models(tmp_path, fmt: str, reduce_range: bool, act: str) -> None:
    """onnxruntime's quantize_static output (per-channel int8 weights, QDQ or QLinearConv) runs on
    qs8-conv1x1-gemm-x8 and matches onnxruntime within one step of each output's quantizer, on inputs
    unseen in calibration."""
    shapes = {f"x_{k}": v[0] for k, v in ORT_CASES.items()}
    model = conv_model(ORT_CASES, {})
    kernels = check_ort_quantized(tmp_path, model, shapes, fmt, reduce_range, act, TIERS[-1])
    assert kernels == {"qs8-conv1x1-gemm-x8-8x4", "qs8-conv1x1-subsample-gemm-x8-8x4"}, kernels
