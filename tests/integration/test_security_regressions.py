"""Agent-side regressions from the security review: replay inside the expiry grace, malformed unsigned
messages, and failures that escaped the worker loop. No broker: messages are handed to the agent's
dispatcher directly (as paho's thread would queue them); installs and signatures are real.
"""

from __future__ import annotations

import json
import secrets
import socket
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

import cuvil_agent.agent as agent_module
from cuvil_agent.agent import Agent
from cuvil_agent.serve import InferenceServer
from cuvil_edge.signing import make_manifest, sign_envelope
from ota.chunks import file_sha256
from ota.config import BrokerSettings, OtaConfig
from ota.protocol import Announcement, Command, format_time
from tests.support.fleet import FleetWorld, log_events
from tests.support.install import write_raw_bundle

pytestmark = pytest.mark.integration
FLEET = "lab"
HW = "test-device"


@pytest.fixture(scope="module")
def fleet_world(tmp_path_factory) -> FleetWorld:
    return FleetWorld(tmp_path_factory.mktemp("fleet"))


@pytest.fixture
def agent(fleet_world, tmp_path):
    """dev-a with release 1 active, a 10-minute expiry grace and no broker (port 1, never started)."""
    cfg = fleet_world.agent_config(tmp_path, "dev-a", FLEET, BrokerSettings(port=1))
    a = Agent(replace(cfg, ota=OtaConfig(expiry_grace_seconds=600)))
    yield a
    a.host.close()
    a.log.close()


def refusals(a: Agent) -> list[dict]:
    return log_events(Path(a.cfg.log_file), "refused")


def test_command_replayed_inside_the_expiry_grace_is_refused(fleet_world, agent, monkeypatch):
    """The nonce is kept until expires + grace (as long as verify_command accepts the command), so a
    replay after expiry but inside the grace does not run the command again."""
    runs: list[str] = []
    monkeypatch.setattr(agent, "_cmd_report", lambda cmd: runs.append(cmd.nonce))
    t0 = datetime.now(timezone.utc).replace(microsecond=0)
    cmd = Command(FLEET, "dev-a", "report", secrets.token_hex(16), format_time(t0),
                  format_time(t0 + timedelta(seconds=60)))
    payload = json.dumps(sign_envelope(cmd.to_dict(), fleet_world.ring.release_keys())).encode()
    for after_s in (10, 120):  # first delivery; replay past expiry (60 s), inside the 600 s grace
        monkeypatch.setattr(agent_module, "_now", lambda s=after_s: t0 + timedelta(seconds=s))
        agent._dispatch(agent.topics.command("dev-a"), payload)
    assert runs == [cmd.nonce]
    assert [r["error"] for r in refusals(agent)] == ["ReplayedCommand"]


def test_malformed_or_crashing_messages_are_refused_and_reported(agent, monkeypatch):
    """NaN and deep nesting were a ValueError / RecursionError that ended Agent.run(); any exception while
    handling one message is now refused and reported and the agent carries on."""
    deep = b'{"signed": ' + b"[" * 200000 + b"]" * 200000 + b', "signatures": []}'
    for topic in (agent.topics.command("dev-a"), agent.topics.release):
        for payload in (b'{"signed": {"x": NaN}, "signatures": []}', deep):
            agent._dispatch(topic, payload)
    assert [r["error"] for r in refusals(agent)] == ["FormatError"] * 4

    def bug(payload: bytes) -> None:
        raise KeyError("a bug in a handler")

    monkeypatch.setattr(agent, "_on_command", bug)
    agent._dispatch(agent.topics.command("dev-a"), b"{}")
    assert refusals(agent)[-1]["error"] == "KeyError"
    assert agent.host.release == 1


def test_inference_server_answers_deeply_nested_json_with_an_error(agent, tmp_path):
    server = InferenceServer(tmp_path / "infer.sock", agent.host)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(server.path))
            s.sendall(b'{"inputs": ' + b"[" * 200000 + b"]" * 200000 + b"}\n")
            with s.makefile("rb") as f:
                reply = json.loads(f.readline() or b"{}")
    finally:
        server.close()
    assert reply.get("type") == "RecursionError"


def test_install_failure_from_a_malformed_spec_is_recorded(fleet_world, agent, tmp_path):
    """A signed bundle whose spec has a negative dimension made the self-test raise a plain ValueError
    that escaped Agent._install: never recorded as failed, retried (and crashing) after every restart."""
    manifest, payloads = make_manifest(fleet_world.models[2], version="1.0.2", release=2, hardware_ids=[HW])
    manifest["spec"]["outputs"][0]["shape"] = [-1]
    bundle = write_raw_bundle(tmp_path / "bad-spec.cvb", manifest, fleet_world.ring.release_keys(), payloads)
    sha = file_sha256(bundle, 1 << 16)
    now = datetime.now(timezone.utc)
    ann = Announcement(FLEET, 1, format_time(now), format_time(now + timedelta(hours=1)), sha,
                       bundle.stat().st_size, 2, "m", "1.0.2", 1 << 20, (sha,), 1 << 32)
    agent._install(SimpleNamespace(ann=ann, path=bundle))
    assert agent._store["failed"][sha].startswith("FormatError")
    assert log_events(Path(agent.cfg.log_file), "failed")[-1]["bundle"] == sha
    assert agent.host.release == 1
