"""What the importer accepts and refuses by opset, attribute and dtype: every opset the onnx wheel defines
(7-28; older ones upgraded by onnx's version converter), attributes its converters do not read refused
by name unless they hold the schema's default, and IR nodes on element types their kernels do not take
refused at import (and by the verifier after every pass), never handed to the C compiler."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import GraphVerificationError, UnsupportedOperator
from cuvil_edge.frontend.onnx.importer import MAX_OPSET, import_onnx
from cuvil_edge.ir.graph import Graph, TensorType
from cuvil_edge.oracle import ort_session
from cuvil_edge.passes.verify import verify


def _model(nodes: list, inputs: list, outputs: list, opset: int, inits: list | None = None,
           domains: tuple[tuple[str, int], ...] = ()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    m = helper.make_model(g, opset_imports=imports)
    m.ir_version = 10
    return m


def _f32(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_max_opset_is_every_opset_the_onnx_wheel_defines() -> None:
    assert MAX_OPSET == onnx.defs.onnx_opset_version()


@pytest.mark.parametrize("opset", [22, 23, 25, MAX_OPSET])
def test_a_conv_net_at_a_recent_opset_builds_and_matches_onnxruntime(opset: int) -> None:
    rng = np.random.default_rng(opset)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c"], ["h"]), helper.make_node("Flatten", ["h"], ["f"]),
             helper.make_node("Identity", ["f"], ["y"])]
    model = _model(nodes, [_f32("x", [1, 3, 6, 6])], [_f32("y", [1, 144])], opset, [w])
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    want = ort_session(model).run(None, {"x": x})[0]
    with CuvilModel.load(model).optimize(targets=[Target()]) as m:
        np.testing.assert_allclose(m.predict({"x": x})["y"], want, rtol=1e-4, atol=1e-5)


def test_an_opset_before_7_is_upgraded_by_onnx() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_f32("x", [2, 3])], [_f32("y", [2, 3])], 6)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    with CuvilModel.load(model).optimize(targets=[Target()]) as m:
        np.testing.assert_array_equal(m.predict({"x": x})["y"], np.maximum(x, 0))


@pytest.mark.parametrize(("precision", "refused"), [(0, False), (TensorProto.DOUBLE, True)])
def test_an_attribute_a_later_opset_added_is_refused_unless_it_holds_its_default(precision, refused) -> None:
    """QuantizeLinear's ``precision`` (of its division) is new at opset 28; its converter divides in
    float32, which is what the default (the scale's type) means here."""
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], precision=precision)
    graph = helper.make_graph([node], "g", [_f32("x", [4])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [4])],
                              [helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)])
    if refused:
        words = r"'QuantizeLinear' at node 'QuantizeLinear_y' \(opset 28\): attribute precision=11 is not "
        words += "supported"
        with pytest.raises(UnsupportedOperator, match=words):
            import_onnx(model)
        return
    x = np.array([0.1, 1.0, 2.4, 300.0], np.float32)
    with CuvilModel.load(model).optimize(targets=[Target()]) as m:
        np.testing.assert_array_equal(m.predict({"x": x})["y"], [0, 2, 5, 255])


def test_dropout_ignores_ratio_and_seed_and_refuses_training_mode() -> None:
    x = _f32("x", [2, 2])
    old = _model([helper.make_node("Dropout", ["x"], ["y"], ratio=0.2)], [x], [_f32("y", [2, 2])], 11)
    assert import_onnx(old).op_counts() == {}  # the identity
    train = numpy_helper.from_array(np.array(True), "t")
    new = _model([helper.make_node("Dropout", ["x", "", "t"], ["y"], seed=3)], [x], [_f32("y", [2, 2])], 22,
                 [train])
    with pytest.raises(UnsupportedOperator, match="training_mode"):
        import_onnx(new)


def test_a_dtype_no_kernel_takes_is_refused_at_import_naming_op_node_and_dtype() -> None:
    """Relu on int8 would be a float activation stopping inside clang (Clip on int8, which used to, now
    runs as integer max/min)."""
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu0")],
                   [helper.make_tensor_value_info("x", TensorProto.INT8, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.INT8, [4])], 14)
    words = r"'Relu' at node 'relu0' \(opset 14\): epilogue_act runs on float32 only, not int8"
    with pytest.raises(UnsupportedOperator, match=words):
        import_onnx(model)


def test_the_verifier_refuses_a_float_kernel_on_another_dtype_after_any_pass() -> None:
    g = Graph("g")
    x = g.value("x", TensorType((4,), "int32"))
    g.inputs.append(x)
    y = g.value("y", TensorType((4,), "int32"))
    g.add_node("epilogue_act", "act", [x], [y], {"act": ("clip", 0.0, 6.0)})
    g.outputs.append(y)
    words = r"after fusion: node 'act': epilogue_act runs on float32 only, not int32"
    with pytest.raises(GraphVerificationError, match=words):
        verify(g, "fusion")


def test_other_domains_operators_are_refused_by_name() -> None:
    node = helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml", name="norm", norm="L2")
    model = helper.make_model(helper.make_graph([node], "g", [_f32("x", [3])], [_f32("y", [3])]),
                              opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)])
    with pytest.raises(UnsupportedOperator, match=r"'ai.onnx.ml.Normalizer' at node 'norm'"):
        import_onnx(model)


def test_an_empty_optional_graph_output_is_refused_naming_it() -> None:
    """A sequence output is one output per item (tests/unit/test_sequence_io.py); an empty optional has
    none, and a compiled output is always present."""
    item = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    empty = helper.make_node("Optional", [], ["opt"], type=item)
    out = helper.make_value_info("opt", helper.make_optional_type_proto(item))
    words = r"'Output' at node 'opt'.*an empty optional: a compiled output is always present"
    with pytest.raises(UnsupportedOperator, match=words):
        import_onnx(_model([empty], [_f32("x", [2, 3])], [out], 15))


@pytest.mark.parametrize("causal", [0, 1])
def test_an_operator_defined_as_an_onnx_function_is_expanded_and_matches_onnxruntime(causal: int) -> None:
    """Attention (opset 23) has no converter of its own: its schema's function (MatMul, Softmax, masks)
    is inlined by onnx's inliner and each of its nodes converted; refusals inside name the model's node."""
    rng = np.random.default_rng(causal)
    q, k, v = (rng.standard_normal((1, 2, 5, 8)).astype(np.float32) for _ in range(3))
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=causal, name="attn")
    model = _model([node], [_f32(n, [1, 2, 5, 8]) for n in "qkv"], [_f32("y", [1, 2, 5, 8])], 23)
    feeds = {"q": q, "k": k, "v": v}
    want = ort_session(model).run(None, feeds)[0]
    with CuvilModel.load(model).optimize(targets=[Target()]) as m:
        np.testing.assert_allclose(m.predict(feeds)["y"], want, rtol=1e-4, atol=1e-5)


def test_a_refusal_inside_an_expanded_function_names_the_models_node() -> None:
    """CenterCropPad (opset 18) expands to a Pad whose pads come from the run-time shape input."""
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], name="crop")
    words = r"'CenterCropPad' at node 'crop' \(opset 18\): its ONNX function: unsupported operator 'Pad'"
    shape = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    with pytest.raises(UnsupportedOperator, match=words):
        import_onnx(_model([node], [_f32("x", [4, 4]), shape], [_f32("y", [2, 2])], 18))


def test_a_sequence_graph_input_is_refused_naming_it() -> None:
    seq = helper.make_tensor_sequence_value_info("xs", TensorProto.FLOAT, [2])
    node = helper.make_node("SequenceLength", ["xs"], ["n"])
    out = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    with pytest.raises(UnsupportedOperator, match=r"'Input' at node 'xs': a sequence input: graph inputs "
                                                  r"must be tensors"):
        import_onnx(_model([node], [seq], [out], 13))
