"""Host-side signing: private key files, root metadata and its rotation, release bundles.

The formats and every check live on the device side (``ota``); this module only holds private keys
and produces what ``ota.TrustState`` verifies. A keyring directory holds ``<role>-<keyid16>.key``
(PKCS#8 PEM, mode 0600, optionally encrypted) and ``roots/<version>.root.json``, the signed root
history a device walks to rotate its trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from device_profiles import available_profiles, load_profile
from ota.bundle import read_header, read_payloads, write_bundle
from ota.config import OtaConfig
from ota.crypto import canonical_bytes, key_id, parse_json
from ota.errors import FormatError
from ota.golden import GOLDEN_FILE, encode_vector
from ota.metadata import MANIFEST_FORMAT, MANIFEST_TYPE, Manifest, Root, parse_envelope
from ota.store import atomic_file, atomic_write
from runtime_wasm.engine import TIER_SIMD128
from runtime_wasm.loader import SPEC_FILE, WEIGHTS_FILE, load_model_dir
from runtime_wasm.processing import processing_files
from runtime_wasm.spec import ModelSpec

from .errors import CuvilError
from .oracle import random_feeds

ROLES = ("root", "release")
ROOTS_DIR = "roots"


class SigningError(CuvilError):
    """A key file is missing, unreadable, too permissive, or the keyring cannot sign what was asked."""


# -- key files --------------------------------------------------------------------------------
def generate_key(path: str | os.PathLike[str], passphrase: bytes | None = None) -> str:
    """Create a new Ed25519 key file (mode 0600, never overwriting); returns the public key (hex)."""
    key = Ed25519PrivateKey.generate()
    encryption = (serialization.BestAvailableEncryption(passphrase) if passphrase
                  else serialization.NoEncryption())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)  # the umask may have cleared bits, never added: make it exact
        f.write(pem)
        f.flush()
        os.fsync(f.fileno())
    return public_hex(key)


def load_key(path: str | os.PathLike[str], passphrase: bytes | None = None) -> Ed25519PrivateKey:
    """Read a private key, refusing one that group or others can read (as ssh does)."""
    try:
        mode = os.stat(path).st_mode
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SigningError(f"cannot read key file {path}: {exc.strerror}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SigningError(f"key file {path} is accessible by others (mode {stat.S_IMODE(mode):o}); "
                           "chmod 600 it")
    try:
        key = serialization.load_pem_private_key(data, password=passphrase)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"cannot load key {path} (wrong or missing passphrase?): {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{path} is not an Ed25519 key")
    return key


def public_hex(key: Ed25519PrivateKey) -> str:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def sign_envelope(signed: Mapping[str, Any], keys: Iterable[Ed25519PrivateKey],
                  signatures: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
    """``{"signed", "signatures"}`` with one signature per key over the canonical bytes (no duplicates)."""
    payload = canonical_bytes(dict(signed))
    sigs = {s["keyid"]: dict(s) for s in signatures}
    for key in keys:
        kid = key_id(public_hex(key))
        sigs[kid] = {"keyid": kid, "sig": key.sign(payload).hex()}
    return {"signed": dict(signed), "signatures": sorted(sigs.values(), key=lambda s: s["keyid"])}


# -- keyring: root metadata and delegation ----------------------------------------------------
class Keyring:
    """A directory of private keys plus the signed root history they produced."""

    def __init__(self, directory: str | os.PathLike[str], passphrase: bytes | None = None) -> None:
        self.directory = Path(directory)
        self.passphrase = passphrase
        if not (self.directory / ROOTS_DIR).is_dir():
            raise SigningError(f"{self.directory} is not a keyring (run `cuvil-edge keys init` first)")

    @classmethod
    def init(cls, directory: str | os.PathLike[str], root_keys: int = 3, root_threshold: int = 2,
             release_keys: int = 1, release_threshold: int = 1, passphrase: bytes | None = None) -> Keyring:
        """New keys for both roles and root version 1, signed by its own root keys."""
        if not 1 <= root_threshold <= root_keys or not 1 <= release_threshold <= release_keys:
            raise SigningError("each threshold must be between 1 and its number of keys")
        d = Path(directory)
        if (d / ROOTS_DIR).exists():
            raise SigningError(f"{d} already holds a keyring")
        (d / ROOTS_DIR).mkdir(parents=True)
        os.chmod(d, 0o700)
        ring = cls(d, passphrase)
        roots = dict(ring._new_key("root") for _ in range(root_keys))
        releases = dict(ring._new_key("release") for _ in range(release_keys))
        ring._publish(Root(1, roots, root_threshold, releases, release_threshold))
        return ring

    def _new_key(self, role: str) -> tuple[str, str]:
        tmp = self.directory / f".new-{role}.key"
        pub = generate_key(tmp, self.passphrase)
        kid = key_id(pub)
        os.replace(tmp, self._key_path(role, kid))
        return kid, pub

    def _key_path(self, role: str, kid: str) -> Path:
        return self.directory / f"{role}-{kid[:16]}.key"

    def private_key(self, kid: str) -> Ed25519PrivateKey:
        for role in ROLES:
            path = self._key_path(role, kid)
            if path.exists():
                return load_key(path, self.passphrase)
        raise SigningError(f"no private key for key id {kid[:16]} in {self.directory}")

    # -- roots --------------------------------------------------------------------------------
    def root_versions(self) -> list[int]:
        return sorted(int(p.name.split(".")[0]) for p in (self.directory / ROOTS_DIR).glob("*.root.json"))

    def root_envelope(self, version: int | None = None) -> dict[str, Any]:
        """A signed root of this keyring (the newest by default); a keyring without one, or with one that is
        not JSON, is a ``SigningError`` naming the file."""
        versions = self.root_versions()
        if not versions:
            raise SigningError(f"{self.directory} holds no signed root ({ROOTS_DIR}/N.root.json): "
                               "not a keyring, or an incomplete one")
        path = self.directory / ROOTS_DIR / f"{version if version is not None else versions[-1]}.root.json"
        try:
            envelope = parse_json(path.read_bytes(), f"root {path}")
        except FormatError as exc:
            raise SigningError(str(exc)) from exc
        if not isinstance(envelope, dict):
            raise SigningError(f"root {path} is not a JSON object")
        return envelope

    @property
    def root(self) -> Root:
        return Root.from_dict(self.root_envelope()["signed"])

    def root_chain(self, after_version: int) -> list[dict[str, Any]]:
        """The signed roots a device at ``after_version`` must apply, in order."""
        return [self.root_envelope(v) for v in self.root_versions() if v > after_version]

    def _publish(self, new: Root) -> dict[str, Any]:
        """Sign root ``new`` with every local key of the current and new root sets, then store it."""
        versions = self.root_versions()
        old = self.root if versions else None
        signers = set(new.root_keys) | (set(old.root_keys) if old else set())
        envelope = sign_envelope(new.to_dict(), [self.private_key(k) for k in sorted(signers)])
        data = json.dumps(envelope, indent=1, sort_keys=True).encode()
        atomic_write(self.directory / ROOTS_DIR / f"{new.version}.root.json", data)
        atomic_write(self.directory / "root.json", data)
        return envelope

    def add_key(self, role: str) -> str:
        """Delegate a fresh key to ``role`` (root version + 1); returns its id."""
        kid, pub = self._new_key(_check_role(role))
        r = self.root
        keys = {**(r.root_keys if role == "root" else r.release_keys), kid: pub}
        self._publish(replace(r, version=r.version + 1, **{f"{role}_keys": keys}))
        return kid

    def revoke(self, kid: str, replacement: bool = True) -> str | None:
        """Remove ``kid`` from its role and list it as revoked; optionally delegate a fresh key in its place.
        Returns the replacement's id."""
        r = self.root
        role = "root" if kid in r.root_keys else "release" if kid in r.release_keys else None
        if role is None:
            raise SigningError(f"key {kid[:16]} is not delegated in root v{r.version}")
        keys = {k: v for k, v in getattr(r, f"{role}_keys").items() if k != kid}
        new_kid = None
        if replacement:
            new_kid, pub = self._new_key(role)
            keys[new_kid] = pub
        if getattr(r, f"{role}_threshold") > len(keys):
            raise SigningError(f"revoking {kid[:16]} would leave fewer {role} keys than the threshold")
        self._publish(replace(r, version=r.version + 1, revoked=r.revoked | {kid}, **{f"{role}_keys": keys}))
        return new_kid

    def release_keys(self) -> list[Ed25519PrivateKey]:
        """The private keys of every currently delegated release key found in the keyring."""
        return [self.private_key(k) for k in sorted(self.root.release_keys)]


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise SigningError(f"role must be one of {ROLES}, got {role!r}")
    return role


# -- bundles ----------------------------------------------------------------------------------
def golden_vectors(model_dir: str | os.PathLike[str], count: int = 2, seed: int = 0) -> list[dict[str, Any]]:
    """Seeded random inputs, each over its tensor's real range (``random_feeds``), and what the compiled
    model answers: the device's self-test reference."""
    rng = np.random.default_rng(seed)
    vectors = []
    with load_model_dir(model_dir) as model:
        for _ in range(count):
            inputs = random_feeds(model.spec.inputs, rng)
            vectors.append(encode_vector(inputs, model.predict(inputs)))
    return vectors


def make_manifest(model_dir: str | os.PathLike[str], *, version: str, release: int,
                  hardware_ids: Sequence[str], profiles: Sequence[str] | None = None,
                  expires_in: timedelta = timedelta(days=30), golden: list[dict[str, Any]] | None = None,
                  quantization: Mapping[str, Any] | None = None, provenance: Mapping[str, Any] | None = None,
                  now: datetime | None = None) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The unsigned manifest of a model directory and its payloads (weights, every module variant and the
    processing files, if any: ``runtime_wasm.processing``), each under the signature by its sha256.
    ``profiles`` None: the profiles the model was built for (``optimize(profiles=...)``), else any.
    ``now`` None: ``SOURCE_DATE_EPOCH`` when set (then the provenance names no host either, so the same
    model directory and keys make the same bundle bytes anywhere: docs/REPRODUCIBLE.md), else the clock."""
    if expires_in <= timedelta(0):  # a device would refuse it on arrival
        raise SigningError(f"a release must expire after it is signed (--expires-days), got {expires_in}")
    root = Path(model_dir)
    spec_text = (root / SPEC_FILE).read_bytes()  # not decoded here: from_json refuses non-UTF-8 (SpecError)
    spec = ModelSpec.from_json(spec_text)
    if profiles is None:
        profiles = spec.extra.get("profiles", [])
    _check_profiles(profiles, spec)
    payloads = {WEIGHTS_FILE: (root / WEIGHTS_FILE).read_bytes()}
    payloads.update({v.file: (root / v.file).read_bytes() for v in spec.variants})
    payloads.update({n: (root / n).read_bytes() for n in processing_files(root)})
    now = now or source_date() or datetime.now(timezone.utc)
    manifest = {
        "type": MANIFEST_TYPE, "format": MANIFEST_FORMAT, "name": spec.name, "version": version,
        "release": release, "expires": _iso(now + expires_in), "spec": json.loads(spec_text),
        "targets": {"hardware_ids": list(hardware_ids), "profiles": list(profiles)},
        "files": [{"name": n, "length": len(b), "sha256": hashlib.sha256(b).hexdigest()}
                  for n, b in payloads.items()],
        "golden": golden if golden is not None else golden_vectors(root),
        "quantization": dict(quantization or {}),
        "provenance": dict(provenance or _provenance(now)),
    }
    _place_golden(manifest, payloads)
    Manifest.from_dict(manifest)  # the host refuses to sign what a device would refuse to parse
    return manifest, payloads


#: room left in the signed header for the envelope and signatures (a few hundred bytes per key)
_SIGNATURE_ROOM = 64 << 10


def _place_golden(manifest: dict[str, Any], payloads: dict[str, bytes]) -> None:
    """Golden vectors ride in the signed header while it stays under what a device reads
    (``OtaConfig.max_manifest_bytes``, less room for signatures), where every agent reads them; past that
    they move to the ``GOLDEN_FILE`` payload (a 320 x 320 detector's input and outputs make ~2.6 MB per
    vector, a 640 x 640 one's ~10 MB; agents from before the file refuse such a release in their
    self-test, which could not ship at all before). A header still over the limit is a ``SigningError``
    here, not a ``LengthMismatch`` on every device after the release went out."""
    limit = OtaConfig().max_manifest_bytes - _SIGNATURE_ROOM
    if len(canonical_bytes(manifest)) > limit and manifest["golden"]:
        if GOLDEN_FILE in payloads:
            raise SigningError(f"the model directory holds a {GOLDEN_FILE}: golden vectors ship as that")
        data = payloads[GOLDEN_FILE] = canonical_bytes(manifest["golden"])
        manifest["files"].append({"name": GOLDEN_FILE, "length": len(data),
                                  "sha256": hashlib.sha256(data).hexdigest()})
        manifest["golden"] = []
    size = len(canonical_bytes(manifest))
    if size > limit:
        raise SigningError(f"the signed manifest would be {size} bytes, over the {limit} a device reads with "
                           f"room for signatures (OtaConfig.max_manifest_bytes), even without golden vectors")


def _check_profiles(profiles: Sequence[str], spec: ModelSpec) -> None:
    """A bundle may target only shipped profiles (a misspelt name matches no device, so every device would
    refuse the release after it was signed and published), and must carry, for each, the simd128 variant of
    its family: what selection falls back to on an engine without relaxed SIMD."""
    known = available_profiles()
    unknown = sorted(set(profiles) - set(known))
    if unknown:
        raise SigningError(f"unknown device profile(s) {unknown} in the bundle's targets; known: {known}")
    shipped = {(v.tier, v.family) for v in spec.variants}
    for name in profiles:
        family = load_profile(name).family
        if (TIER_SIMD128, family) not in shipped:
            raise SigningError(f"the bundle targets {name} ({family}) but carries no simd128 {family} "
                               f"variant (has {sorted(v.name for v in spec.variants)}): build with "
                               f"--profile {name}")


def build_bundle(model_dir: str | os.PathLike[str], out: str | os.PathLike[str],
                 keys: Sequence[Ed25519PrivateKey], **manifest_fields: Any) -> Manifest:
    """Manifest + signatures + payloads in one file (written aside, then renamed into place)."""
    manifest, payloads = make_manifest(model_dir, **manifest_fields)
    write_signed_bundle(out, sign_envelope(manifest, keys), payloads)
    return Manifest.from_dict(manifest)


def write_signed_bundle(out: str | os.PathLike[str], envelope: Mapping[str, Any],
                        payloads: Mapping[str, bytes]) -> None:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        write_bundle(f, envelope, payloads)


def add_signatures(bundle: str | os.PathLike[str], keys: Sequence[Ed25519PrivateKey],
                   config: OtaConfig | None = None) -> dict[str, Any]:
    """Countersign an existing bundle in place (threshold signing by several holders)."""
    config = config or OtaConfig()
    payloads: dict[str, bytearray] = {}
    with open(bundle, "rb") as f:
        envelope = read_header(f, config)
        signed, _ = parse_envelope(envelope, "bundle manifest")
        read_payloads(f, Manifest.from_dict(signed), config,
                      lambda e: payloads.setdefault(e.name, bytearray()).extend)
    envelope = sign_envelope(signed, keys, envelope["signatures"])
    write_signed_bundle(bundle, envelope, {k: bytes(v) for k, v in payloads.items()})
    return envelope


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def source_date() -> datetime | None:
    """``SOURCE_DATE_EPOCH`` (reproducible-builds.org: seconds since 1970, UTC), or None when unset."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        return None
    try:
        return datetime.fromtimestamp(int(epoch), timezone.utc)
    except (ValueError, OverflowError, OSError):
        raise SigningError(f"SOURCE_DATE_EPOCH must be whole seconds since 1970, got {epoch!r}") from None


def _provenance(now: datetime) -> dict[str, Any]:
    try:
        tool = version("cuvil-edge")
    except PackageNotFoundError:
        tool = "unknown"
    host = {} if source_date() else {"build_host": platform.node()}  # a reproducible bundle names none
    return {"tool": "cuvil-edge", "tool_version": tool, "built_at": _iso(now), **host}
