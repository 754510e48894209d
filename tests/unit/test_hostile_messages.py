"""Hostile MQTT messages and damaged device-local state files: every regression input the harnesses
``fuzz/targets/mqtt_messages.py``, ``chunk_state.py`` and ``agent_state.py`` found (each escaped as a
TypeError, AttributeError, OverflowError, RecursionError or JSONDecodeError before), one test each,
asserting the typed answer; and the rules a damaged state file follows (a transfer starts over, a store is
rebuilt without reopening command replays, a cursor starts a new stream). Real Ed25519 keys (the
harness's trust root), real files, no broker and no mocks."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from cuvil_agent.agent import Agent
from cuvil_agent.config import AgentConfig
from cuvil_agent.log import JsonLog
from cuvil_agent.state import STORE_FILE, AgentState, describe_state, unused_command
from cuvil_agent.telemetry import CURSOR_FILE, TelemetryQueue
from cuvil_edge.fleet.dashboard import FleetView
from cuvil_edge.fleet.publisher import Publisher
from cuvil_edge.fleet.telemetry import TelemetryCollector
from fuzz.engine import REGRESSIONS
from fuzz.targets.agent_state import DEFAULT
from fuzz.targets.mqtt_messages import (
    BUNDLE,
    DEVICE,
    FLEET,
    HW,
    NOW,
    announcement,
    command,
    key,
    raw,
    signed,
    trust,
)
from ota.chunks import PART_FILE, PROGRESS_FILE, ChunkTransfer
from ota.config import BrokerSettings, TransferLimits
from ota.errors import FormatError, ReplayedCommand
from ota.metadata import parse_time
from ota.protocol import (
    Announcement,
    TelemetryRecord,
    Topics,
    format_time,
    read_status,
    split_chunks,
    status_payload,
    verify_announcement,
    verify_command,
)
from ota.transport import MqttClient

LIMITS = TransferLimits(window_chunks=2)
TOPICS = Topics("cuvil", FLEET)
#: mqtt_messages regression input -> what the reader of its kind says (all ``FormatError``)
MQTT_CASES = {
    "command-issued-not-a-string": "issued: must be a string, got int",
    "command-numeric-nonce": "nonce: must be a string, got int",
    "announcement-bundle-length-400-digits": "bundle_length: must be in .* a 401-digit integer",
    "status-release-a-string": "release: must be an integer, got str",
    "status-line-release-a-string": r"models\.m1\.release: must be an integer, got str",
    "status-deeply-nested": "nests deeper than",
    "telemetry-summary-model-not-an-object": r"models\.m: must be an object, got int",
}
#: chunk_state regression inputs: a progress file that starts the transfer over
CHUNK_CASES = ("progress-have-1e400", "progress-have-not-a-number", "progress-is-the-number-1",
               "progress-not-json")
#: agent_state regression inputs that are a damaged store -> the damage as the rebuild logs it
STORE_CASES = {
    "state-is-a-list": "must be an object, got list",
    "state-not-json": "not valid JSON",
    "state-deeply-nested": "not valid JSON: maximum recursion depth",
    "state-nonce-expiry-a-number": r"nonces\.0123456789abcdef: must be a string, got int",
}
#: every agent_state regression input is a damaged telemetry cursor (the harness writes it as both)
CURSOR_CASES = (*STORE_CASES, "cursor-removed-through-1e400")


def regression(target: str, name: str) -> bytes:
    return (REGRESSIONS / target / name).read_bytes()


@pytest.mark.parametrize(("target", "cases"), [("mqtt_messages", MQTT_CASES), ("chunk_state", CHUNK_CASES),
                                               ("agent_state", CURSOR_CASES)])
def test_every_regression_input_has_its_test(target, cases):
    assert sorted(p.name for p in (REGRESSIONS / target).iterdir()) == sorted(cases)


# -- MQTT messages --------------------------------------------------------------------------------
def read_message(msg: dict) -> object:
    """The message through the function the agent (announcements, commands) or the fleet side (status,
    telemetry) reads it with."""
    payload = msg["payload"]
    if msg["kind"] == "announcement":
        return verify_announcement(signed(payload), trust(), FLEET, NOW, LIMITS)
    if msg["kind"] == "command":
        return verify_command(signed(payload), trust(), FLEET, DEVICE, NOW, LIMITS)
    if msg["kind"] == "status":
        return read_status(raw(payload))
    return TelemetryRecord.from_bytes(raw(payload))


@pytest.mark.parametrize("name", sorted(MQTT_CASES))
def test_mqtt_regression_inputs_are_format_errors(name):
    msg = json.loads(regression("mqtt_messages", name))
    with pytest.raises(FormatError, match=MQTT_CASES[name]):
        read_message(msg)


def test_the_signed_messages_verify_before_their_one_field_is_broken():
    """The regressions break one field of a valid message: without it, each verifies (so the error above
    is that field's, not the signature's or another's)."""
    ann, cmd = announcement(), command()
    assert verify_announcement(signed(ann.to_dict()), trust(), FLEET, NOW, LIMITS) == ann
    assert verify_command(signed(cmd.to_dict()), trust(), FLEET, DEVICE, NOW, LIMITS) == cmd


@pytest.mark.parametrize("bundle_length", [float("inf"), 1e300, -1, True, "400"])
def test_announcement_numbers_are_checked_integers(bundle_length):
    with pytest.raises(FormatError, match="bundle_length"):
        Announcement.from_dict({**announcement().to_dict(), "bundle_length": bundle_length})


def test_a_literal_1e400_in_a_signed_announcement_is_a_format_error():
    text = signed(announcement().to_dict()).replace(b'"bundle_length": 400', b'"bundle_length": 1e400')
    assert b"1e400" in text
    with pytest.raises(FormatError):
        verify_announcement(text, trust(), FLEET, NOW, LIMITS)


def test_publisher_keeps_a_well_formed_status_and_refuses_a_mistyped_one(tmp_path):
    publisher = Publisher(BrokerSettings(), FLEET, [key()], tmp_path / "publisher.json")
    good = status_payload(DEVICE, "active", hardware_id=HW, profile="", release=3)
    publisher._on_status(TOPICS.status(DEVICE), good, False)
    assert publisher.devices[DEVICE]["release"] == 3
    bad = json.loads(regression("mqtt_messages", "status-release-a-string"))
    publisher._on_status(bad["topic"], raw(bad["payload"]), False)
    assert publisher.devices[DEVICE]["release"] == 3  # the refused status replaced nothing


def test_dashboard_keeps_a_well_formed_status_and_drops_a_hostile_one(tmp_path):
    """The dashboard read statuses with json.loads: one nested 5,000 deep raised RecursionError on the
    network thread. It reads them as the publisher does (``read_status``) and drops what fails."""
    view = FleetView(BrokerSettings(), FLEET)
    try:
        good = status_payload(DEVICE, "active", hardware_id=HW, profile="", release=3)
        view._on(TOPICS.status(DEVICE), good, False)
        assert view.statuses[DEVICE]["release"] == 3
        deep = json.loads(regression("mqtt_messages", "status-deeply-nested"))
        view._on(deep["topic"], raw(deep["payload"]), False)
        mistyped = json.loads(regression("mqtt_messages", "status-release-a-string"))
        view._on(mistyped["topic"], raw(mistyped["payload"]), False)
        assert view.statuses[DEVICE]["release"] == 3
    finally:
        view.close()


def test_collector_counts_a_malformed_record_as_refused_and_keeps_a_good_one():
    collector = TelemetryCollector(BrokerSettings(), FLEET)
    bad = json.loads(regression("mqtt_messages", "telemetry-summary-model-not-an-object"))
    collector._on(bad["topic"], raw(bad["payload"]), False)
    assert collector.refused == 1 and collector.devices == {}
    good = TelemetryRecord(DEVICE, "00ff00ff00ff00ff", 6, format_time(NOW), "summary", {"models": {}})
    collector._on(TOPICS.telemetry(DEVICE), good.to_bytes(), False)
    assert collector.refused == 1 and collector.records(DEVICE) == [good]


def test_a_topic_that_is_not_utf8_is_dropped_before_any_handler(caplog):
    """paho decodes the topic when it is read: a broker's invalid UTF-8 was a UnicodeDecodeError, logged as
    a crashed handler; now it is refused by name and the next message is delivered."""
    got: list[tuple[str, bytes]] = []
    client = MqttClient(BrokerSettings(), "hostile-topic", lambda t, p, _r: got.append((t, p)))
    bad = paho.MQTTMessage(topic=b"cuvil/lab/\xff")
    good = paho.MQTTMessage(topic=TOPICS.command(DEVICE).encode())
    bad.payload = good.payload = b"{}"
    client._message(client._client, None, bad)
    client._message(client._client, None, good)
    assert got == [(TOPICS.command(DEVICE), b"{}")]
    assert [r.message for r in caplog.records] == ["message refused: its topic is not UTF-8"]


# -- the chunk transfer's progress file --------------------------------------------------------------
def transfer_dir(tmp_path: Path, progress: bytes, part: bytes | None = None) -> Path:
    d = tmp_path / "transfer"
    d.mkdir()
    (d / PROGRESS_FILE).write_bytes(progress)
    if part is not None:
        (d / PART_FILE).write_bytes(part)
    return d


@pytest.mark.parametrize("name", CHUNK_CASES)
def test_damaged_progress_starts_the_transfer_over(tmp_path, name):
    d = transfer_dir(tmp_path, regression("chunk_state", name), BUNDLE[:256])
    t = ChunkTransfer(d, announcement(), LIMITS)
    assert (t.have, t.offset) == (0, 0) and not t.path.exists()
    assert t.accept(0, split_chunks(BUNDLE, 128)[0])
    assert json.loads((d / PROGRESS_FILE).read_bytes())["have"] == 1  # rewritten whole
    assert describe_state(tmp_path)["transfer"]["have"] == 1


def test_valid_progress_resumes_after_its_verified_prefix(tmp_path):
    ann = announcement()
    progress = json.dumps({"bundle_sha256": ann.bundle_sha256, "chunk_bytes": 128, "have": 2}).encode()
    d = transfer_dir(tmp_path, progress, BUNDLE[:256])
    assert ChunkTransfer(d, ann, LIMITS).have == 2
    assert describe_state(tmp_path)["transfer"] == json.loads(progress)


def test_status_tool_shows_no_transfer_for_damaged_progress(tmp_path):
    transfer_dir(tmp_path, regression("chunk_state", "progress-is-the-number-1"))
    assert describe_state(tmp_path)["transfer"] is None


# -- the agent's store and the telemetry cursor ------------------------------------------------------
@pytest.mark.parametrize("name", sorted(STORE_CASES))
def test_damaged_store_is_rebuilt_from_the_defaults(tmp_path, name, caplog):
    (tmp_path / STORE_FILE).write_bytes(regression("agent_state", name))
    store = AgentState(tmp_path / STORE_FILE, DEFAULT)
    assert store.rebuilt and store.data == DEFAULT
    assert any(re.search(f"state file unreadable, rebuilt: .*{STORE_CASES[name]}", r.message)
               for r in caplog.records)
    assert describe_state(tmp_path) == {"announce_seq": 0, "failed": {}, "transfer": None}


@pytest.mark.parametrize("name", sorted(CURSOR_CASES))
def test_damaged_cursor_starts_a_new_stream(tmp_path, name):
    (tmp_path / CURSOR_FILE).write_bytes(regression("agent_state", name))
    with TelemetryQueue(tmp_path, 4, 4096) as queue:
        assert queue.stats()["next_seq"] == 0 and queue.dropped == 0
        assert json.loads((queue.dir / CURSOR_FILE).read_bytes())["stream"] == queue.stream
        assert queue.append(lambda s: b"x") == 0


def test_a_well_formed_store_and_cursor_are_read_back_as_written(tmp_path):
    store = AgentState(tmp_path / STORE_FILE, DEFAULT)
    store.save(announce_seq=9, nonces={"0123456789abcdef": format_time(NOW)})
    again = AgentState(tmp_path / STORE_FILE, DEFAULT)
    assert not again.rebuilt and again.data["announce_seq"] == 9 and "commands_after" not in again.data
    with TelemetryQueue(tmp_path / "t", 4, 4096) as queue:
        queue.ack(queue.append(lambda s: b"x"))
        stream = queue.stream
    with TelemetryQueue(tmp_path / "t", 4, 4096) as queue:
        assert (queue.stream, queue.stats()["next_seq"]) == (stream, 1)


def test_after_a_rebuilt_store_only_commands_issued_later_are_taken():
    """The used nonces are lost with a damaged store: a command signed before the rebuild may have been
    used already, so it is refused as a possible replay; one issued after is taken, once."""
    store = {**DEFAULT, "commands_after": format_time(NOW)}
    grace = timedelta(seconds=30)
    with pytest.raises(ReplayedCommand, match="issued before"):
        unused_command(store, command(issued=format_time(NOW - timedelta(minutes=1))), NOW, grace)
    later = command(issued=format_time(NOW + timedelta(minutes=1)))
    store["nonces"] = unused_command(store, later, NOW, grace) | {later.nonce: later.expires}
    with pytest.raises(ReplayedCommand, match="already used"):
        unused_command(store, later, NOW, grace)


def test_an_agent_with_a_damaged_store_refuses_commands_signed_before_it_started(tmp_path):
    """The wiring of the rule above: the agent rebuilds a damaged ``agent.json`` with ``commands_after`` set
    to its start, refuses a command issued earlier (it may be a replay of one it already obeyed) and obeys
    one issued later, recording its nonce."""
    (tmp_path / "root.json").write_text(json.dumps(trust().root_envelope))
    state = tmp_path / "state"
    state.mkdir()
    (state / STORE_FILE).write_bytes(regression("agent_state", "state-nonce-expiry-a-number"))
    cfg = AgentConfig(device_id=DEVICE, fleet=FLEET, state_dir=str(state), hardware_id=HW,
                      trust_root=str(tmp_path / "root.json"), broker=BrokerSettings(port=1),  # never connects
                      telemetry_interval_s=0, log_file=str(tmp_path / "agent.log"))
    agent = Agent(cfg, log_sink=JsonLog(DEVICE, cfg.log_file))
    try:
        started = parse_time(agent._device_store.data["commands_after"])
        before, after = (command(action="report", model="", nonce=n * 32,
                                 issued=format_time(started + timedelta(minutes=m)),
                                 expires=format_time(started + timedelta(minutes=10)))
                         for n, m in (("a", -1), ("b", 1)))
        agent._on_command(signed(before.to_dict()))
        agent._on_command(signed(after.to_dict()))
        assert set(json.loads((state / STORE_FILE).read_bytes())["nonces"]) == {after.nonce}
    finally:
        agent.close()
    refused = [json.loads(line) for line in Path(cfg.log_file).read_text().splitlines()]
    assert [e["error"] for e in refused if e["event"] == "refused"] == ["ReplayedCommand"]
