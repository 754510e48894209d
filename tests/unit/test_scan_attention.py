"""Scan (as a Loop over its scan axis), Attention's function with optional inputs left out (past key and
value without a mask), the preview domain's FlexAttention, Optional/OptionalHasElement/OptionalGetElement
and optional graph inputs: small ONNX graphs compiled, run in wasmtime and compared with onnxruntime
(FlexAttention, which it does not run, with numpy). Random generators: ``test_random_ops.py``."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import UnsupportedOperator
from tests.support.ort_check import check_with_ort, make_model

N = helper.make_node
F = TensorProto.FLOAT
check = partial(check_with_ort, rtol=1e-5, atol=1e-5)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _vi(name: str, shape: list[int] | None, elem: int = F) -> object:
    return helper.make_tensor_value_info(name, elem, shape)


def _loops(cm: CuvilModel) -> list[str]:
    return [n.op for n in cm.graph.nodes if n.op == "loop"]


# -- Scan --------------------------------------------------------------------------------------------------
def _scan_body() -> object:
    """state s [2]; rows a [2] and b [2]; s' = s * w + a - b (w read from the outer graph); scans s' and
    a * b."""
    nodes = [N("Mul", ["s", "w"], ["sw"]), N("Add", ["sw", "a"], ["t"]), N("Sub", ["t", "b"], ["s2"]),
             N("Identity", ["s2"], ["s2o"]), N("Mul", ["a", "b"], ["ab"])]
    return helper.make_graph(nodes, "body", [_vi("s", [2]), _vi("a", [2]), _vi("b", [2])],
                             [_vi("s2", [2]), _vi("s2o", [2]), _vi("ab", [2])])


@pytest.mark.parametrize("directions", [(0, 0, 0, 0), (1, 0, 0, 1), (0, 1, 1, 0)])
def test_scan_with_axes_directions_and_an_outer_value(directions: tuple[int, ...]) -> None:
    """Input a scans axis 0, input b axis 1 (of [2, 5]); output 0 stacks on axis 0, output 1 on axis 1
    (-1); each direction forward or backward; ``w`` is read from the outer graph. Both outputs' rows
    depend on the order, so a wrong direction or axis changes values."""
    in_dirs, out_dirs = directions[:2], directions[2:]
    scan = N("Scan", ["s0", "a", "b"], ["s_final", "ys", "abs"], name="scan0", body=_scan_body(),
             num_scan_inputs=2, scan_input_axes=[0, 1], scan_output_axes=[0, -1],
             scan_input_directions=list(in_dirs), scan_output_directions=list(out_dirs))
    w = N("Mul", ["w0", "w0"], ["w"])  # a run-time outer value: a capture of the loop
    feeds = {"s0": rand(2), "a": rand(5, 2, seed=1), "b": rand(2, 5, seed=2), "w0": rand(2, seed=3)}
    done = check([w, scan], feeds, ["s_final", "ys", "abs"], opset=16)
    assert _loops(done.model) == ["loop"]
    assert done.got[0]["ys"].shape == (5, 2) and done.got[0]["abs"].shape == (2, 5)


def test_scan8_batched_runs_each_batch_row() -> None:
    """Opset 8: axis 0 is a batch (each row scans on its own from its own state), the scan axis is 1."""
    body = helper.make_graph([N("Add", ["s", "x"], ["s2"]), N("Identity", ["s2"], ["y"])], "body",
                             [_vi("s", [3]), _vi("x", [3])], [_vi("s2", [3]), _vi("y", [3])])
    scan = N("Scan", ["", "s0", "x"], ["s_final", "ys"], body=body, num_scan_inputs=1, directions=[1])
    done = check([scan], {"s0": rand(2, 3), "x": rand(2, 4, 3, seed=1)}, ["s_final", "ys"], opset=8)
    assert _loops(done.model) == ["loop", "loop"]


def test_scan_body_passing_a_state_through_and_returning_one_value_twice() -> None:
    """Exporters write both: state c unchanged (its final is its initial value) and s2 as the next state
    and the scan output. onnxruntime 1.32 returns uninitialised memory here, so numpy is the oracle."""
    body = helper.make_graph([N("Add", ["s", "x"], ["s2"])], "body",
                             [_vi(i, [3]) for i in ("s", "c", "x")], [_vi(o, [3]) for o in ("s2", "c", "s2")])
    scan = N("Scan", ["s0", "c0", "x"], ["sf", "cf", "ys"], body=body, num_scan_inputs=1)
    feeds = {"s0": rand(3), "c0": rand(3, seed=1), "x": rand(4, 3, seed=2)}
    model = make_model([scan], feeds, {"sf": rand(3), "cf": rand(3), "ys": rand(4, 3)}, opset=16)
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        got = cm.predict(feeds)
    ys = feeds["s0"] + np.cumsum(feeds["x"], axis=0)
    np.testing.assert_allclose(got["ys"], ys, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["sf"], ys[-1], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got["cf"], feeds["c0"])


def test_scan_inputs_of_different_lengths_are_refused_naming_the_node() -> None:
    body = helper.make_graph([N("Add", ["a", "b"], ["y"])], "body", [_vi("a", [2]), _vi("b", [2])],
                             [_vi("y", [2])])
    scan = N("Scan", ["a", "b"], ["ys"], name="uneven", body=body, num_scan_inputs=2)
    model = make_model([scan], {"a": rand(3, 2), "b": rand(4, 2)}, {"ys": rand(3, 2)}, opset=16)
    with pytest.raises(UnsupportedOperator, match=r"'Scan' at node 'uneven'.*different lengths \[3, 4\]"):
        CuvilModel.load(model)


# -- Attention (opset 23) and FlexAttention (ai.onnx.preview) ----------------------------------------------
def test_attention_with_past_and_no_mask_expands_its_function() -> None:
    """Inputs Q, K, V, "", past_key, past_value: the left-out mask used to stop the function expansion."""
    att = N("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "present_k", "present_v"], is_causal=1)
    feeds = {"q": rand(2, 3, 4, 8), "k": rand(2, 3, 4, 8, seed=1), "v": rand(2, 3, 4, 8, seed=2),
             "pk": rand(2, 3, 3, 8, seed=3), "pv": rand(2, 3, 3, 8, seed=4)}
    done = check([att], feeds, ["y", "present_k", "present_v"], opset=23)
    assert done.got[0]["present_k"].shape == (2, 3, 7, 8)


def test_flex_attention_with_a_score_mod_matches_numpy() -> None:
    score_mod = helper.make_graph(
        [N("Add", ["scores", "bias"], ["out"])], "score_mod", [_vi("scores", None)], [_vi("out", None)],
        [helper.make_tensor("bias", F, [], [0.5])])
    flex = N("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", score_mod=score_mod)
    graph = helper.make_graph([flex], "flex", [_vi(x, [1, 2, 3, 4]) for x in "qkv"], [_vi("y", [1, 2, 3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                    helper.make_opsetid("ai.onnx.preview", 1)])
    q, k, v = (rand(1, 2, 3, 4, seed=s) for s in range(3))
    s = q @ k.swapaxes(-1, -2) / 2.0 + 0.5  # scale 1/sqrt(4)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = p / p.sum(-1, keepdims=True) @ v
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        got = cm.predict({"q": q, "k": k, "v": v})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- Optional --------------------------------------------------------------------------------------------
def test_optional_of_a_tensor_has_it_and_gives_it_back() -> None:
    typed = helper.make_tensor_type_proto(F, [2, 3])
    nodes = [N("Relu", ["x"], ["r"]), N("Optional", ["r"], ["o"], type=typed),
             N("OptionalHasElement", ["o"], ["has"]), N("OptionalGetElement", ["o"], ["got"]),
             N("Neg", ["got"], ["y"])]
    done = check(nodes, {"x": rand(2, 3)}, ["has", "y"], opset=18)
    assert done.got[0]["has"].dtype == bool and bool(done.got[0]["has"])


def test_an_empty_optional_has_no_element() -> None:
    nodes = [N("Optional", [], ["o"], type=helper.make_tensor_type_proto(F, [2])),
             N("OptionalHasElement", ["o"], ["has"]), N("Neg", ["x"], ["y"])]
    done = check(nodes, {"x": rand(2)}, ["has", "y"], opset=18)
    assert not bool(done.got[0]["has"])


def test_taking_the_element_of_an_empty_optional_is_refused_naming_the_node() -> None:
    nodes = [N("Optional", [], ["o"], type=helper.make_tensor_type_proto(F, [2])),
             N("OptionalGetElement", ["o"], ["y"], name="take")]
    model = make_model(nodes, {}, {"y": np.zeros(2, np.float32)}, opset=18)
    with pytest.raises(UnsupportedOperator, match=r"'OptionalGetElement' at node 'take'.*is empty"):
        CuvilModel.load(model)


def test_an_optional_tensor_graph_input_is_fed_as_its_tensor() -> None:
    opt = helper.make_value_info("x", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [4])))
    nodes = [N("OptionalHasElement", ["x"], ["has"]), N("OptionalGetElement", ["x"], ["e"]),
             N("Abs", ["e"], ["y"])]
    graph = helper.make_graph(nodes, "opt", [opt], [_vi("has", [], TensorProto.BOOL), _vi("y", [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    done = check(model, {"x": rand(4)})
    assert bool(done.got[0]["has"])


def test_an_optional_sequence_graph_input_is_refused_naming_it() -> None:
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [2]))
    opt = helper.make_value_info("xs", helper.make_optional_type_proto(seq))
    graph = helper.make_graph([N("OptionalHasElement", ["xs"], ["has"])], "opt", [opt],
                              [_vi("has", [], TensorProto.BOOL)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedOperator, match=r"'Input' at node 'xs': a optional sequence input"):
        CuvilModel.load(model)

