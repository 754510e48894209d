"""Telemetry through a real Mosquitto on 127.0.0.1 that is stopped and started again on the same port:
records pile up on the device's disk while the broker is away, within the bound, and arrive in order,
none lost, when it returns; past the bound the oldest are dropped, counted, reported and scraped.

Every wait is a bounded loop on a condition; the timeouts only guard against hangs.
"""

from __future__ import annotations

import shutil
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cuvil_agent.agent import Agent
from cuvil_agent.config import AgentConfig, HttpSettings, TelemetrySettings
from cuvil_agent.telemetry import SEGMENT_SUFFIX
from cuvil_edge.fleet.publisher import Publisher
from cuvil_edge.fleet.telemetry import DeviceTelemetry, TelemetryCollector
from cuvil_edge.testing.broker import LocalBroker
from runtime_wasm.counts import SERVING_COUNTS
from tests.support.fleet import TEST_LIMITS, AgentThreads, FleetWorld

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not shutil.which("mosquitto"), reason="mosquitto not installed")]
FLEET = "tele"
HANG_S = 90.0  # hang guard only: the CI machine is loaded


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> FleetWorld:
    return FleetWorld(tmp_path_factory.mktemp("tele-world"))


def device_config(world: FleetWorld, tmp_path: Path, broker: LocalBroker, interval_s: float = 0.0,
                  max_events: int = 1000, http: bool = False) -> AgentConfig:
    cfg = world.agent_config(tmp_path, "dev0", FLEET, broker.settings())
    return replace(cfg, telemetry_interval_s=interval_s, http=HttpSettings(port=0) if http else None,
                   telemetry=TelemetrySettings(max_events=max_events, retry_s=0.2, publish_timeout_s=5.0))


def wait_until(pred, what: str, timeout_s: float = HANG_S) -> None:
    """Poll a condition the test cannot be notified of (the agent's own state), in bounded steps."""
    end, tick = time.monotonic() + timeout_s, threading.Event()
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        tick.wait(0.05)


def dev0(devices: dict[str, DeviceTelemetry]) -> DeviceTelemetry | None:
    return devices.get("dev0")


def received_through(collector: TelemetryCollector, seq: int) -> None:
    collector.wait(lambda d: dev0(d) is not None and dev0(d).last_seq >= seq, HANG_S, f"dev0 seq {seq}")


def queued_on_disk(agent: Agent) -> int:
    return sum(p.stat().st_size for p in agent.telemetry.queue.dir.glob(f"*{SEGMENT_SUFFIX}"))


# -- 1. broker away: summaries pile up on disk and all arrive, in order, when it is back -------------------
def test_records_queued_during_an_outage_arrive_in_order(world, broker, tmp_path):
    cfg = device_config(world, tmp_path, broker, interval_s=0.2)
    with TelemetryCollector(broker.settings(), FLEET, limits=TEST_LIMITS).start() as collector:
        agents = AgentThreads()
        try:
            agent = agents.add(cfg)
            received_through(collector, 1)  # online: sent as they happen
            broker.stop()
            wait_until(lambda: not agent.mqtt.connected, "the agent to notice the outage")
            wait_until(lambda: agent.telemetry.stats()["queued"] >= 10, "summaries to pile up")
            assert queued_on_disk(agent) > 0, "queued records must be on disk, not only in memory"
            last_offline = agent.telemetry.stats()["next_seq"] - 1
            broker.start()
            received_through(collector, last_offline)
            stats = agent.telemetry.stats()
        finally:
            agents.close()
        d = collector.devices["dev0"]
        got = [r.seq for r in d.records]
    assert got == list(range(got[-1] + 1)), "every record, from the first, exactly once and in order"
    assert d.gaps == [] and stats["dropped"] == 0
    events = [r.event for r in d.records]
    assert events.count("summary") >= 10 and "update_state" in events
    summary = next(r for r in reversed(d.records) if r.event == "summary")
    assert summary.data["telemetry"]["dropped"] == 0 and summary.data["state"] == "active"
    assert summary.data["models"], "the summary carries the served model's counters"
    for counts in summary.data["models"].values():  # every count of the telemetry vocabulary, by its key
        assert {c.key for c in SERVING_COUNTS} <= counts.keys()
        assert counts["completed"] <= counts["submitted"] and counts["queue_depth"] >= 0


# -- 2. past the bound: the oldest are dropped, counted in the next summary and on /metrics ---------------
def test_past_the_bound_the_oldest_are_dropped_and_counted(world, broker, tmp_path):
    cfg = device_config(world, tmp_path, broker, max_events=5, http=True)
    pub = Publisher(broker.settings(), FLEET, world.ring.release_keys(), tmp_path / "fleet.json",
                    limits=TEST_LIMITS).start()
    with TelemetryCollector(broker.settings(), FLEET, limits=TEST_LIMITS).start() as collector:
        agents = AgentThreads()
        try:
            agent = agents.add(cfg)
            collector.wait(lambda d: dev0(d) is not None, HANG_S, "the first record (update_state)")
            first = collector.devices["dev0"].last_seq
            broker.stop()
            wait_until(lambda: not agent.mqtt.connected, "the agent to notice the outage")
            offline = [agent.telemetry.emit("serving_error", model="m", error="WorkerCrashed", total=i)
                       for i in range(12)]
            assert offline == list(range(first + 1, first + 13))
            stats = agent.telemetry.stats()
            assert (stats["queued"], stats["dropped"]) == (5, 7), "the bound holds while offline"
            broker.start()
            pub.mqtt.wait_connected(HANG_S)
            received_through(collector, offline[-1])
            pub.command("dev0", "report")  # the operator asks: the summary names the drops
            collector.wait(lambda d: dev0(d).summary is not None, HANG_S, "a summary")
            host, port = agent.http.address
            metrics = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30).read().decode()
        finally:
            agents.close()
            pub.close()
    d = collector.devices["dev0"]
    got = [r.seq for r in d.records if first < r.seq <= offline[-1]]
    assert got == offline[-5:], "the newest five arrive, in order"
    assert d.gaps == [(offline[0], offline[6])] and d.missing == 7
    assert d.summary.data["telemetry"]["dropped"] == 7
    assert "cuvil_telemetry_dropped_total 7.0" in metrics.splitlines()


# -- 3. an agent restart while offline keeps the queue and its numbering ------------------------------------
def test_agent_restart_while_offline_keeps_the_queue(world, broker, tmp_path):
    cfg = device_config(world, tmp_path, broker)
    with TelemetryCollector(broker.settings(), FLEET, limits=TEST_LIMITS).start() as collector:
        agents = AgentThreads()
        agent = agents.add(cfg)
        collector.wait(lambda d: dev0(d) is not None, HANG_S, "the first record")
        broker.stop()
        wait_until(lambda: not agent.mqtt.connected, "the agent to notice the outage")
        before = [agent.telemetry.emit("deadline_kill", model="m", count=1, total=i) for i in range(4)]
        agents.close()  # graceful stop while offline: nothing could be sent
        assert queued_on_disk(agent) > 0
        agents = AgentThreads()
        try:
            again = agents.add(cfg)
            assert again.telemetry.stats()["queued"] >= 4, "the restarted agent found the queue"
            after = [again.telemetry.emit("deadline_kill", model="m", count=1, total=i) for i in range(2)]
            assert after[0] > before[-1], "numbering continues after the restart"
            broker.start()
            received_through(collector, after[-1])
        finally:
            agents.close()
        d = collector.devices["dev0"]
    got = [r.seq for r in d.records]
    assert got == list(range(got[-1] + 1)) and d.gaps == []
    assert set(before + after) <= set(got)


# -- the operator's command line --------------------------------------------------------------------------
def test_cli_prints_the_fleet_telemetry(world, broker, tmp_path, host_cli):
    address = f"127.0.0.1:{broker.port}"
    cli = ("fleet", "telemetry", "--fleet", FLEET, "--broker", address, "--client-id", "cli-test")
    host_cli(*cli, "--duration-s", "0.1")  # makes the CLI's persistent session, which queues for it
    agents = AgentThreads()
    try:
        agent = agents.add(device_config(world, tmp_path, broker))
        wait_until(lambda: agent.telemetry.stats()["sent"] >= 1, "the first record to be sent")
        agent.telemetry.emit("install_failed", bundle="ab" * 32, error="HashMismatch", reason="test")
        wait_until(lambda: agent.telemetry.stats()["queued"] == 0, "the queue to drain")
    finally:
        agents.close()
    out = host_cli(*cli, "--count", "2", "--duration-s", str(HANG_S))
    lines = out.splitlines()
    assert "dev0 #0 update_state" in lines[0] and "state=active" in lines[0]
    assert "dev0 #1 install_failed" in lines[1] and "error=HashMismatch" in lines[1]


# -- the agent's own events: an install walks its states, each one a record --------------------------------
def _installed_and_back_to_active(records) -> bool:
    """The last update_state event can trail install_finished: wait for both, not the first alone."""
    states = [r.data["state"] for r in records if r.event == "update_state"]
    return any(r.event == "install_finished" for r in records) and "downloading" in states and \
        states[-1] == "active"


def update_metrics(agent: Agent) -> dict[str, tuple[str, float, float]]:
    """/metrics of the agent, parsed: model -> (its update state, chunks verified, chunks)."""
    host, port = agent.http.address
    body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30).read().decode()
    samples = [s for f in text_string_to_metric_families(body) for s in f.samples]
    value = {(s.name, s.labels.get("model")): s.value for s in samples}
    return {s.labels["model"]: (s.labels["state"], value["cuvil_transfer_chunks_verified", s.labels["model"]],
                                value["cuvil_transfer_chunks", s.labels["model"]])
            for s in samples if s.name == "cuvil_update_state" and s.value == 1}


def test_an_install_is_reported_event_by_event(world, broker, tmp_path):
    """Telemetry events for each step, and /metrics scraped from inside the install's self-test (the
    precompile step): the line in "self-test" with every chunk of its download verified; before and after
    the install, "active" with no download."""
    cfg = device_config(world, tmp_path, broker, http=True)
    pub = Publisher(broker.settings(), FLEET, world.ring.release_keys(), tmp_path / "fleet.json",
                    limits=TEST_LIMITS).start()
    agent: Agent | None = None
    during: list[dict[str, tuple[str, float, float]]] = []

    def scrape_in_self_test(step: str) -> None:
        if step == "precompiled" and agent is not None and agent.state == "self-test" and not during:
            during.append(update_metrics(agent))

    with TelemetryCollector(broker.settings(), FLEET, limits=TEST_LIMITS).start() as collector:
        agents = AgentThreads()
        try:
            agent = agents.add(cfg, on_step=scrape_in_self_test)
            pub.wait_for_devices(1, HANG_S)
            before = update_metrics(agent)
            pub.publish(world.bundles[2], canary=100.0, halt_on=0.0, chunk_bytes=1024)
            collector.wait(lambda d: _installed_and_back_to_active(dev0(d).records), HANG_S,
                           "install_finished and the update state back to active")
            after = update_metrics(agent)
        finally:
            agents.close()
            pub.close()
        records = collector.records("dev0")
    events = [r.event for r in records]
    states = [r.data["state"] for r in records if r.event == "update_state"]
    assert events.index("install_started") < events.index("install_finished")
    assert states[0] == states[-1] == "active" and {"downloading", "verifying", "self-test"} <= set(states)
    started, finished = (records[events.index(e)] for e in ("install_started", "install_finished"))
    assert finished.data["release"] == 2 and finished.data["bundle"] == started.data["bundle"]
    # one line, labelled like the serving metrics: by the name of the model served (release 1's, then 2's)
    assert [list(m.values()) for m in (before, after)] == [[("active", 0, 0)]] * 2, (before, after)
    assert len(during) == 1 and len(during[0]) == 1, during
    state, have, total = next(iter(during[0].values()))
    chunks = -(-world.bundles[2].stat().st_size // 1024)
    assert (state, have, total) == ("self-test", chunks, chunks)  # all verified before the install
