"""Quantization's typed home in the IR: ``QuantParams`` on values (set by the ONNX frontend for QDQ
tensors, carried by converters that only re-lay a constant, dropped by those that change its numbers),
the typed ``xq`` attribute and the attribute schemas the verifier checks, and ``inspect`` showing an
ONNX QDQ model's own quantization as it shows a TFLite one's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from cuvil_edge import CuvilModel
from cuvil_edge.cli import main
from cuvil_edge.errors import GraphVerificationError
from cuvil_edge.frontend.onnx.importer import import_onnx
from cuvil_edge.ir.graph import Graph, QuantParams, TensorType
from cuvil_edge.ops.qlinear import ActQuant
from cuvil_edge.oracle import ort_session
from cuvil_edge.passes.verify import verify

XS, XZ = 0.05, 128  # the activations' scale and (uint8) zero point
W_SCALES = (np.array([0.5, 1.0, 1.5, 2.0]) / 127).astype(np.float32)  # the conv's, per output channel


def _qdq_input(shape: list[int]) -> tuple[list, list]:
    """x quantized to uint8 and back: the nodes and their initializers."""
    inits = [numpy_helper.from_array(np.float32(XS), "xs"), numpy_helper.from_array(np.uint8(XZ), "xz")]
    return [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
            helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"])], inits


def _weights(name: str, w: np.ndarray, scale: np.ndarray, axis: int) -> tuple[list, list]:
    """A per-channel int8 weight (zero points 0) dequantized along ``axis``."""
    inits = [numpy_helper.from_array(w, name), numpy_helper.from_array(scale, f"{name}_s"),
             numpy_helper.from_array(np.zeros(scale.shape, np.int8), f"{name}_z")]
    node = helper.make_node("DequantizeLinear", [name, f"{name}_s", f"{name}_z"], [f"{name}_d"], axis=axis)
    return [node], inits


def _model(nodes: list, inits: list, x: list[int], y: list[int]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", 1, x)],
                          [helper.make_tensor_value_info("y", 1, y)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def qdq_conv() -> onnx.ModelProto:
    """QDQ conv: uint8 activations, per-channel int8 weights and an int32 bias at x_scale * w_scale."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    bs = np.float32(XS) * W_SCALES
    nodes, inits = _qdq_input([1, 3, 6, 6])
    wn, wi = _weights("w", w, W_SCALES, 0)
    inits += wi + [numpy_helper.from_array(rng.integers(-500, 500, 4).astype(np.int32), "b"),
                   numpy_helper.from_array(bs, "b_s"), numpy_helper.from_array(np.zeros(4, np.int32), "b_z")]
    nodes += wn + [helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["b_d"], axis=0),
                   helper.make_node("Conv", ["xd", "w_d", "b_d"], ["y"], pads=[1] * 4)]
    return _model(nodes, inits, [1, 3, 6, 6], [1, 4, 6, 6])


def qdq_gemm(alpha: float, matmul: bool = False) -> onnx.ModelProto:
    """QDQ Gemm (transB: the converter transposes the weights) or MatMul on per-channel int8 weights."""
    rng = np.random.default_rng(4)
    w = rng.integers(-127, 128, (8, 4) if matmul else (4, 8)).astype(np.int8)
    nodes, inits = _qdq_input([2, 8])
    wn, wi = _weights("w", w, (rng.uniform(0.5, 2, 4) / 127).astype(np.float32), 1 if matmul else 0)
    op = helper.make_node("MatMul", ["xd", "w_d"], ["y"]) if matmul else \
        helper.make_node("Gemm", ["xd", "w_d"], ["y"], transB=1, alpha=alpha)
    return _model(nodes + wn + [op], inits + wi, [2, 8], [2, 4])


def test_qdq_conv_fuses_from_its_record_and_inspect_shows_it(tmp_path, capsys) -> None:
    path = tmp_path / "qdq.onnx"
    onnx.save(qdq_conv(), path)
    graph = import_onnx(path)
    assert graph.op_counts().get("qconv") == 1 and "conv" not in graph.op_counts()  # on the integer kernel
    rec = graph.meta["source_quantization"]
    assert rec["format"] == "onnx" and rec["activations"] == 1
    smallest, largest = float(np.float32(XS) * W_SCALES[0]), float(W_SCALES[-1])  # bias's, weights'
    assert rec["weights"] == {"tensors": 2, "per_channel": 2, "dtypes": {"int8": 1, "int32": 1},
                              "scale_min": smallest, "scale_max": largest}
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "source quantization (onnx): 1 quantized activations; 2 quantized constants (int32 x1, " \
           f"int8 x1), 2 per-channel, 0 per-tensor, scales {smallest:.4g}..{largest:.4g}" in out
    x = np.random.default_rng(5).standard_normal((1, 3, 6, 6)).astype(np.float32)
    ref = ort_session(path).run(None, {"x": x})[0]
    with CuvilModel.load(path) as m:
        got = m.predict({"x": x})["y"]
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.parametrize(("alpha", "matmul", "fused"), [(1.0, False, True), (0.5, False, False),
                                                        (1.0, True, True)])
def test_relaid_weights_keep_their_record_changed_ones_lose_it(tmp_path, alpha, matmul, fused) -> None:
    """Gemm's transB transposes the weights (the record follows, channel axis 0 -> 1); alpha scales them
    (their integers are no longer the model's: no record, no fusion); MatMul copies them."""
    path = tmp_path / "g.onnx"
    onnx.save(qdq_gemm(alpha, matmul), path)
    counts = import_onnx(path).op_counts()
    assert (counts.get("qgemm") == 1) is fused and (counts.get("gemm") == 1) is not fused


def test_a_weight_transposed_between_dequantize_and_matmul_keeps_its_record(tmp_path) -> None:
    """DequantizeLinear -> Transpose -> MatMul (exporters that store weights [out, in]): the folded
    transpose carries the record to the new channel axis, so the MatMul still runs on the integer GEMM."""
    rng = np.random.default_rng(6)
    nodes, inits = _qdq_input([2, 8])
    wn, wi = _weights("w", rng.integers(-127, 128, (4, 8)).astype(np.int8),
                      (rng.uniform(0.5, 2, 4) / 127).astype(np.float32), 0)
    nodes += wn + [helper.make_node("Transpose", ["w_d"], ["w_t"], perm=[1, 0]),
                   helper.make_node("MatMul", ["xd", "w_t"], ["y"])]
    path = tmp_path / "t.onnx"
    onnx.save(_model(nodes, inits + wi, [2, 8], [2, 4]), path)
    counts = import_onnx(path).op_counts()
    assert counts.get("qgemm") == 1 and "gemm" not in counts
    x = rng.standard_normal((2, 8)).astype(np.float32)
    ref = ort_session(path).run(None, {"x": x})[0]
    with CuvilModel.load(path) as m:
        got = m.predict({"x": x})["y"]
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()


def test_params_relaid_and_steps() -> None:
    q = QuantParams(np.array([0.5, 0.25, 2.0], np.float32), np.zeros(3), axis=3)
    assert q.relaid((1, 2, 2, 3), lambda a: a.transpose(3, 0, 1, 2)).axis == 0
    assert q.relaid((1, 2, 2, 3), lambda a: a.reshape(-1)) is None  # channels no longer along one axis
    assert QuantParams(np.float32(0.1), 0, axis=2).axis is None  # one scale: per tensor
    steps = np.arange(-6, 6).reshape(1, 2, 2, 3)
    real = q.real_of(steps)
    assert np.array_equal(q.steps(real), steps)
    assert q.steps(real * np.float32(1.5)) is None  # not the integers' real values any more


def _qgemm_graph(attrs: dict, quant: QuantParams | None = None) -> Graph:
    g = Graph()
    x = g.value("x", TensorType((2, 8)))
    g.inputs.append(x)
    w = g.constant("w", np.ones((8, 4), np.int8))
    s = g.constant("s", np.ones(4, np.float32))
    b = g.constant("b", np.zeros(4, np.float32))
    b.quant = quant
    y = g.value("y", TensorType((2, 4)))
    g.add_node("qgemm", "fc", [x, w, s, b], [y], attrs)
    g.outputs.append(y)
    return g


@pytest.mark.parametrize(("attrs", "problem"), [
    ({"xq": ActQuant.dynamic(127, per_row=True), "bogus": 1}, "unknown attr 'bogus'"),
    ({}, "missing attr 'xq'"),
    ({"xq": ("dynamic", 127, True)}, "attr 'xq' is a tuple, not ActQuant"),
])
def test_verifier_checks_quantized_ops_attrs(attrs, problem) -> None:
    verify(_qgemm_graph({"xq": ActQuant.dynamic(127, per_row=True)}))
    with pytest.raises(GraphVerificationError, match=f"after import: node 'fc' \\(qgemm\\): {problem}"):
        verify(_qgemm_graph(attrs))


def test_verifier_checks_quant_records() -> None:
    xq = {"xq": ActQuant.dynamic(127, per_row=True)}
    verify(_qgemm_graph(xq, QuantParams(np.ones(4, np.float32), np.zeros(4), axis=0, dtype="int32")))
    with pytest.raises(GraphVerificationError, match="value 'b' of node 'fc' \\(qgemm\\) has 3 scales along"):
        verify(_qgemm_graph(xq, QuantParams(np.ones(3, np.float32), np.zeros(3), axis=0, dtype="int32")))
