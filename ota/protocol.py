"""The fleet protocol over MQTT: topic names, signed announcements and commands, chunking, rollout buckets.

Pure functions and frozen dataclasses, no I/O (like ``ota.trust``): the agent and the host publisher
both build on them, and docs/PROTOCOL.md describes the same things for people. Everything a device
acts on is signed by the release keys of its trusted root; statuses and telemetry are not signed
(the broker's ACL says which device may write them).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

from runtime_wasm import schema
from runtime_wasm.counts import SERVING_COUNTS
from runtime_wasm.schema import Optional
from runtime_wasm.spec import is_sha256_hex

from .config import TransferLimits, check_name
from .crypto import parse_json
from .errors import BadName, ExpiredMetadata, FormatError, LengthMismatch, UnauthorizedMessage
from .metadata import parse_envelope, parse_time, time_text
from .parse import parse_decimal
from .trust import TrustState, check_signatures, check_target

ANNOUNCE_TYPE = "cuvil-announce"
COMMAND_TYPE = "cuvil-command"
TELEMETRY_TYPE = "cuvil-telemetry"
PROTOCOL_FORMAT = 1
ACTIONS = ("install", "rollback", "report")
#: states an agent reports on its status topic, in the order an install walks them
STATES = ("idle", "downloading", "verifying", "installing", "self-test", "active", "rolled_back", "failed",
          "unhealthy", "offline")
#: what a device says on its telemetry topic: ``summary`` every ``telemetry_interval_s``, the rest as they
#: happen; a receiver keeps records with names it does not know (a newer agent), so the list may grow
TELEMETRY_EVENTS = ("summary", "install_started", "install_finished", "install_failed", "rolled_back",
                    "update_state", "serving_error", "deadline_kill", "worker_restart", "thermal")
MAX_TELEMETRY_BYTES = 256 << 10  # one record, as published; receivers refuse larger ones
BUCKETS = 1 << 32  # a device's rollout bucket is in [0, BUCKETS)
_NONCE = re.compile(r"[0-9a-f]{16,64}")
URL_SCHEMES = ("http", "https")
MAX_URL_CHARS = 2048
#: the device registry's topics are split into this many shards (``registry_shard``), so a controller can
#: read every retained registration a few shards at a time, each read under a broker's per-client queue
#: (Mosquitto's default lets 1,020 retained messages through one subscription; 256 shards of a 200k-device
#: fleet hold ~780 each)
REGISTRY_SHARDS = 256


def check_url(url: str, what: str = "bundle URL") -> str:
    """An http(s) URL with a host and nothing a parser could read two ways (whitespace, control
    characters); any other scheme (``file:``, ``ftp:``) could make a device read what the signer never
    meant. ``FormatError`` otherwise."""
    if not isinstance(url, str) or not 0 < len(url) <= MAX_URL_CHARS \
            or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise FormatError(f"{what}: want an http(s) URL of at most {MAX_URL_CHARS} printable characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a malformed port
    except ValueError as exc:
        raise FormatError(f"{what} {url!r}: {exc}") from None
    if parts.scheme not in URL_SCHEMES or not parts.hostname:
        raise FormatError(f"{what} {url!r}: only http and https URLs with a host are accepted")
    return url


def _level(what: str, allow_empty: bool = False) -> schema.Reader:
    """A fleet, device or model name: one MQTT topic level (``check_name``); empty where that means
    "none"."""
    as_text = schema.text(64, min_len=0 if allow_empty else 1)

    def read_level(value: Any, path: str) -> str:
        if as_text(value, path) == "":
            return value
        try:
            return check_name(value, what)
        except BadName as exc:
            raise schema.Invalid(path, str(exc)) from None

    return read_level


def any_json(value: Any, path: str) -> Any:
    """A value kept as it came (free-form data of strict JSON, whose depth ``parse_json`` bounds)."""
    return value


_TEXT = schema.text(256)
#: chunk hashes an announcement may list: more would not fit under ``OtaConfig.max_manifest_bytes``
MAX_CHUNKS = 1 << 20
#: the fields an announcement carries (docs/PROTOCOL.md); a newer publisher's extra fields are kept
ANNOUNCEMENT_SCHEMA = schema.record({
    "type": schema.one_of(ANNOUNCE_TYPE), "format": schema.one_of(PROTOCOL_FORMAT),
    "fleet": _level("fleet"), "seq": schema.integer(), "issued": time_text, "expires": time_text,
    "bundle_sha256": schema.sha256(), "bundle_length": schema.integer(), "release": schema.integer(),
    "name": _TEXT, "version": _TEXT, "chunk_bytes": schema.integer(1),
    "chunks": schema.array(schema.sha256(), MAX_CHUNKS, 1), "select_below": schema.integer(0, BUCKETS),
    "halted": Optional(schema.boolean(), False),
    "hardware_ids": Optional(schema.array(_TEXT, 256), ()),
    "profiles": Optional(schema.array(_TEXT, 256), ()),
    "url": Optional(schema.text(MAX_URL_CHARS), ""),
})


@dataclass(frozen=True)
class Topics:
    """``<prefix>/<fleet>/...``: a device reads its fleet's release, bundle chunks and its own command
    topic, and writes only its own status and telemetry (see ``device_acl``)."""

    prefix: str
    fleet: str

    def __post_init__(self) -> None:
        check_name(self.prefix, "topic prefix")
        check_name(self.fleet, "fleet")

    @property
    def base(self) -> str:
        return f"{self.prefix}/{self.fleet}"

    @property
    def release(self) -> str:
        return f"{self.base}/release"

    def model_release(self, model: str) -> str:
        """One model line's release topic on a multi-model device; its announcements must name ``model``
        (signed), so a release cannot be moved to another line's topic."""
        return f"{self.release}/{check_name(model, 'model name')}"

    def chunk(self, bundle_sha256: str, index: int) -> str:
        return f"{self.base}/bundle/{bundle_sha256}/{index}"

    def parse_chunk(self, topic: str) -> tuple[str, int] | None:
        head = f"{self.base}/bundle/"
        if not topic.startswith(head):
            return None
        sha, _, index = topic[len(head):].partition("/")
        return (sha, n) if is_sha256_hex(sha) and (n := parse_decimal(index)) is not None else None

    def command(self, device: str) -> str:
        return f"{self.base}/cmd/{check_name(device, 'device id')}"

    def status(self, device: str) -> str:
        return f"{self.base}/status/{check_name(device, 'device id')}"

    def telemetry(self, device: str) -> str:
        return f"{self.base}/telemetry/{check_name(device, 'device id')}"

    def registry(self, device: str) -> str:
        """Where a device registers (retained, at every connect): sharded, see ``REGISTRY_SHARDS``."""
        return f"{self.base}/registry/{registry_shard(device)}/{check_name(device, 'device id')}"

    def registry_filter(self, shard: str) -> str:
        """The filter for one shard's registrations (``shard``: two hex digits)."""
        return f"{self.base}/registry/{shard}/+"

    def parse_registry(self, topic: str) -> tuple[str, str] | None:
        """(shard, device) of a registration topic; None for any other topic."""
        head = f"{self.base}/registry/"
        shard, _, device = topic[len(head):].partition("/") if topic.startswith(head) else ("", "", "")
        return (shard, device) if device and "/" not in device and registry_shard(device) == shard else None

    def status_device(self, topic: str) -> str | None:
        """The device of a status topic; None for any other topic."""
        head, _, device = topic.rpartition("/")
        return device if head == f"{self.base}/status" and device else None

    @property
    def all_status(self) -> str:
        return f"{self.base}/status/+"

    @property
    def all_telemetry(self) -> str:
        return f"{self.base}/telemetry/+"

    def device_acl(self, username: str, device: str) -> list[str]:
        """Mosquitto ``acl_file`` lines for one device account: least privilege, per fleet."""
        return [f"user {username}", f"topic read {self.release}", f"topic read {self.release}/+",
                f"topic read {self.base}/bundle/#",
                f"topic read {self.command(device)}", f"topic write {self.status(device)}",
                f"topic write {self.telemetry(device)}", f"topic write {self.registry(device)}"]

    def publisher_acl(self, username: str) -> list[str]:
        return [f"user {username}", f"topic readwrite {self.base}/#"]


def split_chunks(data: bytes, chunk_bytes: int) -> list[bytes]:
    return [data[i:i + chunk_bytes] for i in range(0, len(data), chunk_bytes)] or [b""]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def registry_shard(device: str) -> str:
    """A device's registry shard: two hex digits of its name's hash, so shards fill evenly."""
    return hashlib.sha256(device.encode()).hexdigest()[:2]


def bucket(bundle_sha256: str, device: str) -> int:
    """Where a device falls in a rollout: salted by the bundle so each release canaries other devices."""
    return int.from_bytes(hashlib.sha256(f"{bundle_sha256}:{device}".encode()).digest()[:4], "big")


def format_time(t: datetime) -> str:
    return t.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def status_time(t: datetime) -> str:
    """A status's time, to the microsecond: controllers sharing a status stream (an MQTT shared
    subscription) write one device's statuses in any order, and keep the newest by this time, so two
    statuses of one second (``downloading``, then ``active``) must still order."""
    return t.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Announcement:
    """A release offered to a fleet: the bundle's hash, length and chunk hashes, and who should take it.

    ``seq`` rises with every announcement of the fleet (a replayed older one is refused); devices
    whose ``bucket`` is below ``select_below`` take part in the current rollout stage; ``halted``
    withdraws the offer. ``hardware_ids`` / ``profiles`` repeat the signed manifest's targets so a
    device for another target refuses before downloading; empty ``hardware_ids`` (an older publisher)
    says nothing, empty ``profiles`` means any profile, as in the manifest. ``url`` (optional, signed
    like the rest) is where the same bytes can also be fetched over HTTP(S); they are checked against
    the same chunk hashes, so the URL says where to look, never what to accept.
    """

    fleet: str
    seq: int
    issued: str
    expires: str
    bundle_sha256: str
    bundle_length: int
    release: int
    name: str
    version: str
    chunk_bytes: int
    chunks: tuple[str, ...]
    select_below: int
    halted: bool = False
    hardware_ids: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()
    url: str = ""

    def selects(self, device: str) -> bool:
        return not self.halted and bucket(self.bundle_sha256, device) < self.select_below

    def check_target(self, hardware_id: str, profile: str | None) -> None:
        """``WrongTarget`` for a release this device's full check (``TrustState.verify_release``, which
        stays) would refuse after the download: refused here, no chunk is fetched."""
        check_target(f"release {self.release} is announced", self.hardware_ids, self.profiles, hardware_id,
                     profile)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "chunks": list(self.chunks), "hardware_ids": list(self.hardware_ids),
                "profiles": list(self.profiles), "type": ANNOUNCE_TYPE, "format": PROTOCOL_FORMAT}

    @classmethod
    def from_dict(cls, d: Any) -> Announcement:
        """``FormatError`` for anything but a well-formed announcement (``ANNOUNCEMENT_SCHEMA``) whose chunk
        hashes add up to its length."""
        what = "announcement"
        doc = schema.read(d, ANNOUNCEMENT_SCHEMA, what, FormatError)
        a = cls(**{k: doc[k] for k in cls.__dataclass_fields__})
        if len(a.chunks) != max(1, -(-a.bundle_length // a.chunk_bytes)):
            raise FormatError(f"{what}: {len(a.chunks)} chunk hashes for {a.bundle_length} bytes in "
                              f"{a.chunk_bytes}-byte chunks")
        if a.url != "":
            check_url(a.url, f"{what} url")
        return a


#: a signed command's fields: the nonce is a hex string (a number would never match a stored one)
COMMAND_SCHEMA = schema.record({
    "type": schema.one_of(COMMAND_TYPE), "format": schema.one_of(PROTOCOL_FORMAT),
    "fleet": _level("fleet"), "device": _level("device id"), "action": schema.one_of(*ACTIONS),
    "nonce": schema.text(64, _NONCE.pattern), "issued": time_text, "expires": time_text,
    "bundle_sha256": Optional(schema.text(64, "|[0-9a-f]{64}"), ""),
    "model": Optional(_level("model", allow_empty=True), ""),
})


@dataclass(frozen=True)
class Command:
    """An operator's order to one device; the nonce makes each signed command usable once."""

    fleet: str
    device: str
    action: str
    nonce: str
    issued: str
    expires: str
    bundle_sha256: str = ""  # install: which announced bundle
    model: str = ""  # the model line it is for on a multi-model device; empty: the only (or announcing) one

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "type": COMMAND_TYPE, "format": PROTOCOL_FORMAT}

    @classmethod
    def from_dict(cls, d: Any) -> Command:
        """``FormatError`` for anything but a well-formed command (``COMMAND_SCHEMA``)."""
        doc = schema.read(d, COMMAND_SCHEMA, "command", FormatError)
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__})


def _signed(payload: bytes, trust: TrustState, what: str) -> dict[str, Any]:
    """Parse a bounded JSON envelope and check it carries the release-key threshold of the trusted root."""
    if len(payload) > trust.config.max_manifest_bytes:
        raise LengthMismatch(f"{what}: {len(payload)} bytes, limit {trust.config.max_manifest_bytes}")
    signed, sigs = parse_envelope(parse_json(payload, what), what)
    root = trust.root
    check_signatures(what, signed, sigs, root.release_keys, root.release_threshold, root.revoked)
    return signed


def _check_expiry(expires: str, now: datetime, trust: TrustState, what: str) -> None:
    if now > parse_time(expires) + timedelta(seconds=trust.config.expiry_grace_seconds):
        raise ExpiredMetadata(f"{what} expired at {expires}")


def verify_announcement(payload: bytes, trust: TrustState, fleet: str, now: datetime,
                        limits: TransferLimits) -> Announcement:
    """Signature, format, fleet, expiry and size limits; the caller checks ``seq`` against its store."""
    a = Announcement.from_dict(_signed(payload, trust, "announcement"))
    if a.fleet != fleet:
        raise UnauthorizedMessage(f"announcement for fleet {a.fleet!r} on fleet {fleet!r}'s topic")
    _check_expiry(a.expires, now, trust, f"announcement {a.seq}")
    if a.chunk_bytes > limits.max_chunk_bytes or a.bundle_length > trust.config.max_bundle_bytes:
        raise LengthMismatch(f"announcement {a.seq}: {a.chunk_bytes}-byte chunks / {a.bundle_length}-byte "
                             "bundle exceed this device's limits")
    return a


def verify_command(payload: bytes, trust: TrustState, fleet: str, device: str, now: datetime,
                   limits: TransferLimits) -> Command:
    """Signature, format, addressee and a bounded lifetime; the caller checks the nonce against its store."""
    c = Command.from_dict(_signed(payload, trust, "command"))
    if (c.fleet, c.device) != (fleet, device):
        raise UnauthorizedMessage(f"command for {c.fleet}/{c.device} delivered to {fleet}/{device}")
    _check_expiry(c.expires, now, trust, f"command {c.nonce[:8]}")
    if parse_time(c.expires) - now > timedelta(seconds=limits.max_command_ttl_s):
        raise FormatError(f"command {c.nonce[:8]} is valid for longer than {limits.max_command_ttl_s}s")
    return c


def status_payload(device: str, state: str, **fields: Any) -> bytes:
    """A device's status report: unsigned JSON; the broker ACL makes the topic the device's own."""
    if state not in STATES:
        raise ValueError(f"unknown state {state!r}")
    return json.dumps({"device": device, "state": state, "time": status_time(datetime.now(timezone.utc)),
                       **fields}, sort_keys=True).encode()


def registration_payload(device: str, **fields: Any) -> bytes:
    """A device's registration (``Topics.registry``): that it exists, with its targets; unsigned, like
    status. A controller reads every registration shard by shard, then each device's status by name."""
    return json.dumps({"device": device, "time": format_time(datetime.now(timezone.utc)), **fields},
                      sort_keys=True).encode()


@dataclass(frozen=True)
class TelemetryRecord:
    """One telemetry message. ``seq`` rises by one per record the device queued and survives agent
    restarts, so a receiver sees order, duplicates (a record sent again after a lost PUBACK: at least once)
    and gaps (records dropped at the queue's bound, or torn by a crash); ``stream`` names the numbering
    (a device whose queue was wiped starts a new stream, and its seq over); ``time`` is when the device
    recorded it, not when it was sent, which may be much later. Unsigned, like status (the broker's ACL
    makes the topic the device's own)."""

    device: str
    stream: str
    seq: int
    time: str
    event: str
    data: Mapping[str, Any]

    def to_bytes(self) -> bytes:
        if self.event not in TELEMETRY_EVENTS:
            raise ValueError(f"unknown telemetry event {self.event!r}")
        return json.dumps({"type": TELEMETRY_TYPE, "format": PROTOCOL_FORMAT, "device": self.device,
                           "stream": self.stream, "seq": self.seq, "time": self.time, "event": self.event,
                           "data": dict(self.data)},
                          sort_keys=True, default=str).encode()

    @classmethod
    def from_bytes(cls, payload: bytes) -> TelemetryRecord:
        """``FormatError`` for anything but a well-formed record of this protocol format
        (``TELEMETRY_SCHEMA``; a summary's per-model numbers too, which receivers format)."""
        what = "telemetry"
        if len(payload) > MAX_TELEMETRY_BYTES:
            raise LengthMismatch(f"{what}: {len(payload)} bytes, limit {MAX_TELEMETRY_BYTES}")
        doc = schema.read(parse_json(payload, what), TELEMETRY_SCHEMA, what, FormatError)
        if doc["event"] == "summary":
            schema.read(doc["data"], SUMMARY_DATA_SCHEMA, f"{what} summary", FormatError)
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__})


_COUNT = Optional(schema.nullable(schema.integer()))
#: a telemetry record; ``event`` is any short name (a newer agent's events are kept), ``data`` free-form
TELEMETRY_SCHEMA = schema.record({
    "type": schema.one_of(TELEMETRY_TYPE), "format": schema.one_of(PROTOCOL_FORMAT),
    "device": _level("device id"), "stream": schema.text(64, min_len=1), "seq": schema.integer(),
    "time": time_text, "event": schema.text(64, "[a-z0-9_]+"),
    "data": schema.mapping(_TEXT, any_json, 1024),
})
#: a line's part of a status (``ModelLine.summary``, under ``models`` in a multi-model device's status,
#: and under ``lines`` in its summaries): what publishers compare and dashboards show (a line's other
#: fields are dropped: a publisher merges a line into the device's fields)
_LINE_STATUS = {
    "state": Optional(schema.text(64)), "release": _COUNT, "target_release": _COUNT,
    "bundle": Optional(schema.text(64)), "error": Optional(schema.text(256)),
}
_LINES = Optional(schema.mapping(_TEXT, schema.record(_LINE_STATUS, extra="drop"), 1024))
_MS = Optional(schema.nullable(schema.number()))
_NAME_TEXT = Optional(schema.nullable(_TEXT))
#: what a summary says per model (``cuvil_agent.telemetry.ServingWatch.summary``) and per line, as far as
#: receivers read it (``cuvil_edge.fleet.telemetry.format_record``, the dashboard): the counts of the
#: telemetry vocabulary (``runtime_wasm.counts``; 0 when an older agent did not send one), latencies, health
SUMMARY_DATA_SCHEMA = schema.record({
    "models": Optional(schema.mapping(_TEXT, schema.record({
        "release": _COUNT, "version": _NAME_TEXT, "variant": _NAME_TEXT,
        **{c.key: Optional(schema.integer(), 0) for c in SERVING_COUNTS},
        "latency_ms": Optional(schema.mapping(_TEXT, schema.nullable(schema.number()), 64), {}),
        "variants": Optional(schema.mapping(_TEXT, schema.record({
            "requests": _COUNT, "p50_ms": _MS, "p95_ms": _MS, "p99_ms": _MS}), 64), {}),
        "thermal": Optional(schema.record({"degraded": Optional(schema.boolean(), False)}), {}),
        # rollout gates (``cuvil_edge.fleet.gates``): statistics of a shadow sample of real inputs run
        # through this release and the previous one (``against``), and the self-test on the golden vectors
        "drift": Optional(schema.nullable(schema.record({
            "against": _COUNT, "samples": schema.integer(), "top1_agree": _COUNT, "max_abs": _MS}))),
        "golden": Optional(schema.nullable(schema.record({
            "vectors": schema.integer(), "max_abs": schema.number(0), "atol": _MS,
            "deterministic": Optional(schema.boolean(), False)}))),
    }), 1024), {}),
    "lines": _LINES,
})
#: a device's status as publishers and dashboards read it: unsigned, so every field they use is checked
STATUS_SCHEMA = schema.record({
    "device": _level("device id"), "time": Optional(time_text), "hardware_id": Optional(_TEXT),
    "profile": Optional(_TEXT), "model": Optional(_level("model", allow_empty=True)), "models": _LINES,
    **_LINE_STATUS,
})
MAX_STATUS_BYTES = 256 << 10


#: a registration as controllers read it (``registration_payload``)
REGISTRATION_SCHEMA = schema.record({
    "device": _level("device id"), "time": Optional(time_text), "hardware_id": Optional(_TEXT),
    "profile": Optional(_TEXT)})


def read_registration(payload: bytes) -> dict[str, Any]:
    """A registration payload (``REGISTRATION_SCHEMA``); ``FormatError``/``LengthMismatch`` otherwise."""
    if len(payload) > MAX_STATUS_BYTES:
        raise LengthMismatch(f"registration: {len(payload)} bytes, limit {MAX_STATUS_BYTES}")
    raw = parse_json(payload, "registration")
    doc = schema.read(raw, REGISTRATION_SCHEMA, "registration", FormatError)
    return {k: v for k, v in doc.items() if k in raw}


def read_status(payload: bytes, device: str | None = None) -> dict[str, Any]:
    """A status payload as a publisher reads it (``STATUS_SCHEMA``), with only the fields it carried
    (an absent one stays absent: "no hardware id" means an older agent); ``FormatError`` (or
    ``LengthMismatch`` past ``MAX_STATUS_BYTES``) for anything else, and for a status that names another
    device than ``device`` (the one whose topic it came on, when given)."""
    if len(payload) > MAX_STATUS_BYTES:
        raise LengthMismatch(f"status: {len(payload)} bytes, limit {MAX_STATUS_BYTES}")
    raw = parse_json(payload, "status")
    doc = schema.read(raw, STATUS_SCHEMA, "status", FormatError)
    if device is not None and doc["device"] != device:
        raise FormatError(f"status names device {doc['device']!r}, not {device!r} whose topic it came on")
    if "models" in raw:
        doc["models"] = {name: {k: v for k, v in line.items() if k in raw["models"][name]}
                         for name, line in doc["models"].items()}
    return {k: v for k, v in doc.items() if k in raw}
