"""Sequences as graph inputs and outputs: a sequence input compiled as one tensor input per item shape
given at build time, a sequence output of build-time length as one tensor output per item, ``predict``
taking and giving lists there; an If returning sequences and a Loop carrying one (unrolled). Checked
against onnxruntime or the onnx reference evaluator on seeded inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from cuvil_edge import CuvilModel
from cuvil_edge.errors import InputError, NotConstant, UnsupportedOperator
from cuvil_edge.oracle import ort_session
from runtime_wasm import ModelSpec

RNG = np.random.default_rng(0)
F = TensorProto.FLOAT


def _seq(name: str, elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_sequence_value_info(name, elem, None)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto], opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_sequence_input_and_output_against_onnxruntime():
    model = _model([helper.make_node("SequenceInsert", ["x", "t"], ["y"]),
                    helper.make_node("SequenceAt", ["x", "i"], ["first"]),
                    helper.make_node("ConcatFromSequence", ["y"], ["z"], axis=0)],
                   [_seq("x"), helper.make_tensor_value_info("t", F, [3]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [])],
                   [_seq("y"), helper.make_tensor_value_info("first", F, [None]),
                    helper.make_tensor_value_info("z", F, [None])])
    x = [RNG.standard_normal(4).astype(np.float32) for _ in range(2)]
    t = RNG.standard_normal(3).astype(np.float32)
    cm = CuvilModel.load(model, input_shapes={"x": [(4,), (4,)]}).optimize()
    assert [s.name for s in cm.spec.inputs] == ["x[0]", "x[1]", "t", "i"]
    assert [s.name for s in cm.spec.outputs] == ["y[0]", "y[1]", "y[2]", "first", "z"]
    # the record predict reads survives the spec's round trip (a saved model)
    assert ModelSpec.from_json(cm.spec.to_json()).extra["sequences"] == {"inputs": {"x": 2},
                                                                         "outputs": {"y": 3}}
    i = np.array(1, np.int64)  # a run-time position: a select between items of one shape
    got = cm.predict({"x": x, "t": t, "i": i})
    want_y, want_first, want_z = ort_session(model).run(None, {"x": x, "t": t, "i": i})
    _same(got["y"], want_y)
    _same([got["first"], got["z"]], [want_first, want_z])
    with pytest.raises(InputError, match="sequence of 2 tensors"):
        cm.predict({"x": x[:1], "t": t, "i": i})


def test_if_returning_sequences_runs_either_branch():
    def branch(tag: str, scale: float) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("Mul", ["a", f"k{tag}"], [f"m{tag}"]),
                                  helper.make_node("SequenceConstruct", [f"m{tag}", "a"], [f"s{tag}"])],
                                 tag, [], [_seq(f"s{tag}")],
                                 [helper.make_tensor(f"k{tag}", F, [], [scale])])
    model = _model([helper.make_node("If", ["c"], ["out"], then_branch=branch("t", 2.0),
                                     else_branch=branch("e", -3.0))],
                   [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                    helper.make_tensor_value_info("a", F, [2, 3])], [_seq("out")])
    cm = CuvilModel.load(model).optimize()
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    ref = ReferenceEvaluator(model)
    for c in (True, False):
        feeds = {"c": np.array(c), "a": a}
        _same(cm.predict(feeds)["out"], ref.run(None, feeds)[0])


def test_sequence_map_unrolls_over_items_of_different_shapes():
    body = helper.make_graph([helper.make_node("Add", ["p", "q"], ["r"]),
                              helper.make_node("Shape", ["p"], ["n"])], "body",
                             [helper.make_tensor_value_info("p", F, None),
                              helper.make_tensor_value_info("q", F, None)],
                             [helper.make_tensor_value_info("r", F, None),
                              helper.make_tensor_value_info("n", TensorProto.INT64, None)])
    model = _model([helper.make_node("SequenceMap", ["x", "y"], ["sums", "shapes"], body=body)],
                   [_seq("x"), _seq("y")], [_seq("sums"), _seq("shapes", TensorProto.INT64)])
    shapes = [(3,), (5,), (2,)]
    x = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    y = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    got = CuvilModel.load(model, input_shapes={"x": shapes, "y": shapes}).optimize().predict({"x": x, "y": y})
    want = ReferenceEvaluator(model).run(None, {"x": x, "y": y})
    _same(got["sums"], want[0])
    _same(got["shapes"], want[1])


def test_what_stays_refused():
    model = _model([helper.make_node("Identity", ["x"], ["y"])], [_seq("x")], [_seq("y")])
    with pytest.raises(UnsupportedOperator, match=r"sequences given their item shapes at build time"):
        CuvilModel.load(model)
    with pytest.raises(UnsupportedOperator, match=r"sequences given their item shapes at build time"):
        CuvilModel.load(model, input_shapes={"x": (2, 3)})  # one shape, not one per item
    split = _model([helper.make_node("SplitToSequence", ["d", "s"], ["parts"])],
                   [helper.make_tensor_value_info("d", F, [5, 2]),
                    helper.make_tensor_value_info("s", TensorProto.INT64, [2])], [_seq("parts")])
    with pytest.raises(NotConstant, match=r"the items' shapes depend on them.*bind=\{'s'"):
        CuvilModel.load(split)  # sizes fed at run time: the output's item shapes depend on data
