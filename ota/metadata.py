"""Typed views of signed metadata (root of trust, bundle manifest); unknown fields survive a round trip.

Parsing is pure: a dict in, a frozen dataclass out, or ``FormatError`` naming the bad field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runtime_wasm.loader import WEIGHTS_FILE
from runtime_wasm.spec import is_sha256_hex

from .crypto import key_id
from .errors import FormatError

ROOT_TYPE = "root"
MANIFEST_TYPE = "cuvil-bundle"
MANIFEST_FORMAT = 1
#: names the installer writes itself into a slot; a payload may not take them
RESERVED_NAMES = frozenset({"model.json", "bundle.json"})
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_SEMVER = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.+-]+)?")


def _get(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = d.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise FormatError(f"{what}: field {key!r} missing or not {getattr(kind, '__name__', kind)}")
    return value


def _count(d: Mapping[str, Any], key: str, what: str, minimum: int = 0) -> int:
    value = _get(d, key, int, what)
    if value < minimum:
        raise FormatError(f"{what}: field {key!r} must be >= {minimum}, got {value}")
    return value


def parse_envelope(obj: Any, what: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``{"signed": {...}, "signatures": [{"keyid", "sig"}]}`` -> (signed, [(keyid, sig)])."""
    if not isinstance(obj, Mapping):
        raise FormatError(f"{what}: envelope is not a JSON object")
    signed = _get(obj, "signed", dict, what)
    sigs = []
    for s in _get(obj, "signatures", list, what):
        if not (isinstance(s, Mapping) and isinstance(s.get("keyid"), str) and isinstance(s.get("sig"), str)):
            raise FormatError(f"{what}: a signature entry lacks string 'keyid' and 'sig'")
        sigs.append((s["keyid"], s["sig"]))
    return signed, sigs


def _keys(d: Mapping[str, Any], key: str, what: str) -> dict[str, str]:
    keys = _get(d, key, dict, what)
    for kid, pub in keys.items():
        if not isinstance(pub, str) or key_id(pub) != kid:
            raise FormatError(f"{what}: key id {kid[:16]} is not the sha256 of its public key")
    return dict(keys)


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
        if d.get("type") != ROOT_TYPE:
            raise FormatError(f"{what}: type must be {ROOT_TYPE!r}")
        revoked = _get(d, "revoked", list, what)
        root = cls(version=_count(d, "version", what, 1), root_keys=_keys(d, "root_keys", what),
                   root_threshold=_count(d, "root_threshold", what, 1),
                   release_keys=_keys(d, "release_keys", what),
                   release_threshold=_count(d, "release_threshold", what, 1),
                   revoked=frozenset(str(k) for k in revoked),
                   extra={k: v for k, v in d.items() if k not in _ROOT_FIELDS})
        if root.root_threshold > len(root.root_keys) or root.release_threshold > len(root.release_keys):
            raise FormatError(f"{what}: a threshold exceeds the number of keys it counts")
        if root.revoked & (root.root_keys.keys() | root.release_keys.keys()):
            raise FormatError(f"{what}: a revoked key is still delegated")
        return root

    def to_dict(self) -> dict[str, Any]:
        return {**self.extra, "type": ROOT_TYPE, "version": self.version, "root_keys": dict(self.root_keys),
                "root_threshold": self.root_threshold, "release_keys": dict(self.release_keys),
                "release_threshold": self.release_threshold, "revoked": sorted(self.revoked)}


_ROOT_FIELDS = {"type", "version", "root_keys", "root_threshold", "release_keys", "release_threshold",
                "revoked"}


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
        if d.get("type") != MANIFEST_TYPE or d.get("format") != MANIFEST_FORMAT:
            raise FormatError(f"{what}: want type {MANIFEST_TYPE!r} format {MANIFEST_FORMAT}")
        version = _get(d, "version", str, what)
        if not _SEMVER.fullmatch(version):
            raise FormatError(f"{what}: version {version!r} is not a semantic version")
        targets = _get(d, "targets", dict, what)
        hardware_ids = _strings(targets, "hardware_ids", what)
        if not hardware_ids:
            raise FormatError(f"{what}: targets.hardware_ids must name at least one hardware id")
        files = tuple(_file_entry(f, what) for f in _get(d, "files", list, what))
        names = [f.name for f in files]
        if len(set(names)) != len(names):
            raise FormatError(f"{what}: duplicate payload names")
        spec = _get(d, "spec", dict, what)
        _check_spec_files(spec, files, what)
        manifest = cls(name=_get(d, "name", str, what), version=version,
                       release=_count(d, "release", what, 1),
                       expires=_get(d, "expires", str, what), spec=spec,
                       hardware_ids=hardware_ids, profiles=_strings(targets, "profiles", what),
                       files=files, golden=_get(d, "golden", list, what),
                       quantization=_get(d, "quantization", dict, what),
                       provenance=_get(d, "provenance", dict, what),
                       extra={k: v for k, v in d.items() if k not in _MANIFEST_FIELDS})
        manifest.expires_at  # noqa: B018 - validates the timestamp now, not at first use
        return manifest

    def to_dict(self) -> dict[str, Any]:
        return {**self.extra, "type": MANIFEST_TYPE, "format": MANIFEST_FORMAT, "name": self.name,
                "version": self.version, "release": self.release, "expires": self.expires, "spec": self.spec,
                "targets": {"hardware_ids": list(self.hardware_ids), "profiles": list(self.profiles)},
                "files": [{"name": f.name, "length": f.length, "sha256": f.sha256} for f in self.files],
                "golden": self.golden, "quantization": self.quantization, "provenance": self.provenance}


_MANIFEST_FIELDS = {"type", "format", "name", "version", "release", "expires", "spec", "targets", "files",
                    "golden", "quantization", "provenance"}


def _strings(d: Mapping[str, Any], key: str, what: str) -> tuple[str, ...]:
    items = _get(d, key, list, what)
    if not all(isinstance(x, str) for x in items):
        raise FormatError(f"{what}: {key} must be a list of strings")
    return tuple(items)


def _file_entry(d: Any, what: str) -> FileEntry:
    if not isinstance(d, Mapping):
        raise FormatError(f"{what}: a files entry is not an object")
    name, digest = _get(d, "name", str, what), _get(d, "sha256", str, what)
    if not _SAFE_NAME.fullmatch(name) or name in RESERVED_NAMES:
        raise FormatError(f"{what}: payload name {name!r} is not a plain, unreserved file name")
    if not is_sha256_hex(digest):
        raise FormatError(f"{what}: payload {name!r} has a malformed sha256")
    return FileEntry(name, _count(d, "length", what), digest)


def _check_spec_files(spec: Mapping[str, Any], files: tuple[FileEntry, ...], what: str) -> None:
    """Every file the spec loads is a signed payload with the payload's hash: a variant naming
    ``../a/m.wasm`` or an absolute path would run code no hash of this release covers."""
    by_name = {f.name: f for f in files}
    if WEIGHTS_FILE not in by_name:
        raise FormatError(f"{what}: files must list {WEIGHTS_FILE}")
    variants = spec.get("variants", [])
    if not isinstance(variants, list):
        raise FormatError(f"{what}: spec.variants must be a list")
    for v in variants:
        file = v.get("file") if isinstance(v, Mapping) else None
        entry = by_name.get(file) if isinstance(file, str) and file != WEIGHTS_FILE else None
        if entry is None:
            raise FormatError(f"{what}: spec variant file {file!r} is not a module payload of this bundle")
        if v.get("sha256") != entry.sha256:
            raise FormatError(f"{what}: spec variant {file!r} does not record its payload's sha256")


def parse_time(text: str) -> datetime:
    """ISO 8601 with an explicit offset ("Z" accepted): a naive time would depend on the device's zone."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FormatError(f"not an ISO 8601 time: {text!r}") from None
    if t.tzinfo is None:
        raise FormatError(f"time {text!r} has no UTC offset")
    return t
