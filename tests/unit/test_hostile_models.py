"""Hostile model files, for real: every input the ONNX and TFLite import harnesses (``fuzz/targets``) found
breaking the importers' contract, kept in ``fuzz/regressions``, gets its typed error here (a
``CuvilError`` naming the node, attribute or tensor; never an IndexError, ZeroDivisionError,
MemoryError...). Beside them, the import limits (``cuvil_edge.ir.limits``): a declared size past them is
refused before anything is allocated, and what legitimate models materialise stays within them."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge.errors import ModelFormatError, ShapeError, UnsupportedOperator
from cuvil_edge.frontend.onnx import import_onnx
from cuvil_edge.ir import limits
from cuvil_edge.ir.graph import TensorType
from fuzz.engine import REGRESSIONS, Target, replay
from fuzz.targets import onnx_import, tflite_import

#: ONNX regression input -> (error class, words its message holds); (None, why) for one that must import
ONNX_CASES = {
    "argmax-axis-of-scalar": (UnsupportedOperator, "outside a rank-0 tensor"),
    "binarizer-int-by-nan": (UnsupportedOperator, "the target_* attributes differ in length"),
    "attribute-not-utf8": (UnsupportedOperator, "not UTF-8"),
    "concat-of-scalars": (ShapeError, "rank 1 or more"),
    "name-not-utf8": (ModelFormatError, "model.graph.node.output is not valid UTF-8"),
    "optional-of-nothing": (UnsupportedOperator, "optional untyped input"),
    "onehot-depth-infinity": (UnsupportedOperator, "depth inf is not a count"),
    "quantize-to-float32": (UnsupportedOperator, "a float32 zero point or output_dtype"),
    "constant-of-shape-2-to-the-40": (ShapeError, "over the limit"),
    "constant-of-shape-rank-327684": (ShapeError, "327684 dimensions, over the limit of 64"),
    "constant-of-shape-empty-of-huge-dims": (ShapeError, "over the limit of 268435456"),
    "conv-stride-0": (UnsupportedOperator, "strides=[0, 1]"),
    "cumsum-axis-of-floats": (ShapeError, "where integers are needed"),
    "conv-transpose-group-0": (UnsupportedOperator, "group=0"),
    "dequantize-8-scales-for-4-channels": (ShapeError, "8 scales"),
    "einsum-missing-operand": (UnsupportedOperator, "1 inputs"),
    "gather-elements-index-out-of-range": (UnsupportedOperator, "outside dims [3]"),
    "gather-index-out-of-range": (ShapeError, "outside an axis of 3"),
    "gather-by-float-indices": (ShapeError, "by float32 indices"),
    "gemm-3d-input": (UnsupportedOperator, "multiplies matrices"),
    "initializer-of-int4": (ModelFormatError, "too small for the declared shape"),  # 5 nibbles in 1 byte
    "layernorm-scalar-input": (UnsupportedOperator, "outside a rank-0 tensor"),
    "loop-body-of-fewer-inputs": (UnsupportedOperator, "the body takes 2 inputs"),
    "maxpool-stride-0": (UnsupportedOperator, "strides=[0, 0]"),
    "range-delta-0": (ShapeError, "no finite length"),
    "reducesum-axes-of-floats": (ShapeError, "where integers are needed"),
    "reshape-to-negative-dim": (ShapeError, "-4611686018427387904"),
    "reducesum-by-67m-axes": (ShapeError, "axes: 67108864 values, over the limit of 16384"),
    "resize-scale-nan": (UnsupportedOperator, "must be finite and positive"),
    "resize-scale-3e38": (UnsupportedOperator, "make an output size past float32's range"),
    "sequence-into-relu": (UnsupportedOperator, "is a sequence, not a tensor"),
    "sequence-position-not-scalar": (UnsupportedOperator, "not one value"),
    "slice-axis-of-scalar": (UnsupportedOperator, "outside a rank-0 tensor"),
    "split-to-sequence-million-items": (ShapeError, "1048576 outputs"),
    "topk-empty-k": (UnsupportedOperator, "must be one value"),
    "tile-by-67m-repeats": (UnsupportedOperator, "67108864 repeats for an input of rank 2"),
    "trilu-of-an-empty-83m-wide-onehot": (ShapeError, "exceeds the import's budget"),
    "tree-modes-not-utf8": (UnsupportedOperator, "attribute nodes_modes holds text that is not UTF-8"),
    # None: a model the importer must take (the finding was a crash on a valid model)
    "tfidf-ragged-bigrams": (None, "a pool whose bigram items end in half a gram: the tail is dropped"),
    "pad-of-a-scalar": (None, "a constant scalar padded by no pads folds to itself"),
    "unsqueeze-axes-of-floats": (ShapeError, "where integers are needed"),
}
#: TFLite regression input -> (error class, words its message holds)
TFLITE_CASES = {
    "average-pool-stride-padded-384-gib": (ShapeError, "pool folded at build time"),
    "bitcast-without-inputs": (UnsupportedOperator, "input 0 is required"),
    "concatenation-axis-9-of-4": (UnsupportedOperator, "axis [9]"),
    "conv-stride-0": (UnsupportedOperator, "'StrideH': 0"),
    "cumsum-axis-nan": (UnsupportedOperator, "is not an integer of a rank-3 tensor"),
    "conv-weights-2d": (UnsupportedOperator, "not 4D"),
    "fully-connected-weights-3d": (UnsupportedOperator, "not 2D"),
    "if-branches-that-run-each-other": (UnsupportedOperator, "runs itself"),
    "int8-zero-point-minus-1664": (ModelFormatError, "zero points outside int8"),
    "matrix-diag-of-65536-wide-rows": (ShapeError, "MATRIX_DIAG's output of shape (4, 65536, 65536)"),
    "matrix-set-diag-of-a-scalar": (UnsupportedOperator, "at least rank 2"),
    "max-pool-without-options": (UnsupportedOperator, "lack FilterHeight"),
    "nms-output-of-an-unknown-type": (UnsupportedOperator, "output 0 is declared tflite_type_127"),
    "operator-without-outputs": (UnsupportedOperator, "no output"),
    "pad-with-one-width": (UnsupportedOperator, "paddings of shape (1,)"),
    "per-channel-scales-along-the-wrong-axis": (ModelFormatError, "3 scales along axis 1"),
    "reduce-window-of-infinite-strides": (UnsupportedOperator, "input 2 is float32, not integers"),
    "reshape-to-nan": (ShapeError, "not integers"),
    "resize-of-an-empty-constant": (UnsupportedOperator, "no empty dims"),
    "scatter-window-dim-past-the-updates": (UnsupportedOperator, "a dim outside the rank-0 updates"),
    "segment-sum-of-268m-segments": (ShapeError, "UNSORTED_SEGMENT_MIN's output of shape (268435460, 65536)"),
    "slice-begin-past-the-end": (ShapeError, "reads outside (1,)"),
    "slice-with-one-range-for-rank-2": (UnsupportedOperator, "1 slice ranges for a rank-2 input"),
    "sparse-dense-size-50331648": (ModelFormatError, "dense size 50331648"),
    "split-into-0": (UnsupportedOperator, "does not split into 0"),
    "subgraph-output-past-the-tensors": (ModelFormatError, "outside the 2 there are"),
    "transpose-conv-output-shape-nan": (ShapeError, "are not integers"),
    "transpose-conv-weights-3d": (UnsupportedOperator, "not 4D"),
}
HARNESSES = {"onnx_import": (onnx_import, ONNX_CASES), "tflite_import": (tflite_import, TFLITE_CASES)}


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_every_regression_input_has_its_case(name):
    assert sorted(p.name for p in (REGRESSIONS / name).iterdir()) == sorted(HARNESSES[name][1])


@pytest.mark.parametrize(("harness", "case"), [(h, c) for h, (_, cases) in HARNESSES.items() for c in cases])
def test_regression_input_gets_its_typed_error(harness, case):
    module, cases = HARNESSES[harness]
    error, words = cases[case]
    one = module.setup()  # the importer, then the IR verifier: what ``CuvilModel.load`` and the build run
    if error is None:
        one((REGRESSIONS / harness / case).read_bytes())
        return
    with pytest.raises(error) as info:
        one((REGRESSIONS / harness / case).read_bytes())
    assert words in str(info.value)


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_regression_inputs_replay_within_the_harness_bounds(name):
    target = HARNESSES[name][0].target()
    paths = sorted((REGRESSIONS / name).iterdir())
    result = replay(target, paths)
    assert result.inputs == len(paths) and not result.findings, result.findings


def _model(nodes: list, inputs: list, outputs: list, inits: list) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_few_kb_model_cannot_make_a_constant_past_the_import_budget():
    """ConstantOfShape of 130M float64 (1.09 GB): under the per-tensor element limit, over what a tiny
    model may materialise; refused naming the node and the size before anything is allocated."""
    shape = numpy_helper.from_array(np.array([130, 1024, 1024], np.int64), "shape")
    value = helper.make_tensor("value", TensorProto.DOUBLE, [1], [1.0])
    m = _model([helper.make_node("ConstantOfShape", ["shape"], ["c"], name="big", value=value),
                helper.make_node("Add", ["x", "c"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1])],
               [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [130, 1024, 1024])], [shape])
    data = m.SerializeToString()
    assert len(data) < 4096
    with pytest.raises(ShapeError, match=r"'big'.*1090519040 more bytes"):
        import_onnx(data)


def test_what_a_model_of_large_weights_materialises_is_within_its_budget():
    """A model holding 16 MB of weights may fold them (a transpose of a weight: 16 MB more) beyond the
    base budget's share: the budget grows with the model."""
    w = numpy_helper.from_array(np.ones((2048, 2048), np.float32), "w")
    m = _model([helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
                helper.make_node("MatMul", ["x", "wt"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])], [w])
    graph = import_onnx(m.SerializeToString())
    assert graph.outputs[0].type.shape == (1, 2048)


def test_budget_counts_across_one_import_and_resets_after():
    with limits.import_budget(0):
        limits.charge(limits.BASE_BUDGET - 10, "first")
        with pytest.raises(ShapeError, match="second"):
            limits.charge(11, "second")
    limits.charge(limits.BASE_BUDGET * 4, "outside an import")  # no budget outside an import


@pytest.mark.parametrize("shape", [(1 << 40,), (1 << 15, 1 << 15, 2), (2, -1)])
def test_a_tensor_type_past_the_limits_or_negative_is_a_shape_error(shape):
    with pytest.raises(ShapeError):
        TensorType(shape)


def test_layer_norm_over_two_axes_without_a_bias_imports():
    """The default bias of a LayerNormalization over several axes is shaped like them (it was a flat
    vector, and numpy refused to broadcast it: a ValueError out of the importer)."""
    scale = numpy_helper.from_array(np.ones((3, 4), np.float32), "s")
    m = _model([helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=1)],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])], [scale])
    graph = import_onnx(m.SerializeToString())
    assert graph.outputs[0].type.shape == (2, 3, 4)


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_every_seed_imports_and_verifies(name):
    """The harness seeds are models the importers take whole (a seed refused early covers little)."""
    module = HARNESSES[name][0]
    one = module.setup()
    for data in module.seeds():
        one(data)


def test_an_op_on_an_empty_constant_folds_to_an_empty_constant():
    """Found by the onnx_import run: Softmax of a constant with an empty axis reached numpy's max, which
    has no identity (ValueError). A node whose outputs are all empty folds to empty constants, unrun."""
    empty = helper.make_tensor("c", TensorProto.FLOAT, [2, 0], [])
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["c"], ["s"], axis=1), helper.make_node("Shape", ["s"], ["y"])],
        "g", [], [helper.make_tensor_value_info("y", TensorProto.INT64, [2])], initializer=[empty])
    g = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert g.outputs[0].is_const and g.outputs[0].const.tolist() == [2, 0]


def test_constant_of_shape_refuses_a_shape_past_the_rank_limit_before_reading_it():
    """Found by the onnx_import run: a Range of 100M values fed to ConstantOfShape as its shape was turned
    into a Python tuple (40 s) before the rank limit refused it; the shape's size is checked first."""
    shape = numpy_helper.from_array(np.zeros(65, np.int64), "shape")
    m = _model([helper.make_node("ConstantOfShape", ["shape"], ["c"], name="wide")], [],
               [helper.make_tensor_value_info("c", TensorProto.FLOAT, [0] * 65)], [shape])
    with pytest.raises(ShapeError, match="wide.*a shape of 65 dimensions, over the limit of 64"):
        import_onnx(m.SerializeToString())


def test_a_hang_inside_a_broad_except_is_still_reported(tmp_path) -> None:
    """The replay's time limit fires inside the code under test: a parser's ``except Exception`` (as
    read_tflite has around flatbuffers) must not swallow it into its own error."""

    def swallowing(data: bytes) -> None:
        while True:
            try:
                time.sleep(1)
            except Exception:  # what a broad parser does
                raise ModelFormatError("malformed") from None

    target = Target("slow", "host", lambda: swallowing, (ModelFormatError,), (), time_limit_s=0.2)
    (tmp_path / "input").write_bytes(b"x")
    found = replay(target, [tmp_path / "input"]).findings
    assert list(found) == ["input"] and found["input"].startswith("Hang: over the time limit")
