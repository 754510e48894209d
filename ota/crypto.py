"""Ed25519 primitives and canonical JSON: what is signed is always ``canonical_bytes(signed)``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .errors import FormatError


def canonical_bytes(obj: Any) -> bytes:
    """One byte string per JSON value (sorted keys, no spaces), so signer and verifier agree."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()


def key_id(public_hex: str) -> str:
    """A key's id is the sha256 of its raw public bytes: ids cannot be chosen to collide."""
    return hashlib.sha256(_public_bytes(public_hex)).hexdigest()


def signature_valid(public_hex: str, signature_hex: str, payload: bytes) -> bool:
    try:
        sig = bytes.fromhex(signature_hex)
    except (ValueError, TypeError):
        return False
    try:
        Ed25519PublicKey.from_public_bytes(_public_bytes(public_hex)).verify(sig, payload)
    except InvalidSignature:
        return False
    return True


def _public_bytes(public_hex: str) -> bytes:
    try:
        raw = bytes.fromhex(public_hex)
    except (ValueError, TypeError):
        raise FormatError(f"public key is not hex: {public_hex!r:.40}") from None
    if len(raw) != 32:
        raise FormatError(f"an Ed25519 public key has 32 bytes, got {len(raw)}")
    return raw
