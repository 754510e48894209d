"""Discovery that does not depend on broker queues (issue 39, must-show 3): 20,000 devices' retained
registrations and statuses on a real Mosquitto with its default queue limits. A subscription to every
status gets 1,020 of them there; ``fleet.discovery`` reads all 20,000 into the registry and ``fleet status``
reports every one; where a shard holds more than the broker lets through, the census names that shard.
A real agent registers itself at connect.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import paho.mqtt.client as paho
import pytest

from cuvil_edge.fleet.discovery import DiscoveryLimits, discover
from cuvil_edge.fleet.store import DeviceFilter, open_store
from cuvil_edge.testing.broker import LocalBroker
from ota import BrokerSettings
from ota.protocol import Topics, read_registration, registration_payload, registry_shard, status_payload
from ota.transport import MqttClient
from tests.support.fleet import HW, AgentThreads, wait_until

pytestmark = pytest.mark.integration
FLEET = "census"
N_DEVICES = 20_000


def retain(settings: BrokerSettings, messages: Iterable[tuple[str, bytes]]) -> int:
    """Publish retained QoS 1 messages as fast as the broker acknowledges them; how many were acked."""
    acked = [0]
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="test-retain", protocol=paho.MQTTv5)
    client.max_inflight_messages_set(200)
    client.max_queued_messages_set(0)
    client.on_publish = lambda *_a: acked.__setitem__(0, acked[0] + 1)
    client.connect(settings.host, settings.port)
    client.loop_start()
    try:
        infos = [client.publish(t, p, qos=1, retain=True) for t, p in messages]
        for info in infos:
            info.wait_for_publish(60)
    finally:
        client.loop_stop()
        client.disconnect()
    return acked[0]


def device_messages(topics: Topics, devices: Iterable[str], release: int = 1) -> Iterable[tuple[str, bytes]]:
    for d in devices:
        yield topics.registry(d), registration_payload(d, hardware_id=HW, profile="pi4")
        yield topics.status(d), status_payload(d, "active", release=release, hardware_id=HW, profile="pi4")


def wildcard_count(settings: BrokerSettings, topics: Topics) -> int:
    """Statuses one plain subscription to every status gets (the broker's queue decides)."""
    seen: set[str] = set()
    client = MqttClient(settings, "test-wildcard", lambda t, _p, _r: seen.add(t), persistent=False)
    client.subscribe([topics.all_status])
    client.start(wait_s=15)
    try:
        wait_until(lambda: len(seen) >= 1000, "the first thousand retained statuses", 60)
        last = -1
        while last != len(seen):  # until a quarter second brings nothing new
            last = len(seen)
            threading.Event().wait(0.25)
    finally:
        client.close()
    return len(seen)


@pytest.fixture(scope="module")
def default_broker(tmp_path_factory) -> Iterable[LocalBroker]:
    """Mosquitto with its default per-client limits (20 in flight, 1,000 queued) and 20,000 devices."""
    with LocalBroker(tmp_path_factory.mktemp("broker"), queue_limit=None) as b:
        settings = b.settings()
        names = [f"dev{i:05d}" for i in range(N_DEVICES)]
        assert retain(settings, device_messages(Topics(settings.topic_prefix, FLEET), names)) == 2 * N_DEVICES
        yield b


def test_twenty_thousand_retained_statuses_are_all_found(default_broker, tmp_path, host_cli):
    settings = default_broker.settings()
    topics = Topics(settings.topic_prefix, FLEET)
    # what a retained-status subscription sees with the broker's defaults: its queue, not the fleet
    assert wildcard_count(settings, topics) < N_DEVICES // 2

    census = discover(settings, FLEET)
    assert len(census.registered) == N_DEVICES and len(census.statuses) == N_DEVICES
    assert census.complete and census.unreported == [] and census.refused == 0
    assert {s["release"] for s in census.statuses.values()} == {1}
    # every round stayed under the bound: more rounds than 40,000 messages / 1,020
    assert census.rounds >= 2 * N_DEVICES // census.limits.broker_queue

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    common = ("--fleet", FLEET, "--broker", f"{settings.host}:{settings.port}")
    out = host_cli("fleet", "discover", *common, "--store", url)
    assert f"{N_DEVICES} devices registered, {N_DEVICES} statuses read" in out
    with open_store(url) as store:
        assert store.count_by("state", DeviceFilter()) == {"active": N_DEVICES}
    assert f"{N_DEVICES} devices: {N_DEVICES} active" in host_cli("fleet", "status", "--fleet", FLEET,
                                                                  "--store", url, "--limit", "5")
    table = host_cli("fleet", "status", *common, "--state", str(tmp_path / "fleet.json"))
    assert sum(line[:3] == "dev" and line[3:8].isdigit() for line in table.splitlines()) == N_DEVICES
    assert "INCOMPLETE" not in table


def names_in_shard(shard: str, count: int) -> list[str]:
    found, i = [], 0
    while len(found) < count:
        if registry_shard(name := f"crowd{i:06d}") == shard:
            found.append(name)
        i += 1
    return found


def test_a_shard_past_the_broker_bound_is_named(tmp_path):
    """A broker that lets 25 messages through one subscription (20 in flight + 5 queued) and a shard of
    60 devices: the census names that shard as the one it could not fully see, and finds every device of
    every other shard."""
    with LocalBroker(tmp_path / "broker", queue_limit=5) as b:
        settings = b.settings()
        topics = Topics(settings.topic_prefix, FLEET)
        crowd = names_in_shard("7f", 60)
        spread = [f"spread{i:04d}" for i in range(400)]
        spread = [d for d in spread if registry_shard(d) != "7f"]
        retain(settings, device_messages(topics, crowd + spread))
        census = discover(settings, FLEET, DiscoveryLimits(broker_queue=25, round_messages=12))
    assert census.saturated == ["7f"] and not census.complete
    assert set(spread) <= set(census.registered) and set(spread) <= set(census.statuses)
    missing = set(crowd) - set(census.registered)
    assert missing and all(registry_shard(d) == "7f" for d in missing)
    assert "INCOMPLETE: registry shards 7f" in census.describe()


def test_agents_from_before_the_registry_are_still_found(broker):
    """30 devices that only publish statuses (agents from before the registry) beside 10 that register:
    discovery reads all 40 statuses and says how many did not register."""
    settings = broker.settings()
    topics = Topics(settings.topic_prefix, FLEET)
    old = [(topics.status(d), status_payload(d, "active", release=1, hardware_id=HW, profile=""))
           for d in (f"old{i:02d}" for i in range(30))]
    assert retain(settings, [*old, *device_messages(topics, [f"new{i:02d}" for i in range(10)])]) == 50
    census = discover(settings, FLEET)
    assert len(census.statuses) == 40 and len(census.registered) == 10 and census.complete
    assert "30 reported without registering" in census.describe()


def test_an_agent_registers_at_connect(fleet_world, broker, tmp_path):
    """A real agent's registration is retained in its shard and names its hardware; discovery finds it."""
    settings = broker.settings()
    topics = Topics(settings.topic_prefix, FLEET)
    got: dict[str, bytes] = {}
    watch = MqttClient(settings, "test-registry", lambda t, p, _r: got.__setitem__(t, p), persistent=False)
    watch.subscribe([topics.registry_filter(registry_shard("cam-7"))])
    agents = AgentThreads()
    try:
        watch.start(wait_s=15)
        agents.add(fleet_world.agent_config(tmp_path, "cam-7", FLEET, settings))
        payload = wait_until(lambda: got.get(topics.registry("cam-7")), "the agent's registration", 60)
        assert read_registration(payload) | {"time": ""} == {"device": "cam-7", "hardware_id": HW,
                                                               "profile": "", "time": ""}
        wait_until(lambda: discover(settings, FLEET).statuses.get("cam-7"), "the agent's status", 60)
    finally:
        agents.close()
        watch.close()
