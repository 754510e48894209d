"""The fleet protocol over MQTT: topic names, signed announcements and commands, chunking, rollout buckets.

Pure functions and frozen dataclasses, no I/O (like ``ota.trust``): the agent and the host publisher
both build on them, and docs/PROTOCOL.md describes the same things for people. Everything a device
acts on is signed by the release keys of its trusted root; statuses and telemetry are not signed
(the broker's ACL says which device may write them).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

from runtime_wasm.spec import is_sha256_hex

from .config import TransferLimits, check_name
from .crypto import parse_json
from .errors import ExpiredMetadata, FormatError, LengthMismatch, UnauthorizedMessage
from .metadata import parse_envelope, parse_time
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
                f"topic write {self.telemetry(device)}"]

    def publisher_acl(self, username: str) -> list[str]:
        return [f"user {username}", f"topic readwrite {self.base}/#"]


def split_chunks(data: bytes, chunk_bytes: int) -> list[bytes]:
    return [data[i:i + chunk_bytes] for i in range(0, len(data), chunk_bytes)] or [b""]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bucket(bundle_sha256: str, device: str) -> int:
    """Where a device falls in a rollout: salted by the bundle so each release canaries other devices."""
    return int.from_bytes(hashlib.sha256(f"{bundle_sha256}:{device}".encode()).digest()[:4], "big")


def format_time(t: datetime) -> str:
    return t.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


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
    def from_dict(cls, d: Mapping[str, Any]) -> Announcement:
        what = "announcement"
        _check_type(d, ANNOUNCE_TYPE, what)
        try:
            a = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
        except TypeError as exc:
            raise FormatError(f"{what}: {exc}") from None
        lists = {k: getattr(a, k) for k in ("chunks", "hardware_ids", "profiles")}
        if not all(isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)
                   for v in lists.values()):
            raise FormatError(f"{what}: chunks, hardware_ids and profiles must be lists of strings")
        a = cls(**{**asdict(a), **{k: tuple(v) for k, v in lists.items()}})
        ints = (a.seq, a.bundle_length, a.release, a.chunk_bytes, a.select_below)
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ints) \
                or a.chunk_bytes == 0 or not isinstance(a.halted, bool):
            raise FormatError(f"{what}: counters, lengths and chunk size must be non-negative integers")
        if not (is_sha256_hex(a.bundle_sha256) and all(is_sha256_hex(c) for c in a.chunks)):
            raise FormatError(f"{what}: malformed sha256")
        if len(a.chunks) != max(1, math.ceil(a.bundle_length / a.chunk_bytes)):
            raise FormatError(f"{what}: {len(a.chunks)} chunk hashes for {a.bundle_length} bytes in "
                              f"{a.chunk_bytes}-byte chunks")
        parse_time(a.issued), parse_time(a.expires)
        if a.url != "":
            check_url(a.url, f"{what} url")
        return a


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
    def from_dict(cls, d: Mapping[str, Any]) -> Command:
        what = "command"
        _check_type(d, COMMAND_TYPE, what)
        try:
            c = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
        except TypeError as exc:
            raise FormatError(f"{what}: {exc}") from None
        if c.action not in ACTIONS or not _NONCE.fullmatch(str(c.nonce)):
            raise FormatError(f"{what}: unknown action {c.action!r} or malformed nonce")
        if c.model != "":
            try:
                check_name(c.model, "model")
            except ValueError as exc:
                raise FormatError(f"{what}: {exc}") from None
        parse_time(c.issued), parse_time(c.expires)
        return c


def _check_type(d: Mapping[str, Any], kind: str, what: str) -> None:
    if not isinstance(d, Mapping) or d.get("type") != kind or d.get("format") != PROTOCOL_FORMAT:
        raise FormatError(f"{what}: want type {kind!r} format {PROTOCOL_FORMAT}")


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
    return json.dumps({"device": device, "state": state, "time": format_time(datetime.now(timezone.utc)),
                       **fields}, sort_keys=True).encode()


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
        """``FormatError`` for anything but a well-formed record of this protocol format."""
        what = "telemetry"
        if len(payload) > MAX_TELEMETRY_BYTES:
            raise LengthMismatch(f"{what}: {len(payload)} bytes, limit {MAX_TELEMETRY_BYTES}")
        d = parse_json(payload, what)
        _check_type(d, TELEMETRY_TYPE, what)
        try:
            r = cls(**{k: d[k] for k in cls.__dataclass_fields__})
        except KeyError as exc:
            raise FormatError(f"{what}: missing {exc}") from None
        strings = (r.device, r.stream, r.time, r.event)
        if not (isinstance(r.seq, int) and not isinstance(r.seq, bool) and r.seq >= 0
                and all(isinstance(x, str) for x in strings) and isinstance(r.data, Mapping)):
            raise FormatError(f"{what}: seq must be a non-negative integer, device, stream, time and event "
                              "strings, data an object")
        parse_time(r.time)
        return r
