"""A bundle file as a device reads it (``ota.bundle.verify_bundle``): magic, header length, the header
(canonical JSON, duplicate keys, nesting), the envelope and, for an unaltered signed part, the manifest,
the embedded model spec and the payloads. Most mutations stop at the signature; the ``manifest`` harness
re-signs to reach past it.

Input: the bundle file's bytes. Trusted: the fixed root of ``_signed`` (its release key signed the seeds)."""

from __future__ import annotations

import io
from collections.abc import Callable

from ..engine import Target

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("ota.bundle", "ota.crypto", "ota.metadata", "ota.trust", "runtime_wasm.schema",
              "runtime_wasm.spec")


def setup() -> Callable[[bytes], None]:
    from ota.bundle import verify_bundle

    from ._signed import HW, NOW, PROFILE, trust_state

    trust = trust_state()

    def one(data: bytes) -> None:
        verify_bundle(io.BytesIO(data), trust, NOW, HW, PROFILE)

    return one


def target() -> Target:
    from ota.errors import VerificationError

    return Target("bundle", "device", setup, (VerificationError,), INSTRUMENT)


def seeds() -> list[bytes]:
    """The release signed (valid), unsigned and truncated after its header, as ``write_bundle`` writes it."""
    from ._signed import bundle_bytes, release, sign_release

    manifest, payloads = release()
    signed = bundle_bytes(sign_release(manifest), payloads)
    unsigned = bundle_bytes({"signed": manifest, "signatures": []}, payloads)
    header_end = 12 + int.from_bytes(signed[8:12], "big")
    return [signed, unsigned, signed[:header_end]]
