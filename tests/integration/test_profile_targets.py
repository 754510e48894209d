"""Profiles drive the build and the device (issue 13): ``build --profile`` compiles only the variants those
device classes need and targets the bundle at them; an announcement carries the signed targets, so an
agent for another hardware id or profile refuses the release before fetching a single chunk (real
Mosquitto, real installs), while a matching one installs."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from cuvil_agent.serve import infer
from cuvil_edge import ALL_TARGETS, CuvilError, CuvilModel, Target, TargetError
from cuvil_edge.cli import main
from cuvil_edge.fleet.publisher import Publisher, Rollout
from cuvil_edge.model import profile_targets
from cuvil_edge.signing import Keyring, build_bundle, sign_envelope
from cuvil_edge.testing.broker import LocalBroker
from device_profiles import load_profile
from ota import TrustState, WrongTarget
from ota.bundle import read_header
from ota.config import BrokerSettings, OtaConfig, TransferLimits
from ota.errors import BadSignature, FormatError
from ota.golden import decode_vector
from ota.installer import Installer
from ota.protocol import Announcement, format_time, verify_announcement
from runtime_wasm.loader import SPEC_FILE
from runtime_wasm.spec import ModelSpec
from runtime_wasm.variants import EngineProbes, select_variant
from tests.support.fleet import HW, AgentThreads, FleetWorld, Watcher, log_events
from tests.support.install import compile_matmul

pytestmark = pytest.mark.integration
PI4, AVX2 = "raspberry-pi-4", "x86-64-avx2"
ARM = {Target("simd128", "arm"), Target("relaxed", "arm")}
X86 = {Target("simd128", "x86"), Target("relaxed", "x86")}


# -- 1. the variant set per profile list --------------------------------------------------------------
@pytest.mark.parametrize(("profiles", "want"), [
    ([PI4], ARM), ([AVX2], X86), (["raspberry-pi-5", "jetson-orin-nano", "generic-arm64"], ARM),
    ([PI4, AVX2], ARM | X86), (["x86-64-avx512", "generic-x86-64"], X86),
])
def test_profiles_choose_their_family_at_both_tiers(profiles, want):
    assert set(profile_targets(profiles)) == want


def test_a_runtime_without_relaxed_simd_gets_only_the_simd128_variant(monkeypatch):
    no_relaxed = replace(load_profile(PI4), relaxed_simd=False)
    monkeypatch.setattr("cuvil_edge.model.load_profile", lambda name: no_relaxed if name == PI4
                        else load_profile(name))
    assert profile_targets([PI4]) == (Target("simd128", "arm"),)
    assert set(profile_targets([PI4, AVX2])) == {Target("simd128", "arm")} | X86


def test_unknown_profile_is_a_cuvil_error_naming_the_known_ones():
    with pytest.raises(TargetError, match=r"unknown device profile\(s\) \['raspberry-pi-9'\]; known: "
                                          r"\['generic-arm64', .*'x86-64-avx512'\]") as info:
        profile_targets([PI4, "raspberry-pi-9"])
    assert isinstance(info.value, CuvilError)
    with pytest.raises(TargetError, match="no device profile given"):
        profile_targets([])


# -- 2. build for profiles, then select on them ------------------------------------------------------
def _matmul_onnx(path: Path) -> Path:
    w = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "pt",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(w, "w")])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """``cuvil-edge build --profile raspberry-pi-4,x86-64-avx2``, signed: (model dir, bundle)."""
    base = tmp_path_factory.mktemp("profile-build")
    Keyring.init(base / "keys", root_keys=1, root_threshold=1)
    out = base / "m.cuvil"
    assert main([
        "build", str(_matmul_onnx(base / "m.onnx")), "-o", str(out), "-q", "--profile", f"{PI4},{AVX2}",
        "--keyring", str(base / "keys"), "--release", "1", "--hardware-id", "hw"]) == 0
    return out, out.with_suffix(".cvb")


def test_build_for_profiles_ships_their_variants_and_targets_the_bundle(built):
    model_dir, bundle = built
    spec = ModelSpec.from_json((model_dir / SPEC_FILE).read_text())
    assert {(v.tier, v.family) for v in spec.variants} == {(t.tier, t.family) for t in ARM | X86}
    assert spec.extra["profiles"] == [PI4, AVX2]
    with open(bundle, "rb") as f:
        targets = read_header(f, OtaConfig())["signed"]["targets"]
    assert targets == {"hardware_ids": ["hw"], "profiles": [PI4, AVX2]}


@pytest.mark.parametrize("name", [PI4, AVX2])
@pytest.mark.parametrize("relaxed_engine", [True, False])
def test_selection_on_a_built_profile_picks_a_shipped_variant_of_its_family(built, name, relaxed_engine):
    spec = ModelSpec.from_json((built[0] / SPEC_FILE).read_text())
    profile = load_profile(name)
    chosen = select_variant(spec.variants, profile, engine=EngineProbes(relaxed_simd=relaxed_engine))
    assert chosen in spec.variants and chosen.family == profile.family
    assert chosen.tier == ("relaxed" if relaxed_engine else "simd128")


def test_python_api_profiles_and_explicit_targets_exclude_each_other(tmp_path):
    model = CuvilModel.load(_matmul_onnx(tmp_path / "m.onnx"))
    with pytest.raises(TargetError, match="either targets or profiles"):
        model.optimize(targets=[Target()], profiles=[PI4])
    with pytest.raises(TargetError, match="jetson-orin-nano-cpu"):
        model.optimize(profiles=["jetson-orin-nano-cpu"])
    assert main(["build", str(tmp_path / "m.onnx"), "-q", "--profile", "raspberry-pi-9"]) == 2


# -- 3. announcements carry the signed targets ------------------------------------------------------
@pytest.fixture(scope="module")
def ring(tmp_path_factory) -> Keyring:
    return Keyring.init(tmp_path_factory.mktemp("ann-keys") / "k", root_keys=1, root_threshold=1)


def _announcement(**targets) -> Announcement:
    now = datetime.now(timezone.utc)
    return Announcement("lab", 1, format_time(now), format_time(now + timedelta(hours=1)), "a" * 64, 10, 2,
                        "m", "1.0.2", 32, ("b" * 64,), 1 << 32, **targets)


def test_announcement_targets_are_signed_optional_and_checked(ring):
    trust = TrustState(ring.root_envelope())
    now, limits = datetime.now(timezone.utc), TransferLimits()

    def verify(body: dict) -> Announcement:
        return verify_announcement(json.dumps(sign_envelope(body, ring.release_keys())).encode(), trust,
                                   "lab", now, limits)

    ann = _announcement(hardware_ids=(HW,), profiles=(PI4,))
    assert verify(ann.to_dict()) == ann
    ann.check_target(HW, PI4)
    with pytest.raises(WrongTarget, match=r"announced for profiles \['raspberry-pi-4'\].*'x86-64-avx2'"):
        ann.check_target(HW, AVX2)
    with pytest.raises(WrongTarget, match="announced for hardware"):
        ann.check_target("other-hw", PI4)
    with pytest.raises(WrongTarget):
        ann.check_target(HW, None)  # a device without a profile, as the manifest check would say
    # an older publisher's announcement (no target fields) behaves as before: no check before download
    old = {k: v for k, v in ann.to_dict().items() if k not in ("hardware_ids", "profiles")}
    verify(old).check_target("any-hw", None)
    # the targets are covered by the signature, and must be lists of strings
    envelope = sign_envelope(ann.to_dict(), ring.release_keys())
    envelope["signed"]["profiles"] = [AVX2]
    with pytest.raises(BadSignature):
        verify_announcement(json.dumps(envelope).encode(), trust, "lab", now, limits)
    with pytest.raises(FormatError, match="profiles: must be a list"):
        verify({**ann.to_dict(), "profiles": PI4})


# -- 4. the agent refuses another target before downloading (real Mosquitto) ---------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> FleetWorld:
    """Release 2 built for both families: a bundle may target a profile only with its family's variants."""
    fw = FleetWorld(tmp_path_factory.mktemp("profile-fleet"))
    fw.models[2] = compile_matmul(fw.base / "m2-both", seed=12, targets=ALL_TARGETS)
    return fw


def _release2(world: FleetWorld, out: Path, hardware_ids: list[str], profiles: list[str]) -> Path:
    build_bundle(world.models[2], out, world.ring.release_keys(), version="1.0.2", release=2,
                 hardware_ids=hardware_ids, profiles=profiles)
    return out


def _completes_without(pub: Publisher, device: str, timeout_s: float = 60.0) -> None:
    """The device reports its hardware id and profile, so the publisher leaves it out of every stage: the
    rollout completes (it is the only device) without an outcome for it, and is never halted."""
    end = time.monotonic() + timeout_s
    while (rollout := pub.step(stage_timeout_s=600)).status == "rolling":
        assert time.monotonic() < end, f"rollout not complete: {rollout}"
        time.sleep(0.05)
    assert rollout.status == "complete" and device not in rollout.outcomes, rollout
    assert device not in pub.targeted(rollout) and device in pub.devices


def test_publisher_stages_only_devices_the_release_is_for(tmp_path):
    """Percentages and thresholds count targeted devices only; a status without targets (an older agent)
    counts as targeted, and its refusal is then recorded as ``not_targeted``, not a failure."""
    pub = Publisher(BrokerSettings(port=1), "lab", [], tmp_path / "fleet.json")  # never started
    pub.state["devices"] = {
        "pi": {"device": "pi", "state": "active", "release": 1, "hardware_id": HW, "profile": PI4},
        "nuc": {"device": "nuc", "state": "active", "release": 1, "hardware_id": HW, "profile": AVX2},
        "other-hw": {"device": "other-hw", "state": "active", "release": 1, "hardware_id": "hw-x",
                     "profile": PI4},
        "old": {"device": "old", "state": "active", "release": 1},
    }
    rollout = Rollout("ab" * 32, "m", 2, "1.0.2", 1, ["00"], 1, [100.0], 0.0, False, select_below=1 << 32,
                      hardware_ids=[HW], profiles=[PI4])
    assert pub.targeted(rollout) == ["old", "pi"]
    assert pub.stage_devices(rollout) == ["old", "pi"]
    refused = {"device": "old", "state": "active", "release": 1, "bundle": rollout.bundle_sha256,
               "error": "WrongTarget", "event": "refused"}
    assert pub._outcome(rollout, refused) == "not_targeted"


@pytest.mark.skipif(not shutil.which("mosquitto"), reason="mosquitto not installed")
def test_announcement_for_another_target_is_refused_before_download(world, tmp_path):
    fleet, device = "lab", "pi-1"
    with LocalBroker(tmp_path / "broker") as broker:
        settings = broker.settings()
        cfg = replace(world.agent_config(tmp_path, device, fleet, settings, socket=True), profile=PI4)
        pub = Publisher(settings, fleet, world.ring.release_keys(), tmp_path / "fleet.json").start()
        watcher = Watcher(settings, fleet)
        agents = AgentThreads()
        try:
            agent = agents.add(cfg)
            watcher.wait_state(device, "active", 1)
            inputs, want1 = decode_vector(Installer(world.template, HW).active_manifest().golden[0])
            refused: list[str] = []
            for name, hw, profiles in (("other-profile", [HW], [AVX2]), ("other-hardware", ["hw-x"], [])):
                rollout = pub.publish(_release2(world, tmp_path / f"{name}.cvb", hw, profiles), canary=100.0,
                                      halt_on=0.0)
                hit = watcher.wait(lambda m, sha=rollout.bundle_sha256: m.get("event") == "refused"
                                   and m.get("bundle") == sha, 30, f"{name} refused")
                assert hit["error"] == "WrongTarget" and hit["what"] == "announcement"
                assert hit["state"] == "active" and hit["release"] == 1 and hit["target_release"] == 2
                _completes_without(pub, device)  # not a failure: halt_on 0% did not halt
                refused.append(rollout.bundle_sha256)
            # nothing was fetched: no transfer started, no part file, the failure store keeps both
            assert log_events(Path(cfg.log_file), "transfer_start") == []
            assert not (Path(cfg.state_dir) / "transfer").exists()
            assert set(refused) <= set(json.loads((Path(cfg.state_dir) / "agent.json").read_text())["failed"])
            release, got = infer(cfg.socket, inputs)
            assert release == 1 and agent.host.release == 1
            np.testing.assert_allclose(got["y"], want1["y"], rtol=1e-5, atol=1e-5)
            # a release for this device's hardware id and profile installs
            rollout = pub.publish(_release2(world, tmp_path / "match.cvb", [HW], [PI4, AVX2]), canary=100.0,
                                  halt_on=0.0)
            watcher.wait_state(device, "active", 2)
            starts = log_events(Path(cfg.log_file), "transfer_start")
            assert [e["bundle"] for e in starts] == [rollout.bundle_sha256]
            assert infer(cfg.socket, inputs)[0] == 2
        finally:
            agents.close()
            watcher.close()
            pub.close()
