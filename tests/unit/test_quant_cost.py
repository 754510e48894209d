"""Kernel cost in the quantization plan: a layer whose int8 kernel is slower than its fp32 one stays fp32
unless asked (``kernel_cost=False``, ``build --ignore-kernel-cost``). The choice rule is a pure function
(tested on given costs); the cost model's estimates are checked against its choices and the kernels the
compiled graph runs, the opt-in measured mode's timings for consistency with its choices.
(tests/unit/test_reproducible_build.py: the default plan under timing noise.)"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.cli import main
from cuvil_edge.errors import QuantizationError
from cuvil_edge.quant.cost import MIN_MACS, SLOWER, LayerCost, drop_slow_int8, estimate, model_identity

SIZE = 200  # the stem (stride 2) writes 100 x 100


def test_only_int8_layers_slower_beyond_the_margin_go_back_to_fp32() -> None:
    plan = {"slow": "int8", "edge": "int8", "fast": "int8", "untimed": "int8", "int4": "int4", "f": "fp32"}
    costs = {"slow": LayerCost(100.0, 126.0), "edge": LayerCost(100.0, 100.0 * SLOWER),
             "fast": LayerCost(100.0, 60.0), "int4": LayerCost(100.0, 500.0), "f": LayerCost(1.0, 9.0)}
    assert drop_slow_int8(plan, costs) == {**plan, "slow": "fp32"}
    assert drop_slow_int8(plan, {}) == plan


def _convnet() -> onnx.ModelProto:
    """A first conv over 3 channels (stride 2), a 3x3 and a 1x1 conv: each over MIN_MACS, so each is
    costed."""
    rng = np.random.default_rng(0)
    shapes = {"w0": (16, 3, 3, 3), "w1": (32, 16, 3, 3), "w2": (32, 32, 1, 1)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), k)
             for k, s in shapes.items()]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Conv", ["br", "w2"], ["y"])]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                            [1, 3, SIZE, SIZE])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [1, 32, SIZE // 2, SIZE // 2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _calibration() -> list[dict[str, np.ndarray]]:
    return [{"x": np.random.default_rng(i).standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)}
            for i in range(2)]


def _check_choices(m: CuvilModel) -> list[dict]:
    """Every conv is costed (each is over MIN_MACS), its choice is what its costs say, and the compiled
    graph runs what the record says."""
    layers = m.quantization.record["layers"]
    assert len(layers) == 3 and all("cost_us" in layer for layer in layers)
    for layer in layers:
        cost = layer["cost_us"]
        assert cost["fp32"] > 0 and cost["int8"] > 0
        assert layer["choice"] == ("fp32" if cost["int8"] > SLOWER * cost["fp32"] else "int8"), layer
    ops = {n.name: n.op for n in m.compiled.graph.nodes}
    for layer in layers:
        assert ops[layer["name"]] == ("conv" if layer["choice"] == "fp32" else "qconv")
    return layers


@pytest.mark.parametrize("precision", ["int8", "int8-dynamic"])
def test_build_costs_each_layer_by_the_model_and_keeps_the_slower_int8_ones_fp32(precision: str) -> None:
    calib = _calibration() if precision == "int8" else None
    m = CuvilModel.load(_convnet()).optimize(precision, targets=[Target()], calibration=calib)
    assert m.quantization.record["kernel_cost"] == model_identity()
    layers = _check_choices(m)
    fp32 = {n.name: n for n in m.graph.nodes if n.op == "conv"}  # the optimized float graph
    for layer in layers:
        assert layer["cost_us"] == estimate(fp32[layer["name"]]).record()
    # the model's verdicts on these shapes: the 3-channel stem packs more than it multiplies
    assert [layer["choice"] for layer in layers] == ["fp32", "int8", "int8"]


def test_measured_mode_times_each_layer_and_says_it_is_not_reproducible() -> None:
    m = CuvilModel.load(_convnet()).optimize("int8", targets=[Target()], calibration=_calibration(),
                                             kernel_cost="measured")
    rec = m.quantization.record["kernel_cost"]
    assert rec["mode"] == "measured" and rec["reproducible"] is False and rec["host"]
    assert rec["int8_slower_than"] == SLOWER
    _check_choices(m)


def test_an_unknown_kernel_cost_mode_is_refused() -> None:
    with pytest.raises(QuantizationError, match="kernel_cost"):
        CuvilModel.load(_convnet()).optimize("int8", targets=[Target()], calibration=_calibration(),
                                             kernel_cost="fast")


def test_asked_for_int8_everywhere_times_nothing() -> None:
    m = CuvilModel.load(_convnet()).optimize("int8", targets=[Target()], calibration=_calibration(),
                                             kernel_cost=False)
    rec = m.quantization.record
    assert "kernel_cost" not in rec
    assert [layer["choice"] for layer in rec["layers"]] == ["int8"] * 3
    assert not any("cost_us" in layer for layer in rec["layers"])


def test_small_layers_are_not_costed() -> None:
    """Under MIN_MACS per-call costs (which the model leaves out, and timer noise) decide: the choice
    stays."""
    small = onnx.ModelProto.FromString(_convnet().SerializeToString())
    small.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 8
    small.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 8
    del small.graph.output[:]
    small.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 4, 4]))
    assert 4 * 4 * 32 * 16 * 9 < MIN_MACS  # the largest layer
    calib = [{"x": np.ones((1, 3, 8, 8), np.float32) * i} for i in (1, 2)]
    rec = CuvilModel.load(small).optimize("int8", targets=[Target()], calibration=calib).quantization.record
    assert [layer["choice"] for layer in rec["layers"]] == ["int8"] * 3
    assert not any("cost_us" in layer for layer in rec["layers"])


def test_cli_build_flag_and_report(tmp_path, capsys) -> None:
    model, calib = tmp_path / "m.onnx", tmp_path / "calib.npz"
    onnx.save(_convnet(), model)
    np.savez(calib, x=np.concatenate([s["x"] for s in _calibration()]))
    for flag, timed in (([], True), (["--ignore-kernel-cost"], False), (["--measure-kernel-cost"], True)):
        report = tmp_path / f"report{len(flag)}.json"
        assert main(["build", str(model), "-o", str(tmp_path / f"m{len(flag)}.cuvil"), "--precision", "int8",
                     "--calib", str(calib), "--report", str(report), *flag]) == 0
        out = capsys.readouterr().out
        layers = json.loads(report.read_text())["layers"]
        assert all(("cost_us" in layer) == timed for layer in layers)
        assert (" us, int8 " in out) == timed
