"""onnxruntime as the oracle: quantized graphs are simulated in float, and no test builds a session of its
own (the one that did took onnxruntime's saturating u8s8 kernel as the truth and failed on AVX2 hosts)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from cuvil_edge.oracle import is_quantized, ort_session, session_options

ort = pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[2]
XS, XZ = 0.05, 128


def qdq_matmul() -> onnx.ModelProto:
    """uint8 activations (scale XS, zero point XZ) times per-channel int8 weights of +-127, dequantized
    into a float MatMul: the pattern onnxruntime's optimizer fuses into its u8s8 integer kernel."""
    w = np.full((8, 4), 127, np.int8)
    w[:, 1] = -127
    inits = [numpy_helper.from_array(np.float32(XS), "xs"), numpy_helper.from_array(np.uint8(XZ), "xz"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.full(4, 0.01, np.float32), "ws"),
             numpy_helper.from_array(np.zeros(4, np.int8), "wz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=1),
             helper.make_node("MatMul", ["xd", "wd"], ["y"])]
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", 1, [2, 8])],
                          [helper.make_tensor_value_info("y", 1, [2, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def float_matmul() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "f",
                          [helper.make_tensor_value_info("x", 1, [2, 8])],
                          [helper.make_tensor_value_info("y", 1, [2, 4])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def in_a_branch(body: onnx.ModelProto) -> onnx.ModelProto:
    """``body``'s nodes inside an If's then-branch: quantization found in subgraphs too."""
    branch = helper.make_graph(list(body.graph.node), "then", [], list(body.graph.output))
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "else", [],
                              [helper.make_tensor_value_info("z", 1, [2, 8])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)], "b",
                          [helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", 1, [2, 8])],
                          [helper.make_tensor_value_info("y", 1, None)], list(body.graph.initializer))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_quantized_graphs_are_found_subgraphs_included() -> None:
    assert is_quantized(qdq_matmul()) and is_quantized(in_a_branch(qdq_matmul()))
    assert not is_quantized(float_matmul()) and not is_quantized(in_a_branch(float_matmul()))


def test_the_oracle_runs_quantized_graphs_unoptimized_and_the_peer_optimized() -> None:
    off, full = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert session_options(qdq_matmul()).graph_optimization_level == off
    assert session_options(in_a_branch(qdq_matmul())).graph_optimization_level == off
    assert session_options(qdq_matmul(), peer=True).graph_optimization_level == full
    assert session_options(float_matmul()).graph_optimization_level == full
    opts = session_options(qdq_matmul(), threads=2)
    assert (opts.intra_op_num_threads, opts.inter_op_num_threads) == (2, 1)


@pytest.mark.parametrize("as_path", [False, True])
def test_the_oracle_answers_the_float_simulation_where_pair_sums_overflow_int16(tmp_path, as_path) -> None:
    """Activations at the top of uint8 against weights of +-127: each u8 x s8 pair sum is +-64,770, past
    int16, where onnxruntime's fused AVX2 kernel (no VNNI) saturates. The oracle gives the QDQ graph's
    float value, computed here in numpy, on every x86 feature level."""
    model = qdq_matmul()
    src: onnx.ModelProto | Path = model
    if as_path:
        src = tmp_path / "q.onnx"
        onnx.save(model, src)
    x = np.full((2, 8), 6.35, np.float32)
    x[1, ::2] = -6.4  # uint8 0 at the other end
    xq = np.clip(np.round(x / XS) + XZ, 0, 255)
    want = ((xq - XZ) * XS) @ (numpy_helper.to_array(model.graph.initializer[2]).astype(np.float64) * 0.01)
    got = ort_session(src).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


SESSION_NAMES = {"InferenceSession", "SessionOptions", "GraphOptimizationLevel", "ort_peer"}


def _own_sessions(source: str, where: str) -> list[str]:
    """Places in ``source`` that name onnxruntime's session API or the benchmark peer directly."""
    tree = ast.parse(source, where)
    found = []
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else \
            None
        if isinstance(node, ast.alias):
            name = node.name.rsplit(".", 1)[-1]
        if name in SESSION_NAMES:
            found.append(f"{where}:{node.lineno}: {name}")
    return found


def test_no_test_builds_its_own_onnxruntime_session() -> None:
    """Every onnxruntime session a test compares against comes from ``cuvil_edge.oracle.ort_session``;
    an optimizing session built in a test would take the fused int8 kernels as the truth again."""
    this = Path(__file__).resolve()
    found = [f for p in sorted((ROOT / "tests").rglob("*.py")) if p.resolve() != this
             for f in _own_sessions(p.read_text(), str(p.relative_to(ROOT)))]
    assert not found, "build onnxruntime sessions with cuvil_edge.oracle.ort_session:\n" + "\n".join(found)


def test_the_session_check_sees_what_it_forbids() -> None:
    source = ("import onnxruntime as ort\nfrom onnxruntime import SessionOptions\n"
              "s = ort.InferenceSession('m.onnx')\nfrom cuvil_edge.oracle import ort_peer, ort_session\n")
    assert sorted(f.split(": ")[1] for f in _own_sessions(source, "probe.py")) == \
        ["InferenceSession", "SessionOptions", "ort_peer"]
