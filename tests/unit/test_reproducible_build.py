"""Reproducible builds (issue 36): the same model, options, calibration data and compiler give the same
bytes (weights, every module, the spec) whatever the build host's clock says, and the spec records the
digests of those inputs (``extra["build"]``) so anyone can rebuild and compare.

The net sits at the int8/fp32 edge: its 3-channel stride-2 stem is 1.2x costlier at int8 by the cost model
(just past ``SLOWER``) and 1.0-1.3x by the clock here; its 16 -> 16 Winograd layer 0.78x by the model,
0.8-1.2x by the clock. Timing noise is a clock
whose every reading moves on by a random step: under it the opt-in measured mode plans differently from
one seed to the next, the default build not at all."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target, timing
from cuvil_edge.buildcache import BuildCache, BuildCacheConfig, compiler_identity, data_digest
from cuvil_edge.quant.cost import SLOWER, estimate, model_identity
from cuvil_edge.signing import build_bundle
from runtime_wasm.loader import SPEC_FILE, WEIGHTS_FILE

SIZE = 200  # the stem writes 100 x 100: its 100 x 100 x 16 x 27 multiply-adds are over MIN_MACS


def _edge_net() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), k)
             for k, s in {"w0": (16, 3, 3, 3), "w1": (16, 16, 3, 3)}.items()]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2], name="stem"),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w1"], ["y"], pads=[1, 1, 1, 1], name="wino")]
    g = helper.make_graph(nodes, "edge", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [1, 3, SIZE, SIZE])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [1, 16, SIZE // 2, SIZE // 2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


class NoisyClock:
    """``time`` for ``cuvil_edge.timing``: every ``perf_counter`` reading moves on by a random step, so
    each timed call takes a random time (a loaded build host at its worst)."""

    def __init__(self, seed: int) -> None:
        self.rng, self.now = np.random.default_rng(seed), 0.0

    def perf_counter(self) -> float:
        self.now += float(self.rng.exponential(1e-3))
        return self.now


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    """The model file and the calibration file, on disk as a build server gets them."""
    model, calib = tmp_path / "edge.onnx", tmp_path / "calib.npz"
    onnx.save(_edge_net(), model)
    rng = np.random.default_rng(7)
    np.savez(calib, x=rng.standard_normal((2, 3, SIZE, SIZE)).astype(np.float32))
    return model, calib


def _build(inputs: tuple[Path, Path], out: Path, **options) -> tuple[dict[str, bytes], CuvilModel]:
    """Build from the files (no build cache: each build runs) and save: every file's bytes by name."""
    model, calib = inputs
    off = BuildCache(BuildCacheConfig(enabled=False))
    m = CuvilModel.load(model).optimize("int8", targets=[Target()], calibration=calib, build_cache=off,
                                        **options)
    saved = m.save(out)
    return {p.name: p.read_bytes() for p in sorted(saved.iterdir())}, m


def _choices(m: CuvilModel) -> dict[str, str]:
    return {layer["name"]: layer["choice"] for layer in m.quantization.record["layers"]}


def test_timing_noise_changes_not_a_byte_of_the_default_build(inputs, tmp_path, monkeypatch) -> None:
    builds = []
    for seed in (1, 2, 3):
        monkeypatch.setattr(timing, "time", NoisyClock(seed))
        builds.append(_build(inputs, tmp_path / f"default{seed}"))
    (files, m), *others = builds
    assert {WEIGHTS_FILE, SPEC_FILE} <= set(files) and any(n.endswith(".wasm") for n in files)
    for other, _ in others:
        assert other == files
    assert _choices(m) == {"stem": "fp32", "wino": "int8"}  # the cost model's verdicts, as built
    stem = next(n for n in m.graph.nodes if n.name == "stem")
    ratio = estimate(stem).int8_us / estimate(stem).fp32_us
    assert SLOWER < ratio < 1.2 * SLOWER  # near the edge

    # the same noise moves the opt-in measured mode's plan, and so its bytes: the noise above was felt
    measured = {}
    for seed in (1, 2, 3, 4):
        monkeypatch.setattr(timing, "time", NoisyClock(seed))
        got, mm = _build(inputs, tmp_path / f"measured{seed}", kernel_cost="measured")
        measured[tuple(sorted(_choices(mm).items()))] = got
        assert mm.quantization.record["kernel_cost"]["reproducible"] is False
    assert len(measured) > 1
    assert len({f[WEIGHTS_FILE] for f in measured.values()}) > 1


def test_two_builds_are_the_same_bytes_and_record_their_inputs(inputs, tmp_path) -> None:
    model, calib = inputs
    files, _ = _build(inputs, tmp_path / "a", observer="percentile")
    rec = json.loads(files[SPEC_FILE])["extra"]["build"]
    assert rec["model_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert rec["calibration_sha256"] == data_digest(calib)[0]
    assert (rec["precision"], rec["targets"], rec["quant_options"]) == ("int8", [Target().name],
                                                                       {"observer": "percentile"})
    assert rec["compiler"] == compiler_identity() and rec["compiler"]["cuvil-edge"]
    assert rec["kernel_cost"] == model_identity()

    # rebuilt from what the record says: the same bytes, record included
    again, _ = _build(inputs, tmp_path / "b", **rec["quant_options"])
    assert again == files
    # no wall-clock time and no host name anywhere in the compiled output
    text = files[SPEC_FILE].decode()
    assert "built_at" not in text and '"host"' not in text



def test_a_bundle_signed_twice_at_source_date_epoch_is_the_same_bytes(inputs, tmp_path, monkeypatch) -> None:
    """Ed25519 signs deterministically; SOURCE_DATE_EPOCH fixes the manifest's times and drops the host."""
    model, _ = inputs
    _build(inputs, tmp_path / "m")
    key = Ed25519PrivateKey.generate()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # 2026-01-01T00:00:00Z
    bundles = []
    for name in ("a.cvb", "b.cvb"):
        manifest = build_bundle(tmp_path / "m", tmp_path / name, [key], version="1.0.0", release=1,
                                hardware_ids=["hw-1"])
        bundles.append((tmp_path / name).read_bytes())
    assert bundles[0] == bundles[1]
    assert manifest.provenance["built_at"] == "2026-01-01T00:00:00Z"
    assert "build_host" not in manifest.provenance
    assert manifest.expires == "2026-01-31T00:00:00Z"
    assert manifest.spec["extra"]["build"]["model_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
