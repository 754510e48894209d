"""The trust state machine on its own: real Ed25519, metadata built in memory, no files, no network."""

from __future__ import annotations

import hashlib
import io
from datetime import datetime, timedelta, timezone

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cuvil_edge.signing import public_hex, sign_envelope
from ota import (
    BadSignature,
    BrokenChain,
    ExpiredMetadata,
    FileEntry,
    FormatError,
    HashMismatch,
    LengthMismatch,
    Manifest,
    OtaConfig,
    RollbackError,
    Root,
    ThresholdNotMet,
    TrustState,
    UntrustedKey,
    VerificationError,
    WrongTarget,
    key_id,
)
from ota.bundle import MAGIC, read_header
from ota.config import TransferLimits
from ota.crypto import canonical_bytes
from ota.protocol import verify_command
from ota.trust import check_payload

NOW = datetime(2026, 5, 1, tzinfo=timezone.utc)
HW = "generic-x86_64"


def keys(n: int) -> list[Ed25519PrivateKey]:
    return [Ed25519PrivateKey.generate() for _ in range(n)]


def ids(ks: list[Ed25519PrivateKey]) -> dict[str, str]:
    return {key_id(public_hex(k)): public_hex(k) for k in ks}


def kid(k: Ed25519PrivateKey) -> str:
    return key_id(public_hex(k))


def root_doc(version: int, roots: list, releases: list, root_threshold: int = 2, release_threshold: int = 2,
             revoked: tuple[str, ...] = ()) -> dict:
    return Root(version, ids(roots), root_threshold, ids(releases), release_threshold,
                frozenset(revoked)).to_dict()


def manifest_doc(release: int = 1, expires: datetime | str = NOW + timedelta(days=1), **extra) -> dict:
    data = b"\0asm-module"
    when = expires if isinstance(expires, str) else expires.isoformat()
    return {"type": "cuvil-bundle", "format": 1, "name": "m", "version": f"1.0.{release}", "release": release,
            "expires": when, "spec": {}, "targets": {"hardware_ids": [HW], "profiles": []},
            "files": [{"name": "m.wasm", "length": len(data), "sha256": hashlib.sha256(data).hexdigest()},
                      {"name": "weights.bin", "length": 0, "sha256": hashlib.sha256().hexdigest()}],
            "golden": [], "quantization": {}, "provenance": {}, **extra}


@pytest.fixture
def ring():
    """2-of-3 root keys delegating to 2-of-2 release keys; one spare key nobody delegated."""
    r = {"root": keys(3), "release": keys(2), "stranger": keys(1)[0]}
    r["state"] = TrustState(sign_envelope(root_doc(1, r["root"], r["release"]), r["root"][:2]))
    return r


def test_valid_release_verifies_and_counter_only_rises(ring):
    state = ring["state"]
    checks: list[str] = []
    m = state.verify_release(sign_envelope(manifest_doc(3), ring["release"]), NOW, HW, report=checks.append)
    assert m.release == 3 and len(checks) == 5
    state.accept_release(m)
    assert state.release_counter == 3
    with pytest.raises(RollbackError):
        state.verify_release(sign_envelope(manifest_doc(2), ring["release"]), NOW, HW)
    with pytest.raises(RollbackError):  # equal is a replay too
        state.verify_release(sign_envelope(manifest_doc(3), ring["release"]), NOW, HW)


@pytest.mark.parametrize("case, error", [
    ("unsigned", ThresholdNotMet), ("one_of_two", ThresholdNotMet), ("not_delegated", UntrustedKey),
    ("root_key_signs_release", UntrustedKey), ("tampered", BadSignature),
    ("duplicate_signature", ThresholdNotMet),
])
def test_weak_signing_is_rejected(ring, case, error):
    rel = ring["release"]
    env = sign_envelope(manifest_doc(), {
        "unsigned": [], "one_of_two": rel[:1], "not_delegated": [rel[0], ring["stranger"]],
        "root_key_signs_release": [rel[0], ring["root"][0]], "tampered": rel,
        "duplicate_signature": rel[:1]}[case])
    if case == "tampered":
        env["signed"]["name"] = "evil"
    if case == "duplicate_signature":
        env["signatures"] *= 2
    with pytest.raises(error):
        ring["state"].verify_release(env, NOW, HW)


def test_revoked_release_key_is_untrusted(ring):
    rel, roots = ring["release"], ring["root"]
    new_release = keys(1)[0]
    v2 = root_doc(2, roots, [rel[1], new_release], revoked=(kid(rel[0]),))
    ring["state"].update_root([sign_envelope(v2, roots[:2])])
    with pytest.raises(UntrustedKey, match="revoked"):
        ring["state"].verify_release(sign_envelope(manifest_doc(), rel), NOW, HW)
    assert ring["state"].verify_release(sign_envelope(manifest_doc(), [rel[1], new_release]), NOW, HW)


def test_root_rotation_chain_is_accepted(ring):
    old, rel = ring["root"], ring["release"]
    new = keys(3)
    v2 = sign_envelope(root_doc(2, [old[1], old[2], new[0]], rel, revoked=(kid(old[0]),)), [*old, new[0]])
    v3 = sign_envelope(root_doc(3, new, rel), [old[1], old[2], *new])
    v4 = sign_envelope(root_doc(4, new, rel, root_threshold=3), new)
    root = ring["state"].update_root([v2, v3, v4])
    assert root.version == 4 and set(root.root_keys) == set(ids(new))


@pytest.mark.parametrize("bad", ["old_threshold_missing", "new_threshold_missing", "skipped_version",
                                 "older_version", "tampered", "malformed"])
def test_one_bad_link_aborts_the_chain_and_trust_is_unchanged(ring, bad):
    old, rel = ring["root"], ring["release"]
    state = ring["state"]
    before = state.to_dict()
    new = keys(3)
    good_v2 = sign_envelope(root_doc(2, new, rel), [*old, *new])
    v3_doc = root_doc(3, new, rel)
    link = {
        "old_threshold_missing": lambda: (lambda ks: sign_envelope(root_doc(3, ks, rel), ks))(keys(3)),
        "new_threshold_missing": lambda: sign_envelope(v3_doc, new[:1]),
        "skipped_version": lambda: sign_envelope(root_doc(4, new, rel), new),
        "older_version": lambda: sign_envelope(root_doc(1, new, rel), new),
        "tampered": lambda: {**sign_envelope(v3_doc, new), "signed": {**v3_doc, "release_threshold": 1}},
        "malformed": lambda: {"signed": {"type": "root"}, "signatures": []},
    }[bad]()
    with pytest.raises(VerificationError):
        state.update_root([good_v2, link, sign_envelope(root_doc(4, new, rel), new)])
    assert state.to_dict() == before and state.root.version == 1


def test_chain_length_is_capped():
    roots, rel = keys(1), keys(1)
    state = TrustState(sign_envelope(root_doc(1, roots, rel, 1, 1), roots),
                       config=OtaConfig(max_root_chain_length=2))
    chain = [sign_envelope(root_doc(v, roots, rel, 1, 1), roots) for v in (2, 3, 4)]
    with pytest.raises(BrokenChain):
        state.update_root(chain)
    assert state.update_root(chain[:2]).version == 3


def test_expired_release_is_refused_with_bounded_grace(ring):
    env = sign_envelope(manifest_doc(expires=NOW - timedelta(seconds=30)), ring["release"])
    with pytest.raises(ExpiredMetadata):
        ring["state"].verify_release(env, NOW, HW)
    lenient = TrustState(ring["state"].root_envelope, config=OtaConfig(expiry_grace_seconds=60))
    assert lenient.verify_release(env, NOW, HW).release == 1


def test_wrong_hardware_or_profile_is_wrong_target(ring):
    env = sign_envelope(manifest_doc(targets={"hardware_ids": [HW], "profiles": ["raspberry-pi-4"]}),
                        ring["release"])
    with pytest.raises(WrongTarget):
        ring["state"].verify_release(env, NOW, "raspberry-pi-5", "raspberry-pi-4")
    with pytest.raises(WrongTarget):
        ring["state"].verify_release(env, NOW, HW, "raspberry-pi-5")
    assert ring["state"].verify_release(env, NOW, HW, "raspberry-pi-4")


def test_payload_checks_name_the_attack():
    entry = FileEntry("m.wasm", 4, hashlib.sha256(b"abcd").hexdigest())
    check_payload(entry, 4, hashlib.sha256(b"abcd").hexdigest())
    with pytest.raises(LengthMismatch):
        check_payload(entry, 5, entry.sha256)
    with pytest.raises(HashMismatch):  # e.g. release 1's module under release 2's manifest
        check_payload(entry, 4, hashlib.sha256(b"abce").hexdigest())


def test_bundle_size_limit_comes_from_config(ring):
    small = TrustState(ring["state"].root_envelope, config=OtaConfig(max_bundle_bytes=4))
    with pytest.raises(LengthMismatch):
        small.verify_release(sign_envelope(manifest_doc(), ring["release"]), NOW, HW)


def test_unknown_fields_survive_a_round_trip():
    doc = manifest_doc(future_field={"x": [1, 2]})
    doc["targets"] = {"hardware_ids": [HW], "profiles": []}
    assert Manifest.from_dict(doc).to_dict() == doc
    root = {**root_doc(1, keys(3), keys(2)), "delegation_note": "kept"}
    assert Root.from_dict(root).to_dict() == root


@pytest.mark.parametrize("field, value", [("release", 0), ("version", "one"), ("version", "1.0.1\n"),
                                          ("expires", "2026-01-01"),
                                          ("files", [{"name": "../x", "length": 1, "sha256": "0" * 64}])])
def test_malformed_manifest_is_a_format_error(ring, field, value):
    with pytest.raises(FormatError):
        ring["state"].verify_release(sign_envelope(manifest_doc(**{field: value}), ring["release"]), NOW, HW)


@pytest.mark.parametrize("name, sha256, error", [("m.wasm\n", "0" * 64, "plain, unreserved"),
                                                  ("m.wasm", "0" * 64 + "\n", "malformed sha256")])
def test_a_files_entry_is_exactly_a_name_and_a_digest(name, sha256, error):
    """A trailing newline passed the ``^...$`` patterns (``re.match`` lets ``$`` match before one)."""
    doc = manifest_doc()
    doc["files"][0] = {**doc["files"][0], "name": name, "sha256": sha256}
    with pytest.raises(FormatError, match=error):
        Manifest.from_dict(doc)


MODULE_SHA = hashlib.sha256(b"\0asm-module").hexdigest()


def _variant_spec(file: str, sha256: str = MODULE_SHA) -> dict:
    return {"variants": [{"name": "v", "tier": "simd128", "family": "x86", "file": file, "sha256": sha256,
                          "size": 11}]}


def test_spec_variants_must_be_signed_module_payloads(ring):
    """A variant naming a file outside the signed payloads (another slot, an absolute path), without the
    payload's hash, or the weights file, would load code no hash of this release covers."""
    Manifest.from_dict(manifest_doc(spec=_variant_spec("m.wasm")))
    weights_sha = hashlib.sha256().hexdigest()
    for spec in (_variant_spec("../a/m.wasm"), _variant_spec("/tmp/outside.wasm", ""),
                 _variant_spec("m.wasm", ""), _variant_spec("weights.bin", weights_sha), {"variants": {}}):
        with pytest.raises(FormatError, match="variant"):
            ring["state"].verify_release(sign_envelope(manifest_doc(spec=spec), ring["release"]), NOW, HW)
    no_weights = manifest_doc()
    no_weights["files"] = no_weights["files"][:1]
    with pytest.raises(FormatError, match="weights.bin"):
        Manifest.from_dict(no_weights)


@pytest.mark.parametrize("payload", [b'{"signed": {"x": NaN}, "signatures": []}',
                                     b'{"signed": {"x": -Infinity}, "signatures": []}',
                                     b'{"signed": ' + b"[" * 200000 + b"]" * 200000 + b', "signatures": []}'],
                         ids=["nan", "infinity", "deep_nesting"])
def test_unsigned_malformed_json_is_a_format_error(ring, payload):
    """NaN (no canonical form) and nesting deeper than the parser's recursion limit were a ValueError and
    a RecursionError, which no caller expects from untrusted input."""
    with pytest.raises(FormatError):
        verify_command(payload, ring["state"], "eu", "dev-a", NOW, TransferLimits())
    with pytest.raises(FormatError):
        read_header(io.BytesIO(MAGIC + len(payload).to_bytes(4, "big") + payload), OtaConfig())


def test_value_without_canonical_form_is_a_format_error():
    with pytest.raises(FormatError):
        canonical_bytes({"x": float("nan")})


def test_misuse_by_the_caller_is_a_runtime_error(ring):
    state = ring["state"]
    env = sign_envelope(manifest_doc(), ring["release"])
    with pytest.raises(RuntimeError):
        state.verify_release(env, NOW.replace(tzinfo=None), HW)
    other = TrustState(state.root_envelope)
    with pytest.raises(RuntimeError):  # a manifest this state never verified
        state.accept_release(other.verify_release(env, NOW, HW))
    m = state.verify_release(env, NOW, HW)
    state.accept_release(m)
    with pytest.raises(RuntimeError):
        state.accept_release(m)


def test_verifying_without_installing_keeps_only_the_latest_verified_manifests(ring):
    """The manifest fuzzer grew a TrustState by one kept manifest per verify (1.3 GB after a million): only
    the latest MAX_PENDING_VERIFIED stay acceptable, the oldest is forgotten (verify it again)."""
    from ota.trust import MAX_PENDING_VERIFIED

    state = ring["state"]
    verified = [state.verify_release(sign_envelope(manifest_doc(r), ring["release"]), NOW, HW)
                for r in range(1, 3 * MAX_PENDING_VERIFIED + 1)]
    assert len(state._verified) == MAX_PENDING_VERIFIED
    with pytest.raises(RuntimeError):
        state.accept_release(verified[0])
    state.accept_release(verified[-1])
    assert state.release_counter == 3 * MAX_PENDING_VERIFIED
