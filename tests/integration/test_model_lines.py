"""Model lines of multi-model devices end to end, with a real Mosquitto and real agents: the publisher
rolls out one model line (``Publisher(model=...)``, ``cuvil-edge publish --model``) while the other line
keeps its release, a halted rollout on one line rolls back only that line while another line's rollout
completes at the same time, ``cuvil-agent`` subcommands pick a line with ``--model``, and a rotated root
of trust applies to every line of the device (a release on any line signed by the revoked key is
refused; trust never goes back).
"""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cuvil_agent.agent import Agent
from cuvil_agent.cli import main as agent_cli
from cuvil_agent.config import AgentConfig, ModelConfig, load_agent_config
from cuvil_edge.cli import main as edge_cli
from cuvil_edge.fleet.dashboard import FleetView
from cuvil_edge.fleet.publisher import FleetError, Publisher, line_status
from cuvil_edge.signing import Keyring
from ota import Installer
from ota.errors import BrokenChain, SelfTestFailed
from ota.roots import MODELS_DIR, line_dirs
from tests.support.fleet import AgentThreads, Watcher, log_events, wait_until
from tests.support.model_lines import FLEET, A, B, LinesWorld
from tests.support.multi_model import HW

pytestmark = pytest.mark.integration
HANG_S = 180.0  # a bound for waits on agents, never a measured time


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> LinesWorld:
    return LinesWorld(tmp_path_factory.mktemp("lines"))


def load(path: Path) -> AgentConfig:
    return load_agent_config(path)


def releases(agent: Agent) -> dict[str, int | None]:
    return {line.name: line.host.release for line in agent.lines}


def root_version(state_dir: Path) -> int:
    return json.loads((state_dir / "trust.json").read_bytes())["root"]["signed"]["version"]


def test_rollouts_on_two_model_lines_at_once(world, broker, tmp_path, capsys):
    """Line A: release 2 rolled out in two stages while B keeps release 1; then at the same time A's
    release 3 halts (one device fails its self-test) and is rolled back on A only, while B's release 2
    completes on every device."""
    settings = broker.settings()
    devices = ["d0", "d1", "d2"]
    tomls = {d: world.device(tmp_path, d, broker, sockets=d == "d0") for d in devices}
    failing = "d2"
    agents = AgentThreads()
    by_name: dict[str, Agent] = {}

    def fail_a3(step: str) -> None:  # d2's self-test of line A's release 3 fails; nothing else does
        line = by_name[failing].line(A)
        if step == "precompiled" and line.state == "self-test" and line.ann and line.ann.release == 3:
            raise SelfTestFailed("injected: golden output differs on this device")

    watcher = Watcher(settings, FLEET)
    view = FleetView(settings, FLEET).start()
    pub_a = Publisher(settings, FLEET, world.ring.release_keys(), tmp_path / "fleet-a.json", model=A)
    pub_b = Publisher(settings, FLEET, world.ring.release_keys(), tmp_path / "fleet-b.json", model=B)
    try:
        for d in devices:
            by_name[d] = agents.add(load(tomls[d]), on_step=fail_a3 if d == failing else None)
        for pub in (pub_a, pub_b):
            pub.start()
            assert pub.wait_for_devices(3, HANG_S) == 3
        pub_a.publish(world.bundles[A, 2], canary=34.0, halt_on=0.0, stages=[34.0, 100.0])
        rollout = pub_a.watch(timeout_s=HANG_S * 3, stage_timeout_s=HANG_S * 2)
        assert rollout.status == "complete" and rollout.model == A and rollout.stage == 1, rollout
        assert rollout.outcomes == dict.fromkeys(devices, "active")
        assert all(releases(by_name[d]) == {A: 2, B: 1} for d in devices)
        for d in devices:  # B's line saw no announcement at all
            assert not [e for e in log_events(tmp_path / f"{d}.log", "announcement") if e.get("model") == B]
        seq = pub_a.state["seq"]
        with pytest.raises(FleetError, match="not model line"):  # B's bundle is refused on A's line
            pub_a.publish(world.bundles[B, 2], canary=100.0, halt_on=0.0)
        assert pub_a.rollout == rollout and pub_a.state["seq"] == seq  # and A's rollout is untouched

        # both lines at once: A's release 3 halts and rolls back (A only); B's release 2 completes
        pub_a.publish(world.bundles[A, 3], canary=100.0, halt_on=10.0, rollback_on_halt=True)
        pub_b.publish(world.bundles[B, 2], canary=100.0, halt_on=0.0)
        results: dict[str, Any] = {}
        threads = [threading.Thread(target=lambda p=p: results.__setitem__(
            p.model, p.watch(timeout_s=HANG_S * 3, stage_timeout_s=HANG_S * 2, settle_s=HANG_S)))
            for p in (pub_a, pub_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(HANG_S * 4)
        assert results.keys() == {A, B}, "a rollout did not finish"
        halted, done = results[A], results[B]
        assert halted.status == "halted" and "1 of 3 devices failed" in halted.reason, halted
        assert halted.outcomes == {"d0": "rolled_back", "d1": "rolled_back", failing: "failed"}
        assert done.status == "complete" and done.outcomes == dict.fromkeys(devices, "active"), done
        assert all(releases(by_name[d]) == {A: 2, B: 2} for d in devices)
        for d in devices:  # every rollback command named line A
            commands = log_events(tmp_path / f"{d}.log", "command")
            assert all(c["action"] == "rollback" and c["model"] == A for c in commands), commands
            assert len(commands) == (0 if d == failing else 1)
        # the publisher reads each line's state from whichever line's status came last
        statuses = pub_b.devices
        assert {d: line_status(statuses[d], A)["release"] for d in devices} == dict.fromkeys(devices, 2)
        assert {d: line_status(statuses[d], B)["release"] for d in devices} == dict.fromkeys(devices, 2)
        # each line's rollout on its own retained topic: the dashboard holds both
        rollouts = wait_until(lambda: (r := view.snapshot()["rollouts"]).keys() == {A, B}
                              and r[A]["status"] == "halted" and r[B]["status"] == "complete" and r,
                              "both lines' rollouts on the dashboard", HANG_S)
        assert rollouts[A]["failed"] == [failing] and rollouts[A]["model"] == A

        # the agent CLI's --model on a running device: inference through line B's socket
        np.save(tmp_path / "x.npy", world.input)
        capsys.readouterr()
        infer = ["infer", f"x={tmp_path / 'x.npy'}", "--config", str(tomls["d0"])]
        assert agent_cli([*infer, "--model", B]) == 0
        assert "(release 2)" in capsys.readouterr().out
        assert agent_cli(infer) == 3
        assert "give --model NAME" in capsys.readouterr().err
    finally:
        agents.close()
        for pub in (pub_a, pub_b):
            pub.close()
        view.close()
        watcher.close()


def test_cli_publish_and_status_on_a_model_line(world, broker, tmp_path, capsys, host_cli):
    """``cuvil-edge publish --model`` rolls out one line; ``fleet status --model`` shows that line's
    release, without ``--model`` every line of each device; the line's state file is its own."""
    common = ["--fleet", FLEET, "--broker", f"127.0.0.1:{broker.port}"]
    agents = AgentThreads()
    try:
        agents.add(load(world.device(tmp_path, "dev0", broker)))
        out = host_cli("publish", str(world.bundles[B, 2]), *common, "--model", B, "--keyring",
                       str(world.ring.directory), "--canary", "100%", "--halt-on", "0%", "--expect", "1",
                       "--state", str(tmp_path / "b.json"))
        assert f"fleet {FLEET} model line {B}: 1 devices known" in out and "complete; 1 active" in out
        assert json.loads((tmp_path / "b.json").read_text())["model"] == B
        table = host_cli("fleet", "status", *common, "--model", B, "--state", str(tmp_path / "b.json"))
        assert any(line.split()[:3] == ["dev0", "active", "2"] for line in table.splitlines()), table
        table = host_cli("fleet", "status", *common, "--state", str(tmp_path / "fleet.json"))
        assert f"{A}: active release 1; {B}: active release 2" in table
        # one state file per line: B's file cannot drive line A (its counter and rollout are B's)
        assert edge_cli(["publish", str(world.bundles[A, 2]), *common, "--model", A, "--keyring",
                        str(world.ring.directory), "--state", str(tmp_path / "b.json")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: FleetError") and "give each model line its own state file" in err
    finally:
        agents.close()


def test_agent_cli_acts_on_the_model_line_it_is_given(world, broker, tmp_path, capsys):
    toml = world.device(tmp_path, "cli", broker)
    state = Path(load(toml).state_dir)

    def run(*argv: str) -> tuple[int, str, str]:
        code = agent_cli([*argv, "--config", str(toml)])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, _ = run("status")  # no --model: every line
    assert code == 0 and f"model {A}:" in out and f"model {B}:" in out
    code, _, err = run("install", str(world.bundles[A, 2]))
    assert code == 3 and err.startswith("failed: UnknownModel") and f"({A}, {B})" in err
    code, _, err = run("install", str(world.bundles[A, 2]), "--model", "gamma")
    assert code == 3 and "no model line 'gamma'" in err and f"its models: {A}, {B}" in err
    code, _, err = run("install", str(world.bundles[B, 2]), "--model", A)  # B's release on line A
    assert code == 2 and err.startswith("refused: WrongModel")
    code, out, _ = run("install", str(world.bundles[A, 2]), "--model", A)
    assert code == 0 and "release 2" in out
    code, out, _ = run("status", "--model", A)
    assert code == 0 and "active: slot" in out and "(release 2): ok" in out
    assert Installer(state / MODELS_DIR / B, HW, read_only=True).active_manifest().release == 1
    code, out, _ = run("rollback", "--model", A)
    assert code == 0 and "release 1" in out
    assert Installer(state / MODELS_DIR / A, HW, read_only=True).active_manifest().release == 1
    assert agent_cli(["status", "--state-dir", str(state), "--model", B, "--hardware-id", HW]) == 0
    assert f"{B} 1.0.1 (release 1): ok" in capsys.readouterr().out


def test_a_rotated_root_applies_to_every_model_line(world, broker, tmp_path):
    """``cuvil-agent trust`` on a multi-model device rotates every line (release key revoked) while the agent
    runs; a release on line B signed by the revoked key is then refused, announced by it or only carried
    in the bundle; a new line and a line a crash left behind take the device's root, never an older one."""
    ring = Keyring(shutil.copytree(world.ring.directory, tmp_path / "keys"))
    old_keys = ring.release_keys()
    ring.revoke(sorted(ring.root.release_keys)[0])
    root2 = tmp_path / "root2.json"
    root2.write_text(json.dumps(ring.root_envelope(2)))
    toml = world.device(tmp_path, "rot", broker)
    cfg = load(toml)
    lines = line_dirs(cfg.state_dir, (A, B))
    settings = broker.settings()
    watcher = Watcher(settings, FLEET)
    agents = AgentThreads()
    agent = agents.add(cfg)
    try:
        watcher.wait(lambda m: m["device"] == "rot" and m.get("models", {}).get(B, {}).get("release") == 1,
                     HANG_S, "the agent's first status")
        assert agent_cli(["trust", "--config", str(toml), "--root", str(root2)]) == 0
        assert {name: root_version(d) for name, d in lines.items()} == {A: 2, B: 2}

        revoked = Publisher(settings, FLEET, old_keys, tmp_path / "pub-old.json", model=B).start()
        revoked.publish(world.bundles[B, 2], canary=100.0, halt_on=0.0)  # announcement by the revoked key
        hit = watcher.wait(lambda m: m.get("model") == B and m.get("error") == "UntrustedKey", HANG_S,
                           "the refused announcement")
        assert hit["what"] == "announcement" and "revoked" in hit["detail"]
        revoked.close()
        fresh = Publisher(settings, FLEET, ring.release_keys(), tmp_path / "pub-new.json", model=B).start()
        fresh.publish(world.bundles[B, 3], canary=100.0, halt_on=0.0)  # bundle still by the revoked key
        failed = watcher.wait(lambda m: m.get("model") == B and m["state"] == "failed", HANG_S, "failure")
        assert failed["error"] == "UntrustedKey" and failed["target_release"] == 3
        assert releases(agent) == {A: 1, B: 1}
        fresh.publish(world.bundle(B, 4, ring, "-new"), canary=100.0, halt_on=0.0)  # the new key: taken
        watcher.wait(lambda m: m.get("model") == B and m["state"] == "active" and m["release"] == 4, HANG_S,
                     "release 4 on B")
        assert releases(agent) == {A: 1, B: 4}
        fresh.close()
    finally:
        agents.close()
        watcher.close()
    assert {name: root_version(d) for name, d in lines.items()} == {A: 2, B: 2}  # the agent kept it

    # a crash cut a rotation short (A at v3, B still at v2): the next start brings B to v3
    ring.revoke(sorted(ring.root.release_keys)[0])
    Installer(lines[A], HW).update_root([ring.root_envelope(3)])
    Agent(cfg).close()
    assert {name: root_version(d) for name, d in lines.items()} == {A: 3, B: 3}
    # a line added to the device takes the device's root (v3), not the config's (v1)
    grown = load(toml)
    Agent(replace(grown, models=(*grown.models, ModelConfig("gamma")))).close()
    assert root_version(Path(cfg.state_dir) / MODELS_DIR / "gamma") == 3
    # a line two versions behind cannot be brought level on the device: refused, not served
    shutil.rmtree(lines[B])
    shutil.copytree(world.templates[B], lines[B])
    with pytest.raises(BrokenChain, match="v1"):
        Agent(cfg)
    assert root_version(lines[B]) == 1 and root_version(lines[A]) == 3
