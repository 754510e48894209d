"""Quantized depthwise convolution (the ``qs8-dwconv`` kernels): the kernel each geometry gets, the exact
integer math in both tiers, equality with the im2col path it replaced, onnxruntime's own QDQ and
QLinearConv models within one output LSB, and a MobileNet audit (no grouped conv on an im2col kernel).

All cases of one test share one model (one node per case), so each tier compiles once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import shape_inference as si

from cuvil_edge import CuvilModel, Target
from cuvil_edge.ops import qlinear
from cuvil_edge.quant.rewrite import quantize_int8_rows
from cuvil_edge.testing.zoo import mobilenet
from tests.support.ort_quantized import check_ort_quantized
from tests.support.qs8 import TIERS, bit_for_bit_test, dynamic_qparams, every_tier, quantize_cases, run_cases

#: name -> (input shape, filter, strides, pads (begins, ends), dilations, ReLU6 after, expected kernel);
#: widths cover whole 8-pixel steps, a partial last step and rows narrower than 4 outputs
CASES: dict[str, tuple[list[int], list[int], list[int], list[int], list[int], bool, str]] = {
    "3x3s1-pad1-c8": ([1, 8, 13, 19], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], True, "qs8-dwconv-3x3s1"),
    "3x3s2-pad1-c5": ([1, 5, 14, 21], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], True, "qs8-dwconv-3x3s2"),
    "3x3s1-valid-c13": ([1, 13, 9, 10], [3, 3], [1, 1], [0, 0, 0, 0], [1, 1], False, "qs8-dwconv-3x3s1"),
    "3x3s2-valid-c3": ([1, 3, 10, 7], [3, 3], [2, 2], [0, 0, 0, 0], [1, 1], False, "qs8-dwconv-3x3s2"),
    "5x5s1-pad2-c7": ([1, 7, 12, 17], [5, 5], [1, 1], [2, 2, 2, 2], [1, 1], True, "qs8-dwconv-5x5s1"),
    "5x5s2-asym-c6": ([1, 6, 15, 16], [5, 5], [2, 2], [2, 1, 1, 2], [1, 1], False, "qs8-dwconv-5x5s2"),
    "3x3s1-112-c4": ([1, 4, 112, 112], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], True, "qs8-dwconv-3x3s1"),
    "3x3s2-112-c3": ([1, 3, 112, 112], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], True, "qs8-dwconv-3x3s2"),
    "3x3s1-7x7-c24": ([1, 24, 7, 7], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], True, "qs8-dwconv-3x3s1"),
    "3x3s2-batch2": ([2, 6, 9, 12], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], True, "qs8-dwconv-3x3s2"),
    "7x7s1-kxk": ([1, 4, 15, 15], [7, 7], [1, 1], [3, 3, 3, 3], [1, 1], False, "qs8-dwconv-7x7s1"),
    "3x5s2-kxk": ([1, 5, 11, 18], [3, 5], [2, 2], [1, 2, 1, 2], [1, 1], False, "qs8-dwconv-3x5s2"),
    "3x3s3-gathered": ([1, 3, 11, 26], [3, 3], [3, 3], [1, 1, 1, 1], [1, 1], False, "qs8-dwconv-3x3s3"),
    "3x3-dil2-gathered": ([1, 4, 15, 15], [3, 3], [1, 1], [2, 2, 2, 2], [2, 2], True, "qs8-dwconv-3x3s1"),
    "1d-k5": ([1, 6, 30], [5], [1], [2, 2], [1], False, "qs8-dwconv-1x5s1"),
}


def _weights(name: str, shape: Sequence[int], kernel: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(sum(map(ord, name)))
    c = shape[1]
    return ((rng.standard_normal((c, 1, *kernel)) * 0.5).astype(np.float32),
            rng.standard_normal(c).astype(np.float32))


def dw_model(cases: dict[str, tuple]) -> onnx.ModelProto:
    """One depthwise Conv (group = channels, bias) per case on input ``x_<name>``, Clip(0, 6) when asked."""
    nodes, inits, ins, outs = [], [], [], []
    for name, (shape, kernel, strides, pads, dil, relu6, _) in cases.items():
        w, b = _weights(name, shape, kernel)
        inits += [numpy_helper.from_array(w, f"w_{name}"), numpy_helper.from_array(b, f"b_{name}")]
        conv_out = f"c_{name}" if relu6 else f"y_{name}"
        nodes.append(helper.make_node("Conv", [f"x_{name}", f"w_{name}", f"b_{name}"], [conv_out],
                                      name=f"dw_{name}", group=shape[1], kernel_shape=kernel, strides=strides,
                                      pads=pads, dilations=dil))
        if relu6:
            nodes.append(helper.make_node("Clip", [conv_out, "zero", "six"], [f"y_{name}"]))
        ins.append(helper.make_tensor_value_info(f"x_{name}", TensorProto.FLOAT, shape))
        outs.append(helper.make_tensor_value_info(f"y_{name}", TensorProto.FLOAT, None))
    inits += [numpy_helper.from_array(np.float32(0), "zero"), numpy_helper.from_array(np.float32(6), "six")]
    g = helper.make_graph(nodes, "dw", ins, outs, inits)
    return si.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def reference(name: str, x: np.ndarray, s: float, z: int) -> np.ndarray:
    """The kernel's math in numpy: 7-bit input (ONNX QuantizeLinear: scale s, zero point z), int8
    per-channel weights, exact sums of w * (xq - z) (a padding tap is the zero point: it adds nothing),
    then the qs8 epilogue f32(sum) * f32(ws * s) + bias, each an f32 rounding, and the fused ReLU6."""
    shape, kernel, strides, pads, dil, relu6, _ = CASES[name]
    w, b = _weights(name, shape, kernel)
    if len(shape) == 3:  # 1D runs as height 1
        x, w, kernel, strides, dil = x[:, :, None], w[:, :, None], [1, *kernel], [1, *strides], [1, *dil]
        pads = [0, pads[0], 0, pads[1]]
    c = shape[1]
    xq = np.clip(np.rint(x / np.float32(s)) + z, 0, 127).astype(np.int64) - z
    xq = np.pad(xq, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    wq, ws = quantize_int8_rows(w.reshape(c, -1))
    wq = wq.reshape(c, *kernel).astype(np.int64)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dil
    oh, ow = (xq.shape[2] - dh * (kh - 1) - 1) // sh + 1, (xq.shape[3] - dw * (kw - 1) - 1) // sw + 1
    acc = sum(wq[None, :, ky, kx, None, None]
              * xq[:, :, ky * dh: ky * dh + sh * (oh - 1) + 1: sh, kx * dw: kx * dw + sw * (ow - 1) + 1: sw]
              for ky in range(kh) for kx in range(kw))
    y = acc.astype(np.float32) * (ws * np.float32(s))[:, None, None] + b[:, None, None]
    y = np.clip(y, np.float32(0), np.float32(6)) if relu6 else y
    return y.reshape(shape[0], c, *([ow] if len(shape) == 3 else [oh, ow]))


def _quantized(dynamic: bool = False):
    return quantize_cases(dw_model(CASES), {name: shape for name, (shape, *_) in CASES.items()}, dynamic)


@pytest.fixture(scope="module")
def quantized():
    return _quantized()


results = every_tier()


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_choice(results, name: str) -> None:
    """Every depthwise geometry (any filter, stride, dilation, 1D) gets a qs8-dwconv kernel, never im2col;
    the name is the filter and stride (NAMING.md), whichever row loop (shuffled or gathered) runs it."""
    kernels, _ = results[TIERS[0]]
    assert kernels[f"dw_{name}"] == CASES[name][-1]


test_matches_integer_reference_bit_for_bit = bit_for_bit_test(CASES, reference)


def test_dynamic_activations_bit_for_bit() -> None:
    """int8-dynamic: scale and zero point come from the input's range at run time (qu8_quantize_dyn, f32
    arithmetic), then the same kernels and the same exact answer."""
    q, xs, _ = _quantized(dynamic=True)
    _, outs = run_cases(q, xs, TIERS[-1])
    for name, x in xs.items():
        want = reference(name, x, *dynamic_qparams(x))
        np.testing.assert_array_equal(outs[f"y_{name}"], want, err_msg=name)


def test_equals_the_im2col_path(quantized, results) -> None:
    """The im2col + GEMM path the depthwise convs ran on before gives the same bits (same zero-point
    padding, same integers, same epilogue)."""
    q, xs, _ = quantized
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(qlinear, "is_depthwise", lambda g: False)
        kernels, old = run_cases(q, xs, TIERS[-1])
    assert {k for n, k in kernels.items() if n.startswith("dw_")} == {"qs8-conv-im2col-gemm-8x4"}
    _, new = results[TIERS[-1]]
    for name in CASES:
        np.testing.assert_array_equal(new[f"y_{name}"], old[f"y_{name}"], err_msg=name)


# -- onnxruntime's quantized models: 8-bit activations, the x8 kernels ----------------------------------
ORT_CASES = {k: CASES[k] for k in ("3x3s1-pad1-c8", "3x3s2-112-c3", "5x5s2-asym-c6", "3x3s1-7x7-c24")}
# QOperator only with reduce_range: without it onnxruntime has no exact reference (see test_prequantized)
ORT_FORMATS = [("QDQ", True, "QUInt8"), ("QDQ", False, "QUInt8"), ("QDQ", True, "QInt8"),
               ("QDQ", False, "QInt8"), ("QOperator", True, "QUInt8")]


@pytest.mark.parametrize(("fmt", "reduce_range", "act"), ORT_FORMATS)
def test_onnxruntime_quantized_models(tmp_path, fmt: str, reduce_range: bool, act: str) -> None:
    """onnxruntime's quantize_static output (per-channel int8 weights) runs on qs8-dwconv-x8 and matches
    onnxruntime within one LSB of each output's quantizer, on inputs unseen in calibration."""
    shapes = {f"x_{k}": v[0] for k, v in ORT_CASES.items()}
    kernels = check_ort_quantized(tmp_path, dw_model(ORT_CASES), shapes, fmt, reduce_range, act, TIERS[-1])
    assert kernels == {f"qs8-dwconv-x8-{CASES[k][-1].rsplit('-', 1)[1]}" for k in ORT_CASES}, kernels


# -- audit: a MobileNet at 224 runs no grouped or 1x1 conv through im2col -----------------------------
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_mobilenet_grouped_and_1x1_convs_skip_im2col(precision: str) -> None:
    """Read the kernel table of a 224x224 MobileNet build: every grouped (here: depthwise) conv runs a
    dwconv kernel of its precision and every 1x1 conv (stride 1, unpadded here) its 1x1 GEMM kernel, none
    an im2col one."""
    proto = mobilenet(size=224)
    calib = [{"x": np.random.default_rng(i).standard_normal((1, 3, 224, 224)).astype(np.float32)}
             for i in range(2)]
    with CuvilModel.load(proto) as m:
        int8 = {"calibration": calib, "kernel_cost": False} if precision == "int8" else {}  # every layer int8
        m.optimize(precision, targets=[Target()], **int8)
        assert m.compiled is not None
        convs = [n for n in m.compiled.graph.nodes if n.op in ("conv", "qconv")]
        used = m.compiled.program.kernels_used
        grouped = {n.name: used[n.name] for n in convs if n.attrs.get("group", 1) > 1}
        pointwise = {n.name: used[n.name] for n in convs
                     if n.attrs.get("group", 1) == 1 and n.inputs[1].type.shape[2:] == (1, 1)}
    prefix = "f32-dwconv-" if precision == "fp32" else "qs8-dwconv-"
    assert len(grouped) == 4 and all(k.startswith(prefix) for k in grouped.values()), grouped
    want = {"f32-conv1x1-gemm-4x8"} if precision == "fp32" else {f"qs8-conv1x1-gemm-8x{t}" for t in (1, 4)}
    assert pointwise and set(pointwise.values()) <= want, pointwise
