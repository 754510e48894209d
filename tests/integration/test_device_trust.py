"""The device keeps its trust state and keeps serving when operators, crashes and broken slots get in the way:
an operator's root rotation or install while the agent runs, two installs at once, a read-only status
beside a running install, failures after the commit point, corrupted slots at start, a planted symlink,
a leftover download and an unwritable log. Real files, real processes, real Mosquitto; every wait bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cuvil_agent.agent import Agent
from cuvil_agent.cli import main as agent_cli
from cuvil_agent.config import AgentConfig
from cuvil_agent.log import JsonLog
from cuvil_agent.serve import infer
from cuvil_agent.state import TRANSFER_DIR, describe_state
from cuvil_edge.fleet.publisher import Publisher
from cuvil_edge.signing import Keyring, build_bundle
from cuvil_edge.testing.broker import LocalBroker
from ota import CorruptSlot, Installer, RollbackError, UntrustedKey
from ota.chunks import PART_FILE, PROGRESS_FILE
from ota.config import BrokerSettings
from ota.golden import decode_vector
from tests.support.fleet import HW as FLEET_HW
from tests.support.fleet import AgentThreads, FleetWorld, Watcher, log_events, write_toml
from tests.support.install import HW, ROOT, World, assert_serving, only_active_slot

pytestmark = pytest.mark.integration
needs_broker = pytest.mark.skipif(not shutil.which("mosquitto"), reason="mosquitto not installed")
FLEET = "trust"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
WAIT_S = 120.0  # a bound for waits on other processes, never a measured time


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return World(tmp_path_factory.mktemp("trust"))


@pytest.fixture
def state(world, tmp_path) -> Path:
    return Path(shutil.copytree(world.template, tmp_path / "state"))


@pytest.fixture(scope="module")
def fleet_world(tmp_path_factory) -> FleetWorld:
    fw = FleetWorld(tmp_path_factory.mktemp("fleet"))
    fw.bundles[3] = fw.base / "release3.cvb"
    build_bundle(fw.models[2], fw.bundles[3], fw.ring.release_keys(), version="1.0.3", release=3,
                 hardware_ids=[FLEET_HW])
    return fw


def counter(state_dir: Path) -> int:
    return json.loads((state_dir / "trust.json").read_bytes())["release_counter"]


def root_version(state_dir: Path) -> int:
    return json.loads((state_dir / "trust.json").read_bytes())["root"]["signed"]["version"]


def golden_of(bundle_state: Installer) -> tuple[dict, dict]:
    return decode_vector(bundle_state.active_manifest().golden[0])


def wait_until(pred, what: str, timeout_s: float = WAIT_S) -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@contextlib.contextmanager
def one_agent(fleet_world: FleetWorld, broker: LocalBroker, tmp_path: Path, device: str,
              on_step=None, log_sink: JsonLog | None = None) -> Iterator[tuple[Agent, AgentConfig, Watcher,
                                                                                  Publisher]]:
    """One agent thread (release 1 active, socket on), a status watcher and a publisher, all closed after."""
    settings = broker.settings()
    cfg = fleet_world.agent_config(tmp_path, device, FLEET, settings, socket=True)
    agents = AgentThreads()
    watcher = Watcher(settings, FLEET)
    pub = Publisher(settings, FLEET, fleet_world.ring.release_keys(), tmp_path / "fleet.json")
    try:
        agent = agents.add(cfg, on_step=on_step, log_sink=log_sink)
        watcher.wait_state(device, "active", 1, WAIT_S)
        pub.start()
        yield agent, cfg, watcher, pub
    finally:
        agents.close()
        watcher.close()
        pub.close()


# -- trust state changed by another process while the agent's installer is open -------------------
def test_root_rotation_by_an_operator_is_not_undone_by_the_running_agents_installer(world, state, tmp_path):
    """The agent's long-lived installer must not write back the root it read at start: the operator's
    rotation (revoking a release key) holds, and a release signed by the revoked key is refused."""
    agents_installer = Installer(state, HW)  # opened at agent start, before the rotation
    ring = Keyring(shutil.copytree(world.ring.directory, tmp_path / "keys"))
    revoked = sorted(ring.root.release_keys)[0]
    ring.revoke(revoked)
    root2 = tmp_path / "root2.json"
    root2.write_text(json.dumps(ring.root_envelope(2)))
    assert agent_cli(["trust", "--state-dir", str(state), "--root", str(root2), "--hardware-id", HW]) == 0
    old_keys = [world.ring.private_key(k) for k in sorted(world.ring.root.release_keys)]
    with pytest.raises(UntrustedKey, match="revoked"):
        agents_installer.install(world.signed(tmp_path / "revoked.cvb", old_keys))
    assert root_version(state) == 2
    agents_installer.install(world.signed(tmp_path / "fresh.cvb", ring.release_keys()))
    assert root_version(state) == 2 and counter(state) == 2
    assert_serving(state, 2)


def test_counter_raised_by_another_process_is_never_lowered(world, state):
    """Release 3 installed by the operator, then release 2 through the installer that was open before:
    a RollbackError, the counter stays 3 (it was saved back as 2 from memory before)."""
    agents_installer = Installer(state, HW)
    r3 = world.bundle(3, world.models[2])
    assert agent_cli(["install", str(r3), "--state-dir", str(state), "--hardware-id", HW]) == 0
    with pytest.raises(RollbackError):
        agents_installer.install(world.bundles[2])
    assert counter(state) == 3 and agents_installer.trust.release_counter == 3
    assert_serving(state, 3)


@needs_broker
def test_agent_follows_an_operator_install_and_refuses_the_older_announcement(fleet_world, broker, tmp_path):
    with one_agent(fleet_world, broker, tmp_path, "op0") as (agent, cfg, watcher, pub):
        assert agent_cli(["install", str(fleet_world.bundles[3]), "--state-dir", cfg.state_dir,
                          "--hardware-id", FLEET_HW]) == 0
        watcher.wait_state("op0", "active", 3, WAIT_S)  # the agent serves what the disk says
        pub.publish(fleet_world.bundles[2], canary=100.0, halt_on=50.0)
        log = Path(cfg.log_file)
        wait_until(lambda: any(e["release"] == 2 for e in log_events(log, "announcement")), "announcement")
        assert not log_events(log, "transfer_start")
        inputs, want = golden_of(Installer(cfg.state_dir, FLEET_HW, read_only=True))
        release, got = infer(cfg.socket, inputs)
        assert release == 3
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
        assert counter(Path(cfg.state_dir)) == 3 and agent.installer.trust.release_counter == 3


# -- two installs at once, and a status beside a running install ------------------------------------
PAUSED_INSTALL = """
import sys, time
from pathlib import Path
from ota import Installer
state, bundle, marks = sys.argv[1], sys.argv[2], Path(sys.argv[3])
def pause(step):
    if step == "writing":
        (marks / "writing").touch()
        end = time.monotonic() + 300
        while not (marks / "go").exists() and time.monotonic() < end:
            time.sleep(0.02)
m = Installer(state, {hw!r}, on_step=pause).install(bundle)
print("installed release", m.release)
"""


def read_until(proc: subprocess.Popen, needle: str, lines: list[str]) -> None:
    """Collect ``proc``'s stderr lines (in a thread: bounded wait) until one contains ``needle``."""
    seen = threading.Event()

    def pump() -> None:
        for line in proc.stderr:
            lines.append(line)
            if needle in line:
                seen.set()

    threading.Thread(target=pump, daemon=True).start()
    assert seen.wait(WAIT_S), f"no {needle!r} on stderr: {lines}"


@pytest.mark.parametrize("first,second", [(2, 3), (3, 2)])
def test_concurrent_installs_are_serialized_and_status_never_disturbs_them(world, state, tmp_path, first,
                                                                           second):
    bundles = {2: world.bundles[2], 3: world.bundle(3, world.models[2])}
    marks = tmp_path / "marks"
    marks.mkdir()
    a = subprocess.Popen([sys.executable, "-c", PAUSED_INSTALL.format(hw=HW), str(state), str(bundles[first]),
                          str(marks)], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    b = None
    try:
        wait_until(lambda: (marks / "writing").exists() or a.poll() is not None, "first install writing")
        assert a.poll() is None, a.communicate()
        # a read-only status while the first install writes its slot: no recovery, nothing deleted
        status = subprocess.run([sys.executable, "-m", "cuvil_agent.cli", "status", "--state-dir", str(state),
                                 "--hardware-id", HW], cwd=ROOT, env=ENV, capture_output=True, text=True,
                                timeout=WAIT_S)
        assert status.returncode == 0, status.stderr
        assert "active: slot a" in status.stdout and "release 1" in status.stdout, status.stdout
        b = subprocess.Popen([sys.executable, "-m", "cuvil_agent.cli", "install", str(bundles[second]),
                              "--state-dir", str(state), "--hardware-id", HW], cwd=ROOT, env=ENV,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        read_until(b, "waiting for", lines)  # the second install waits for the lock, and says so
        (marks / "go").touch()
        out_a, err_a = a.communicate(timeout=WAIT_S)
        b.wait(WAIT_S)
        out_b = b.stdout.read()
    finally:
        for p in (a, b):
            if p and p.poll() is None:
                p.kill()
    assert a.returncode == 0, err_a
    assert f"installed release {first}" in out_a
    if second > first:
        assert b.returncode == 0, lines
        assert "now active" in out_b
    else:
        assert b.returncode == 2 and any("RollbackError" in line for line in lines), lines
    assert counter(state) == 3
    assert_serving(state, 3)
    slots = Installer(state, HW, read_only=True).describe()["slots"]
    assert all(s["healthy"] for s in slots.values()), slots
    assert sorted(s["release"] for s in slots.values()) == ([2, 3] if second > first else [1, 3])


# -- failures after the commit point ---------------------------------------------------------------
def test_failure_after_the_pointer_switch_is_a_committed_install(world, state):
    """The directory fsync after the switch fails (EIO at ``pointer_switched``): the install happened, so
    it returns (with a warning) instead of raising as if the old model were still active."""
    said: list[str] = []

    def fsync_fails(step: str) -> None:
        if step == "pointer_switched":
            raise OSError(5, "Input/output error")

    manifest = Installer(state, HW, on_step=fsync_fails).install(world.bundles[2], report=said.append)
    assert manifest.release == 2
    assert any(m.startswith("warning:") and "Input/output error" in m for m in said), said
    assert counter(state) == 2
    assert_serving(state, 2)


def test_switch_lost_after_the_commit_point_is_already_the_active_slot(world, state):
    """The counter is saved but the pointer still names the old slot (the replace failed, or a power loss
    undid it): every reader already takes the staged slot as active, so nothing serves a release below the
    counter, and the next start (recovery) completes the switch on disk."""
    def lose_the_switch(step: str) -> None:
        if step == "pointer_switched":
            (state / "active.tmp").write_text(json.dumps({"slot": "b"}))
            (state / "active").write_text(json.dumps({"slot": "a"}))

    Installer(state, HW, on_step=lose_the_switch).install(world.bundles[2])
    reader = Installer(state, HW, read_only=True)
    assert reader.active_manifest().release == 2 and reader.describe()["active"] == "b"
    assert json.loads((state / "active").read_bytes())["slot"] == "a"
    assert_serving(state, 2)  # opening it for writing ran recovery: the pointer file itself says b now
    assert json.loads((state / "active").read_bytes())["slot"] == "b"


@needs_broker
def test_committed_release_that_cannot_be_served_is_rolled_back_and_reported(fleet_world, broker, tmp_path):
    """The new slot breaks right after the commit point (its module corrupted): the agent cannot serve it,
    goes back to release 1 (counter stays 2), reports the release failed, keeps serving, and a restarted
    agent starts normally."""
    state = tmp_path / "brk0"  # where fleet_world.agent_config puts the device's state

    def corrupt_new_slot(step: str) -> None:
        if step == "trust_saved":
            new = json.loads((state / "active.tmp").read_bytes())["slot"]
            for wasm in (state / "slots" / new).glob("*.wasm"):
                flip_bytes(wasm)

    with one_agent(fleet_world, broker, tmp_path, "brk0", on_step=corrupt_new_slot) as (_, cfg, watcher, pub):
        assert Path(cfg.state_dir) == state
        pub.publish(fleet_world.bundles[2], canary=100.0, halt_on=50.0)
        failed = watcher.wait(lambda m: m["state"] == "failed", WAIT_S, "failed")
        assert failed["release"] == 1 and "cannot be served" in failed["reason"], failed
        inputs, want = golden_of(Installer(fleet_world.template, FLEET_HW, read_only=True))
        release, got = infer(cfg.socket, inputs)
        assert release == 1
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
        assert counter(state) == 2
    again = Agent(cfg, log_sink=JsonLog("brk0", cfg.log_file))  # a restart: no crash, release 1 served
    try:
        assert again.host.release == 1 and again.state == "active"
    finally:
        again.close()


# -- corrupted slots at start ------------------------------------------------------------------------
def two_releases(world, state) -> None:
    Installer(state, HW).install(world.bundles[2])  # slot b active (2), slot a keeps 1


@pytest.mark.parametrize("how", ["envelope_missing", "module_corrupt"])
def test_status_and_rollback_name_a_corrupted_active_slot(world, state, how, capsys):
    two_releases(world, state)
    if how == "envelope_missing":
        (state / "slots" / "b" / "bundle.json").unlink()
    else:
        for wasm in (state / "slots" / "b").glob("*.wasm"):
            flip_bytes(wasm)
    assert agent_cli(["status", "--state-dir", str(state), "--hardware-id", HW]) == 0
    out = capsys.readouterr().out
    assert "active: slot b" in out and "CORRUPT" in out, out
    assert agent_cli(["rollback", "--state-dir", str(state), "--hardware-id", HW]) == 0
    assert_serving(state, 1)
    assert counter(state) == 2


@needs_broker
@pytest.mark.parametrize("other_slot", ["healthy", "absent"])
def test_agent_starts_with_a_corrupted_active_slot(world, state, broker, tmp_path, other_slot):
    """``cuvil-agent run`` starts anyway: it serves the healthy slot (rolled back, reported with the reason),
    or, with none, reports "unhealthy" and keeps running until SIGTERM."""
    if other_slot == "healthy":
        two_releases(world, state)
        (state / "slots" / "b" / "bundle.json").unlink()
    else:
        for wasm in (state / "slots" / "a").glob("*.wasm"):
            flip_bytes(wasm)
    cfg = AgentConfig(device_id="cor0", fleet=FLEET, state_dir=str(state), hardware_id=HW,
                      socket=str(state / "infer.sock"), log_file=str(tmp_path / "cor0.log"),
                      telemetry_interval_s=0, broker=broker.settings())
    watcher = Watcher(broker.settings(), FLEET)
    proc = subprocess.Popen([sys.executable, "-m", "cuvil_agent.cli", "run", "--config",
                             str(write_toml(cfg, tmp_path / "cor0.toml"))], cwd=ROOT, env=ENV,
                            stderr=subprocess.PIPE)
    try:
        if other_slot == "healthy":
            seen = watcher.wait(lambda m: m["state"] == "rolled_back", WAIT_S, "rolled_back")
            assert seen["release"] == 1 and seen["error"] == "CorruptSlot", seen
            inputs, want = golden_of(Installer(world.template, HW, read_only=True))
            wait_until(lambda: Path(cfg.socket).exists(), "socket")
            release, got = infer(cfg.socket, inputs)
            assert release == 1
            np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
        else:
            seen = watcher.wait(lambda m: m["state"] == "unhealthy", WAIT_S, "unhealthy")
            assert "no healthy model" in seen["detail"], seen
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(WAIT_S)
        watcher.close()
    assert code == 0, proc.stderr.read()


# -- smaller ones ---------------------------------------------------------------------------------
def test_symlink_planted_at_the_inactive_slot_is_replaced_not_followed(world, state, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the installer's")
    (state / "slots" / "b").symlink_to(outside, target_is_directory=True)
    Installer(state, HW).install(world.bundles[2])
    assert (outside / "keep").read_text() == "not the installer's" and len(list(outside.iterdir())) == 1
    assert not (state / "slots" / "b").is_symlink()
    assert_serving(state, 2)


def test_download_left_by_a_crash_after_the_install_is_dropped_at_start(fleet_world, tmp_path):
    """Killed between the switch and removing ``transfer/``: the next start drops the installed bundle
    instead of showing it as a download in progress."""
    cfg = fleet_world.agent_config(tmp_path, "left0", FLEET, BrokerSettings(port=1))  # never connects
    state = Path(cfg.state_dir)
    Installer(state, FLEET_HW).install(fleet_world.bundles[2])
    transfer = state / TRANSFER_DIR
    transfer.mkdir()
    shutil.copy(fleet_world.bundles[2], transfer / PART_FILE)
    progress = {"bundle_sha256": "0" * 64, "chunk_bytes": 1, "have": 3}  # well formed, another bundle's
    (transfer / PROGRESS_FILE).write_text(json.dumps(progress))
    assert describe_state(state)["transfer"] is not None
    Agent(cfg, log_sink=JsonLog("left0", cfg.log_file)).close()
    assert not transfer.exists() and describe_state(state)["transfer"] is None
    assert Installer(state, FLEET_HW, read_only=True).active_manifest().release == 2


@needs_broker
def test_a_log_that_cannot_be_written_is_not_fatal(fleet_world, broker, tmp_path):
    sink = JsonLog("full0", "/dev/full")
    with one_agent(fleet_world, broker, tmp_path, "full0", log_sink=sink) as (_, cfg, watcher, pub):
        pub.publish(fleet_world.bundles[2], canary=100.0, halt_on=50.0)
        watcher.wait_state("full0", "active", 2, WAIT_S)
        assert sink.dropped > 0
        assert infer(cfg.socket, golden_of(Installer(cfg.state_dir, FLEET_HW, read_only=True))[0])[0] == 2


def test_read_only_installer_writes_nothing(world, state):
    def snapshot() -> list[tuple[str, int, int]]:
        return sorted((str(p.relative_to(state)), p.stat().st_mtime_ns, p.stat().st_size)
                      for p in state.rglob("*") if p.is_file())

    before = snapshot()
    (state / "slots" / "b").mkdir()  # an incomplete slot: a writer's recovery would remove it
    reader = Installer(state, HW, read_only=True)
    assert reader.active_manifest().release == 1 and reader.describe()["slots"]["b"]["healthy"] is False
    with pytest.raises(RuntimeError):
        reader.install(world.bundles[2])
    assert (state / "slots" / "b").exists()
    (state / "slots" / "b").rmdir()
    assert snapshot() == before
    only_active_slot(state)


def test_unreadable_slot_is_a_corrupt_slot_error(world, state):
    two_releases(world, state)
    (state / "slots" / "b" / "bundle.json").write_text("{")
    with pytest.raises(CorruptSlot):
        Installer(state, HW, read_only=True).active_manifest()
