"""DepthToSpace / SpaceToDepth as their own IR ops (``depth_to_space``, ``space_to_depth`` in
``ops/movement.py``): both frontends import one node of the op the model asked for, not a reshape + 6-D
transpose + reshape, and it runs as one pass over the data. ONNX (both DepthToSpace modes, SpaceToDepth)
against onnxruntime, TFLite builder models against LiteRT: a DEPTH_TO_SPACE between convs (as
pose_detection's decoder) leaves no transpose, and one feeding an NHWC graph output (as
face_detection_full_range_sparse's heads) writes channels-last itself, so no transpose appears for it."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.codegen.emit import EmitContext
from cuvil_edge.codegen.memplan import plan_memory
from cuvil_edge.errors import ShapeError, UnsupportedOperator
from cuvil_edge.ops.registry import node_code
from tests.support.ort_check import assert_matches_ort
from tests.support.tflite_builder import TfliteBuilder
from tests.support.tflite_third_party import Case, interior_transposes, run_case

pytestmark = pytest.mark.integration

IR_OP = {"DepthToSpace": "depth_to_space", "SpaceToDepth": "space_to_depth",
         "DEPTH_TO_SPACE": "depth_to_space", "SPACE_TO_DEPTH": "space_to_depth"}


def onnx_block_move(op: str, shape: list[int], k: int, mode: str | None = None,
                    const: np.ndarray | None = None) -> onnx.ModelProto:
    """One DepthToSpace / SpaceToDepth on input x; with ``const`` it reads that initializer instead and
    its output is added to x (shaped as the op's output)."""
    attrs = {"blocksize": k} | ({"mode": mode} if mode else {})
    src = "c" if const is not None else "x"
    n, c, h, w = shape if const is None else const.shape
    out = [n, c // k // k, h * k, w * k] if op == "DepthToSpace" else [n, c * k * k, h // k, w // k]
    nodes = [helper.make_node(op, [src], ["y" if const is None else "d"], **attrs)]
    inits = []
    if const is not None:
        nodes.append(helper.make_node("Add", ["d", "x"], ["y"]))
        inits.append(numpy_helper.from_array(const, "c"))
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op,mode,shape,k,call", [
    ("DepthToSpace", "DCR", [2, 12, 3, 5], 2, "x32_copy_nd"),
    ("DepthToSpace", "CRD", [1, 18, 2, 3], 3, "x32_copy_nd"),
    ("DepthToSpace", None, [1, 8, 1, 1], 2, "x32_transpose"),  # default DCR; 1x1 pixels: a 2-D transpose
    ("SpaceToDepth", None, [2, 3, 4, 6], 2, "x32_copy_nd"),
    ("SpaceToDepth", None, [1, 5, 6, 3], 3, "x32_transpose"),  # one block wide: (k*k, C*H/k) transposed
])
def test_onnx_import_is_one_node_of_the_op_and_matches_ort(op: str, mode: str | None, shape: list[int],
                                                           k: int, call: str) -> None:
    proto = onnx_block_move(op, shape, k, mode)
    model = CuvilModel.load(proto)
    (node,) = model.graph.nodes
    assert node.op == IR_OP[op] and node.attrs["blocksize"] == k
    assert node.attrs.get("mode") == (mode or "DCR" if op == "DepthToSpace" else None)
    model.optimize(targets=[Target()])
    assert model.compiled is not None
    assert model.compiled.program.kernels_used == {node.name: "x32-" + IR_OP[op].replace("_", "-")}
    ctx = EmitContext(model.graph, plan_memory(model.graph))
    calls = re.findall(r"\b(x32_\w+)\(", node_code(model.graph.nodes[0], ctx) or "")
    assert calls == [call]  # one pass over the data
    assert_matches_ort(proto, model, n_inputs=2)


@pytest.mark.parametrize("op,mode", [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"),
                                     ("SpaceToDepth", None)])
def test_onnx_block_move_of_a_constant_folds_at_import(op: str, mode: str | None) -> None:
    """The op's numpy reference (``fold``) is ONNX's: a constant input is moved at build time."""
    c = np.random.default_rng(5).standard_normal((1, 8, 2, 4)).astype(np.float32)
    out = [1, 2, 4, 8] if op == "DepthToSpace" else [1, 32, 1, 2]
    proto = onnx_block_move(op, out, 2, mode, const=c)
    model = CuvilModel.load(proto)
    assert model.graph.op_counts() == {"binary_f32": 1}, model.graph.op_counts()
    assert_matches_ort(proto, model.optimize(targets=[Target()]), n_inputs=2)


def test_onnx_bad_mode_and_shape_are_typed_errors() -> None:
    with pytest.raises(UnsupportedOperator, match="DepthToSpace.*'XYZ'"):
        CuvilModel.load(onnx_block_move("DepthToSpace", [1, 8, 2, 2], 2, "XYZ"))
    with pytest.raises(ShapeError, match="depth_to_space mode 'DCR' with block 2 on 6 channels"):
        CuvilModel.load(onnx_block_move("DepthToSpace", [1, 6, 2, 2], 2, "DCR"))
    with pytest.raises(ShapeError, match="space_to_depth block 2 does not divide 3x4"):
        CuvilModel.load(onnx_block_move("SpaceToDepth", [1, 6, 3, 4], 2))


def _w(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def conv_block_move_conv(op: str) -> bytes:
    """x [1, 6, 8, 4] -> 1x1 CONV_2D (16 channels) -> ``op`` (block 2) -> 3x3 SAME CONV_2D (3 channels):
    the block move between convs, as pose_detection's decoder has DEPTH_TO_SPACE."""
    b = TfliteBuilder()
    x, a = b.tensor("x", (1, 6, 8, 4)), b.tensor("a", (1, 6, 8, 16))
    b.op("CONV_2D", [x, b.const("w1", _w(16, 1, 1, 4)), b.const("b1", _w(16, seed=1))], [a],
         ("Conv2DOptions", {"Padding": 1, "StrideH": 1, "StrideW": 1}))
    mid = (1, 12, 16, 4) if op == "DEPTH_TO_SPACE" else (1, 3, 4, 64)
    m, y = b.tensor("m", mid), b.tensor("y", (*mid[:3], 3))
    b.op(op, [a], [m], (f"{op.title().replace('_', '')}Options", {"BlockSize": 2}))
    b.op("CONV_2D", [m, b.const("w2", _w(3, 3, 3, mid[3], seed=2)), b.const("b2", _w(3, seed=3))], [y],
         ("Conv2DOptions", {"Padding": 0, "StrideH": 1, "StrideW": 1}))
    return b.build([x], [y])


def conv_block_move_out(op: str) -> bytes:
    """x [1, 4, 6, 3] -> 1x1 CONV_2D (8 channels) -> ``op`` (block 2) -> graph output (NHWC), as
    face_detection_full_range_sparse's regressor head ends in DEPTH_TO_SPACE."""
    b = TfliteBuilder()
    x, a = b.tensor("x", (1, 4, 6, 3)), b.tensor("a", (1, 4, 6, 8))
    b.op("CONV_2D", [x, b.const("w", _w(8, 1, 1, 3)), b.const("b", _w(8, seed=1))], [a],
         ("Conv2DOptions", {"Padding": 1, "StrideH": 1, "StrideW": 1}))
    y = b.tensor("y", (1, 8, 12, 2) if op == "DEPTH_TO_SPACE" else (1, 2, 3, 32))
    b.op(op, [a], [y], (f"{op.title().replace('_', '')}Options", {"BlockSize": 2}))
    return b.build([x], [y])


@pytest.mark.parametrize("op", ["DEPTH_TO_SPACE", "SPACE_TO_DEPTH"])
def test_tflite_block_move_between_convs_leaves_no_transpose(op: str) -> None:
    model, _ = run_case(conv_block_move_conv(op), Case("", ""))
    g = model.graph
    assert not interior_transposes(g)
    (node,) = [n for n in g.nodes if n.op == IR_OP[op]]
    assert "channels_last" not in node.attrs
    assert [n.op for n in g.nodes].count("transpose") == 2  # the input's and the output's moves only


@pytest.mark.parametrize("op", ["DEPTH_TO_SPACE", "SPACE_TO_DEPTH"])
def test_tflite_block_move_at_an_nhwc_output_writes_channels_last(op: str) -> None:
    model, _ = run_case(conv_block_move_out(op), Case("", ""))
    g = model.graph
    (node,) = [n for n in g.nodes if n.op == IR_OP[op]]
    assert node.attrs["channels_last"] is True and node.outputs[0] is g.outputs[0]
    assert [n.op for n in g.nodes].count("transpose") == 1  # the input's move only
