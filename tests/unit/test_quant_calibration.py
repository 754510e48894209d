"""Calibration sources and observers, and the CLI's --precision/--calib/--report path."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge.cli import main
from cuvil_edge.errors import QuantizationError
from cuvil_edge.ir.graph import TensorType, Value
from cuvil_edge.quant.calibrate import Observer, load_samples

INPUTS = [Value("x", TensorType((1, 4)))]


def test_sources_agree(tmp_path):
    data = np.arange(24, dtype=np.float32).reshape(6, 1, 4)
    np.savez(tmp_path / "calib.npz", x=data)
    d = tmp_path / "dir"
    d.mkdir()
    for i, s in enumerate(data):
        np.save(d / f"{i:02d}.npy", s)
    want = [s.reshape(1, 4) for s in data]
    for source in (tmp_path / "calib.npz", d, list(data), [{"x": s} for s in data]):
        got = [s["x"] for s in load_samples(source, INPUTS)]
        np.testing.assert_array_equal(np.stack(got), np.stack(want))
    assert len(load_samples(d, INPUTS, limit=2)) == 2


def test_observers_clip_outliers_deterministically():
    x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)
    x[0] = 50.0
    ranges = {}
    for method in ("minmax", "percentile", "mse"):
        obs = Observer(method)
        for chunk in np.split(x, 10):
            obs.update(chunk)
        ranges[method] = obs.range()
    assert ranges["minmax"].hi == 50.0
    assert ranges["percentile"].hi < 10 and ranges["mse"].hi < 50.0
    with pytest.raises(QuantizationError, match="unknown observer"):
        Observer("entropy?")


def test_cli_build_report_and_inspect(tmp_path, capsys):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 10)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((16, 1, 64)).astype(np.float32))
    out, rep = tmp_path / "m.cuvil", tmp_path / "report.json"
    assert main(["build", str(tmp_path / "m.onnx"), "-o", str(out), "-q", "--precision", "int4",
                 "--calib", str(tmp_path / "calib.npz"), "--report", str(rep)]) == 0
    report = json.loads(rep.read_text())
    assert report["layers"][0]["choice"] == "int4"
    assert report["accuracy_vs_fp32"]["cosine"] > 0.99
    assert report["size"]["weights_bytes"] < report["size"]["weights_fp32_bytes"]
    assert main(["inspect", str(out)]) == 0
    assert "quantization: int4" in capsys.readouterr().out
