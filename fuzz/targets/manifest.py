"""A bundle's signed manifest (with its embedded model spec) as ``verify_bundle`` reads it *past* the
signature check: the harness signs whatever the fuzzer made with the release key its root trusts, wraps it
in a bundle with the release's payloads and verifies it, so every field reaches the manifest and spec
readers, the expiry, rollback, target and size checks and the payload reads.

Input: the signed part (the manifest JSON)."""

from __future__ import annotations

import io
from collections.abc import Callable

from ..engine import Target
from ..mutators import json_mutator

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("ota.bundle", "ota.metadata", "ota.trust", "runtime_wasm.schema", "runtime_wasm.spec")


def setup() -> Callable[[bytes], None]:
    from ota.bundle import MAGIC, verify_bundle
    from ota.crypto import canonical_bytes, parse_json

    from ._signed import HW, NOW, PROFILE, release, sign_release, trust_state

    trust = trust_state()
    _, payloads = release()
    body = b"".join(payloads.values())

    def one(data: bytes) -> None:
        header = canonical_bytes(sign_release(parse_json(data, "fuzz input")))
        bundle = MAGIC + len(header).to_bytes(4, "big") + header + body
        verify_bundle(io.BytesIO(bundle), trust, NOW, HW, PROFILE)

    return one


def target() -> Target:
    from ota.errors import VerificationError

    return Target("manifest", "device", setup, (VerificationError,), INSTRUMENT, json_mutator)


def seeds() -> list[bytes]:
    """The release's manifest as ``make_manifest`` writes it, and variants the format allows: a target
    profile, an index bound, a stateful spec, extra fields."""
    import json

    from ._signed import HW, PROFILE, release

    manifest, _ = release()
    spec = manifest["spec"]
    variants = [
        manifest,
        {**manifest, "targets": {"hardware_ids": [HW, "other"], "profiles": ["other", PROFILE]}},
        {**manifest, "note": "a newer writer's field", "quantization": {"mode": "int8"}},
        {**manifest, "spec": {**spec, "threads": 2, "extra": {"nodes": []}}},
        {**manifest, "spec": {**spec, "weights_size": 8, "states": [
            {"name": "h", "dtype": "float32", "shape": [2], "offset": 56, "init_offset": 0}]}},
        {**manifest, "spec": {**spec, "inputs": [*spec["inputs"], {
            "name": "text", "dtype": "S8", "shape": [1], "offset": 0}]}},
    ]
    return [json.dumps(m, sort_keys=True).encode() for m in variants]
