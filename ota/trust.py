"""The trust state machine: which root is trusted and which release counter was reached. No I/O.

Like python-tuf's ``TrustedMetadataSet``: the caller reads bytes from wherever it likes and hands
parsed JSON in; every check is here; a refusal raises a ``VerificationError`` naming the attack and
leaves the state unchanged; calling it the wrong way raises ``RuntimeError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from runtime_wasm import schema

from .config import OtaConfig
from .crypto import canonical_bytes, signature_valid
from .errors import (
    BadSignature,
    BrokenChain,
    ExpiredMetadata,
    FormatError,
    HashMismatch,
    LengthMismatch,
    RollbackError,
    ThresholdNotMet,
    UntrustedKey,
    WrongTarget,
)
from .metadata import FileEntry, Manifest, Root, parse_envelope

Report = Callable[[str], None]
_COUNTER = schema.integer()
#: ``trust.json``: the trusted root's envelope (verified by ``TrustState`` itself) and the counter
TRUST_SCHEMA = schema.record({"root": schema.record({}), "release_counter": schema.Optional(_COUNTER, 0)})


def check_signatures(role: str, signed: Mapping[str, Any], signatures: Sequence[tuple[str, str]],
                     keys: Mapping[str, str], threshold: int, revoked: Iterable[str] = ()) -> None:
    """At least ``threshold`` distinct delegated keys signed ``signed``; a bad signature is never ignored."""
    payload = canonical_bytes(signed)
    revoked = set(revoked)
    valid: set[str] = set()
    unknown: list[str] = []
    by_revoked: list[str] = []
    for kid, sig in signatures:
        if kid in revoked:
            by_revoked.append(kid)
        elif kid not in keys:
            unknown.append(kid)
        elif signature_valid(keys[kid], sig, payload):
            valid.add(kid)
        else:
            raise BadSignature(f"{role}: signature by key {kid[:12]} does not verify (content altered)")
    if len(valid) >= threshold:
        return
    if by_revoked:
        raise UntrustedKey(f"{role}: signed by revoked key {by_revoked[0][:12]}")
    if unknown:
        raise UntrustedKey(f"{role}: signed by key {unknown[0][:12]}, which is not delegated for {role}")
    detail = "unsigned" if not signatures else f"{len(valid)} of {threshold} required signatures"
    raise ThresholdNotMet(f"{role}: {detail}")


def check_payload(entry: FileEntry, length: int, sha256: str) -> None:
    """A payload matches what the signed manifest declared for it (length first, then hash)."""
    if length != entry.length:
        raise LengthMismatch(f"payload {entry.name!r} is {length} bytes, manifest declares {entry.length}")
    if sha256 != entry.sha256:
        raise HashMismatch(f"payload {entry.name!r} does not match its signed sha256 (tampered or mixed)")


def check_target(what: str, hardware_ids: Sequence[str], profiles: Sequence[str], hardware_id: str,
                 profile: str | None) -> None:
    """The one target rule (bundles and announcements): this device's hardware id is listed and, when
    profiles are listed, its profile too; an empty list names no restriction (a manifest always lists
    hardware ids; an announcement from before targets were announced lists none)."""
    if hardware_ids and hardware_id not in hardware_ids:
        raise WrongTarget(f"{what} for hardware {list(hardware_ids)}, this device is {hardware_id!r}")
    if profiles and profile not in profiles:
        raise WrongTarget(f"{what} for profiles {list(profiles)}, this device is {profile!r}")


def _verify_root(envelope: Any, trusted: Root | None) -> Root:
    """A root signed by a threshold of its own keys and, when rotating, of the trusted root's keys."""
    signed, sigs = parse_envelope(envelope, "root metadata")
    new = Root.from_dict(signed)
    if trusted is not None:
        if new.version <= trusted.version:
            raise RollbackError(f"root version {new.version} is not newer than trusted {trusted.version}")
        if new.version != trusted.version + 1:
            raise BrokenChain(f"root version {new.version} skips versions after {trusted.version}")
        check_signatures(f"root v{new.version} (by root v{trusted.version} keys)", signed, sigs,
                         trusted.root_keys, trusted.root_threshold, trusted.revoked)
    check_signatures(f"root v{new.version}", signed, sigs, new.root_keys, new.root_threshold, new.revoked)
    return new


#: verified manifests ``accept_release`` will take (the latest ones): a state that verifies release after
#: release without installing one (a fuzzer, a refused payload each time) keeps no more than these
MAX_PENDING_VERIFIED = 8

class TrustState:
    """Trusted root + highest installed release counter; updated only by checks that all passed."""

    def __init__(self, root_envelope: Mapping[str, Any], release_counter: int = 0,
                 config: OtaConfig | None = None) -> None:
        self.config = config or OtaConfig()
        self._root = _verify_root(root_envelope, None)
        self._root_envelope = dict(root_envelope)
        self._counter = schema.read(release_counter, _COUNTER, "release counter", FormatError)
        self._verified: dict[int, Manifest] = {}

    @property
    def root(self) -> Root:
        return self._root

    @property
    def root_envelope(self) -> dict[str, Any]:
        return dict(self._root_envelope)

    @property
    def release_counter(self) -> int:
        return self._counter

    # -- root rotation ------------------------------------------------------------------------
    def update_root(self, chain: Sequence[Mapping[str, Any]]) -> Root:
        """Apply root versions N+1, N+2, ... in order; all of them or none (one bad link aborts)."""
        if len(chain) > self.config.max_root_chain_length:
            raise BrokenChain(f"root chain of {len(chain)} links exceeds the cap of "
                              f"{self.config.max_root_chain_length}")
        root, envelope = self._root, self._root_envelope
        for link in chain:
            root, envelope = _verify_root(link, root), dict(link)
        self._root, self._root_envelope = root, envelope
        return root

    # -- releases -----------------------------------------------------------------------------
    def verify_release(self, envelope: Mapping[str, Any], now: datetime, hardware_id: str,
                       profile: str | None = None, report: Report | None = None) -> Manifest:
        """Signatures, format, expiry, rollback and target of a bundle's signed manifest."""
        if now.tzinfo is None:
            raise RuntimeError("verify_release needs an aware datetime (UTC), not a naive one")
        say = report or (lambda _msg: None)
        signed, sigs = parse_envelope(envelope, "bundle manifest")
        root = self._root
        check_signatures("release", signed, sigs, root.release_keys, root.release_threshold, root.revoked)
        say(f"signatures: {len(sigs)} present, threshold {root.release_threshold} of delegated release keys "
            f"(root v{root.version}) met")
        manifest = Manifest.from_dict(signed)
        say(f"manifest format: {manifest.name} {manifest.version}, release {manifest.release}, "
            f"{len(manifest.files)} payloads")
        self._check_expiry(manifest, now)
        say(f"expiry: valid until {manifest.expires}")
        if manifest.release <= self._counter:
            raise RollbackError(f"release {manifest.release} is not newer than the trusted {self._counter}")
        say(f"rollback: release {manifest.release} > trusted counter {self._counter}")
        check_target("bundle is", manifest.hardware_ids, manifest.profiles, hardware_id, profile)
        say(f"target: hardware id {hardware_id!r} is listed")
        total = manifest.payload_bytes
        if total > self.config.max_bundle_bytes:
            raise LengthMismatch(f"payloads declare {total} bytes, limit {self.config.max_bundle_bytes}")
        self._verified[id(manifest)] = manifest
        while len(self._verified) > MAX_PENDING_VERIFIED:  # oldest first: a verify that never installs
            del self._verified[next(iter(self._verified))]
        return manifest

    def recheck_release(self, envelope: Mapping[str, Any], now: datetime) -> Manifest:
        """A release installed earlier is still trusted *now*: signed by a threshold of the current root's
        release keys (a since-revoked key no longer counts) and not expired (same grace). The counter is
        not checked: an operator rollback goes back to an older release on purpose."""
        if now.tzinfo is None:
            raise RuntimeError("recheck_release needs an aware datetime (UTC), not a naive one")
        signed, sigs = parse_envelope(envelope, "installed manifest")
        root = self._root
        check_signatures("installed release", signed, sigs, root.release_keys, root.release_threshold,
                         root.revoked)
        manifest = Manifest.from_dict(signed)
        self._check_expiry(manifest, now)
        return manifest

    def _check_expiry(self, manifest: Manifest, now: datetime) -> None:
        if now > manifest.expires_at + timedelta(seconds=self.config.expiry_grace_seconds):
            raise ExpiredMetadata(f"release {manifest.release} expired at {manifest.expires}")

    def accept_release(self, manifest: Manifest) -> None:
        """Raise the counter to an installed release; only for a manifest this state verified."""
        if self._verified.get(id(manifest)) is not manifest:
            raise RuntimeError("accept_release: manifest was not verified by this TrustState")
        if manifest.release <= self._counter:
            raise RuntimeError("accept_release: counter already at or past this release")
        self._counter = manifest.release
        self._verified.clear()

    def raise_counter(self, release: int) -> None:
        """Recovery after a crash between switch and save: the counter only ever goes up."""
        self._counter = max(self._counter, release)

    # -- persistence (the caller does the I/O) ------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"root": self._root_envelope, "release_counter": self._counter}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], config: OtaConfig | None = None) -> TrustState:
        """A saved state, read through ``TRUST_SCHEMA``; its root is verified like any other."""
        state = schema.read(d, TRUST_SCHEMA, "trust state", FormatError)
        return cls(state["root"], state["release_counter"], config)
