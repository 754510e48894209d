"""passes/absorb_transposes.py: a detector head's conv -> Transpose(0, 2, 3, 1) -> Reshape becomes one
``conv_nhwc`` (the 1x1 kernel storing its tiles channels-last), a DepthToSpace / SpaceToDepth moved to
NHWC writes channels-last itself, and transpose -> merging reshape -> transpose becomes one transpose; all
against onnxruntime, threads bit-identical to one thread."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.passes.absorb_transposes import merge_groups
from tests.support.ort_check import assert_matches_ort


def heads(batch: int = 1, shared: bool = False) -> onnx.ModelProto:
    """SSD-style heads: two 1x1 convs (6 and 5 outputs, 63 and 15 pixels: channel and pixel tails, one
    with a fused Relu), each moved NHWC and reshaped to [N, pixels * anchors, values], concatenated along
    the anchors. ``shared``: the second conv's output is read by a Sigmoid too (output "z")."""
    rng = np.random.default_rng(7)
    w = {"w1": rng.standard_normal((6, 13, 1, 1)), "b1": rng.standard_normal(6),
         "w2": rng.standard_normal((5, 11, 1, 1)), "b2": rng.standard_normal(5),
         "s1": np.array([batch, 7 * 9 * 3, 2]), "s2": np.array([batch, 3 * 5 * 5, 1]),
         "zero": np.array([0]), "one": np.array([1]), "two": np.array([2])}
    nodes = [helper.make_node("Conv", ["x1", "w1", "b1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Transpose", ["r1"], ["t1"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["t1", "s1"], ["h1"]),
             helper.make_node("Conv", ["x2", "w2", "b2"], ["c2"]),
             helper.make_node("Transpose", ["c2"], ["t2"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["t2", "s2"], ["h2"]),
             helper.make_node("Slice", ["h1", "zero", "one", "two"], ["h1s"]),
             helper.make_node("Concat", ["h1s", "h2"], ["y"], axis=1)]
    nodes += [helper.make_node("Sigmoid", ["c2"], ["z"])] if shared else []
    graph = helper.make_graph(
        nodes, "heads", [helper.make_tensor_value_info("x1", TensorProto.FLOAT, [batch, 13, 7, 9]),
                         helper.make_tensor_value_info("x2", TensorProto.FLOAT, [batch, 11, 3, 5])],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in ("y", "z")[:1 + shared]],
        [numpy_helper.from_array(v.astype(np.float32 if v.dtype.kind == "f" else np.int64), k)
         for k, v in w.items()])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17)]), strict_mode=True)


@pytest.mark.parametrize("batch", [1, 2])
def test_pointwise_head_convs_write_channels_last_and_match_ort(batch: int) -> None:
    proto = heads(batch)
    model = CuvilModel.load(proto).optimize(targets=[Target()])
    counts = model.graph.op_counts()
    assert counts["conv_nhwc"] == 2 and "transpose" not in counts, counts
    assert_matches_ort(proto, model, n_inputs=2)


def test_conv_whose_output_is_read_elsewhere_stays_nchw() -> None:
    proto = heads(shared=True)
    model = CuvilModel.load(proto).optimize(targets=[Target()])
    counts = model.graph.op_counts()
    assert counts["conv_nhwc"] == 1 and counts["conv"] == 1 and counts["transpose"] == 1, counts
    assert_matches_ort(proto, model, n_inputs=1)


def test_channels_last_conv_on_threads_is_bit_identical_to_one_thread() -> None:
    """The transposed store splits the pixels in whole panels: every tile as on one thread."""
    proto = heads()
    xs = {"x1": np.random.default_rng(1).standard_normal((1, 13, 7, 9)).astype(np.float32),
          "x2": np.random.default_rng(2).standard_normal((1, 11, 3, 5)).astype(np.float32)}
    outs = []
    for threads in (1, 3):
        model = CuvilModel.load(proto).optimize(targets=[Target()], max_threads=4)
        model.threads = threads
        outs.append(model.predict(xs))
    assert all(np.array_equal(outs[0][k], outs[1][k]) for k in outs[0])


def block_move_then_nhwc(op: str, mode: str | None, shared: bool = False) -> onnx.ModelProto:
    """DepthToSpace (``mode``) or SpaceToDepth on x [1, 12, 4, 6], its output moved to NHWC (and read by
    a Sigmoid too when ``shared``)."""
    attrs = {"blocksize": 2} | ({"mode": mode} if mode else {})
    nodes = [helper.make_node(op, ["x"], ["d"], **attrs),
             helper.make_node("Transpose", ["d"], ["y"], perm=[0, 2, 3, 1])]
    nodes += [helper.make_node("Sigmoid", ["d"], ["z"])] if shared else []
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 4, 6])],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in ("y", "z")[:1 + shared]])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17)]), strict_mode=True)


BLOCK_MOVES = [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"), ("SpaceToDepth", None)]


@pytest.mark.parametrize("op,mode", BLOCK_MOVES)
def test_block_move_read_by_a_move_to_nhwc_writes_channels_last(op: str, mode: str | None) -> None:
    """The import keeps the op the model asked for (one node, no 6-D transpose); the move to NHWC after
    it becomes another permutation of the same view: one node, no transpose left."""
    proto = block_move_then_nhwc(op, mode)
    ir_op = "depth_to_space" if op == "DepthToSpace" else "space_to_depth"
    model = CuvilModel.load(proto)
    assert model.graph.op_counts() == {ir_op: 1, "transpose": 1}
    model.optimize(targets=[Target()])
    (node,) = model.graph.nodes
    assert node.op == ir_op and node.attrs["channels_last"] is True
    assert_matches_ort(proto, model, n_inputs=2)


def test_block_move_whose_output_is_read_elsewhere_stays_nchw() -> None:
    proto = block_move_then_nhwc("DepthToSpace", "DCR", shared=True)
    model = CuvilModel.load(proto).optimize(targets=[Target()])
    counts = model.graph.op_counts()
    assert counts["depth_to_space"] == 1 and counts["transpose"] == 1, counts
    assert "channels_last" not in next(n for n in model.graph.nodes if n.op == "depth_to_space").attrs
    assert_matches_ort(proto, model, n_inputs=2)


def pixel_shuffle_then_nhwc() -> onnx.ModelProto:
    """A depth-to-space written out (Reshape -> 6-D Transpose -> Reshape, as exporters spell pixel
    shuffle), its output moved to NHWC: one transpose."""
    shapes = {"six": np.array([1, 3, 2, 2, 5, 3]), "four": np.array([1, 3, 10, 6])}
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "six"], ["v"]),
         helper.make_node("Transpose", ["v"], ["t"], perm=[0, 1, 4, 2, 5, 3]),
         helper.make_node("Reshape", ["t", "four"], ["d"]),
         helper.make_node("Transpose", ["d"], ["y"], perm=[0, 2, 3, 1])],
        "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 5, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in shapes.items()])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17)]), strict_mode=True)


def test_transposes_merge_across_a_reshape_that_merges_dims() -> None:
    proto = pixel_shuffle_then_nhwc()
    model = CuvilModel.load(proto).optimize(targets=[Target()])
    assert model.graph.op_counts()["transpose"] == 1
    assert_matches_ort(proto, model, n_inputs=2)


@pytest.mark.parametrize("src,dst,groups", [
    ((1, 16, 24, 2, 24, 2), (1, 16, 48, 48), [[0], [1], [2, 3], [4, 5]]),
    ((2, 3, 1), (6,), [[0, 1, 2]]),
    ((4, 1, 5), (4, 1, 5), [[0], [1], [2]]),
    ((4, 5), (2, 10), None),   # a split, not a merge
    ((6, 4), (4, 6), None),
])
def test_merge_groups(src: tuple[int, ...], dst: tuple[int, ...], groups: list[list[int]] | None) -> None:
    assert merge_groups(src, dst) == groups
