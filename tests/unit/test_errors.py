"""Every mistake a user can make with a model or its inputs ends in one documented ``CuvilError``
subclass with a message that says what to fix, never in a protobuf, numpy or wasmtime traceback."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cuvil_edge import CuvilModel, InputError, ModelFormatError, ShapeError, Target, UnsupportedOperator
from cuvil_edge.testing.zoo import NetBuilder


def _relu_model(shape: list[int | str]) -> onnx.ModelProto:
    b = NetBuilder("relu")
    return b.build([("x", shape)], b.op("Relu", ["x"]), shape)


@pytest.fixture(scope="module")
def small() -> CuvilModel:
    """A 4 -> 3 Gemm: the cheapest model with a real input signature."""
    b = NetBuilder("small")
    return CuvilModel.load(b.build([("x", [1, 4])], b.gemm("x", 4, 3), [1, 3])).optimize(targets=[Target()])


# -- model files ----------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"", b"\x00\xffnot a model at all\x12", b"\x08\x07\x12"],
                         ids=["empty", "garbage", "truncated"])
def test_malformed_bytes(data: bytes) -> None:
    with pytest.raises(ModelFormatError, match="ONNX"):
        CuvilModel.load(data)


def test_truncated_real_model(tmp_path: Path) -> None:
    path = tmp_path / "cut.onnx"
    path.write_bytes(_relu_model([1, 4]).SerializeToString()[:-7])
    with pytest.raises(ModelFormatError):
        CuvilModel.load(path)


def test_checker_failure_is_a_format_error() -> None:
    model = _relu_model([1, 4])
    model.graph.node[0].input[0] = "nowhere"  # reads a tensor nothing defines
    with pytest.raises(ModelFormatError, match="checker"):
        CuvilModel.load(model)


# -- operators ------------------------------------------------------------------------------------
def _unconverted_model() -> onnx.ModelProto:
    """MaxRoiPool: no converter."""
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], name="roi", pooled_shape=[1, 1])
    x, rois = (helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in (("x", [1, 1, 4, 4]),
                                                                                 ("rois", [1, 5])))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 1])
    graph = helper.make_graph([node], "roi", [x, rois], [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _custom_domain_model() -> onnx.ModelProto:
    node = helper.make_node("FooBar", ["x"], ["y"], name="foo", domain="com.example")
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in "xy"]
    graph = helper.make_graph([node], "custom", io[:1], io[1:])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.example", 1)])


@pytest.mark.parametrize(("build", "op_type", "node"), [
    (_unconverted_model, "MaxRoiPool", "roi"),
    (_custom_domain_model, "com.example.FooBar", "foo"),
])
def test_unsupported_operator_names_op_node_and_opset(build, op_type: str, node: str) -> None:
    with pytest.raises(UnsupportedOperator) as info:
        CuvilModel.load(build())
    err = info.value
    assert (err.op_type, err.node, err.opset) == (op_type, node, 17)
    for part in (op_type, node, "opset 17"):
        assert part in str(err)


# -- shapes ---------------------------------------------------------------------------------------
def test_dynamic_non_batch_dim_needs_input_shape() -> None:
    with pytest.raises(ShapeError, match=re.escape("--input-shape x=")):
        CuvilModel.load(_relu_model([1, "n"]))


def test_input_shape_fixes_dynamic_dim() -> None:
    model = CuvilModel.load(_relu_model([1, "n"]), input_shapes={"x": [1, 5]})
    assert model.graph.inputs[0].type.shape == (1, 5)


def test_input_shape_fixes_minus_one_dims_and_still_checks_the_static_ones() -> None:
    """paddle2onnx marks dynamic dimensions with -1 instead of a dim_param (PaddleOCR's classifiers)."""
    model = CuvilModel.load(_relu_model([-1, 4, -1]), input_shapes={"x": [2, 4, 3]})
    assert model.graph.inputs[0].type.shape == (2, 4, 3)
    with pytest.raises(ShapeError, match="conflicts with the model's"):
        CuvilModel.load(_relu_model([-1, 4, -1]), input_shapes={"x": [2, 5, 3]})


def test_input_shape_for_unknown_input() -> None:
    with pytest.raises(ShapeError, match="unknown inputs"):
        CuvilModel.load(_relu_model([1, 4]), input_shapes={"y": [1, 4]})


# -- predict inputs -------------------------------------------------------------------------------
@pytest.mark.parametrize(("inputs", "message"), [
    ({"x": np.zeros((1, 5), np.float32)}, r"'x' must have shape \(1, 4\), got \(1, 5\)"),
    (np.zeros((4,), np.float32), r"'x' must have shape \(1, 4\), got \(4,\)"),
    ({"x": np.zeros((1, 4), np.complex64)}, "'x' must be float32, got complex64"),
    ({"x": np.zeros((1, 4), np.int64)}, "'x' must be float32, got int64"),
    ({"y": np.zeros((1, 4), np.float32)}, r"missing \['x'\].*unknown \['y'\]"),
    ({}, r"missing \['x'\]"),
    ([np.zeros((1, 4), np.float32)] * 2, "takes 1 inputs, got 2"),
], ids=["shape", "rank", "dtype", "int-for-float", "wrong-name", "missing", "count"])
def test_predict_rejects_bad_inputs(small: CuvilModel, inputs: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        small.predict(inputs)


def test_float64_input_is_converted_to_float32(small: CuvilModel) -> None:
    x = np.linspace(-1, 1, 4).reshape(1, 4)
    np.testing.assert_array_equal(small.predict({"x": x})["gemm0"],
                                  small.predict({"x": x.astype(np.float32)})["gemm0"])


def test_good_input_still_runs_after_rejections(small: CuvilModel) -> None:
    """A rejected call must leave the instance usable (no half-written state)."""
    with pytest.raises(InputError):
        small.predict({"x": np.zeros((2, 4), np.float32)})
    assert small.predict({"x": np.ones((1, 4), np.float32)})["gemm0"].shape == (1, 3)
