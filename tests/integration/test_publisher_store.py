"""The publisher on a fleet store (``Publisher(..., store=...)``, ``--store``), every test on SQLite and on a
real PostgreSQL (``cuvil_edge.testing.postgres``, as test_fleet_store.py): a real Mosquitto, real agents
installing in wasmtime, or the status messages agents send. Waits are bounded; nothing asserts a time.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from cuvil_edge.cli import main as cli_main
from cuvil_edge.fleet.publisher import FleetError, Publisher
from cuvil_edge.fleet.store import DeviceFilter, StoreConflict, open_store
from ota.protocol import Topics, registration_payload, status_payload
from ota.transport import MqttClient
from tests.support.fleet import HW, AgentThreads, Watcher, wait_until

pytestmark = pytest.mark.integration
FLEET = "lab"


def seq_of(payload: bytes) -> int:
    return int(json.loads(payload)["signed"]["seq"])


def send_statuses(broker: Any, statuses: list[dict[str, Any]]) -> None:
    """Publish statuses as agents do: retained, one per device on its status topic."""
    topics = Topics(broker.settings().topic_prefix, FLEET)
    client = MqttClient(broker.settings(), f"fake-devices-{id(statuses)}", lambda *_: None, persistent=False)
    client.start(wait_s=10)
    try:
        for s in statuses:
            client.publish(topics.status(s["device"]), json.dumps(s).encode(), retain=True)
    finally:
        client.close()


def test_staged_rollout_completes_through_the_store(fleet_world, broker, tmp_path, store_url):
    """Six real agents take release 2 in three stages; the store holds the devices, the rollout with every
    outcome and the announcement numbers, written as changes: statuses applied no more often than they
    arrived, each outcome stored once, no state file."""
    settings = broker.settings()
    devices = [f"dev{i}" for i in range(6)]
    agents, watcher = AgentThreads(), Watcher(settings, FLEET)
    applied, saved = [], []
    with open_store(store_url) as store:
        apply, save = store.apply_statuses, store.save_rollout

        def counted_apply(batch: Any) -> int:  # the real store write, counted
            batch = list(batch)
            applied.append(len(batch))
            return apply(batch)

        def counted_save(line: str, record: Any, outcomes: Any = None, rollout_id: Any = None) -> int:
            saved.append(dict(outcomes or {}))
            return save(line, record, outcomes, rollout_id)

        store.apply_statuses, store.save_rollout = counted_apply, counted_save
        pub = Publisher(settings, FLEET, fleet_world.ring.release_keys(), None, store=store)
        try:
            for d in devices:
                agents.add(fleet_world.agent_config(tmp_path, d, FLEET, settings))
            for d in devices:
                watcher.wait_state(d, "active", 1)
            pub.start()
            assert pub.wait_for_devices(6, 30) == 6
            pub.publish(fleet_world.bundles[2], canary=34.0, halt_on=50.0)
            rollout = pub.watch(timeout_s=300, stage_timeout_s=300)
            assert rollout.status == "complete" and rollout.outcomes == dict.fromkeys(devices, "active")
            assert {a.device: a.host.release for a in agents.agents} == dict.fromkeys(devices, 2)
            wait_until(lambda: store.count_by("release", DeviceFilter(line="")) == {2: 6}, "statuses stored")
        finally:
            agents.close()
            pub.close()
            received = len(watcher.messages)
            watcher.close()
        row = store.current_rollout("")
        assert row is not None and row.state == "complete"
        assert row.outcomes == dict.fromkeys(devices, "active")
        assert store.sequence("") == 3  # one announcement per stage: 34%, 50%, 100%
        # O(changes): every status at most once (plus the retained ones at subscribing), each outcome once
        assert sum(applied) <= received + len(devices), (applied, received)
        assert sorted(d for changed in saved for d in changed) == devices
        again = Publisher(settings, FLEET, [], None, store=store)  # a restart reads it back
        assert again.rollout == rollout and set(again.line_devices) == set(devices)
    assert not list(tmp_path.glob("*.json"))


def test_two_publishers_on_one_line_never_reuse_an_announcement_number(fleet_world, broker, store_url):
    """Two publishers, each with its own connection to one store, announce as fast as they can at once:
    every number is used once, and every announcement that went out is the one the store recorded."""
    settings, rounds = broker.settings(), 6
    watcher = Watcher(settings, FLEET)
    stores = [open_store(store_url), open_store(store_url)]
    keys = fleet_world.ring.release_keys()
    pubs = [Publisher(settings, FLEET, keys, None, store=s).start() for s in stores]
    errors: list[BaseException] = []

    def run(pub: Publisher, first: int) -> None:
        try:
            for i in range(rounds):  # a new rollout each time: each publish announces its 100% stage
                pub.publish(fleet_world.bundles[1 + (first + i) % 2], canary=100.0, halt_on=0.0)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(p, n)) for n, p in enumerate(pubs)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors and not any(t.is_alive() for t in threads), errors
        wait_until(lambda: len(watcher.announcements) >= 2 * rounds, "every announcement delivered", 60)
        seqs = sorted(seq_of(p) for p in watcher.announcements)
        assert seqs == list(range(1, 2 * rounds + 1))
        assert stores[0].sequence("") == 2 * rounds
    finally:
        for p in pubs:
            p.close()
        for s in stores:
            s.close()
        watcher.close()


def test_fleet_status_reads_the_store_with_filters_counts_and_pages(broker, store_url, capsys):
    """Statuses as agents send them reach the store through a store-backed publisher; ``fleet status
    --store`` lists them with counts by state and release, filtered and paged, without a broker."""
    statuses = [{"device": f"d{i:02d}", "state": ("active", "failed")[i % 5 == 0], "release": 1 + i % 2,
                 "hardware_id": "hw", "profile": ("pi4", "jetson")[i % 3 == 0],
                 "time": "2026-03-01T10:00:00Z"} for i in range(12)]
    send_statuses(broker, statuses)
    with open_store(store_url) as store:
        pub = Publisher(broker.settings(), FLEET, [], None, store=store).start()
        try:
            assert pub.wait_for_devices(12, 30) == 12
        finally:
            pub.close()

    def status(*extra: str) -> list[str]:
        assert cli_main(["fleet", "status", "--fleet", FLEET, "--broker", "127.0.0.1:1", "--store", store_url,
                         *extra]) == 0
        return capsys.readouterr().out.splitlines()

    out = status("--limit", "5")
    assert out[0] == "12 devices: 9 active, 3 failed; by release: 1: 6, 2: 6"
    listed = [line.split()[:3] for line in out[2:7]]
    assert listed == [[s["device"], s["state"], str(s["release"])] for s in statuses[:5]]
    seen = [row[0] for row in listed]
    while out[-1].startswith("more: --after"):
        out = status("--limit", "5", "--after", out[-1].split("'")[1])
        seen += [line.split()[0] for line in out[2:] if not line.startswith("more:")]
    assert seen == [s["device"] for s in statuses]
    out = status("--release", "2", "--in-state", "active")
    want = [s["device"] for s in statuses if s["release"] == 2 and s["state"] == "active"]
    assert out[0].startswith(f"{len(want)} devices: {len(want)} active;")
    assert [line.split()[0] for line in out[2:]] == want
    out = status("--device-class", "jetson")
    jetsons = [s["device"] for s in statuses if s["profile"] == "jetson"]
    assert [line.split()[0] for line in out[2:]] == jetsons


def test_publishers_of_a_share_group_split_the_status_stream(broker, store_url):
    """Two publishers in one shared-subscription group (``share``): each gets a part of 200 live statuses,
    none twice, and together they write every one to the store (the part a publisher took arrives there
    without a step: a standby only ingests)."""
    statuses = [{"device": f"s{i:03d}", "state": "active", "release": 1, "hardware_id": "hw",
                 "time": "2026-03-01T10:00:00Z"} for i in range(200)]
    with open_store(store_url) as store_a, open_store(store_url) as store_b:
        pubs = [Publisher(broker.settings(), FLEET, [], None, store=s, share="ctl").start()
                for s in (store_a, store_b)]
        try:
            send_statuses(broker, statuses)
            wait_until(lambda: sum(p.mqtt.received for p in pubs) >= 200, "200 statuses between the two", 30)
            wait_until(lambda: store_a.count_by("state", DeviceFilter()) == {"active": 200},
                       "every status in the store", 30)
            assert sum(p.mqtt.received for p in pubs) == 200 and min(p.mqtt.received for p in pubs) > 0
        finally:
            for p in pubs:
                p.close()
    with pytest.raises(FleetError, match="shared subscription group"):
        Publisher(broker.settings(), FLEET, [], None, share="a/b")


def test_a_leader_whose_lease_ran_out_unchallenged_still_publishes(fleet_world, broker, store_url):
    """Leading, then busy past its lease (discovering 50,000 devices takes half a minute): with nobody else
    leading, ``publish`` takes the lease again and announces; a publisher that another took over from is
    still refused."""
    with open_store(store_url) as store, open_store(store_url) as other_store:
        pub = Publisher(broker.settings(), FLEET, fleet_world.ring.release_keys(), None, store=store,
                        lease_s=0.5).start()
        try:
            assert pub.lead(5)
            threading.Event().wait(1.0)  # the lease runs out; nobody takes it
            assert pub.publish(fleet_world.bundles[2], canary=10, halt_on=5).release == 2
            threading.Event().wait(1.0)
            assert other_store.take_lease("", "another-publisher", 30)
            with pytest.raises(StoreConflict, match="another publisher leads"):
                pub.publish(fleet_world.bundles[1], canary=10, halt_on=5)
        finally:
            pub.close()


def test_a_stage_rereads_statuses_its_publisher_never_got(fleet_world, broker, store_url):
    """A member of the publisher's share group takes half of the live statuses and drops them (a controller
    that died holding them): after ``recheck_s`` the stage re-reads its waiting devices' retained statuses
    and completes, where it would otherwise have waited for its timeout."""
    settings = broker.settings()
    topics = Topics(settings.topic_prefix, FLEET)
    devices = [f"r{i:02d}" for i in range(40)]

    def statuses(release: int, **fields: Any) -> list[dict[str, Any]]:
        return [json.loads(status_payload(d, "active", release=release, hardware_id=HW, profile="", **fields))
                for d in devices]

    send_statuses(broker, statuses(1))
    registrar = MqttClient(settings, "registrations", lambda *_: None, persistent=False).start(wait_s=10)
    registrar.publish_many([(topics.registry(d), registration_payload(d, hardware_id=HW)) for d in devices],
                           retain=True)
    registrar.close()
    lost: list[str] = []
    thief = MqttClient(settings, "share-member-that-dies", lambda t, _p, _r: lost.append(t), persistent=False)
    thief.subscribe([f"$share/ctl/{topics.all_status}"])
    with open_store(store_url) as store:
        pub = Publisher(settings, FLEET, fleet_world.ring.release_keys(), None, store=store, share="ctl",
                        lease_s=30).start()
        try:
            thief.start(wait_s=10)
            assert pub.lead(10) and len(pub.discover().statuses) == 40
            pub.recheck_s = 1.0
            rollout = pub.publish(fleet_world.bundles[2], canary=100, halt_on=5, stages=[100.0])
            send_statuses(broker, statuses(2, bundle=rollout.bundle_sha256))
            done = pub.watch(timeout_s=60, stage_timeout_s=45, poll_s=0.1)
        finally:
            thief.close()
            pub.close()
    assert lost, "the share member took none of the statuses: nothing was left to re-read"
    assert done.status == "complete" and sorted(done.outcomes) == devices
    assert set(done.outcomes.values()) == {"active"}


def test_what_stays_refused(broker, store_url, tmp_path, capsys):
    """A publisher needs a state file or a store; a store of another fleet is refused before anything is
    written; ``fleet status --store`` refuses a page cursor it did not print and another fleet's store."""
    with pytest.raises(FleetError, match="a state file or a fleet store"):
        Publisher(broker.settings(), FLEET, [], None)
    with open_store(store_url) as store:
        store.bind_fleet("other")
        with pytest.raises(StoreConflict, match="'other'"):
            Publisher(broker.settings(), FLEET, [], None, store=store)
        assert store.current_rollout("") is None
    base = ["fleet", "status", "--broker", "127.0.0.1:1", "--store", store_url]
    assert cli_main([*base, "--fleet", "other", "--after", "not-a-cursor"]) == 2
    assert "not a query_devices page cursor" in capsys.readouterr().err
    assert cli_main([*base, "--fleet", FLEET]) == 2
    assert "fleet 'other'" in capsys.readouterr().err


def test_standby_takes_over_when_the_leader_stops_mid_rollout(fleet_world, broker, tmp_path, store_url):
    """The leader stops stepping after the canary (no lease release: as a crash); the standby, refused the
    lease until then, takes it once it runs out, carries the stored rollout on to completion with the
    next announcement numbers, and the old leader may neither step nor announce any more."""
    settings, keys = broker.settings(), fleet_world.ring.release_keys()
    devices = [f"fo{i}" for i in range(6)]
    agents, watcher = AgentThreads(), Watcher(settings, FLEET)
    stores = [open_store(store_url), open_store(store_url)]
    leader, standby = (Publisher(settings, FLEET, keys, None, store=s, lease_s=2.0).start() for s in stores)
    took_over: list[bool] = []
    try:
        for d in devices:
            agents.add(fleet_world.agent_config(tmp_path, d, FLEET, settings))
        for d in devices:
            watcher.wait_state(d, "active", 1)
        assert leader.lead(10) and not standby.lead(0)
        waiting = threading.Thread(target=lambda: took_over.append(standby.lead(120)))
        waiting.start()
        assert leader.wait_for_devices(6, 30) == 6
        leader.publish(fleet_world.bundles[2], canary=34.0, halt_on=50.0)
        wait_until(lambda: leader.step(300).stage >= 1, "the leader past its canary", 300)
        leader.mqtt.close()  # the leader stops: no more steps, its lease runs out
        waiting.join(60)
        assert took_over == [True]
        with pytest.raises(StoreConflict, match="another publisher leads"):
            leader.step(300)
        resumed = standby.publish(fleet_world.bundles[2], canary=34.0, halt_on=50.0)
        assert resumed.stage >= 1 and resumed.outcomes  # the stored rollout, not a new one
        rollout = standby.watch(timeout_s=300, stage_timeout_s=300)
        assert rollout.status == "complete" and rollout.outcomes == dict.fromkeys(devices, "active")
        assert {a.device: (a.host.release, a.installer.trust.release_counter) for a in agents.agents} == \
            dict.fromkeys(devices, (2, 2))
        wait_until(lambda: stores[1].count_by("release", DeviceFilter(line="")) == {2: 6}, "statuses stored")
        wait_until(lambda: len(watcher.announcements) == 3, "three announcements", 30)
        assert sorted(seq_of(p) for p in watcher.announcements) == [1, 2, 3] and stores[1].sequence("") == 3
    finally:
        agents.close()
        watcher.close()
        for p in (standby, leader):
            p.close()
        for s in stores:
            s.close()
