"""Ed25519 primitives and canonical JSON: what is signed is always ``canonical_bytes(signed)``."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from functools import partial
from itertools import accumulate
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .errors import FormatError

#: Deepest nesting of objects and arrays accepted in JSON from outside. Real headers nest under 10 deep
#: (the deepest, 9: envelope > signed > spec > extra > quantization > layers > layer > sensitivity >
#: precision, in a mixed-precision release); the cap keeps every later recursive walk (``canonical_bytes``,
#: ``ModelSpec``, the trust checks) far from Python's recursion limit.
MAX_JSON_DEPTH = 64

#: a string literal, or an unterminated one up to the end: every attempt matches, so scanning stays linear
_STRING = re.compile(r'"[^"\\]*(?:\\.?[^"\\]*)*(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


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


def nesting_depth(text: str) -> int:
    """How deep objects and arrays nest, from the brackets outside strings: no recursion and linear in the
    input, so it can run before the parser on any input (``"[]"`` is 1, a scalar 0)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate((1 if c in "[{" else -1 for c in brackets), initial=0))


def _unique_keys(pairs: list[tuple[str, Any]], what: str) -> dict[str, Any]:
    """A repeated key is refused: tools that keep its first or its last value would read different
    documents under one signature."""
    obj = dict(pairs)
    if len(obj) < len(pairs):
        dup = next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        raise FormatError(f"{what}: duplicate key {dup!r:.80}")
    return obj


def parse_json(data: bytes | str, what: str) -> Any:
    """Strict JSON from outside: not JSON, NaN/Infinity, a duplicate key or nesting deeper than
    ``MAX_JSON_DEPTH`` are all a ``FormatError`` (never a ``ValueError``/``RecursionError`` that would
    escape the caller's handling); the depth is checked before parsing."""
    try:
        text = data.decode(json.detect_encoding(data), "surrogatepass") if isinstance(data, bytes) else data
        if nesting_depth(text) > MAX_JSON_DEPTH:
            raise FormatError(f"{what}: JSON nests deeper than {MAX_JSON_DEPTH} levels")
        return json.loads(text, parse_constant=_no_constant,
                          object_pairs_hook=partial(_unique_keys, what=what))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
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
