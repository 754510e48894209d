"""Quantized ops on int8 tensors at run time (held as uint8 inside, int8 again at the graph's outputs) and
QuantizeLinear / DequantizeLinear with blocked scales (``block_size``), against onnxruntime or the onnx
reference evaluator on seeded inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import UnsupportedOperator
from tests.support.ort_check import assert_outputs_close, check_with_ort, make_model

RNG_SEED = 0


def _ints(rng: np.random.Generator, dtype: type, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _predict(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        return cm.predict(feeds)


QLINEAR_MATMUL = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"]


@pytest.mark.parametrize("shape_a, shape_b", [((5, 8), (8, 6)), ((2, 3, 8), (2, 8, 4))])
@pytest.mark.parametrize("runtime_params", [False, True], ids=["const-params", "runtime-params"])
def test_qlinearmatmul_int8_at_run_time(shape_a, shape_b, runtime_params):
    """Run-time int8 a and b, zero points int8 (constants, or model inputs like the onnx cases), int8 out."""
    rng = np.random.default_rng(RNG_SEED)
    data = {"a": _ints(rng, np.int8, *shape_a), "b": _ints(rng, np.int8, *shape_b)}
    params = {"a_scale": np.array([0.0125], np.float32), "a_zero_point": np.array([-7], np.int8),
              "b_scale": np.array([0.02], np.float32), "b_zero_point": np.array([5], np.int8),
              "y_scale": np.array([0.4], np.float32), "y_zero_point": np.array([-3], np.int8)}
    nodes = [helper.make_node("QLinearMatMul", QLINEAR_MATMUL, ["y"], name="y")]
    feeds = {**data, **params} if runtime_params else data
    got = check_with_ort(nodes, feeds, ["y"], inits=None if runtime_params else params, opset=21).got[0]
    assert got["y"].dtype == np.int8 and len(np.unique(got["y"])) > 8  # not all clamped to one end


def test_int8_quantize_output_and_per_column_zero_point_at_run_time():
    """QuantizeLinear to int8 with a zero point answers int8 (held as uint8 inside), and MatMulInteger on a
    run-time int8 b with one zero point per column subtracts each column's own."""
    rng = np.random.default_rng(RNG_SEED + 1)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["y"], name="y")]
    inits = {"s": np.float32(0.05), "z": np.int8(-20), "a_zp": np.int8(3),
             "b_zp": np.array([-4, 0, 7, 100, -128], np.int8)}
    feeds = {"x": rng.standard_normal((3, 7)).astype(np.float32) * 10, "a": _ints(rng, np.int8, 4, 6),
             "b": _ints(rng, np.int8, 6, 5)}
    got = check_with_ort(nodes, feeds, ["q", "y"], inits=inits, opset=13).got[0]
    assert got["q"].dtype == np.int8 and got["q"].min() == -128  # clamped at int8's own end


@pytest.mark.parametrize("runtime_scales", [False, True], ids=["const-scales", "runtime-scales"])
@pytest.mark.parametrize("axis, block", [(1, 2), (0, 3), (-1, 4)])
def test_blocked_quantize_dequantize(runtime_scales, axis, block):
    """Each scale and zero point covers ``block`` consecutive entries along ``axis`` (the last block
    short where the axis is not a multiple); uint8 and int8 results, dequantized back."""
    rng = np.random.default_rng(RNG_SEED + block)
    x = (rng.standard_normal((5, 6)) * 10).astype(np.float32)
    blocks = list(x.shape)
    blocks[axis] = -(-blocks[axis] // block)
    params = {"s": rng.uniform(0.05, 0.5, blocks).astype(np.float32),
              "zu": _ints(rng, np.uint8, *blocks), "zi": rng.integers(-5, 6, blocks).astype(np.int8)}
    attrs = {"axis": axis, "block_size": block}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zu"], ["qu"], name="qu", **attrs),
             helper.make_node("QuantizeLinear", ["x", "s", "zi"], ["qi"], name="qi", **attrs),
             helper.make_node("QuantizeLinear", ["x", "s"], ["q16"], name="q16", output_dtype=5, **attrs),
             helper.make_node("DequantizeLinear", ["qu", "s", "zu"], ["du"], name="du", **attrs),
             helper.make_node("DequantizeLinear", ["qi", "s", "zi"], ["di"], name="di", **attrs)]
    feeds = {"x": x, **params} if runtime_scales else {"x": x}
    model = make_model(nodes, feeds, {}, None if runtime_scales else params, opset=21)
    model.graph.output.extend(helper.make_tensor_value_info(o, t, x.shape) for o, t in
                              [("qu", 2), ("qi", 3), ("q16", 5), ("du", 1), ("di", 1)])
    want = dict(zip(["qu", "qi", "q16", "du", "di"], ReferenceEvaluator(model).run(None, feeds)))
    assert_outputs_close(_predict(model, feeds), want)


def test_blocked_dequantize_of_constant_weights_folds():
    """A blocked int8 weight (the int4-style LLM layout) dequantized at build time feeds a MatMul."""
    rng = np.random.default_rng(RNG_SEED + 2)
    inits = {"w": _ints(rng, np.int8, 16, 3), "ws": rng.uniform(0.01, 0.1, (2, 3)).astype(np.float32),
             "wz": rng.integers(-3, 4, (2, 3)).astype(np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], name="wf", axis=0, block_size=8),
             helper.make_node("MatMul", ["x", "wf"], ["y"], name="y")]
    feeds = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    model = make_model(nodes, feeds, {"y": np.zeros((4, 3), np.float32)}, inits, opset=21)
    want = {"y": ReferenceEvaluator(model).run(None, feeds)[0]}
    assert_outputs_close(_predict(model, feeds), want)


def test_float8_qlinearmatmul_at_run_time_stays_refused():
    """QLinearMatMul on a run-time float8 tensor has no integer grid to hold it on: refused, named."""
    nodes = [helper.make_node("QLinearMatMul", QLINEAR_MATMUL, ["y"], name="qmm")]
    f8 = 17  # FLOAT8E4M3FN
    inputs = [helper.make_tensor_value_info("a", f8, [2, 4])]
    inits = [helper.make_tensor(n, t, [1], [v]) for n, t, v in [
        ("a_scale", 1, 0.1), ("a_zero_point", f8, 0.0), ("b_scale", 1, 0.1), ("b_zero_point", f8, 0.0),
        ("y_scale", 1, 0.1), ("y_zero_point", f8, 0.0)]]
    inits.append(helper.make_tensor("b", f8, [4, 3], np.ones(12, np.float32)))
    graph = helper.make_graph(nodes, "t", inputs, [helper.make_tensor_value_info("y", f8, [2, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    with pytest.raises(UnsupportedOperator, match=r"QLinearMatMul.*qmm.*float32 quantized tensor at run"):
        CuvilModel.load(model)
