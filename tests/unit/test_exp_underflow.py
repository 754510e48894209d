"""e^x below ln(FLT_MIN) is exactly 0 in every kernel that uses the vector exp: no subnormal leaves it, so
none reaches a later product (x86 takes a microcode assist per subnormal operation; a padded attention
mask's scores once made the whole P.V GEMM of a padded sequence 1.5x slower)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
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


@pytest.mark.parametrize("family", ["x86", "arm"])
@pytest.mark.parametrize("op", ["Exp", "Sigmoid", "Tanh", "Erf", "Log"])
def test_nan_and_infinities_pass_through_the_vector_transcendentals(op: str, family: str) -> None:
    """The argument reductions clamp with one instruction a bound (x86: pmin/pmax with the bound second)
    and turn n into an integer by the 1.5 * 2^23 trick: NaN must still give NaN, infinities their limits,
    in every lane of a vector (the clamps of both host families)."""
    x = np.array([np.nan, -np.inf, np.inf, 0.5, -0.0, np.nan, 2.0, -3.0], np.float32)
    model = CuvilModel.load(_unary(op, x.size)).optimize(targets=[Target(family=family)])
    y = model.predict({"x": x})["y"]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        want = {"Exp": np.exp, "Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Tanh": np.tanh,
                "Erf": np.vectorize(math.erf, otypes=[np.float32]), "Log": np.log}[op](x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("family", ["x86", "arm"])
def test_softmax_row_with_a_nan_is_nan_and_others_are_untouched(family: str) -> None:
    """The row maximum takes one instruction a vector (pmax on x86, which skips a NaN): the NaN still
    reaches the row's sum, so its row is all NaN (as onnxruntime's), and other rows are exact."""
    rng = np.random.default_rng(1)
    s = rng.standard_normal((3, 12)).astype(np.float32)
    s[1, 5] = np.nan
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(s.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(s.shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    y = CuvilModel.load(m).optimize(targets=[Target(family=family)]).predict({"x": s})["y"]
    assert np.isnan(y[1]).all()
    e = np.exp(s[[0, 2]] - s[[0, 2]].max(axis=1, keepdims=True))
    np.testing.assert_allclose(y[[0, 2]], e / e.sum(axis=1, keepdims=True), rtol=1e-6)
