"""e^x below ln(FLT_MIN) is exactly 0 in every kernel that uses the vector exp: no subnormal leaves it, so
none reaches a later product (x86 takes a microcode assist per subnormal operation; a padded attention
mask's scores once made the whole P.V GEMM of a padded sequence 1.5x slower)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from cuvil_edge import CuvilModel, Target

FLT_MIN = np.finfo(np.float32).tiny


def _unary(op: str, n: int) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _subnormal(a: np.ndarray) -> np.ndarray:
    return (a != 0) & (np.abs(a) < FLT_MIN)


def test_exp_below_the_normal_range_is_zero_and_above_matches_numpy() -> None:
    x = np.array([-np.inf, -1e4, -103.0, -95.0, -87.5, -87.33, -87.0, -50.0, -1.0, 0.0, 1.0, 88.0],
                 np.float32)
    y = CuvilModel.load(_unary("Exp", x.size)).optimize(targets=[Target()]).predict({"x": x})["y"]
    assert not _subnormal(y).any()
    np.testing.assert_array_equal(y[:5], 0.0)  # numpy: 0 only for the first two, subnormals after
    np.testing.assert_allclose(y[5:], np.exp(x[5:]), rtol=1e-6)


def test_masked_softmax_gives_exact_zeros_for_masked_scores() -> None:
    """A padding mask's -10000 (BERT's convention) and -inf: exact zeros, no subnormals, rows sum to 1."""
    rng = np.random.default_rng(0)
    s = rng.standard_normal((4, 37)).astype(np.float32)
    s[:, 29:] += np.float32(-1e4)
    s[1, 20:] = -np.inf
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(s.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(s.shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    y = CuvilModel.load(m).optimize(targets=[Target()]).predict({"x": s})["y"]
    assert not _subnormal(y).any()
    np.testing.assert_array_equal(y[:, 29:], 0.0)
    np.testing.assert_array_equal(y[1, 20:], 0.0)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)
