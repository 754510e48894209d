"""Every MQTT message a device or the fleet side reads, through the functions that read them: signed
announcements and commands (``ota.protocol.verify_*``, then what the agent does next with them), bundle
chunks (``Topics.parse_chunk`` and ``ChunkTransfer.accept``), statuses as a publisher reads them
(``Publisher._on_status``, ``line_status``, the rollout's outcome), registrations as discovery reads them
(``fleet.discovery``) and telemetry as the collector does (``TelemetryCollector._on``, then
``format_record``).

Input: a JSON object ``{"kind": ..., ...}``. ``announcement`` / ``command``: ``payload`` is the body to
sign; an object is signed by ``KEY``, the release key of the harness's root, so the fuzzer reaches past the
signature into every field check; a string is sent as it is (the envelope and strict JSON themselves).
``status`` / ``registration`` / ``telemetry``: ``topic`` and ``payload`` (a string: the bytes as they are;
anything else: its JSON). ``chunk``: ``messages``, a list of ``{"topic", "payload"}`` delivered in order to
one transfer of ``BUNDLE`` (a string payload is the chunk's bytes as Latin-1). An input that is not JSON is
one raw payload, its first byte picking the kind. The contract: ``VerificationError`` (the message is
refused, typed) and nothing else."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ..engine import Target
from ..mutators import json_mutator

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("ota.protocol", "ota.chunks", "ota.store", "ota.metadata", "ota.crypto", "runtime_wasm.schema",
              "cuvil_edge.fleet.publisher", "cuvil_edge.fleet.telemetry", "cuvil_edge.fleet.discovery")

#: the harness's clock: the seeds' messages are valid at this time, whenever the harness runs
NOW = datetime(2026, 5, 1, tzinfo=timezone.utc)
FLEET, DEVICE, MODEL, HW, PROFILE = "lab", "dev-a", "m1", "generic-x86_64", "raspberry-pi-4"
#: the bundle the chunk messages belong to: 4 chunks, the last one short
BUNDLE = bytes(range(200)) * 2
CHUNK_BYTES = 128
KINDS = ("announcement", "command", "chunk", "status", "telemetry", "registration")


def scratch(prefix: str) -> Path:
    """A directory for the harness's files, in memory where the system has one: the code under test
    fsyncs every state file it writes, which a disk makes the slowest part of an input."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/dev/shm" if Path("/dev/shm").is_dir() else None))


def key() -> Any:
    """The fixed release (and root) key the harness's trust root delegates to."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(bytes(range(32)))


def trust() -> Any:
    """A trust state whose root is signed by ``key()`` and delegates releases to it, threshold 1."""
    from cuvil_edge.signing import public_hex, sign_envelope
    from ota import TrustState, key_id
    from ota.metadata import Root

    k = key()
    ids = {key_id(public_hex(k)): public_hex(k)}
    return TrustState(sign_envelope(Root(1, ids, 1, ids, 1, frozenset()).to_dict(), [k]))


def announcement(**changes: Any) -> Any:
    """The announcement of ``BUNDLE`` that the chunk messages are checked against."""
    from dataclasses import replace

    from ota.protocol import Announcement, format_time, sha256_hex, split_chunks

    chunks = tuple(sha256_hex(c) for c in split_chunks(BUNDLE, CHUNK_BYTES))
    ann = Announcement(FLEET, 7, format_time(NOW), format_time(NOW + timedelta(days=7)), sha256_hex(BUNDLE),
                       len(BUNDLE), 3, "m", "1.0.3", CHUNK_BYTES, chunks, 1 << 32, hardware_ids=(HW,))
    return replace(ann, **changes)


def command(**changes: Any) -> Any:
    """An install command for ``DEVICE`` of the bundle the chunk messages belong to."""
    from dataclasses import replace

    from ota.protocol import Command, format_time

    cmd = Command(FLEET, DEVICE, "install", "0123456789abcdef" * 2, format_time(NOW),
                  format_time(NOW + timedelta(minutes=30)), announcement().bundle_sha256, MODEL)
    return replace(cmd, **changes)


def raw(value: Any) -> bytes:
    """A payload: bytes as they are, a string as its UTF-8, anything else its JSON (NaN and all)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return json.dumps(value).encode()


def signed(payload: Any) -> bytes:
    """An object signed by ``key()`` (the envelope as the publisher sends it); anything else, or an object
    with no canonical form (NaN), as it is, for the parser to refuse."""
    from cuvil_edge.signing import sign_envelope
    from ota.errors import FormatError

    if isinstance(payload, dict):
        try:
            return json.dumps(sign_envelope(payload, [key()])).encode()
        except FormatError:
            pass
    return raw(payload)


def _chunk_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        try:
            return value.encode("latin-1")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")
    return raw(value)


def setup() -> Callable[[bytes], None]:
    from cuvil_edge.fleet.discovery import Census, _keep_registration, _keep_status
    from cuvil_edge.fleet.publisher import Publisher, Rollout, line_status
    from cuvil_edge.fleet.telemetry import TelemetryCollector, format_record
    from ota.chunks import ChunkTransfer
    from ota.config import BrokerSettings, TransferLimits
    from ota.protocol import Topics, verify_announcement, verify_command

    state = trust()
    limits = TransferLimits(window_chunks=2)
    topics = Topics("cuvil", FLEET)
    ann = announcement()
    work = scratch("fuzz-mqtt-")
    broker = BrokerSettings()
    publishers = [Publisher(broker, FLEET, [key()], work / f"publisher{i}.json", model=m)
                  for i, m in enumerate(("", MODEL))]
    rollout = Rollout(ann.bundle_sha256, "m", 3, "1.0.3", CHUNK_BYTES, list(ann.chunks), len(BUNDLE),
                      [10.0, 100.0], 50.0, True, hardware_ids=[HW], profiles=[PROFILE])
    collector = TelemetryCollector(broker, FLEET, on_record=format_record)

    def one(data: bytes) -> None:
        try:
            msg = json.loads(data)
        except (ValueError, RecursionError):  # not the harness's framing: the first byte picks the kind
            msg = {"kind": KINDS[data[0] % len(KINDS)], "payload": data[1:]} if data else {}
        if not isinstance(msg, dict) or msg.get("kind") not in KINDS:
            return
        kind, payload = msg["kind"], msg.get("payload")
        if kind == "announcement":
            a = verify_announcement(signed(payload), state, FLEET, NOW, limits)
            a.selects(DEVICE)
            a.check_target(HW, PROFILE)
            ChunkTransfer(work / "announced", a, limits).wanted()
        elif kind == "command":
            verify_command(signed(payload), state, FLEET, DEVICE, NOW, limits)
        elif kind == "chunk":
            transfer = ChunkTransfer(work / "transfer", ann, limits)
            try:
                messages = msg.get("messages")
                for m in messages if isinstance(messages, list) else []:
                    topic = m.get("topic") if isinstance(m, dict) else None
                    chunk = topics.parse_chunk(topic) if isinstance(topic, str) else None
                    if chunk is not None and chunk[0] == ann.bundle_sha256:
                        transfer.accept(chunk[1], _chunk_bytes(m.get("payload")))
            finally:
                transfer.discard()
        elif kind == "status":
            topic = msg.get("topic") if isinstance(msg.get("topic"), str) else topics.status(DEVICE)
            for p in publishers:
                p.state["devices"] = {}
                p._on_status(topic, raw(payload), False)
                for status in p.devices.values():
                    line_status(status, MODEL)
                for status in p.line_devices.values():
                    p._outcome(rollout, status)
                p.targeted(rollout)
        elif kind == "registration":
            topic = msg.get("topic") if isinstance(msg.get("topic"), str) else topics.registry(DEVICE)
            census = Census()
            _keep_registration(census, topics, topic, raw(payload))
            for device in census.registered:
                _keep_status(census, topics, topics.status(device), raw(payload))
            census.describe()
        else:
            topic = msg.get("topic") if isinstance(msg.get("topic"), str) else topics.telemetry(DEVICE)
            collector.devices.clear()
            collector._on(topic, raw(payload), False)

    return one


def seeds() -> list[bytes]:
    """One of each message as the project's own code writes it (the publisher's announcement and
    command bodies, the agent's status and telemetry, the publisher's chunk topics)."""
    from ota.protocol import (
        TelemetryRecord,
        Topics,
        format_time,
        registration_payload,
        split_chunks,
        status_payload,
    )

    topics = Topics("cuvil", FLEET)
    ann = announcement()
    cmd = command()
    parts = split_chunks(BUNDLE, CHUNK_BYTES)
    in_order = [{"topic": topics.chunk(ann.bundle_sha256, i), "payload": c.decode("latin-1")}
                for i, c in enumerate(parts)]
    summary = {"state": "active", "release": 3, "transfer": {"have": 2, "total": 4},
               "models": {"m": {"release": 3, "version": "1.0.3", "variant": "simd128", "submitted": 9,
                                "completed": 8, "shed": 0, "queue_full": 1, "stale": 0,
                                "latency_ms": {"p50": 1.5, "p95": 3.0, "p99": None, "count": 8}}},
               "telemetry": {"queued": 0, "dropped": 0}}
    records = [TelemetryRecord(DEVICE, "00ff00ff00ff00ff", 5, format_time(NOW), "summary", summary),
               TelemetryRecord(DEVICE, "00ff00ff00ff00ff", 6, format_time(NOW), "install_failed",
                               {"bundle": ann.bundle_sha256, "error": "HashMismatch"})]
    statuses = [
        status_payload(DEVICE, "active", hardware_id=HW, profile="", release=3),
        status_payload(DEVICE, "failed", hardware_id=HW, profile=PROFILE, release=2,
                       bundle=ann.bundle_sha256, target_release=3, error="SelfTestFailed", reason="x"),
        status_payload(DEVICE, "installing", hardware_id=HW, profile="", model=MODEL, release=2,
                       models={MODEL: {"state": "installing", "release": 2, "bundle": ann.bundle_sha256},
                               "m2": {"state": "active", "release": 5}}),
    ]
    docs: list[dict[str, Any]] = [
        {"kind": "announcement", "payload": ann.to_dict()},
        {"kind": "announcement", "payload": announcement(url="https://cdn.example/b.cvb", halted=True,
                                                          profiles=(PROFILE,)).to_dict()},
        {"kind": "command", "payload": cmd.to_dict()},
        {"kind": "command", "payload": {**cmd.to_dict(), "action": "rollback", "bundle_sha256": "",
                                        "model": ""}},
        {"kind": "chunk", "messages": in_order},
        {"kind": "chunk", "messages": [in_order[1], in_order[0], in_order[0], in_order[3], in_order[2]]},
        *({"kind": "status", "topic": topics.status(DEVICE), "payload": json.loads(s)} for s in statuses),
        *({"kind": "telemetry", "topic": topics.telemetry(DEVICE), "payload": json.loads(r.to_bytes())}
          for r in records),
        {"kind": "registration", "topic": topics.registry(DEVICE),
         "payload": json.loads(registration_payload(DEVICE, hardware_id=HW, profile=PROFILE))},
    ]
    return [json.dumps(d, sort_keys=True).encode() for d in docs]


def target() -> Target:
    from ota.errors import VerificationError

    return Target("mqtt_messages", "device", setup, (VerificationError,), INSTRUMENT, json_mutator)
