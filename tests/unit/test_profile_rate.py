"""``cuvil-edge profile``'s rate column: achieved GFLOP/s or GOPS of conv/GEMM nodes from their FLOP count,
next to the measured ceiling of their dtype (checked on known shapes, no timing)."""

from __future__ import annotations

import numpy as np
from onnx import helper
from test_conv import build, conv_model, rand

from cuvil_edge import CuvilModel
from cuvil_edge.profile import CEILING, NodeTiming, node_ops, profile_table


def test_node_ops_conv_and_gemm_formulas() -> None:
    conv = CuvilModel.load(conv_model("Conv", [1, 16, 9, 7], [18, 16, 3, 3], strides=[2, 2],
                                      pads=[1, 1, 1, 1])).graph.nodes[0]
    assert node_ops(conv) == 2 * (18 * 5 * 4) * (16 * 3 * 3)  # 2 x output elements x C x kh x kw
    grouped = CuvilModel.load(conv_model("Conv", [1, 8, 6, 6], [12, 4, 3, 3], group=2)).graph.nodes[0]
    assert node_ops(grouped) == 2 * (12 * 4 * 4) * (4 * 3 * 3)  # C/G taps per output
    mm = build([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": [5, 32]},
               {"b": rand(np.random.default_rng(0), 32, 10)})
    gemm = [n for n in CuvilModel.load(mm).graph.nodes if n.op in ("gemm", "matmul")][0]
    assert node_ops(gemm) == 2 * 5 * 10 * 32


def test_rate_column_from_ops_and_ceiling() -> None:
    conv = NodeTiming("c", "conv", "f32-conv-im2col-gemm-4x8", "float32[1,18,5,4]", 2.0, ops=40_000)
    q = NodeTiming("q", "qconv", "qs8-conv-im2col-gemm-8x4", "float32[1,8,4,4]", 1.0, ops=50_000)
    add = NodeTiming("a", "binary_f32", "f32-add", "float32[1,18,5,4]", 4.0)
    assert conv.rate == 40_000 / 2.0 / 1e3 == 20.0
    assert conv.rate_text() == f"20.0 GFLOP/s of {CEILING['fp32']:.0f}"
    assert q.rate_text() == f"50.0 GOPS of {CEILING['int8']:.0f}"
    assert add.rate == 0.0 and add.rate_text() == ""
    lines = profile_table([conv, q, add], top=10, repeat=3, tier="relaxed")
    assert "rate (ceiling)" in lines[0]
    assert lines[2].startswith("c ") and lines[2].endswith("20.0 GFLOP/s of 38")
    assert lines[1].startswith("a ") and "GFLOP/s" not in lines[1] and "GOPS" not in lines[1]
