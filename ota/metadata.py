"""Typed views of signed metadata (root of trust, bundle manifest); unknown fields survive a round trip.

Parsing is pure: a dict in, a frozen dataclass out, or ``FormatError`` naming the bad field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from runtime_wasm import schema
from runtime_wasm.spec import WEIGHTS_FILE, is_sha256_hex

from .crypto import key_id
from .errors import FormatError

ROOT_TYPE = "root"
MANIFEST_TYPE = "cuvil-bundle"
MANIFEST_FORMAT = 1
#: names the installer writes itself into a slot; a payload may not take them
RESERVED_NAMES = frozenset({"model.json", "bundle.json"})
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_SEMVER = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.+-]+)?")
#: the times a document may carry: far enough from ``datetime``'s ends that converting to UTC or adding a
#: grace period cannot overflow
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9000, 1, 1, tzinfo=timezone.utc)
MAX_SIGNATURES = 64
MAX_KEYS = 256
MAX_FILES = 4096
MAX_TARGETS = 1024
MAX_GOLDEN = 4096


def time_text(value: Any, path: str) -> str:
    """An ISO 8601 time with an offset (``parse_time``), kept as its text."""
    text = _TIME_TEXT(value, path)
    try:
        parse_time(text)
    except FormatError as exc:
        raise schema.Invalid(path, str(exc)) from None
    return text


def _payload_name(value: Any, path: str) -> str:
    """A payload's name in the slot: one plain file name, none the installer writes itself."""
    name = _NAME_TEXT(value, path)
    if not _SAFE_NAME.fullmatch(name) or name in RESERVED_NAMES:
        raise schema.Invalid(path, f"payload name {name!r} is not a plain, unreserved file name")
    return name


def _payload_sha256(value: Any, path: str) -> str:
    if not is_sha256_hex(value):
        raise schema.Invalid(path, f"is a malformed sha256: {str(value)[:80]!r}")
    return value


def _any(value: Any, path: str) -> Any:
    """A value kept as it came: free-form data whose depth ``parse_json`` bounds."""
    return value


_TIME_TEXT = schema.text(64)
_NAME_TEXT = schema.text(128)
_OBJECT = schema.record({})  # any object, its fields kept as they came
_PUBLIC_KEY = schema.text(64, r"[0-9a-f]{64}")
_KEYS = schema.mapping(schema.sha256(), _PUBLIC_KEY, MAX_KEYS)
_SIGNATURE = schema.record({"keyid": schema.text(256), "sig": schema.text(256)})
#: ``{"signed": {...}, "signatures": [{"keyid", "sig"}]}``, the form of every signed document
ENVELOPE_SCHEMA = schema.record({"signed": _OBJECT, "signatures": schema.array(_SIGNATURE, MAX_SIGNATURES)})
_ROOT_FIELDS = {
    "type": schema.one_of(ROOT_TYPE),
    "version": schema.integer(1),
    "root_keys": _KEYS,
    "root_threshold": schema.integer(1),
    "release_keys": _KEYS,
    "release_threshold": schema.integer(1),
    "revoked": schema.array(schema.sha256(), MAX_KEYS),
}
ROOT_SCHEMA = schema.record(_ROOT_FIELDS)
FILE_SCHEMA = schema.record({"name": _payload_name, "length": schema.integer(), "sha256": _payload_sha256},
                            extra="drop")
#: the part of the spec that names payloads (the rest is ``ModelSpec``'s, checked by ``verify_bundle``)
_SPEC_FILES = schema.record({"variants": schema.Optional(schema.array(
    schema.record({"file": schema.Optional(schema.text(255)), "sha256": schema.Optional(schema.text(64))}),
    MAX_FILES), ())})
_STRINGS = schema.array(schema.text(256), MAX_TARGETS)
_MANIFEST_FIELDS = {
    "type": schema.one_of(MANIFEST_TYPE),
    "format": schema.one_of(MANIFEST_FORMAT),
    "name": schema.text(),
    "version": schema.text(256, _SEMVER.pattern),
    "release": schema.integer(1),
    "expires": time_text,
    "spec": _OBJECT,
    "targets": schema.record({"hardware_ids": schema.array(schema.text(256), MAX_TARGETS, 1),
                              "profiles": _STRINGS}),
    "files": schema.array(FILE_SCHEMA, MAX_FILES),
    "golden": schema.array(_any, MAX_GOLDEN),
    "quantization": _OBJECT,
    "provenance": _OBJECT,
}
MANIFEST_SCHEMA = schema.record(_MANIFEST_FIELDS)


def parse_envelope(obj: Any, what: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``{"signed": {...}, "signatures": [{"keyid", "sig"}]}`` -> (signed, [(keyid, sig)])."""
    d = schema.read(obj, ENVELOPE_SCHEMA, f"{what} envelope", FormatError)
    return d["signed"], [(s["keyid"], s["sig"]) for s in d["signatures"]]


def _extra(d: Mapping[str, Any], known: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a schema does not know, kept for the round trip."""
    return {k: v for k, v in d.items() if k not in known}


@dataclass(frozen=True)
class Root:
    """The device's root of trust: who may sign the next root, and who may sign releases."""

    version: int
    root_keys: dict[str, str]  # key id -> Ed25519 public key (hex)
    root_threshold: int
    release_keys: dict[str, str]
    release_threshold: int
    revoked: frozenset[str] = frozenset()
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Root:
        what = "root metadata"
        r = schema.read(d, ROOT_SCHEMA, what, FormatError)
        for keys in (r["root_keys"], r["release_keys"]):
            for kid, pub in keys.items():
                if key_id(pub) != kid:
                    raise FormatError(f"{what}: key id {kid[:16]} is not the sha256 of its public key")
        root = cls(version=r["version"], root_keys=r["root_keys"], root_threshold=r["root_threshold"],
                   release_keys=r["release_keys"], release_threshold=r["release_threshold"],
                   revoked=frozenset(r["revoked"]), extra=_extra(r, _ROOT_FIELDS))
        if root.root_threshold > len(root.root_keys) or root.release_threshold > len(root.release_keys):
            raise FormatError(f"{what}: a threshold exceeds the number of keys it counts")
        if root.revoked & (root.root_keys.keys() | root.release_keys.keys()):
            raise FormatError(f"{what}: a revoked key is still delegated")
        return root

    def to_dict(self) -> dict[str, Any]:
        return {**self.extra, "type": ROOT_TYPE, "version": self.version, "root_keys": dict(self.root_keys),
                "root_threshold": self.root_threshold, "release_keys": dict(self.release_keys),
                "release_threshold": self.release_threshold, "revoked": sorted(self.revoked)}


@dataclass(frozen=True)
class FileEntry:
    """One payload of a bundle: its name in the slot, declared length and sha256, all signed."""

    name: str
    length: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """What a release promises: identity, counter, expiry, target, I/O spec, payload hashes, golden data."""

    name: str
    version: str  # semantic version, for people
    release: int  # monotonic counter, for the rollback check
    expires: str  # ISO 8601 with a UTC offset
    spec: dict[str, Any]  # runtime_wasm.ModelSpec as JSON
    hardware_ids: tuple[str, ...]
    profiles: tuple[str, ...]  # empty: any profile
    files: tuple[FileEntry, ...]
    golden: list[Any]
    quantization: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def expires_at(self) -> datetime:
        return parse_time(self.expires)

    @property
    def payload_bytes(self) -> int:
        return sum(f.length for f in self.files)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Manifest:
        what = "bundle manifest"
        m = schema.read(d, MANIFEST_SCHEMA, what, FormatError)
        files = tuple(FileEntry(**f) for f in m["files"])
        if len({f.name for f in files}) != len(files):
            raise FormatError(f"{what}: duplicate payload names")
        _check_spec_files(m["spec"], files, what)
        targets = m["targets"]
        return cls(name=m["name"], version=m["version"], release=m["release"], expires=m["expires"],
                   spec=m["spec"], hardware_ids=targets["hardware_ids"], profiles=targets["profiles"],
                   files=files, golden=list(m["golden"]), quantization=m["quantization"],
                   provenance=m["provenance"], extra=_extra(m, _MANIFEST_FIELDS))

    def to_dict(self) -> dict[str, Any]:
        return {**self.extra, "type": MANIFEST_TYPE, "format": MANIFEST_FORMAT, "name": self.name,
                "version": self.version, "release": self.release, "expires": self.expires, "spec": self.spec,
                "targets": {"hardware_ids": list(self.hardware_ids), "profiles": list(self.profiles)},
                "files": [{"name": f.name, "length": f.length, "sha256": f.sha256} for f in self.files],
                "golden": self.golden, "quantization": self.quantization, "provenance": self.provenance}


def _check_spec_files(spec: Mapping[str, Any], files: tuple[FileEntry, ...], what: str) -> None:
    """Every file the spec loads is a signed payload with the payload's hash: a variant naming
    ``../a/m.wasm`` or an absolute path would run code no hash of this release covers."""
    by_name = {f.name: f for f in files}
    if WEIGHTS_FILE not in by_name:
        raise FormatError(f"{what}: files must list {WEIGHTS_FILE}")
    for v in schema.read(spec, _SPEC_FILES, f"{what}: spec", FormatError)["variants"]:
        file = v["file"]
        entry = by_name.get(file) if file != WEIGHTS_FILE else None
        if entry is None:
            raise FormatError(f"{what}: spec variant file {file!r} is not a module payload of this bundle")
        if v["sha256"] != entry.sha256:
            raise FormatError(f"{what}: spec variant {file!r} does not record its payload's sha256")


def parse_time(text: str) -> datetime:
    """ISO 8601 with an explicit offset ("Z" accepted): a naive time would depend on the device's zone;
    within ``EARLIEST``..``LATEST``, so no later arithmetic on it overflows."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FormatError(f"not an ISO 8601 time: {text!r:.80}") from None
    if t.tzinfo is None:
        raise FormatError(f"time {text!r} has no UTC offset")
    if not EARLIEST <= t <= LATEST:
        raise FormatError(f"time {text!r} is outside {EARLIEST.year}-{LATEST.year}")
    return t
