"""The ops added for the backend suites, against onnxruntime on the cases the shipped data leaves out:
3D Conv/Pool with groups, dilations, padding, ceil_mode and count_include_pad; run-time math on
int32/int64/float64; sequence ops with run-time positions (the shipped ones are initializers)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import helper

from cuvil_edge import CuvilModel
from cuvil_edge.errors import UnsupportedOperator
from tests.support.ort_check import check_with_ort, make_model

N = helper.make_node
#: the shared check with this file's defaults: opset 18, an absolute tolerance closer than the shared one
check = partial(check_with_ort, opset=18, atol=1e-5)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CONV3D = [
    dict(kernel_shape=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1]),
    dict(kernel_shape=[2, 3, 1], strides=[2, 1, 2], dilations=[1, 2, 1], pads=[0, 1, 0, 1, 0, 1]),
    dict(kernel_shape=[3, 3, 3], group=2, auto_pad="SAME_UPPER", strides=[2, 2, 2]),
    dict(kernel_shape=[3, 3, 3], group=4, pads=[1, 0, 1, 1, 0, 1]),  # depthwise: the GEMM path in 3D
]


@pytest.mark.parametrize("i", range(len(CONV3D)))
def test_conv3d(i: int) -> None:
    attrs = CONV3D[i]
    group = attrs.get("group", 1)
    m = 4 if group == 4 else 6
    inits = {"w": rand(m, 4 // group, *attrs["kernel_shape"], seed=1), "b": rand(m, seed=2)}
    check([N("Conv", ["x", "w", "b"], ["y"], **attrs), N("Conv", ["x", "w"], ["z"], **attrs),
           N("Relu", ["y"], ["r"])], {"x": rand(2, 4, 5, 7, 6)}, ["y", "z", "r"], inits=inits)


def test_pool3d() -> None:
    pools = [("MaxPool", dict(kernel_shape=[3, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 1, 1, 0])),
             ("MaxPool", dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], dilations=[2, 1, 1], ceil_mode=1)),
             ("AveragePool", dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1])),
             ("AveragePool", dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1],
                                  count_include_pad=1)),
             ("AveragePool", dict(kernel_shape=[2, 3, 2], strides=[2, 2, 2], ceil_mode=1))]
    nodes = [N(op, ["x"], [f"y{i}"], **attrs) for i, (op, attrs) in enumerate(pools)]
    check(nodes, {"x": rand(2, 3, 7, 9, 8)}, [f"y{i}" for i in range(len(pools))], opset=19)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_runtime_arith_on_typed_tensors(dtype: type) -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (2, 3, 4)).astype(dtype)
    b = (rng.integers(1, 9, (3, 1)) * rng.choice([-1, 1], (3, 1))).astype(dtype)
    ops = ["Add", "Sub", "Mul", "Div", "Max", "Min"]
    check([N(op, ["a", "b"], [op.lower()]) for op in ops], {"a": a, "b": b}, [op.lower() for op in ops])


def _positions(**pos: int) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, np.int64) for k, v in pos.items()}


@pytest.mark.parametrize("pos", [dict(e=0, i=2, a=1), dict(e=-1, i=-2, a=-3), dict(e=2, i=0, a=3)])
def test_sequence_ops_with_runtime_positions(pos: dict[str, int]) -> None:
    xs = {k: rand(2, 3, seed=s) for s, k in enumerate("xyzw")}
    nodes = [N("SequenceConstruct", ["x", "y", "z"], ["s"]),
             N("SequenceErase", ["s", "e"], ["s1"]),
             N("SequenceInsert", ["s1", "w", "i"], ["s2"]),
             N("SequenceInsert", ["s2", "x"], ["s3"]),
             N("SequenceAt", ["s3", "a"], ["at"]),
             N("SequenceLength", ["s3"], ["n"]),
             N("ConcatFromSequence", ["s3"], ["stack"], axis=-1, new_axis=1),
             N("SplitToSequence", ["stack"], ["parts"], axis=1, keepdims=0),
             N("SequenceAt", ["parts", "e"], ["part"])]
    check(nodes, {**xs, **_positions(**pos)}, ["at", "n", "stack", "part"])


def test_runtime_position_over_different_shapes_is_a_clear_error() -> None:
    nodes = [N("SequenceConstruct", ["x", "y"], ["s"]), N("SequenceAt", ["s", "p"], ["out"])]
    model = make_model(nodes, {"x": rand(2, 3), "y": rand(1, 3), "p": np.zeros((), np.int64)},
                       {"out": rand(2, 3)}, opset=18)
    with pytest.raises(UnsupportedOperator, match="shape would depend on data"):
        CuvilModel.load(model)
