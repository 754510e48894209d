"""The cuvil-edge CLI end to end on a small model: build, inspect, run, profile, and error exits."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from cuvil_edge.cli import main
from cuvil_edge.testing.zoo import NetBuilder


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory) -> str:
    b = NetBuilder("cli_net", seed=1)
    y = b.op("GlobalAveragePool", [b.conv_bn("x", 3, 8, 3, act="Relu")])
    path = tmp_path_factory.mktemp("cli") / "net.onnx"
    onnx.save(b.build([("x", [1, 3, 16, 16])], y, [1, 8, 1, 1]), path)
    return str(path)


def test_build_inspect_run_profile(onnx_file, tmp_path, capsys):
    out = tmp_path / "net.cuvil"
    assert main(["build", onnx_file, "-o", str(out), "--targets", "simd128-x86", "-q"]) == 0
    assert (out / "model.json").exists() and (out / "f32-wasmsimd-x86.wasm").exists()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "f32-conv-" in text and "global_pool" in text and "@arena+" in text

    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(out), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as z:
        assert list(z.values())[0].shape == (1, 8, 1, 1)

    assert main(["profile", onnx_file, "--repeat", "3"]) == 0
    text = capsys.readouterr().out
    assert "conv" in text and "total" in text

    assert main(["bench", onnx_file, "--repeat", "3"]) == 0
    text = capsys.readouterr().out
    assert "onnxruntime native fp32" in text and "max |diff|" in text


def test_errors_exit_2_with_the_error_named(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["build", str(bad), "-o", str(tmp_path / "x.cuvil")]) == 2
    assert "ModelFormatError" in capsys.readouterr().err
