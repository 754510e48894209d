"""Weights and parameters given at run time (graph inputs, not initializers): Conv, ConvTranspose,
ConvInteger and QLinearConv weights (the direct ``f32-conv-rt`` kernels), Clip bounds, the statistics of
BatchNormalization (also in training mode) and the scale and bias of Instance/GroupNormalization, and the
W/R/B of LSTM, GRU and RNN (packed per run), each a small ONNX graph compiled, run in wasmtime and compared
with onnxruntime. Constant weights keep their packed kernels; what stays unsupported is refused by name."""

from __future__ import annotations

import re
from functools import partial

import numpy as np
import pytest
from onnx import helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.errors import UnsupportedOperator
from tests.support.ort_check import check_with_ort, make_model

N = helper.make_node
check = partial(check_with_ort, opset=19)


def rand(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def packs_at_run_time(checked) -> bool:
    """The model's C calls ``f32_rnn_pack`` (its definition is there either way)."""
    return re.search(r"\bf32_rnn_pack\(\d", checked.model.compiled.program.source) is not None


# -- Conv / ConvTranspose ----------------------------------------------------------------------------
CONVS = {  # name: (x shape, w shape, attrs)
    "2d_pads_strides": ((2, 3, 9, 8), (4, 3, 3, 3), dict(pads=[1, 0, 2, 1], strides=[2, 1])),
    "2d_groups_dilations": ((1, 4, 10, 9), (6, 2, 3, 2), dict(group=2, dilations=[2, 3], pads=[2, 1, 1, 2])),
    "dw_same_upper": ((1, 5, 7, 7), (5, 1, 3, 3), dict(group=5, auto_pad="SAME_UPPER", strides=[2, 1])),
    "same_lower": ((1, 2, 6, 5), (3, 2, 2, 4), dict(auto_pad="SAME_LOWER")),
    "pointwise_valid": ((1, 6, 4, 5), (3, 6, 1, 1), dict(auto_pad="VALID")),
    "1d_strided": ((2, 3, 17), (4, 3, 5), dict(strides=[3], pads=[2, 1], dilations=[2])),
    "3d": ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), dict(pads=[1, 0, 1, 0, 1, 1], strides=[1, 2, 1])),
}


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("case", sorted(CONVS))
def test_conv_with_runtime_weights_runs_the_direct_kernel(case: str, bias: bool) -> None:
    xs, ws, attrs = CONVS[case]
    feeds = {"x": rand(*xs), "w": rand(*ws, seed=1)}
    if bias:
        feeds["b"] = rand(ws[0], seed=2)
    used = check([N("Conv", list(feeds), ["y"], **attrs)], feeds, ["y"]).kernels
    assert used == {"f32-conv-rt-4"}


def test_conv_runtime_weights_fused_activation_and_threads() -> None:
    """A Relu fuses into the direct kernel; with 3 threads splitting the 2 x 5 output planes the numbers
    are the single-thread ones."""
    feeds = {"x": rand(2, 4, 12, 11), "w": rand(5, 4, 3, 3, seed=1), "b": rand(5, seed=2)}
    nodes = [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["y"])]
    got = [check(nodes, feeds, ["y"], threads=t) for t in (1, 3)]
    assert got[0].kernels == got[1].kernels == {"f32-conv-rt-4"}
    np.testing.assert_array_equal(got[0].got[0]["y"], got[1].got[0]["y"])
    assert (got[0].got[0]["y"] == 0).any()  # the activation ran


def test_conv_constant_weights_keep_the_packed_kernels() -> None:
    x, w = rand(1, 3, 9, 9), rand(8, 3, 3, 3, seed=1)
    used = check([N("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": x}, ["y"], inits={"w": w}).kernels
    assert used == {"f32-conv-direct-4x8"}


DECONVS = {  # name: (x shape, w shape, attrs)
    "2d_strides_pads": ((1, 3, 4, 5), (3, 2, 3, 3), dict(strides=[2, 2], pads=[1, 0, 0, 1])),
    "2d_groups_dilations_output_padding": ((2, 4, 3, 4), (4, 3, 2, 3), dict(
        group=2, dilations=[2, 1], strides=[3, 2], output_padding=[1, 1])),
    "output_shape": ((1, 2, 3, 3), (2, 3, 3, 3), dict(strides=[3, 2], output_shape=[10, 8])),
    "same_upper": ((1, 2, 3, 4), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    "1d": ((1, 3, 6), (3, 2, 4), dict(strides=[2], pads=[1, 2])),
    "3d": ((1, 2, 3, 3, 2), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[0, 1, 0, 1, 0, 1])),
}


@pytest.mark.parametrize("case", sorted(DECONVS))
def test_conv_transpose_with_runtime_weights(case: str) -> None:
    xs, ws, attrs = DECONVS[case]
    feeds = {"x": rand(*xs), "w": rand(*ws, seed=1), "b": rand(ws[1] * attrs.get("group", 1), seed=2)}
    used = check([N("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], feeds, ["y"]).kernels
    assert used == {"f32-deconv-rt-4"}


def test_conv_integer_and_qlinear_conv_with_runtime_weights() -> None:
    """uint8 weights dequantized at run time, then the direct kernel (onnxruntime takes one ConvInteger
    weight zero point; the node case test_convinteger_with_padding has one per channel); QLinearConv's
    int32 bias is scaled at run time when its scales are inputs."""
    rng = np.random.default_rng(3)
    u8, f32 = partial(np.array, dtype=np.uint8), partial(np.array, dtype=np.float32)
    x = rng.integers(0, 255, (1, 2, 6, 5), dtype=np.uint8)
    w = rng.integers(0, 255, (3, 2, 3, 3), dtype=np.uint8)
    feeds = {"x": x, "w": w, "xz": u8(7), "wz": u8(250)}
    got = check([N("ConvInteger", list(feeds), ["y"], pads=[1, 1, 0, 1])], feeds, ["y"], opset=10, rtol=0,
                atol=0)
    assert "f32-conv-rt-4" in got.kernels
    feeds = {"x": x, "xs": f32(0.05), "xz": u8(128), "w": w, "ws": f32([0.01, 0.02, 0.004]),
             "wz": u8([128, 100, 140]), "ys": f32(0.2), "yz": u8(100),
             "b": rng.integers(-500, 500, 3).astype(np.int32)}
    got = check([N("QLinearConv", list(feeds), ["y"], pads=[1, 1, 1, 1], strides=[2, 1])], feeds, ["y"],
                opset=10, rtol=0, atol=1)
    assert "f32-conv-rt-4" in got.kernels


def test_conv_runtime_bias_of_wrong_size_is_refused() -> None:
    feeds = {"x": rand(1, 2, 5, 5), "w": rand(3, 2, 3, 3), "b": rand(4)}
    with pytest.raises(UnsupportedOperator, match="'Conv' at node 'cv'.*bias of shape \\(4,\\) for 3 output"):
        CuvilModel.load(make_model([N("Conv", ["x", "w", "b"], ["y"], name="cv")], feeds,
                                   {"y": rand(1, 3, 3, 3)}))


# -- Clip --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8])
def test_clip_with_runtime_bounds(dtype) -> None:
    x = (rand(3, 7, scale=40)).astype(dtype)
    for lo, hi in ((-5, 9), (6, -2)):  # min > max: every value becomes max
        feeds = {"x": x, "lo": np.array(lo, dtype), "hi": np.array(hi, dtype)}
        y = check([N("Clip", ["x", "lo", "hi"], ["y"])], feeds, ["y"], rtol=0, atol=0).got[0]["y"]
        assert {y.min(), y.max()} == ({lo, hi} if lo <= hi else {hi})
    bounds = {"lo": np.array(-3, dtype), "hi": np.array(4, dtype)}
    for ins in (["x", "lo"], ["x", "", "hi"]):
        check([N("Clip", ins, ["y"])], {"x": x} | {k: bounds[k] for k in ins[1:] if k}, ["y"], rtol=0, atol=0)


def test_clip_bound_of_several_values_is_refused() -> None:
    feeds = {"x": rand(4), "lo": rand(2)}
    with pytest.raises(UnsupportedOperator, match="'Clip' at node 'cl'.*bound of shape \\(2,\\)"):
        CuvilModel.load(make_model([N("Clip", ["x", "lo"], ["y"], name="cl")], feeds, {"y": rand(4)}))


# -- BatchNormalization, InstanceNormalization, GroupNormalization ---------------------------------
def _stats(c: int) -> dict[str, np.ndarray]:
    return {"s": rand(c, seed=1), "bias": rand(c, seed=2), "mean": rand(c, seed=3),
            "var": np.abs(rand(c, seed=4)) + 0.1}


def test_batchnorm_with_runtime_statistics_after_a_constant_conv() -> None:
    """The affine is computed per run and read by channel_affine, which the fold pass must leave alone
    (a constant conv before it would otherwise take its a and b into its weights)."""
    x, w = rand(2, 3, 6, 5), rand(4, 3, 3, 3, seed=5)
    feeds = {"x": x, **_stats(4)}
    nodes = [N("Conv", ["x", "w"], ["c"]), N("BatchNormalization", ["c", "s", "bias", "mean", "var"], ["y"],
                                             epsilon=1e-3)]
    got = check(nodes, feeds, ["y"], inits={"w": w})
    assert "f32-vaffinec-4" in got.kernels


def test_batchnorm_training_mode_outputs_running_statistics() -> None:
    feeds = {"x": rand(3, 4, 5, 2, scale=2), **_stats(4)}
    node = N("BatchNormalization", ["x", "s", "bias", "mean", "var"], ["y", "rm", "rv"], training_mode=1,
             momentum=0.7)
    check([node], feeds, ["y", "rm", "rv"], opset=15)


def test_group_and_instance_norm_with_runtime_scale_and_bias() -> None:
    x = rand(2, 6, 4, 3, scale=3)
    feeds = {"x": x, "s": rand(6, seed=1), "b": rand(6, seed=2)}
    for node, opset in ((N("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-3), 21),
                        (N("InstanceNormalization", ["x", "s", "b"], ["y"]), 19)):
        got = check([node], feeds, ["y"], opset=opset)
        assert {"f32-layernorm", "f32-vaffinec-4"} <= got.kernels


# -- LSTM, GRU, RNN ------------------------------------------------------------------------------------
def _rnn_feeds(op: str, t: int, b: int, i: int, h: int, dirs: int, seed: int = 0) -> dict[str, np.ndarray]:
    g = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    return {"x": rand(t, b, i, seed=seed), "w": rand(dirs, g * h, i, seed=seed + 1, scale=0.5),
            "r": rand(dirs, g * h, h, seed=seed + 2, scale=0.5), "bias": rand(dirs, 2 * g * h, seed=seed + 3)}


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_ops_with_runtime_weights(op: str, direction: str) -> None:
    """W, R and B are inputs: packed per run (f32_rnn_pack) for the same cell kernels; initial states and
    run-time sequence lengths (shorter sequences keep their state and write zeros) too."""
    dirs = 2 if direction == "bidirectional" else 1
    t, b, h = 5, 3, 6
    feeds = _rnn_feeds(op, t, b, 4, h, dirs)
    feeds |= {"lens": np.array([5, 2, 4], np.int32), "h0": rand(dirs, b, h, seed=9)}
    ins = ["x", "w", "r", "bias", "lens", "h0"]
    outs = ["y", "yh"]
    if op == "LSTM":
        feeds["c0"] = rand(dirs, b, h, seed=10)
        ins.append("c0")
        outs.append("yc")
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    got = check([N(op, ins, outs, hidden_size=h, direction=direction, **attrs)], feeds, outs)
    assert got.kernels == {f"f32-{op.lower()}-3x8"}
    assert packs_at_run_time(got)
    assert not got.got[0]["y"][2:, :, 1].any()  # batch entry 1 stops after 2 steps


def test_rnn_activations_per_direction_and_layout_1() -> None:
    """Relu forward, Sigmoid backward; layout 1 (onnxruntime runs only 0) gives the same numbers with the
    batch axis first."""
    feeds = _rnn_feeds("RNN", 4, 2, 3, 5, 2, seed=20)
    attrs = dict(hidden_size=5, direction="bidirectional", activations=["Relu", "Sigmoid"])
    ref = check([N("RNN", ["x", "w", "r", "bias"], ["y", "yh"], **attrs)], feeds, ["y", "yh"]).got[0]
    batch_first = feeds | {"x": np.ascontiguousarray(feeds["x"].transpose(1, 0, 2))}
    model = make_model([N("RNN", ["x", "w", "r", "bias"], ["y", "yh"], layout=1, **attrs)], batch_first,
                       {"y": ref["y"].transpose(2, 0, 1, 3), "yh": ref["yh"].transpose(1, 0, 2)}, opset=19)
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        got = cm.predict(batch_first)
    np.testing.assert_array_equal(got["y"], ref["y"].transpose(2, 0, 1, 3))
    np.testing.assert_array_equal(got["yh"], ref["yh"].transpose(1, 0, 2))


def test_lstm_peepholes_at_run_time() -> None:
    feeds = _rnn_feeds("LSTM", 3, 2, 3, 4, 1, seed=30) | {"p": rand(1, 12, seed=31)}
    node = N("LSTM", ["x", "w", "r", "bias", "", "", "", "p"], ["y", "yh", "yc"], hidden_size=4)
    got = check([node], feeds, ["y", "yh", "yc"])
    assert packs_at_run_time(got)


def test_recurrent_constant_weights_stay_packed_at_build_time() -> None:
    feeds = _rnn_feeds("GRU", 3, 2, 4, 5, 1)
    inits = {k: feeds.pop(k) for k in ("w", "r", "bias")}
    got = check([N("GRU", ["x", "w", "r", "bias"], ["y", "yh"], hidden_size=5)], feeds, ["y", "yh"],
                inits=inits)
    assert got.kernels == {"f32-gru-2x8"} and not packs_at_run_time(got)


@pytest.mark.parametrize("attrs, why", [
    (dict(activations=["Elu"]), "activations \\['elu'\\]"),
    (dict(clip=1.0), "clip and input_forget"),
])
def test_unsupported_rnn_variants_are_refused(attrs: dict, why: str) -> None:
    feeds = _rnn_feeds("RNN", 2, 1, 3, 4, 1)
    model = make_model([N("RNN", ["x", "w", "r", "bias"], ["y"], hidden_size=4, name="rn", **attrs)], feeds,
                       {"y": rand(2, 1, 1, 4)})
    with pytest.raises(UnsupportedOperator, match=f"'RNN' at node 'rn'.*{why}"):
        CuvilModel.load(model)
