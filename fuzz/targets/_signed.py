"""The signed world the metadata harnesses (``bundle``, ``manifest``, ``trust``) share: fixed Ed25519 keys
(derived from their names, so the checked-in seeds and every fuzzing process agree on them), root
metadata delegating them, and a tiny real bundle built by the project's own signing code.

Not a harness itself (no ``target()``)."""

from __future__ import annotations

import hashlib
import io
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

HW = "fuzz-device"
PROFILE = "fuzz-profile"  # the device's profile: a manifest may name it among its targets
#: the harnesses' clock: bundles are signed a day before and expire a year after
NOW = datetime(2026, 12, 6, tzinfo=timezone.utc)
#: root versions a chain seed goes up to; each delegates the next root key in ``ROOT_KEY_NAMES``
ROOT_KEY_NAMES = ("root-1", "root-2", "root-3")


def key(name: str) -> Ed25519PrivateKey:
    """A fixed test key: never a secret, only a way to sign what the fuzzer made."""
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(f"cuvil-edge fuzz {name}".encode()).digest())


RELEASE_KEY = key("release")
ROOT_KEYS = tuple(key(n) for n in ROOT_KEY_NAMES)


def root_doc(version: int) -> dict[str, Any]:
    """Root ``version``'s signed part: one root key per version (a rotation every time), one release key."""
    from cuvil_edge.signing import public_hex
    from ota.crypto import key_id
    from ota.metadata import Root

    def ids(*keys: Ed25519PrivateKey) -> dict[str, str]:
        return {key_id(public_hex(k)): public_hex(k) for k in keys}

    return Root(version, ids(ROOT_KEYS[version - 1]), 1, ids(RELEASE_KEY), 1).to_dict()


def sign_root(signed: Any) -> dict[str, Any]:
    """A root envelope signed by every fixed root key (the keys of the old and of the new root, whichever
    versions they are); what is not an object goes unsigned, as it came."""
    from cuvil_edge.signing import sign_envelope

    if not isinstance(signed, dict):
        return {"signed": signed, "signatures": []}
    return sign_envelope(signed, ROOT_KEYS)


def sign_release(signed: Any) -> dict[str, Any]:
    """A manifest envelope signed by the release key the roots delegate (unsigned when not an object)."""
    from cuvil_edge.signing import sign_envelope

    if not isinstance(signed, dict):
        return {"signed": signed, "signatures": []}
    return sign_envelope(signed, [RELEASE_KEY])


def trust_state() -> Any:
    """The device's trust: root v1, nothing installed yet, an hour's grace on expiry (a device without a
    trusted clock: the grace is added to the signed expiry)."""
    from ota import OtaConfig, TrustState

    return TrustState(sign_root(root_doc(1)), config=OtaConfig(expiry_grace_seconds=3600))


def release() -> tuple[dict[str, Any], dict[str, bytes]]:
    """A tiny real release (the ``http_api`` harness's hand-written model): its unsigned manifest, as
    ``make_manifest`` writes it, and its payloads."""
    from cuvil_edge.signing import make_manifest

    from .http_api import model_dir

    with tempfile.TemporaryDirectory(prefix="fuzz-release-") as tmp:
        return make_manifest(model_dir(Path(tmp) / "m"), version="1.0.0", release=1, hardware_ids=[HW],
                             golden=[], now=NOW - timedelta(days=1), expires_in=timedelta(days=365),
                             provenance={"tool": "cuvil-edge", "built_at": "2026-12-05T00:00:00Z"})


def bundle_bytes(envelope: dict[str, Any], payloads: dict[str, bytes]) -> bytes:
    """The bundle file ``write_bundle`` writes for a valid envelope."""
    from ota.bundle import write_bundle

    out = io.BytesIO()
    write_bundle(out, envelope, payloads)
    return out.getvalue()
