"""Quantized k x k convolution (``qs8-conv-im2col-gemm``: channel-major im2col, one strided row run and
two zero-point fills per output row and tap, packed like a 1x1 conv's planes): the exact integer math
in both tiers against a numpy reference, on the geometries whose row runs take each path (stride 1, 2
and 3, dilation, asymmetric and wide padding, rows shorter and longer than a 16-byte vector, output rows
split between pixel chunks, groups, batch 2, 1D).

All cases share one model (one node per case), so each tier compiles once.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import shape_inference as si

from cuvil_edge.ops import qlinear
from cuvil_edge.quant.rewrite import quantize_int8_rows
from tests.support.qs8 import TIERS, bit_for_bit_test, every_tier, quantize_cases

#: name -> (input shape, output channels, groups, kernel, strides, dilations, pads (begins, ends))
CASES: dict[str, tuple[list[int], int, int, list[int], list[int], list[int], list[int]]] = {
    "3x3-c8-m12-40x40": ([1, 8, 40, 40], 12, 1, [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    "3x3-s2-c5-m9-57x57": ([1, 5, 57, 57], 9, 1, [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
    "first-conv-c3-m16-s2-64x70": ([1, 3, 64, 70], 16, 1, [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
    "5x3-d2-asym-c6-m7-19x23": ([1, 6, 19, 23], 7, 1, [5, 3], [1, 1], [2, 2], [2, 0, 3, 1]),
    "3x3-s3-pad2-c4-m5-11x29": ([1, 4, 11, 29], 5, 1, [3, 3], [3, 3], [1, 1], [2, 2, 2, 2]),
    "3x3-c16-m8-7x7-batch2": ([2, 16, 7, 7], 8, 1, [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    "3x3-g2-c12-m10-18x18": ([1, 12, 18, 18], 10, 2, [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    "2x2-s2x1-c7-m6-9x33": ([1, 7, 9, 33], 6, 1, [2, 2], [2, 1], [1, 1], [0, 1, 1, 0]),
    # K = 1152: 227 pixels a chunk, so chunks start mid-row on 37-pixel rows
    "3x3-c128-m9-two-chunks": ([1, 128, 9, 37], 9, 1, [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    "1d-k5-c6-m9": ([1, 6, 50], 9, 1, [5], [1], [1], [2, 2]),
    "1d-k3-s2-c4-m6": ([1, 4, 41], 6, 1, [3], [2], [1], [1, 1]),
}


def _weights(name: str) -> tuple[np.ndarray, np.ndarray]:
    shape, m, groups, kernel, *_ = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    return ((rng.standard_normal((m, shape[1] // groups, *kernel)) * 0.3).astype(np.float32),
            rng.standard_normal(m).astype(np.float32))


def conv_model() -> onnx.ModelProto:
    nodes, inits, ins, outs = [], [], [], []
    for name, (shape, _, groups, _, strides, dilations, pads) in CASES.items():
        w, b = _weights(name)
        inits += [numpy_helper.from_array(w, f"w_{name}"), numpy_helper.from_array(b, f"b_{name}")]
        nodes.append(helper.make_node("Conv", [f"x_{name}", f"w_{name}", f"b_{name}"], [f"y_{name}"],
                                      name=f"cv_{name}", group=groups, strides=strides, dilations=dilations,
                                      pads=pads))
        ins.append(helper.make_tensor_value_info(f"x_{name}", TensorProto.FLOAT, shape))
        outs.append(helper.make_tensor_value_info(f"y_{name}", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "kxk", ins, outs, inits)
    return si.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def reference(name: str, x: np.ndarray, s: float, z: int) -> np.ndarray:
    """7-bit input (QuantizeLinear: scale s, zero point z; padding reads z, i.e. 0 after - z), int8
    per-channel weights, exact per-group sums over the taps, then the qs8 epilogue f32(sum) * f32(ws * s) +
    bias, each an f32 rounding."""
    shape, m, groups, kernel, strides, dilations, pads = CASES[name]
    w, b = _weights(name)
    nd = len(kernel)
    xq = np.clip(np.rint(x / np.float32(s)) + z, 0, 127).astype(np.int64) - z
    xq = np.pad(xq, [(0, 0), (0, 0), *zip(pads[:nd], pads[nd:])])
    out = [(xq.shape[2 + d] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1 for d in range(nd)]
    wq, ws = quantize_int8_rows(w.reshape(m, -1))
    wq = wq.astype(np.int64).reshape(groups, m // groups, shape[1] // groups, *kernel)
    xg = xq.reshape(shape[0], groups, shape[1] // groups, *xq.shape[2:])
    acc = np.zeros((shape[0], groups, m // groups, *out), np.int64)
    for tap in np.ndindex(*kernel):
        win = tuple(slice(t * dl, t * dl + st * (o - 1) + 1, st)
                    for t, dl, st, o in zip(tap, dilations, strides, out))
        acc += np.einsum("gmc,ngc...->ngm...", wq[(..., *tap)], xg[(..., *win)])
    acc = acc.reshape(shape[0], m, -1)
    y = acc.astype(np.float32) * (ws * np.float32(s))[:, None] + b[:, None]
    return y.reshape(shape[0], m, *out)


@pytest.fixture(scope="module")
def quantized():
    return quantize_cases(conv_model(), {k: v[0] for k, v in CASES.items()})


results = every_tier()


def test_every_case_runs_the_im2col_kernel(results) -> None:
    """None of these geometries is a 1x1 or depthwise conv: all meet the im2col path under test."""
    kernels, _ = results[TIERS[0]]
    assert {kernels[f"cv_{name}"].rsplit("-", 1)[0] for name in CASES} == {"qs8-conv-im2col-gemm"}


def test_a_case_spans_two_pixel_chunks() -> None:
    """The two-chunk case's chunk boundary falls inside an output row (a row run split between chunks)."""
    shape, *_ = CASES["3x3-c128-m9-two-chunks"]
    g = {"C": shape[1], "G": 1, "kh": 3, "kw": 3, "OH": shape[2], "OW": shape[3]}
    assert qlinear._pchunk(g) < shape[2] * shape[3] and qlinear._pchunk(g) % shape[3]


test_matches_integer_reference_bit_for_bit = bit_for_bit_test(CASES, reference)
