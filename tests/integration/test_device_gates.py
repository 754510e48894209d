"""The device side of the rollout gates (issue 39, part 4): a real agent on a real Mosquitto reports what
the gates judge (``cuvil_edge.fleet.gates``).

- golden: the install's self-test records the vectors it ran, their largest error, the tolerance applied,
  the variant and the mode beside the slot (``ota.selftest``), and the next summary carries them under
  ``models.<m>.golden``; expected outputs off by a known amount give exactly that error;
- drift: with ``[telemetry] shadow_fraction`` on, requests after a switch also run through the previous
  release (two MatMul models whose seeded weights differ), and the summaries' ``models.<m>.drift`` sum to
  what onnxruntime computes on the same inputs; the publisher's drift gate halts the rollout on it, and
  the previous release's workers end once the sample is complete;
- with the sampler off no summary has a drift field and the previous release is closed at the switch.

Every wait is a bounded loop on a condition; the timeouts only guard against hangs.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper

from cuvil_agent.config import AgentConfig, TelemetrySettings, load_agent_config
from cuvil_agent.serve import infer
from cuvil_edge import CuvilModel
from cuvil_edge.fleet.gates import GateConfig
from cuvil_edge.fleet.publisher import Publisher
from cuvil_edge.fleet.telemetry import TelemetryCollector
from cuvil_edge.oracle import ort_session
from cuvil_edge.signing import Keyring, build_bundle, golden_vectors
from ota import Installer
from ota.errors import ConfigError, SelfTestFailed
from ota.golden import decode_vector, encode_vector
from ota.selftest import SELFTEST_FILE, read_report
from runtime_wasm.supervisor import ModelSource
from tests.support.fleet import TEST_LIMITS, AgentThreads, wait_until

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not shutil.which("mosquitto"), reason="mosquitto not installed")]
HW = "test-device"
FLEET = "gates"
HANG_S = 120.0  # hang guard only: the CI machine is loaded
SAMPLES = 12  # shadow samples per switch, and what the drift gate needs
SELFTEST_TOL = 1e-4  # OtaConfig's selftest_rtol and selftest_atol


def matmul(w: np.ndarray) -> ModelProto:
    """y[4, 8] = x[4, 16] @ w: the release's outputs move with its weights."""
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "drift",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@dataclass
class Releases:
    ring: Keyring
    protos: dict[int, ModelProto]
    dirs: dict[int, Path]
    bundles: dict[int, Path]
    template: Path  # a device state with release 1 active


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Releases:
    base = tmp_path_factory.mktemp("device-gates")
    ring = Keyring.init(base / "keys", 1, 1, 1, 1)
    w1 = np.random.default_rng(7).standard_normal((16, 8)).astype(np.float32)
    w2 = (w1 + 0.05 * np.random.default_rng(8).standard_normal((16, 8))).astype(np.float32)
    protos = {1: matmul(w1), 2: matmul(w2)}
    dirs = {n: CuvilModel.load(p).optimize().save(base / f"m{n}") for n, p in protos.items()}
    bundles = {}
    for n, d in dirs.items():
        bundles[n] = base / f"r{n}.cvb"
        build_bundle(d, bundles[n], ring.release_keys(), version=f"1.0.{n}", release=n, hardware_ids=[HW])
    template = base / "template"
    Installer(template, HW, root=ring.root_envelope()).install(bundles[1])
    return Releases(ring, protos, dirs, bundles, template)


def agent_config(rel: Releases, tmp_path: Path, broker: Any, fraction: float) -> AgentConfig:
    state = Path(shutil.copytree(rel.template, tmp_path / "dev0"))
    return AgentConfig(device_id="dev0", fleet=FLEET, state_dir=str(state), hardware_id=HW,
                       socket=str(state / "infer.sock"), log_file=str(tmp_path / "dev0.log"),
                       telemetry_interval_s=0.2, broker=broker.settings(), limits=TEST_LIMITS,
                       telemetry=TelemetrySettings(retry_s=0.2, shadow_fraction=fraction,
                                                   shadow_max_samples=SAMPLES, shadow_timeout_s=HANG_S))


def workers() -> int:
    """Worker processes alive in this process (the agent's schedulers: each model's workers)."""
    return len(multiprocessing.active_children())


def check_golden(golden: dict[str, Any], slot: Path) -> None:
    """The figures the slot's own golden vectors and the self-test's tolerance give."""
    manifest = json.loads((slot / "bundle.json").read_bytes())["signed"]
    wants = [decode_vector(v)[1]["y"] for v in manifest["golden"]]
    largest = max(float(np.abs(w).max()) for w in wants)
    assert golden["vectors"] == len(wants) == 2
    assert golden["atol"] == pytest.approx(SELFTEST_TOL + SELFTEST_TOL * largest, rel=1e-9)
    assert golden["max_abs"] <= golden["atol"] and golden["deterministic"] is False
    assert golden["variant"] == ModelSource.from_dir(slot).variant.name
    assert read_report(slot) == golden


# -- the self-test's figures, on the installer alone: a known error, and a failing one ----------------------
@pytest.mark.parametrize("error", [3e-5, 0.0])
def test_the_self_test_records_what_it_measured(releases, tmp_path, error):
    vectors = golden_vectors(releases.dirs[1])
    inputs, want = decode_vector(vectors[1])
    want["y"][2, 5] += np.float32(error)  # one expected output off by ``error``, inside the tolerance
    vectors[1] = encode_vector(inputs, want)
    bundle = tmp_path / "r1.cvb"
    build_bundle(releases.dirs[1], bundle, releases.ring.release_keys(), version="1.0.1", release=1,
                 hardware_ids=[HW], golden=vectors)
    inst = Installer(tmp_path / "state", HW, root=releases.ring.root_envelope())
    inst.install(bundle)
    golden = read_report(inst.active_dir())
    assert golden is not None and inst.active_model().golden == golden
    check_golden(golden, inst.active_dir())
    assert golden["max_abs"] == pytest.approx(error, abs=1e-6)


def test_what_stays_refused(releases, tmp_path):
    # a self-test outside the tolerance fails the install and leaves no record (the slot is gone)
    vectors = golden_vectors(releases.dirs[2])
    inputs, want = decode_vector(vectors[0])
    want["y"][0, 0] += np.float32(0.01)
    vectors[0] = encode_vector(inputs, want)
    bundle = tmp_path / "bad.cvb"
    build_bundle(releases.dirs[2], bundle, releases.ring.release_keys(), version="1.0.2", release=2,
                 hardware_ids=[HW], golden=vectors)
    state = Path(shutil.copytree(releases.template, tmp_path / "state"))
    with pytest.raises(SelfTestFailed, match="golden vector 0 differs in outputs"):
        Installer(state, HW).install(bundle)
    assert len(list(state.glob(f"slots/*/{SELFTEST_FILE}"))) == 1, "only the active slot has a record"
    # a damaged record informs nothing (and stops nothing)
    slot = Installer(state, HW).active_dir()
    (slot / SELFTEST_FILE).write_text('{"vectors": "two"}')
    assert read_report(slot) is None and Installer(state, HW).active_model().golden is None
    # the sampler's settings
    for bad in ("shadow_fraction = 1.5", "shadow_fraction = 0.5\nshadow_max_samples = 0",
                "shadow_fraction = 0.5\nshadow_timeout_s = 0.0", "shadow_fraction = -0.1"):
        path = tmp_path / "agent.toml"
        path.write_text(f'[agent]\ndevice_id = "d"\nfleet = "f"\nstate_dir = "s"\n[telemetry]\n{bad}\n')
        with pytest.raises(ConfigError, match="shadow"):
            load_agent_config(path)


# -- a real agent: golden in its summaries; with the sampler on, drift that halts the rollout -------------
def release_two_summaries(pub: Publisher) -> Any:
    assert pub.evidence is not None
    return pub.evidence.windows.get("dev0", {}).get(2)


def test_shadow_drift_halts_the_rollout_and_the_previous_release_is_then_closed(releases, broker, tmp_path):
    cfg = agent_config(releases, tmp_path, broker, fraction=1.0)
    gates = GateConfig(drift=0.01, top1=0.99, golden=True, min_samples=SAMPLES)
    pub = Publisher(broker.settings(), FLEET, releases.ring.release_keys(), tmp_path / "fleet.json",
                    limits=TEST_LIMITS, gates=gates).start()
    agents = AgentThreads()
    try:
        agent = agents.add(cfg)
        assert pub.wait_for_devices(1, HANG_S) == 1
        wait_until(lambda: agent.host.release == 1 and workers(), "release 1 served", HANG_S)
        serving = workers()
        pub.publish(releases.bundles[2], canary=100.0, halt_on=0.0, stages=[100.0])
        wait_until(lambda: agent.host.release == 2 and agent.state == "active", "the switch", HANG_S)
        shadow = agent.host.shadow
        assert shadow is not None and shadow.sampling and workers() == 2 * serving

        rng = np.random.default_rng(9)
        sessions = {n: ort_session(p) for n, p in releases.protos.items()}
        agree, max_abs = 0, 0.0
        for i in range(SAMPLES):
            x = rng.standard_normal((4, 16)).astype(np.float32)
            release, got = infer(cfg.socket, {"x": x})
            new, old = (sessions[n].run(None, {"x": x})[0] for n in (2, 1))
            assert release == 2
            np.testing.assert_allclose(got["y"], new, rtol=1e-4, atol=1e-4)
            agree += np.array_equal(new.argmax(-1), old.argmax(-1))
            max_abs = max(max_abs, float(np.abs(new - old).max()))
            wait_until(lambda n=i + 1: shadow.compared >= n or not shadow.sampling, f"shadow sample {i}",
                       HANG_S)
        assert 0 < agree < SAMPLES, "the seeds must give some top-1 disagreement"
        wait_until(lambda: not shadow.sampling and workers() == serving,
                   "the previous release closed after the last sample", HANG_S)

        rollout = pub.watch(timeout_s=HANG_S, stage_timeout_s=HANG_S, poll_s=0.1, settle_s=0)
        window = release_two_summaries(pub)
    finally:
        agents.close()
        pub.close()
    assert rollout.status == "halted", rollout.reason
    assert rollout.reason.startswith(f"drift gate failed in stage 1 of 1 (100%): device class '{HW}': max "
                                     "abs difference"), rollout.reason
    verdicts = {r["gate"]: r["status"] for r in rollout.gate_results}
    assert verdicts == {"drift": "fail", "golden": "pass"}, rollout.gate_results
    # what the summaries carried, summed as the gate sums them: every sample once, as onnxruntime says
    assert (window.samples, window.agree) == (SAMPLES, agree) and shadow.dropped == 0
    assert window.max_abs == pytest.approx(max_abs, rel=1e-4, abs=1e-4)
    check_golden(window.golden, Path(cfg.state_dir) / "slots" / "b")
    assert window.golden["variant"] == window.variant


def test_with_the_sampler_off_no_drift_and_the_previous_release_is_closed(releases, broker, tmp_path):
    cfg = agent_config(releases, tmp_path, broker, fraction=0.0)
    pub = Publisher(broker.settings(), FLEET, releases.ring.release_keys(), tmp_path / "fleet.json",
                    limits=TEST_LIMITS, gates=GateConfig(golden=True)).start()
    collector = TelemetryCollector(broker.settings(), FLEET, limits=TEST_LIMITS).start()
    agents = AgentThreads()
    try:
        agent = agents.add(cfg)
        assert pub.wait_for_devices(1, HANG_S) == 1
        wait_until(lambda: agent.host.release == 1 and workers(), "release 1 served", HANG_S)
        serving = workers()
        pub.publish(releases.bundles[2], canary=100.0, halt_on=0.0, stages=[100.0])
        wait_until(lambda: agent.host.release == 2 and agent.state == "active", "the switch", HANG_S)
        assert agent.host.shadow is None
        wait_until(lambda: workers() == serving, "the previous release's workers to end", HANG_S)
        x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
        for _ in range(3):
            assert infer(cfg.socket, {"x": x})[0] == 2
        rollout = pub.watch(timeout_s=HANG_S, stage_timeout_s=HANG_S, poll_s=0.1, settle_s=0)
        wait_until(lambda: (w := release_two_summaries(pub)) and w.requests >= 3, "the requests summarized",
                   HANG_S)
        window = release_two_summaries(pub)
    finally:
        agents.close()
        pub.close()
        collector.close()
    summaries = [r.data["models"] for r in collector.records("dev0") if r.event == "summary"]
    assert [m for m in summaries if any(e["release"] == 2 for e in m.values())], "release 2 summarized"
    assert not [m for m in summaries if any("drift" in e for e in m.values())]
    assert rollout.status == "complete", rollout.reason
    assert [(r["gate"], r["status"]) for r in rollout.gate_results] == [("golden", "pass")]
    assert window.samples == 0 and window.max_abs == 0.0, "no summary carried a drift field"
    check_golden(window.golden, Path(cfg.state_dir) / "slots" / "b")
