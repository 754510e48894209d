"""Integer kernels: qgemm/qconv/qb4gemm against a numpy reference of the same integer math, and the
baseline-SIMD128 and relaxed-SIMD variants giving bit-identical results on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import shape_inference as si

from cuvil_edge import CuvilModel, Target
from cuvil_edge.compiler import optimize_graph
from cuvil_edge.here import host_tiers
from cuvil_edge.quant.calibrate import ActRange
from cuvil_edge.quant.rewrite import (
    act_qparams,
    choices_for,
    quantize_graph,
    quantize_int4_groups,
    quantize_int8_rows,
)
from cuvil_edge.quant.runner import Runner
from runtime_wasm.variants import probe_host


def _model():
    """Conv (odd sizes, stride 2, pads) -> flatten (K = 80) -> two MatMuls: every tail path runs."""
    rng = np.random.default_rng(1)
    w = {"cw": rng.standard_normal((5, 3, 3, 3)).astype(np.float32) * 0.3,
         "cb": rng.standard_normal(5).astype(np.float32),
         "w1": rng.standard_normal((5 * 4 * 4, 64)).astype(np.float32) * 0.2,
         "w2": rng.standard_normal((64, 13)).astype(np.float32) * 0.2}
    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])]
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    cm = CuvilModel.load(si.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])))
    optimize_graph(cm.graph)
    return cm.graph


@pytest.fixture(scope="module")
def graph():
    return _model()


def _plan(graph, choice: str) -> dict[str, str]:
    """Every layer integer (float layers use FMA under relaxed SIMD, so they differ by an ulp)."""
    return {n.name: choice if choice in choices_for(n, 32) else "int8"
            for n in graph.nodes if n.op in ("conv", "gemm")}


@pytest.mark.parametrize("choice", ["int8", "int4"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_tiers_agree_bit_for_bit(graph, choice, dynamic):
    if len(host_tiers()) < 2:
        pytest.skip("this engine has no relaxed SIMD")
    x = np.random.default_rng(2).standard_normal((3, 3, 7, 7)).astype(np.float32)
    ranges = {n.inputs[0].name: ActRange(-3.0, 4.0) for n in graph.nodes}
    q = quantize_graph(graph, _plan(graph, choice), ranges, dynamic=dynamic)
    outs = []
    for tier in host_tiers():
        with Runner(q, Target(tier, probe_host().family)) as run:
            outs.append(run({"x": x})["y"])
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("m", [1, 3, 4, 7, 9])
def test_qgemm_matches_integer_reference(m):
    """Static int8 gemm = f32(int32 dot of quantized x and w) * scales: exact up to the f32 epilogue, in
    every tier. K = 70 (a partial 4-byte k group), N = 13 (a partial 8-row panel) and M through the 8x4
    tile, its 1-token remainder and the 8x1 path alone."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((70, 13)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, 70])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, 13])],
                          [numpy_helper.from_array(w, "w")])
    graph = CuvilModel.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).graph
    optimize_graph(graph)
    x = rng.standard_normal((m, 70)).astype(np.float32)
    rng_x = ActRange(float(x.min()), float(x.max()))
    q = quantize_graph(graph, {graph.nodes[0].name: "int8"}, {"x": rng_x})
    s, z = act_qparams(rng_x)
    wq, ws = quantize_int8_rows(w.T)
    xq = np.clip(np.rint(x / np.float32(s)) + z, 0, 127).astype(np.int32)
    want = ((xq - z) @ wq.T.astype(np.int32)).astype(np.float32) * (ws * np.float32(s))
    outs = []
    for tier in host_tiers():
        with Runner(q, Target(tier, probe_host().family)) as run:
            assert list(run.compiled.program.kernels_used.values()) == [f"qs8-gemm-8x{4 if m >= 4 else 1}"]
            outs.append(run({"x": x})["y"])
    np.testing.assert_allclose(outs[0], want, rtol=1e-6, atol=1e-5)
    for other in outs[1:]:
        np.testing.assert_array_equal(other, outs[0])


def test_int4_group_quantization_roundtrip():
    w = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)
    q, scale, zp = quantize_int4_groups(w, 32)
    assert q.max() <= 15 and zp.shape == (8, 2)
    back = (q.reshape(8, 2, 32).astype(np.float32) - zp[..., None]) * scale[..., None]
    assert np.abs(back.reshape(8, 64) - w).max() <= scale.max() / 2 + 1e-6


QB4_ROWS = (1, 3, 4, 7, 128)


@pytest.fixture(scope="module")
def qb4_case():
    """One int4 MatMul weight (K = 96: three groups) applied to inputs of every row count in QB4_ROWS,
    so the 8x1 GEMV (M < 4), the 8x4 tile and the tile + 1-token tail all run."""
    rng = np.random.default_rng(5)
    k, n = 96, 13
    w = rng.standard_normal((k, n)).astype(np.float32)
    nodes = [helper.make_node("MatMul", [f"x{m}", "w"], [f"y{m}"]) for m in QB4_ROWS]
    g = helper.make_graph(nodes, "qb4", [helper.make_tensor_value_info(f"x{m}", TensorProto.FLOAT, [m, k])
                                        for m in QB4_ROWS],
                          [helper.make_tensor_value_info(f"y{m}", TensorProto.FLOAT, [m, n])
                           for m in QB4_ROWS],
                          [numpy_helper.from_array(w, "w")])
    graph = CuvilModel.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).graph
    optimize_graph(graph)
    xs = {f"x{m}": rng.standard_normal((m, k)).astype(np.float32) for m in QB4_ROWS}
    return w, xs, quantize_graph(graph, {nd.name: "int4" for nd in graph.nodes})


def _dynamic_rows(x: np.ndarray) -> np.ndarray:
    """int4 layers' activations: per-row dynamic 7-bit quantization (qu8_quantize_dyn), dequantized."""
    lo, hi = np.minimum(x.min(1, keepdims=True), 0), np.maximum(x.max(1, keepdims=True), 0)
    s = ((hi - lo) / np.float32(127)).astype(np.float32)
    z = np.clip(np.rint(-lo / s), 0, 127)
    return (np.clip(np.rint(x / s) + z, 0, 127) - z) * s.astype(np.float64)


def test_qb4_tiles_match_reference_and_agree(qb4_case):
    """Both qb4 paths compute the exact integer group dots; only the f32 epilogue rounds."""
    w, xs, q = qb4_case
    q4, scale, zp = quantize_int4_groups(w.T, 32)
    wdq = ((q4.reshape(w.shape[1], -1, 32).astype(np.float64) - zp[..., None]) * scale[..., None])
    outs = []
    for tier in host_tiers():
        with Runner(q, Target(tier, probe_host().family)) as run:
            kernels = run.compiled.program.kernels_used
            outs.append(run(xs))
    assert sorted(kernels.values()) == sorted(f"qb4-gemm-8x{4 if m >= 4 else 1}" for m in QB4_ROWS)
    for m in QB4_ROWS:
        want = _dynamic_rows(xs[f"x{m}"]) @ wdq.reshape(w.shape[1], -1).T
        got = outs[0][f"y{m}"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(), err_msg=f"M={m}")
        for other in outs[1:]:
            np.testing.assert_array_equal(other[f"y{m}"], got, err_msg=f"M={m}")
