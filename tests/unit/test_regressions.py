"""Bugs found in review, each pinned by the smallest model that showed it (compared with onnxruntime)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.support.ort_check import check_with_ort


def test_in_place_add_does_not_overwrite_a_concat_slice_it_still_reads():
    """y = concat(a, b) + a: the concat is elided (a lives inside its buffer), so writing y in place over
    it would clobber a while the broadcast still reads it."""
    nodes = [helper.make_node("Relu", ["x1"], ["a"]), helper.make_node("Relu", ["x2"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Add", ["c", "a"], ["y"])]
    rng = np.random.default_rng(0)
    feeds = {"x1": rng.random((1, 1, 8), np.float32) + 1, "x2": rng.random((1, 3, 8), np.float32)}
    check_with_ort(nodes, feeds, ["y"])


@pytest.mark.parametrize("op", ["MatMul+Add", "Gemm"])
def test_column_bias_is_not_taken_for_a_row_bias(op):
    """A [M, 1] addend broadcasts down the columns; with M == N it has the size of a row bias."""
    rng = np.random.default_rng(0)
    w, c = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 1)).astype(np.float32)
    nodes = ([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "c"], ["y"])]
             if op == "MatMul+Add" else [helper.make_node("Gemm", ["x", "w", "c"], ["y"])])
    check_with_ort(nodes, {"x": rng.standard_normal((4, 4)).astype(np.float32)}, ["y"],
                   inits={"w": w, "c": c})


@pytest.mark.parametrize(("policy", "mode", "shape", "sizes"), [
    ("not_larger", "nearest", [1, 1, 2, 5], [5, 100]),
    ("not_smaller", "linear", [1, 1, 4, 6], [7, 3]),
    ("not_larger", "linear", [1, 1, 3, 7], [10, 100]),
])
def test_resize_keep_aspect_ratio(policy, mode, shape, sizes):
    """One scale for every resized axis; the output size rounds half up (12.5 -> 13)."""
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, axes=[2, 3],
                            keep_aspect_ratio_policy=policy)
    check_with_ort([node], {"x": np.random.default_rng(5).standard_normal(shape).astype(np.float32)}, ["y"],
                   inits={"sizes": np.array(sizes, np.int64)}, opset=18)
