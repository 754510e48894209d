"""The bundle file: ``MAGIC | u32 header length | header JSON (signed manifest) | payloads in order``.

Every read is bounded by a declared length, and declared lengths by ``OtaConfig``: a reader never
consumes more than the manifest promised (plus one byte to notice a longer file).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, BinaryIO

from runtime_wasm.errors import SpecError
from runtime_wasm.spec import ModelSpec

from .config import OtaConfig
from .crypto import canonical_bytes, parse_json
from .errors import FormatError, LengthMismatch
from .metadata import FileEntry, Manifest, parse_envelope
from .trust import Report, TrustState, check_payload

MAGIC = b"CUVILBN1"
_LENGTH = struct.Struct(">I")

#: called per payload with its entry; returns where to write its bytes, or None to only check them
Sink = Callable[[FileEntry], Callable[[bytes], object] | None]


def write_bundle(out: BinaryIO, envelope: Mapping[str, Any], payloads: Mapping[str, bytes]) -> None:
    """Host side: header, then each payload the manifest lists, in the manifest's order."""
    signed, _ = parse_envelope(envelope, "bundle manifest")
    manifest = Manifest.from_dict(signed)
    if {f.name for f in manifest.files} != set(payloads):
        raise ValueError("payloads must be exactly the files the manifest lists")
    for f in manifest.files:
        if len(payloads[f.name]) != f.length:
            raise ValueError(f"payload {f.name!r} is not the length the manifest declares")
    header = canonical_bytes(dict(envelope))
    out.write(MAGIC + _LENGTH.pack(len(header)) + header)
    for f in manifest.files:
        out.write(payloads[f.name])


def _read_exact(stream: BinaryIO, n: int, what: str) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise LengthMismatch(f"bundle truncated: {what} declares {n} bytes, got {len(data)}")
    return data


def read_header(stream: BinaryIO, config: OtaConfig) -> dict[str, Any]:
    """The signed envelope, read up to its declared length (itself capped by ``max_manifest_bytes``). The
    header must be exactly its canonical JSON: then every reader of the file sees the one document the
    signatures cover, whatever its parser does with spaces, escapes or key order."""
    if _read_exact(stream, len(MAGIC), "magic") != MAGIC:
        raise FormatError("not a cuvil-edge bundle (bad magic)")
    (n,) = _LENGTH.unpack(_read_exact(stream, _LENGTH.size, "header length"))
    if n > config.max_manifest_bytes:
        raise LengthMismatch(f"manifest declares {n} bytes, over the limit of {config.max_manifest_bytes}")
    header = _read_exact(stream, n, "manifest")
    envelope = parse_json(header, "manifest")
    if not isinstance(envelope, dict):
        raise FormatError("manifest is not a JSON object")
    if header != canonical_bytes(envelope):
        raise FormatError("manifest header is not canonical JSON (sorted keys, no spaces, ASCII escapes)")
    return envelope


def read_payloads(stream: BinaryIO, manifest: Manifest, config: OtaConfig, sink: Sink | None = None) -> None:
    """Stream each payload through its hash (and ``sink``); then require the end of the file."""
    for entry in manifest.files:
        write = sink(entry) if sink else None
        h, left = hashlib.sha256(), entry.length
        while left:
            chunk = _read_exact(stream, min(left, config.chunk_bytes), f"payload {entry.name!r}")
            h.update(chunk)
            if write:
                write(chunk)
            left -= len(chunk)
        check_payload(entry, entry.length, h.hexdigest())
    if stream.read(1):
        raise LengthMismatch("bundle is longer than its manifest declares (endless data)")


def verify_bundle(stream: BinaryIO, trust: TrustState, now: datetime, hardware_id: str,
                  profile: str | None = None,
                  report: Report | None = None) -> tuple[dict[str, Any], Manifest]:
    """Every check a bundle must pass, reading it once and writing nothing: (signed envelope, manifest)."""
    envelope = read_header(stream, trust.config)
    manifest = trust.verify_release(envelope, now, hardware_id, profile, report)
    try:  # a spec the runtime would choke on is refused here, before anything is written
        ModelSpec.from_json(canonical_bytes(manifest.spec))
    except SpecError as exc:
        raise FormatError(f"bundle manifest: {exc}") from exc
    read_payloads(stream, manifest, trust.config)
    if report:
        report(f"payloads: {len(manifest.files)} files, {manifest.payload_bytes} bytes, lengths and sha256 "
               "match the signed manifest; nothing after them")
    return envelope, manifest
