"""Ed25519 primitives and canonical JSON: what is signed is always ``canonical_bytes(signed)``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .errors import FormatError


def canonical_bytes(obj: Any) -> bytes:
    """One byte string per JSON value (sorted keys, no spaces), so signer and verifier agree; a value with
    no canonical form (NaN, too deep, not JSON) is a ``FormatError``, like any other malformed input."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False).encode()
    except (ValueError, TypeError, RecursionError) as exc:
        raise FormatError(f"value has no canonical JSON form: {str(exc)[:80]}") from None


def _no_constant(name: str) -> Any:
    raise FormatError(f"JSON constant {name} is not allowed (it has no canonical form)")


def parse_json(data: bytes | str, what: str) -> Any:
    """Strict JSON from outside: not JSON, NaN/Infinity or nesting too deep for the parser are all a
    ``FormatError`` (never a ``ValueError``/``RecursionError`` that would escape the caller's handling)."""
    try:
        return json.loads(data, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise FormatError(f"{what}: not JSON: {str(exc)[:80]}") from None


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
