"""The qb4 (4-bit group-wise weight) kernels: both paths against a float64 reference of the same integer
math, at group sizes 32 to 128 and at the i16 accumulation bound; the GEMV path (nibbles read in place,
zero point applied per block) giving the GEMM path's bits (unpacked panels); tiers bit-identical; and the
kernel chosen per geometry."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.compiler import optimize_graph
from cuvil_edge.here import host_tiers
from cuvil_edge.ops.qlinear import b4_tile
from cuvil_edge.quant.rewrite import quantize_graph, quantize_int4_groups
from cuvil_edge.quant.runner import Runner
from runtime_wasm.variants import probe_host


def _graph(nodes: list, inputs: dict[str, list[int]], outputs: dict[str, list[int]],
           inits: dict[str, np.ndarray]):
    def info(shapes: dict[str, list[int]]) -> list:
        return [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in shapes.items()]

    g = helper.make_graph(nodes, "qb4", info(inputs), info(outputs),
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    graph = CuvilModel.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).graph
    optimize_graph(graph)
    return graph


Arrays = dict[str, np.ndarray]


def _run(graph, feeds: Arrays, group: int) -> tuple[list[Arrays], dict[str, str]]:
    """Every layer int4 with ``group``: outputs per tier and the kernels that ran."""
    plan = {n.name: "int4" for n in graph.nodes if n.op in ("gemm", "conv")}
    q = quantize_graph(graph, plan, group=group)
    outs = []
    for tier in host_tiers():
        with Runner(q, Target(tier, probe_host().family)) as run:
            kernels = dict(run.compiled.program.kernels_used)
            outs.append(run(feeds))
    return outs, kernels


def _dequant(w_rows: np.ndarray, group: int) -> np.ndarray:
    """[N, K] float rows -> their int4 group quantization, dequantized in float64."""
    q, scale, zp = quantize_int4_groups(w_rows, group)
    n, k = w_rows.shape
    return ((q.reshape(n, -1, group).astype(np.float64) - zp[..., None]) * scale[..., None]).reshape(n, k)


def _qrows(x: np.ndarray) -> np.ndarray:
    """Dynamic 7-bit activations, per row (gemm) or per tensor (conv: pass x.reshape(1, -1)), dequantized."""
    lo, hi = np.minimum(x.min(1, keepdims=True), 0), np.maximum(x.max(1, keepdims=True), 0)
    s = ((hi - lo) / np.float32(127)).astype(np.float32)
    z = np.clip(np.rint(-lo / s), 0, 127)
    return (np.clip(np.rint(x / s) + z, 0, 127) - z) * s.astype(np.float64)


def _close(got: np.ndarray, want: np.ndarray, msg: str) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(), err_msg=msg)


@pytest.mark.parametrize("group", [32, 64, 128])
def test_gemm_and_gemv_match_reference_and_each_other(group):
    """M = 1 and 3 run the GEMV (8x1 on the nibbles), M = 9 the 8x4 tiles plus one token from the
    unpacked panel; N = 13 leaves a partial 8-row panel. The same rows give the same bits either way."""
    rng = np.random.default_rng(11)
    k, n, rows = 256, 13, (1, 3, 9)
    w = rng.standard_normal((k, n)).astype(np.float32)
    x9 = rng.standard_normal((9, k)).astype(np.float32)
    feeds = {f"x{m}": x9[:m] for m in rows}
    graph = _graph([helper.make_node("MatMul", [f"x{m}", "w"], [f"y{m}"]) for m in rows],
                   {f"x{m}": [m, k] for m in rows}, {f"y{m}": [m, n] for m in rows}, {"w": w})
    outs, kernels = _run(graph, feeds, group)
    assert sorted(kernels.values()) == ["qb4-gemm-8x1", "qb4-gemm-8x1", "qb4-gemm-8x4"]
    want = _qrows(x9) @ _dequant(w.T, group).T
    for m in rows:
        _close(outs[0][f"y{m}"], want[:m], f"M={m}")
        np.testing.assert_array_equal(outs[0][f"y{m}"], outs[0]["y9"][:m], err_msg=f"M={m} vs M=9")
        for other in outs[1:]:
            np.testing.assert_array_equal(other[f"y{m}"], outs[0][f"y{m}"], err_msg=f"tiers, M={m}")


def test_block_dot_at_the_i16_bound():
    """Every activation at the top of the 7-bit grid and every |q - wz| = 15 (rows all positive: zero
    point 0; all negative: zero point 15), the largest block pair sums the relaxed i16 accumulation sees."""
    k, n = 128, 16
    sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0).astype(np.float32)
    w = np.tile(sign, (k, 1)) * np.linspace(1.0, 2.0, k, dtype=np.float32)[:, None]
    x = np.full((5, k), 3.0, np.float32)
    graph = _graph([helper.make_node("MatMul", [f"x{m}", "w"], [f"y{m}"]) for m in (1, 5)],
                   {"x1": [1, k], "x5": [5, k]}, {"y1": [1, n], "y5": [5, n]}, {"w": w})
    outs, _ = _run(graph, {"x1": x[:1], "x5": x}, 32)
    q, _, zp = quantize_int4_groups(w.T, 32)
    assert set(zp.reshape(-1)) == {0, 15} and np.abs(q.astype(int) - np.repeat(zp, 32, 1)).max() == 15
    want = _qrows(x) @ _dequant(w.T, 32).T
    for out in outs:
        _close(out["y5"], want, "M=5")
        _close(out["y1"], want[:1], "M=1")


@pytest.mark.parametrize(("c", "kh", "hw", "stride", "pad", "kernel"),
                         [(8, 2, 6, 1, 0, "qb4-conv-im2col-gemm-8x4"),
                          (64, 1, 5, 1, 0, "qb4-conv-im2col-gemm-8x4"),
                          (32, 1, 1, 1, 0, "qb4-conv-im2col-gemm-8x1"),
                          (32, 3, 41, 2, 1, "qb4-conv-im2col-gemm-8x4")])
def test_conv_matches_reference(c, kh, hw, stride, pad, kernel):
    """4-bit convs (K = C * kh * kw a multiple of 32) through im2col: pixels adjacent in the output, so
    full 4-pixel tiles take the transposed store; 13 output channels (a partial panel); padding (the
    zero point, 0.0 dequantized) and stride 2 on 21-pixel output rows."""
    rng = np.random.default_rng(12)
    m = 13
    w = rng.standard_normal((m, c, kh, kh)).astype(np.float32)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    oh = (hw + 2 * pad - kh) // stride + 1
    graph = _graph([helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride] * 2, pads=[pad] * 4)],
                   {"x": [1, c, hw, hw]}, {"y": [1, m, oh, oh]}, {"w": w})
    outs, kernels = _run(graph, {"x": x}, 32)
    assert list(kernels.values()) == [kernel]
    xd = np.pad(_qrows(x.reshape(1, -1)).reshape(c, hw, hw), [(0, 0), (pad, pad), (pad, pad)])
    cols = np.stack([xd[:, i:i + kh, j:j + kh].reshape(-1)
                     for i in range(0, stride * oh, stride) for j in range(0, stride * oh, stride)])
    want = (cols @ _dequant(w.reshape(m, -1), 32).T).T.reshape(1, m, oh, oh)
    _close(outs[0]["y"], want, kernel)
    for other in outs[1:]:
        np.testing.assert_array_equal(other["y"], outs[0]["y"])


@pytest.mark.parametrize(("rows", "tile"), [(1, "8x1"), (3, "8x1"), (4, "8x4"), (128, "8x4")])
def test_tile_is_a_function_of_rows(rows, tile):
    assert b4_tile(rows) == tile
