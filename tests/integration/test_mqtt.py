"""Fleet updates over a real Mosquitto on 127.0.0.1: agents as real processes and as threads, real
signatures, real installs in wasmtime, the broker restarted and agents SIGKILLed mid-transfer.

Every test starts its own broker on a free port (generated config, persistence in its tmp dir) and
stops it; every wait is bounded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from cuvil_agent.cli import main as agent_cli
from cuvil_agent.serve import infer
from cuvil_edge.fleet.publisher import Publisher
from cuvil_edge.testing.broker import LocalBroker
from ota import SelfTestFailed
from ota.errors import NotAuthorized
from ota.golden import decode_vector
from ota.installer import Installer
from ota.protocol import Command, Topics, bucket, format_time
from ota.transport import MqttClient
from tests.support.fleet import (
    AgentThreads,
    FleetWorld,
    Watcher,
    log_events,
    wait_until,
    with_limits,
    write_toml,
)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not shutil.which("mosquitto"), reason="mosquitto not installed")]
ROOT = Path(__file__).resolve().parents[2]
FLEET = "lab"


@pytest.fixture(scope="session")
def fleet_world(tmp_path_factory) -> FleetWorld:
    return FleetWorld(tmp_path_factory.mktemp("fleet"))


def spawn_agent(cfg_path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cuvil_agent.cli", "run", "--config", str(cfg_path)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE)


def stop_agent(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(20)


def golden(bundle_release_dir: Path) -> tuple[dict, dict]:
    manifest = Installer(bundle_release_dir, "test-device").active_manifest()
    return decode_vector(manifest.golden[0])


def wait_file(pred, timeout_s: float = 30.0, what: str = "") -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


# -- 1. publish -> three agent processes install, report active and serve the new golden output ----------
def test_publish_to_three_agent_processes(fleet_world, broker, tmp_path, capsys):
    settings = broker.settings()
    cfgs = [fleet_world.agent_config(tmp_path, f"dev{i}", FLEET, settings, socket=True) for i in range(3)]
    procs = [spawn_agent(write_toml(c, tmp_path / f"{c.device_id}.toml")) for c in cfgs]
    watcher = Watcher(settings, FLEET)
    pub = Publisher(settings, FLEET, fleet_world.ring.release_keys(), tmp_path / "fleet.json").start()
    try:
        for c in cfgs:
            watcher.wait_state(c.device_id, "active", 1)
        assert pub.wait_for_devices(3, 10) == 3
        pub.publish(fleet_world.bundles[2], canary=34.0, halt_on=50.0)
        rollout = pub.watch(timeout_s=60, stage_timeout_s=60)
        assert rollout.status == "complete" and rollout.stages == [34.0, 50.0, 100.0]
        assert rollout.outcomes == {c.device_id: "active" for c in cfgs}
        for c in cfgs:  # every transition was reported, in order
            states = [m["state"] for m in watcher.messages if m["device"] == c.device_id]
            assert states[states.index("downloading"):] == ["downloading", "verifying", "installing",
                                                             "self-test", "active"][:len(states) -
                                                                                      states.index("downloading")]
        inputs, want = decode_vector(Installer(cfgs[0].state_dir, "test-device").active_manifest().golden[0])
        for c in cfgs:
            release, got = infer(c.socket, inputs)
            assert release == 2
            np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
    finally:
        codes = [stop_agent(p) for p in procs]
        pub.close()
    assert codes == [0, 0, 0]  # SIGTERM is a clean shutdown
    watcher.wait_state("dev0", "offline", 2, timeout_s=10)
    watcher.close()
    assert agent_cli(["status", "--config", str(tmp_path / "dev0.toml")]) == 0
    assert "release 2" in capsys.readouterr().out
    assert json.loads((tmp_path / "fleet.json").read_text())["rollout"]["status"] == "complete"


# -- 2. resume after a broker restart and after SIGKILL of the agent ---------------------------------------
@pytest.mark.parametrize("interruption", ["broker_restart", "agent_sigkill"])
def test_transfer_resumes_from_last_verified_chunk(fleet_world, broker, tmp_path, interruption):
    settings = broker.settings()
    cfg = fleet_world.agent_config(tmp_path, "dev0", FLEET, settings)
    toml = write_toml(cfg, tmp_path / "dev0.toml")
    pub = Publisher(settings, FLEET, fleet_world.ring.release_keys(), tmp_path / "fleet.json").start()
    data = fleet_world.bundles[2].read_bytes()
    rollout = pub.publish(fleet_world.bundles[2], canary=100.0, halt_on=0.0, chunk_bytes=256)
    total = len(rollout.chunks)
    half = total // 2
    assert total >= 24, "the test wants dozens of chunks"
    for i in range(half, total):  # only the first half is available: the transfer stalls there
        pub.mqtt.publish(pub.topics.chunk(rollout.bundle_sha256, i), b"", retain=True)
    progress = Path(cfg.state_dir) / "transfer" / "progress.json"
    proc = spawn_agent(toml)
    try:
        wait_file(lambda: progress.exists() and json.loads(progress.read_text())["have"] == half,
                  what="first half of the chunks")
        if interruption == "broker_restart":
            broker.restart()
            pub.mqtt.wait_connected(15)
        else:
            proc.kill()
            proc.wait(10)
            proc = spawn_agent(toml)
        pub.publish_chunks(rollout, data, range(half, total))
        watcher = Watcher(settings, FLEET)
        watcher.wait_state("dev0", "active", 2, timeout_s=60)
        watcher.close()
    finally:
        assert stop_agent(proc) == 0
        pub.close()
    log = Path(cfg.log_file)
    done = log_events(log, "transfer_done")[-1]
    assert done["resumed_from"] == half and done["fetched"] == total - half < total
    resumed = log_events(log, "transfer_resume" if interruption == "broker_restart" else "transfer_start")
    assert resumed[-1]["from_chunk"] == half
    assert Installer(cfg.state_dir, "test-device").verify_active().release == 2
    assert not (Path(cfg.state_dir) / "transfer").exists()


# -- 3. corrupted chunk, replayed announcement, replayed command, unauthorised topic ----------------------
def test_refusals_are_reported_and_the_model_keeps_serving(fleet_world, tmp_path):
    users = {"publisher": "pub-secret", "dev-a": "a-secret", "dev-b": "b-secret"}
    topics = Topics("cuvil", FLEET)
    acl = topics.publisher_acl("publisher") + topics.device_acl("dev-a", "dev-a") \
        + topics.device_acl("dev-b", "dev-b")
    with LocalBroker(tmp_path / "broker", users=users, acl=acl) as broker:
        admin = broker.settings("publisher", "pub-secret")
        cfg = fleet_world.agent_config(tmp_path, "dev-a", FLEET, broker.settings("dev-a", "a-secret"),
                                       socket=True)
        pub = Publisher(admin, FLEET, fleet_world.ring.release_keys(), tmp_path / "fleet.json").start()
        rollout = pub.publish(fleet_world.bundles[2], canary=100.0, halt_on=0.0, chunk_bytes=1024)
        good = fleet_world.bundles[2].read_bytes()[3 * 1024:4 * 1024]
        pub.mqtt.publish(pub.topics.chunk(rollout.bundle_sha256, 3), bytes([good[0] ^ 1]) + good[1:],
                         retain=True)
        watcher = Watcher(admin, FLEET)
        agents = AgentThreads()
        agent = agents.add(cfg)
        inputs, want1 = golden(fleet_world.template)

        def serves(release: int) -> None:
            got_release, got = infer(cfg.socket, inputs)
            assert got_release == release
            if release == 1:
                np.testing.assert_allclose(got["y"], want1["y"], rtol=1e-5, atol=1e-5)

        def refused(error: str) -> dict:
            return watcher.wait(lambda m: m.get("event") == "refused" and m.get("error") == error
                                and m not in seen, 20, f"refusal {error}")

        seen: list[dict] = []
        try:
            # corrupted chunk: refused and reported; fetched again once the broker holds the right bytes
            hit = refused("HashMismatch")
            seen.append(hit)
            assert hit["what"] == "chunk" and hit["chunk"] == 3 and hit["state"] == "downloading"
            serves(1)
            pub.publish_chunks(rollout, fleet_world.bundles[2].read_bytes(), [3])
            watcher.wait_state("dev-a", "active", 2)
            serves(2)
            # replayed announcement: an older, validly signed one after a newer one
            first = watcher.announcements[0]
            pub.halt(pub.rollout, "test: a newer announcement")
            pub.mqtt.publish(topics.release, first, retain=True)
            seen.append(hit := refused("RollbackError"))
            assert hit["what"] == "announcement" and "replayed" in hit["detail"]
            # replayed command: the same signed bytes a second time
            payload = pub.command("dev-a", "report")
            watcher.wait(lambda m: m.get("event") == "report", 20, "report")
            pub.mqtt.publish(topics.command("dev-a"), payload)
            seen.append(refused("ReplayedCommand"))
            # a valid command for another device, delivered to this one
            now = datetime.now(timezone.utc)
            other = Command(FLEET, "dev-b", "rollback", "ab" * 16, format_time(now),
                            format_time(now + timedelta(minutes=10)))
            pub.mqtt.publish(topics.command("dev-a"), pub.signed(other.to_dict()))
            seen.append(refused("UnauthorizedMessage"))
            # unauthorised topics: dev-b's account may not announce releases nor command dev-a
            intruder = MqttClient(broker.settings("dev-b", "b-secret"), "intruder", lambda *a: None).start(10)
            for topic in (topics.release, topics.command("dev-a")):
                with pytest.raises(NotAuthorized):
                    intruder.publish(topic, first)
            intruder.close()
            time.sleep(0.5)
            assert agent.host.release == 2 and watcher.latest("dev-a")["state"] == "active"
            serves(2)
        finally:
            agents.close()
            watcher.close()
            pub.close()


# -- 3b. a re-sent status (report command, reconnect) still says why the device failed ----------------------
def test_a_resent_status_keeps_why_the_install_failed(fleet_world, broker, tmp_path):
    settings = broker.settings()

    def fail_selftest(step: str) -> None:
        if step == "precompiled":
            raise SelfTestFailed("injected: golden output differs on this device")

    watcher = Watcher(settings, FLEET)
    agents = AgentThreads()
    pub = Publisher(settings, FLEET, fleet_world.ring.release_keys(), tmp_path / "fleet.json").start()
    try:
        agents.add(fleet_world.agent_config(tmp_path, "dev0", FLEET, settings), on_step=fail_selftest)
        watcher.wait_state("dev0", "active", 1)
        rollout = pub.publish(fleet_world.bundles[2], canary=100.0, halt_on=0.0)
        failed = watcher.wait(lambda m: m["state"] == "failed", 120, "the failed install")
        why = {k: failed[k] for k in ("bundle", "target_release", "error", "reason")}
        assert why["bundle"] == rollout.bundle_sha256 and why["target_release"] == 2
        assert why["error"] == "SelfTestFailed" and "injected" in why["reason"], why
        pub.command("dev0", "report")
        report = watcher.wait(lambda m: m.get("event") == "report", 120, "the reported status")
        assert report["state"] == "failed" and {k: report.get(k) for k in why} == why, report
        # the publisher, holding only that latest status, still reads the device's outcome from it
        wait_until(lambda: pub.devices.get("dev0", {}).get("event") == "report", "the publisher's copy", 120)
        assert pub.step(stage_timeout_s=600).outcomes == {"dev0": "failed"}
        # a reconnect re-sends the status too (one sent while offline is lost): the same fields again
        before = {id(m) for m in watcher.messages}
        broker.restart()
        again = watcher.wait(lambda m: id(m) not in before and m["state"] == "failed" and "event" not in m,
                             120, "the status re-sent on reconnect")
        assert {k: again.get(k) for k in why} == why, again
    finally:
        agents.close()
        watcher.close()
        pub.close()


# -- 4. staged rollout over 20 agents: failures in stage 2 halt it; later devices never get it -------------
def test_staged_rollout_halts_at_threshold(fleet_world, broker, tmp_path):
    settings = broker.settings()
    devices = [f"sim{i:02d}" for i in range(20)]
    sha = hashlib.sha256(fleet_world.bundles[2].read_bytes()).hexdigest()
    order = sorted(devices, key=lambda d: bucket(sha, d))  # canary = order[:2], stage 2 = order[:10]
    failing = set(order[3:5])

    def fail_selftest(step: str) -> None:
        if step == "precompiled":
            raise SelfTestFailed("injected: golden output differs on this device")

    agents = AgentThreads()
    watcher = Watcher(settings, FLEET)
    pub = Publisher(settings, FLEET, fleet_world.ring.release_keys(), tmp_path / "fleet.json")
    try:
        for d in devices:
            cfg = with_limits(fleet_world.agent_config(tmp_path, d, FLEET, settings), window_chunks=8)
            agents.add(cfg, on_step=fail_selftest if d in failing else None)
        for d in devices:
            watcher.wait_state(d, "active", 1)
        pub.start()
        assert pub.wait_for_devices(20, 10) == 20
        pub.publish(fleet_world.bundles[2], canary=10.0, halt_on=10.0, stages=[10.0, 50.0, 100.0],
                    rollback_on_halt=True)
        # generous bounds only: the halt happens at the second failure whatever the machine's speed
        rollout = pub.watch(timeout_s=900, stage_timeout_s=600, settle_s=0)
        assert rollout.status == "halted" and rollout.stage == 1, rollout
        # counted from 1, as operators read it (and as the dashboard and ``fleet status`` print it)
        assert rollout.reason == "2 of 10 devices failed in stage 2 of 3 (50%), over the 10% threshold"
        # watch returned at once: what it ordered is recorded as pending, and the caller can wait for it
        assert set(rollout.pending_rollbacks) <= set(order[:10]) - failing
        rollout = pub.wait_settled(timeout_s=600)
        assert not rollout.pending_rollbacks, rollout
        assert {d for d, o in rollout.outcomes.items() if o == "failed"} == failing
        assert set(rollout.outcomes) == set(order[:10])
        # the canary took the release and was rolled back; a stage device either installed it before the
        # halt reached it (rolled back too) or abandoned its download (withdrawn)
        rest = {d: o for d, o in rollout.outcomes.items() if d not in failing}
        assert set(rest.values()) <= {"rolled_back", "withdrawn"}, rest
        assert all(rest[d] == "rolled_back" for d in order[:2]), rest
        for a in agents.agents:
            d = a.device
            if d in order[:10]:
                assert a.host.release == 1  # failed (kept release 1) or rolled back to it
            else:  # outside the stage that ran: never received a single chunk
                assert not log_events(Path(tmp_path / f"{d}.log"), "transfer_start"), d
                assert a.installer.trust.release_counter == 1 and a.host.release == 1
        # the publisher's state survives a restart: a new Publisher reads the halted rollout
        again = Publisher(settings, FLEET, fleet_world.ring.release_keys(), tmp_path / "fleet.json")
        assert again.rollout.status == "halted" and again.state["seq"] == pub.state["seq"]
    finally:
        agents.close()
        watcher.close()
        pub.close()


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_slow_retrieval_and_stalls_are_bounded(fleet_world, tmp_path):
    """docs/THREATS.md 9 and 13 without a broker: a trickle trips the minimum rate, silence the bounded
    retries."""
    from ota.chunks import ChunkTransfer
    from ota.config import TransferLimits
    from ota.errors import SlowRetrieval, TransferFailed
    from ota.protocol import Announcement, sha256_hex, split_chunks

    data = fleet_world.bundles[2].read_bytes()
    pieces = split_chunks(data, 256)
    ann = Announcement(FLEET, 1, "2020-01-01T00:00:00Z", "2999-01-01T00:00:00Z", sha256_hex(data), len(data),
                       2, "m", "1.0.2", 256, tuple(sha256_hex(p) for p in pieces), 1 << 32)
    clock = FakeClock()
    slow = ChunkTransfer(tmp_path / "slow", ann, TransferLimits(min_rate_bytes_per_s=100, rate_window_s=10,
                                                                 chunk_timeout_s=60), clock)
    for i in range(3):
        clock.t += 4.0
        slow.accept(i, pieces[i])  # 768 bytes in 12 s: 64 B/s
        if i < 2:
            assert not slow.due()
    with pytest.raises(SlowRetrieval, match="below the minimum"):
        slow.due()
    late = ChunkTransfer(tmp_path / "late", ann, TransferLimits(deadline_s=30, min_rate_bytes_per_s=0), clock)
    clock.t += 31
    with pytest.raises(SlowRetrieval, match="deadline"):
        late.due()
    limits = TransferLimits(chunk_timeout_s=1, max_retries=3, backoff_max_s=1, min_rate_bytes_per_s=0)
    stalled = ChunkTransfer(tmp_path / "stall", ann, limits, clock)
    requests = 0
    with pytest.raises(TransferFailed, match="3 retries"):
        for _ in range(100):  # a tick every 0.25 s, no chunk ever arrives
            clock.t += 0.25
            requests += stalled.due()
    assert requests == 3  # re-requested with backoff, then given up: no busy loop
    # a restart resumes after the verified prefix on disk; a corrupted tail is cut off
    (tmp_path / "slow" / "bundle.part").open("ab").write(b"junk")
    assert ChunkTransfer(tmp_path / "slow", ann, TransferLimits(), clock).have == 3


def test_example_agent_config_parses(monkeypatch, tmp_path):
    from cuvil_agent.config import load_agent_config

    text = (ROOT / "packaging" / "agent.example.toml").read_text()
    monkeypatch.setenv("CUVIL_MQTT_PASS", "s3cret")
    (tmp_path / "a.toml").write_text(text.replace('password_file = "/etc/cuvil/mqtt.pass"',
                                                  'password_env = "CUVIL_MQTT_PASS"'))
    cfg = load_agent_config(tmp_path / "a.toml")
    assert cfg.broker.password == "s3cret" and cfg.limits.max_chunk_bytes < 128 << 10
    (tmp_path / "b.toml").write_text(text + "\n[limits2]\n")
    with pytest.raises(ValueError, match="unknown sections"):
        load_agent_config(tmp_path / "b.toml")


# -- command line: publish, fleet status, and the one-command demo ----------------------------------------
def test_cli_publish_status_and_demo(fleet_world, broker, tmp_path, capsys, host_cli):
    host = host_cli

    common = ["--fleet", FLEET, "--broker", f"127.0.0.1:{broker.port}", "--state", str(tmp_path / "f.json")]
    agents = AgentThreads()
    try:
        agents.add(fleet_world.agent_config(tmp_path, "dev0", FLEET, broker.settings()))
        out = host("publish", str(fleet_world.bundles[2]), *common, "--keyring",
                   str(fleet_world.ring.directory), "--canary", "100%", "--halt-on", "0%", "--expect", "1",
                   "--chunk-kb", "2")
        assert "1 devices known" in out and "complete; 1 active" in out
        table = host("fleet", "status", *common)
        assert any(line.split()[:3] == ["dev0", "active", "2"] for line in table.splitlines())
    finally:
        agents.close()
    demo = host("fleet", "demo", "--workdir", str(tmp_path))
    assert demo.count("golden output matches") == 2
