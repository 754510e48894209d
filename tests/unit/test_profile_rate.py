"""``cuvil-edge profile``'s rate column: achieved GFLOP/s or GOPS of conv/GEMM nodes from their FLOP count,
next to the ceiling of their dtype measured on this host (checked on known shapes and given ceilings; the
measurement itself: what it builds and runs, no timing)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from cuvil_edge import CuvilModel
from cuvil_edge.here import host_target
from cuvil_edge.timing import CEILING_SHAPE, NodeTiming, node_ops, profile_table
from cuvil_edge.tools.bench import measured_ceilings
from tests.support.conv import build, conv_model, rand


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


CEILINGS = {"fp32": 40.0, "int8": 100.0, "int4": 100.0}


def test_rate_column_from_ops_and_ceiling() -> None:
    conv = NodeTiming("c", "conv", "f32-conv-im2col-gemm-4x8", "float32[1,18,5,4]", 2.0, ops=40_000)
    q = NodeTiming("q", "qconv", "qs8-conv-im2col-gemm-8x4", "float32[1,8,4,4]", 1.0, ops=90_000)
    add = NodeTiming("a", "binary_f32", "f32-add", "float32[1,18,5,4]", 4.0)
    assert conv.rate == 40_000 / 2.0 / 1e3 == 20.0
    assert conv.rate_text(CEILINGS) == "20.0 GFLOP/s of 40 (50%)"
    assert q.rate_text(CEILINGS) == "90.0 GOPS of 100 (90%)"
    assert add.rate == 0.0 and add.rate_text(CEILINGS) == ""
    lines = profile_table([conv, q, add], top=10, repeat=3, tier="relaxed", ceilings=CEILINGS)
    assert "rate (ceiling)" in lines[0]
    assert lines[2].startswith("c ") and lines[2].endswith("20.0 GFLOP/s of 40 (50%)")
    assert lines[3].startswith("q ") and lines[3].endswith("90.0 GOPS of 100 (90%)")
    assert lines[1].startswith("a ") and "GFLOP/s" not in lines[1] and "GOPS" not in lines[1]
    # the summary: q (1 us) reaches 80% of its ceiling, conv (2 us) does not
    assert lines[-1].startswith("conv/GEMM nodes at >= 80% of their ceiling: 1 of 2, 33% of their time")


def test_measured_ceilings_run_the_gemm_kernels_of_each_precision(monkeypatch) -> None:
    """The ceilings come from profiling CEILING_SHAPE's MatMul built at each precision for the target:
    one conv/GEMM node a build, running its precision's GEMM kernel; the rate reported is that node's."""
    import cuvil_edge.tools.bench as bench

    seen = []
    real = bench.profile_model

    def spy(model, target, repeat):
        rows = real(model, target, repeat)
        seen.append(([r for r in rows if r.ops], target))
        return rows

    monkeypatch.setattr(bench, "profile_model", spy)
    measured_ceilings.cache_clear()
    target = host_target()
    got = measured_ceilings(target, repeat=1)
    measured_ceilings.cache_clear()
    assert set(got) == {"fp32", "int8", "int4"} and all(v > 0 for v in got.values())
    m, n, k = CEILING_SHAPE
    kernels = {r[0].kernel.split("-")[0] for r, _ in seen}
    assert len(seen) == 3 and all(len(r) == 1 and t == target for r, t in seen), "one profile a precision"
    assert kernels == {"f32", "qs8", "qb4"}
    assert all(r[0].ops == 2 * m * n * k for r, _ in seen)
    for dtype, prefix in (("fp32", "f32"), ("int8", "qs8"), ("int4", "qb4")):
        (rate,) = [r[0].rate for r, _ in seen if r[0].kernel.startswith(prefix)]
        assert got[dtype] == rate
