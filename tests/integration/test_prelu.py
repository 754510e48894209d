"""The fused ``prelu`` op: ONNX PRelu against onnxruntime and TFLite PRELU against LiteRT (both kernels:
channel planes and the channel innermost, and one slope for all), the elementwise form kept where the
slope varies along two axes, and the same bits on 1, 2 and 4 threads."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.ops.prelu import channel_slope
from cuvil_edge.oracle import ort_session
from tests.support.tflite_builder import TfliteBuilder
from tests.support.tflite_third_party import Case, run_case

pytestmark = pytest.mark.integration


def onnx_prelu(shape: list[int], slope: np.ndarray) -> onnx.ModelProto:
    """y = PRelu(x, slope) with slope an initializer."""
    graph = helper.make_graph(
        [helper.make_node("PRelu", ["x", "slope"], ["y"], name="prelu")], "prelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(slope, "slope")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def kernels(model: CuvilModel) -> dict[str, str]:
    """op -> the kernel its node runs."""
    used = model.compiled.program.kernels_used
    return {n.op: used[n.name] for n in model.graph.nodes if n.name in used}


def test_channel_slope_finds_the_one_axis_a_slope_varies_along() -> None:
    """Broadcast as numpy does (aligned on the right); None where the fused op cannot say it."""
    ones = np.ones
    assert channel_slope((1, 8, 5, 7), ones((8, 1, 1)))[0] == 1
    assert channel_slope((1, 5, 7, 8), ones((1, 1, 8)))[0] == 3
    assert channel_slope((6, 9), ones(9))[0] == 1
    assert channel_slope((1, 3, 5), ones((1, 1)))[1].shape == (1,)  # one slope for all
    assert channel_slope((1, 3, 5, 7), ones((3, 5, 1))) is None  # two axes
    assert channel_slope((3, 5), ones((1, 3, 5))) is None  # would add a dim
    assert channel_slope((1, 4, 5), ones(4)) is None  # aligned on the right: the 5, not the 4


SLOPES = {  # x shape, slope shape, fused into one prelu node
    "per-channel-planes": ([2, 8, 5, 7], [8, 1, 1], True),
    "per-channel-innermost": ([6, 9], [9], True),
    "scalar": ([1, 3, 5, 7], [1], True),
    "two-axes": ([1, 3, 5, 7], [3, 5, 1], False),
}


@pytest.mark.parametrize("name", sorted(SLOPES))
def test_onnx_prelu_matches_onnxruntime(name: str) -> None:
    shape, slope_shape, fused = SLOPES[name]
    rng = np.random.default_rng(0)
    model = onnx_prelu(shape, rng.uniform(-0.5, 0.5, slope_shape).astype(np.float32))
    x = rng.standard_normal(shape).astype(np.float32)
    cm = CuvilModel.load(model).optimize(targets=[Target()])
    got, want = cm.predict({"x": x})["y"], ort_session(model).run(None, {"x": x})[0]
    assert np.array_equal(got, want)  # one multiply per negative element: exact
    if fused:
        assert cm.graph.op_counts() == {"prelu": 1} and kernels(cm)["prelu"] == "f32-vprelu-4"
    else:
        assert "prelu" not in cm.graph.op_counts()


def tflite_conv_prelu(alpha: np.ndarray) -> bytes:
    """conv (so PRELU gets an NCHW value) -> PRELU(alpha), and PRELU straight on the NHWC graph input."""
    rng = np.random.default_rng(1)
    b = TfliteBuilder()
    x = b.tensor("x", (1, 6, 10, 4))
    conv = b.tensor("conv", (1, 6, 10, 8))
    b.op("CONV_2D", [x, b.const("w", rng.standard_normal((8, 3, 3, 4)).astype(np.float32)),
                     b.const("b", rng.standard_normal(8).astype(np.float32))], [conv],
         ("Conv2DOptions", {"Padding": 0, "StrideH": 1, "StrideW": 1}))
    y, z = b.tensor("y", (1, 6, 10, 8)), b.tensor("z", (1, 6, 10, 4))
    b.op("PRELU", [conv, b.const("alpha", alpha)], [y])
    b.op("PRELU", [x, b.const("alpha_in", alpha.reshape(-1)[:4] if alpha.size > 1 else alpha)], [z])
    return b.build([x], [y, z])


@pytest.mark.parametrize("alpha", [np.linspace(-0.4, 0.6, 8, dtype=np.float32).reshape(1, 1, 8),
                                   np.linspace(-0.4, 0.6, 8, dtype=np.float32),
                                   np.full((1, 1, 1), 0.25, np.float32)], ids=["hwc", "c", "scalar"])
def test_tflite_prelu_matches_litert(alpha: np.ndarray) -> None:
    model, _ = run_case(tflite_conv_prelu(alpha), Case("", ""))
    assert model.graph.op_counts() == {"transpose": 2, "conv": 1, "prelu": 2}  # in and out of the conv


@pytest.mark.parametrize("name", ["per-channel-planes", "per-channel-innermost", "scalar"])
def test_prelu_same_bits_on_1_2_and_4_threads(name: str) -> None:
    """Large enough to be split between threads (at least 16384 elements)."""
    shape, slope_shape = {"per-channel-planes": ([1, 16, 40, 41], [16, 1, 1]),
                          "per-channel-innermost": ([700, 33], [33]), "scalar": ([1, 5, 61, 67], [1])}[name]
    rng = np.random.default_rng(2)
    proto = onnx_prelu(shape, rng.uniform(-0.5, 0.5, slope_shape).astype(np.float32))
    x = rng.standard_normal(shape).astype(np.float32)
    outs = {}
    for n in (1, 2, 4):
        cm = CuvilModel.load(proto).optimize(targets=[Target()], max_threads=4)
        cm.threads = n
        outs[n] = cm.predict({"x": x})["y"]
    body = cm.compiled.program.source.split("cuvil_body(const int tid) {")[1]  # the graph's one node
    assert "cuvil_split(" in body and "f32_prelu_" in body  # split between threads
    assert np.array_equal(outs[1], outs[2]) and np.array_equal(outs[1], outs[4])
    assert np.array_equal(outs[1], ort_session(proto).run(None, {"x": x})[0])
