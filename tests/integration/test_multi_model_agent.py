"""A multi-model agent (``[[models]]`` in agent.toml) against a real broker: each model line takes only
its own signed releases from its own release topic into its own state directory, a release signed for
one model is refused on another model's topic (``WrongModel``), and the HTTP API serves every line with
its priority and the threads divided from one core budget.
"""

from __future__ import annotations

import http.client
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cuvil_agent.config import AdmissionSettings, AgentConfig, HttpSettings, ModelConfig, load_agent_config
from cuvil_agent.http_client import InferenceClient
from cuvil_edge.signing import sign_envelope
from cuvil_edge.testing.broker import LocalBroker
from ota.protocol import Announcement, Topics, format_time, sha256_hex, split_chunks
from ota.roots import MODELS_DIR
from ota.transport import MqttClient
from runtime_wasm import RuntimePolicy
from tests.support.fleet import AgentThreads, Watcher, log_events, write_toml
from tests.support.multi_model import HIGH, HW, LOW, MultiWorld

pytestmark = pytest.mark.integration
FLEET = "multi"
CHUNK = 32 << 10


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> MultiWorld:
    return MultiWorld(tmp_path_factory.mktemp("multi-agent"))


def announce(world: MultiWorld, mqtt: MqttClient, topic: str, bundle: Path, release: int, name: str,
             seq: int) -> None:
    """What a publisher sends for one model line: chunks, then the signed announcement (retained)."""
    data = bundle.read_bytes()
    chunks = split_chunks(data, CHUNK)
    sha = sha256_hex(data)
    now = datetime.now(timezone.utc)
    topics = Topics("cuvil", FLEET)
    for i, piece in enumerate(chunks):
        mqtt.publish(topics.chunk(sha, i), piece, retain=True)
    ann = Announcement(FLEET, seq, format_time(now), format_time(now + timedelta(hours=1)), sha, len(data),
                       release, name, "1.0.0", CHUNK, tuple(sha256_hex(c) for c in chunks), 1 << 32,
                       hardware_ids=(HW,))
    payload = json.dumps(sign_envelope(ann.to_dict(), world.ring.release_keys()), sort_keys=True).encode()
    mqtt.publish(topic, payload, retain=True)


def multi_config(world: MultiWorld, tmp_path: Path, broker: LocalBroker) -> Path:
    root = tmp_path / "root.json"
    root.write_text(json.dumps(world.ring.root_envelope()))
    cfg = AgentConfig(device_id="dev-m", fleet=FLEET, state_dir=str(tmp_path / "state"), trust_root=str(root),
                      hardware_id=HW, log_file=str(tmp_path / "agent.log"), telemetry_interval_s=0,
                      broker=broker.settings(), http=HttpSettings(port=0),
                      models=(ModelConfig(LOW, priority=1, policy=RuntimePolicy(max_batch_size=4)),
                              ModelConfig(HIGH, priority=10)),
                      admission=AdmissionSettings(max_pending=8, reserve_per_level=4, cores=3))
    path = write_toml(cfg, tmp_path / "agent.toml")
    http = "[http]\nport = 0\n"  # write_toml writes the sections fleet tests use; the API on top
    path.write_text(path.read_text() + http)
    return path


def line_status(watcher: Watcher, model: str, state: str, release: int | None = None) -> dict[str, Any]:
    return watcher.wait(lambda m: m.get("model") == model and m["state"] == state
                        and (release is None or m.get("release") == release), 60, f"{model} {state}")


def test_each_model_line_installs_only_its_own_signed_releases(world, tmp_path):
    with LocalBroker(tmp_path / "broker") as broker:
        cfg = load_agent_config(multi_config(world, tmp_path, broker))
        assert [(m.name, m.priority, m.policy) for m in cfg.models] == [
            (LOW, 1, RuntimePolicy(max_batch_size=4)), (HIGH, 10, None)]
        topics = Topics("cuvil", FLEET)
        watcher = Watcher(broker.settings(), FLEET)
        publisher = MqttClient(broker.settings(), "test-publisher", lambda *_: None)
        publisher.start(wait_s=10)
        agents = AgentThreads()
        try:
            agent = agents.add(cfg)
            assert [line.name for line in agent.lines] == [LOW, HIGH]
            # one core budget (3 here): the high priority asks for every core and gets all but one
            assert {line.name: line.host.policy.threads for line in agent.lines} == {HIGH: 2, LOW: 1}
            line_status(watcher, LOW, "idle")

            # the attack: the high-priority model's release, validly signed, on the low model's topic
            announce(world, publisher, topics.model_release(LOW), world.bundles[HIGH], 1, HIGH, seq=1)
            refused = watcher.wait(lambda m: m.get("error") == "WrongModel", 60, "the refusal")
            assert refused["model"] == LOW and refused["what"] == "announcement"
            # and the same bundle with a lying announcement name: the installer's check on the signed manifest
            announce(world, publisher, topics.model_release(LOW), world.bundles[HIGH], 1, LOW, seq=2)
            failed = line_status(watcher, LOW, "failed")
            assert failed["error"] == "WrongModel"

            # each line's own release, on its own topic
            announce(world, publisher, topics.model_release(LOW), world.bundles[LOW], 1, LOW, seq=3)
            announce(world, publisher, topics.model_release(HIGH), world.bundles[HIGH], 1, HIGH, seq=4)
            line_status(watcher, LOW, "active", 1)
            last = line_status(watcher, HIGH, "active", 1)
            assert set(last["models"]) == {LOW, HIGH}

            state = Path(cfg.state_dir) / MODELS_DIR
            for name in (LOW, HIGH):  # own state directory, slots and release counter per line
                assert agent.line(name).installer.state_dir == state / name
                assert agent.line(name).installer.active_manifest().name == name
            assert agent.http is not None
            host, port = agent.http.address  # type: ignore[misc]
            with InferenceClient(f"http://{host}:{port}", timeout_s=60) as client:
                for name in (LOW, HIGH):
                    got = client.infer(name, {"x": world.inputs[name]})
                    assert got.outputs["y"].shape == world.expected[name].shape
            conn = http.client.HTTPConnection(host, port, timeout=60)
            conn.request("GET", "/metrics")
            metrics = conn.getresponse().read().decode()
            conn.close()
            assert f'cuvil_model_priority{{model="{HIGH}"}} 10.0' in metrics
            assert f'cuvil_model_priority{{model="{LOW}"}} 1.0' in metrics
        finally:
            agents.close()
            publisher.close()
            watcher.close()
    refusals = [e for e in log_events(tmp_path / "agent.log", "refused") if e.get("error") == "WrongModel"]
    assert refusals and all(e["model"] == LOW for e in refusals)

