"""ReduceLogSum and ReduceLogSumExp (constant axes, both keepdims) against onnxruntime, and LogSumExp's
edges: large values do not overflow, an all -inf slice gives -inf, a +inf gives +inf."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session


def _model(op: str, keepdims: int, out: list[int]):
    axes = numpy_helper.from_array(np.array([1, -1], np.int64), "axes")
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2, 3, 4])],
                          [helper.make_tensor_value_info("y", 1, out)], [axes])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op", ["ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize(("keepdims", "out"), [(1, [2, 1, 1]), (0, [2])])
def test_reduce_log_matches_onnxruntime(op, keepdims, out) -> None:
    model = _model(op, keepdims, out)
    x = np.random.default_rng(1).uniform(0.1, 3, (2, 3, 4)).astype(np.float32)
    if op == "ReduceLogSumExp":
        x[1] += 100  # exp(100) overflows float32: the shift keeps it finite
    with CuvilModel.load(model).optimize(targets=[Target()]) as m:
        got = m.predict({"x": x})["y"]
    np.testing.assert_allclose(got, ort_session(model).run(None, {"x": x})[0], rtol=1e-5)


def test_log_sum_exp_of_infinities() -> None:
    x = np.zeros((2, 3, 4), np.float32)
    x[0] = -np.inf
    x[1, 2, 3] = np.inf
    with CuvilModel.load(_model("ReduceLogSumExp", 0, [2])).optimize(targets=[Target()]) as m:
        np.testing.assert_array_equal(m.predict({"x": x})["y"], [-np.inf, np.inf])
