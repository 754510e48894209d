"""Hostile signed metadata and model files (issue 36): each defect the fuzzers or a review found, replayed
from its checked-in input (``fuzz/regressions/<harness>/``) through the harness's own real path (real
Ed25519 signatures by the project's signing code, a real bundle), must be the documented typed error with
a message naming what is wrong; and the device's own state files, corrupted, are typed errors too."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fuzz.engine import REGRESSIONS
from fuzz.targets import _signed, golden_json, manifest, model_json, trust
from ota import Installer
from ota.crypto import canonical_bytes
from ota.errors import CorruptSlot, FormatError
from ota.golden import GOLDEN_FILE, decode_tensor, decode_vector, encode_tensor, release_vectors
from ota.installer import ENVELOPE_FILE, POINTER_FILE, TRUST_FILE
from runtime_wasm import ModelSpec
from runtime_wasm.errors import SpecError


def regression(harness: str, name: str) -> bytes:
    return (REGRESSIONS / harness / name).read_bytes()


# -- model.json -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, match", [
    ("weights-size-string", r"weights_size: must be an integer, got str"),  # was a TypeError
    ("shape-dim-2-63", r"inputs\[0\]\.shape\[0\]: must be in \[0, 2147483647\]"),  # was numpy's ValueError
    ("dtype-leading-zero", r"inputs\[0\]\.dtype: is not a dtype the runtime supports: '01'"),  # SyntaxError
    ("dtype-timestamp", r"outputs\[1\]\.dtype: is not a dtype the runtime supports"),  # ValueError
    ("dtype-lone-surrogate", r"inputs\[0\]\.dtype: is not valid UTF-8"),  # UnicodeEncodeError
    ("offset-infinity", r"outputs\[0\]\.offset: must be an integer, got float"),  # OverflowError
    ("size-wraps-int64", r"tensor 'x' of shape .* is too large"),  # int64 size wrapped to 0: numpy ValueError
    ("empty-but-too-large", r"tensor 'x' of shape .* is too large for any array"),  # numpy's ValueError
    ("string-length-not-scalar", r"'words:length' must be an integer scalar"),  # TypeError in caller_outputs
    ("string-length-of-a-scalar", r"length of the last axis of 'words'"),  # IndexError in caller_outputs
    ("duplicate-output-names", r"outputs \['words'\] are named more than once"),  # AttributeError
    ("index-bound-on-strings", r"index_bound 9: ids are integers"),  # numpy's UFuncTypeError on min()
])
def test_malformed_model_json_is_a_spec_error(name, match):
    data = regression("model_json", name)
    with pytest.raises(SpecError, match=match):
        ModelSpec.from_json(data)
    with pytest.raises(SpecError, match=match):  # and so on the harness's whole path
        model_json.setup()(data)


# -- golden.json (the payload of golden vectors too large for the signed header) --------------------------
@pytest.mark.parametrize("name, match", [
    ("dtype-comma-leading-zero", "unsupported dtype"),  # numpy's comma-string parser: SyntaxError
    ("shape-2e308", "shape must be a list of at most 32 integers"),  # JSON 2e+308 is inf: int() OverflowError
])
def test_malformed_golden_json_is_a_format_error(name, match):
    with pytest.raises(FormatError, match=match):
        golden_json.setup()(regression("golden_json", name))


def test_a_golden_dtype_numpy_would_parse_as_code_is_a_format_error(tmp_path):
    """"01,i4"-like dtype strings made numpy's comma-string parser raise SyntaxError in the self-test's
    decode (found by the ``golden_json`` harness in seconds); every dtype is now checked against the
    runtime's allow-list first, and the names ``encode_tensor`` writes still decode."""
    data = regression("golden_json", "dtype-comma-leading-zero")
    with pytest.raises(FormatError, match="unsupported dtype"):
        golden_json.setup()(data)
    slot = tmp_path / "slot"
    slot.mkdir()
    (slot / GOLDEN_FILE).write_bytes(data)
    with pytest.raises(FormatError, match="unsupported dtype"):
        for vector in release_vectors(slot, ()):
            decode_vector(vector)
    for a in (np.array([b"ab", b"c"], "S5"), np.arange(3, dtype=np.float16), np.array([True]),
              np.zeros((0, 2))):
        back = decode_tensor(encode_tensor(a))
        assert back.dtype == np.asarray(a).dtype and np.array_equal(back, a)


def test_golden_tensors_keep_their_rank_and_decode_without_ml_dtypes(monkeypatch):
    """A 0-d output encodes as shape [] (np.ascontiguousarray made it [1]); a bfloat16 or float8 one
    decodes as its bit patterns where ml_dtypes is missing (np.dtype("bfloat16") raised there: a device
    without the host extras failed such a release's self-test), as that device's model gives them."""
    import ml_dtypes

    from runtime_wasm import spec

    scalar = encode_tensor(np.float32(2.5))
    assert scalar["shape"] == [] and decode_tensor(scalar).shape == ()
    b = np.array([1.5, -2.0, 0.0], ml_dtypes.bfloat16)
    f8 = np.array([0.5, -4.0], ml_dtypes.float8_e4m3fn)
    got = decode_tensor(encode_tensor(b))
    assert got.dtype == ml_dtypes.bfloat16 and np.array_equal(got, b)
    monkeypatch.setattr(spec, "_ml_dtypes", lambda: None)
    for a, store in ((b, np.uint16), (f8, np.uint8)):
        got = decode_tensor(encode_tensor(a))
        assert got.dtype == store and np.array_equal(got, a.view(store))
        assert np.array_equal(got, spec.from_storage(a.dtype.name, a.view(store)))


def test_a_stored_type_tensor_passes_the_harness_as_the_instance_views_it():
    """An int4 tensor (the harness viewed memory with ``np.dtype('int4')``, which numpy does not know; the
    instance views a stored type as its storage, ``storage_dtype``)."""
    data = regression("model_json", "int4-tensor")
    spec = ModelSpec.from_json(data)
    assert "int4" in {t.dtype for t in (*spec.inputs, *spec.outputs, *spec.states)}
    model_json.setup()(data)


def test_every_model_json_seed_still_loads():
    """The specs ``to_json`` writes (stateful, threaded with a weights tree, strings with a length, an
    unknown field) pass the schema, and unknown fields survive the round trip as before."""
    for data in model_json.seeds():
        spec = ModelSpec.from_json(data)
        assert ModelSpec.from_json(spec.to_json()) == spec
    newer = ModelSpec.from_json(model_json.seeds()[-1])
    assert newer.extra["newer_field"] == {"kept": True}
    assert json.loads(newer.to_json())["extra"]["newer_field"] == {"kept": True}


# -- a bundle's signed manifest, signed by a trusted key -------------------------------------------------
@pytest.mark.parametrize("name, match", [
    ("spec-weights-size-string", r"weights_size: must be an integer"),  # was a TypeError
    ("spec-dim-2-63", r"shape\[0\]: must be in \[0, 2147483647\]"),  # was accepted: an impossible spec
    ("spec-dtype-timestamp", r"outputs\[0\]\.dtype: is not a dtype the runtime supports"),  # ValueError
    ("spec-dtype-lone-surrogate", r"inputs\[0\]\.dtype: is not valid UTF-8"),  # UnicodeEncodeError
    ("expires-past-year-9999", r"expires: .* is outside 1970-9000"),  # OverflowError adding the grace
])
def test_malformed_signed_manifest_is_a_format_error(name, match):
    """Re-signed with the release key the root delegates, so only the content can be refused."""
    with pytest.raises(FormatError, match=match):
        manifest.setup()(regression("manifest", name))


def test_signed_seeds_verify():
    """The harness reaches past the signature: the release as ``make_manifest`` writes it verifies."""
    manifest.setup()(manifest.seeds()[0])


# -- trust state and root rotation -----------------------------------------------------------------------
@pytest.mark.parametrize("doc, match", [
    ({"root": [], "release_counter": 0}, r"trust state: root: must be an object"),
    ({"release_counter": 0}, r"trust state: root: is missing"),
    ({"root": {}, "release_counter": "5"}, r"release_counter: must be an integer"),
    ({"root": {}, "release_counter": 2**64}, r"release_counter: must be in"),
])
def test_malformed_trust_state_is_a_format_error(doc, match):
    with pytest.raises(FormatError, match=match):
        trust.setup()(json.dumps(doc).encode())


@pytest.mark.parametrize("change, match", [
    ({"version": 1.0}, r"version: must be an integer, got float"),
    ({"root_threshold": True}, r"root_threshold: must be an integer, got bool"),
    ({"revoked": [["x"]]}, r"revoked\[0\]: must be a string"),
    ({"root_keys": {"AB" * 32: "00" * 32}}, r"root_keys key: is malformed"),
])
def test_malformed_root_is_a_format_error(change, match):
    """Signed by every root key: the schema, not the signature, refuses it."""
    with pytest.raises(FormatError, match=match):
        trust.setup()(json.dumps([{**_signed.root_doc(1), **change}]).encode())


def test_root_rotation_seeds_apply():
    """v1 -> v2 -> v3 through the harness (each link signed by the old and the new root's key)."""
    trust.setup()(trust.seeds()[3])


# -- the installer's own state files ---------------------------------------------------------------------
@pytest.fixture
def state(tmp_path: Path) -> Path:
    Installer(tmp_path / "state", _signed.HW, root=_signed.sign_root(_signed.root_doc(1)))
    return tmp_path / "state"


@pytest.mark.parametrize("pointer", [b'{"slot": ["a"]}', b'{"slot": "c"}', b"[]", b"\xff"])
def test_corrupt_active_pointer_is_a_corrupt_slot(state, pointer):
    (state / POINTER_FILE).write_bytes(pointer)
    with pytest.raises(CorruptSlot, match="active pointer"):
        Installer(state, _signed.HW, read_only=True).active_dir()


@pytest.mark.parametrize("installed", [
    b'{"signed": 1, "signatures": []}', b'{"signed": {}, "signatures": {}}',
    b'{"signed": {"type": "cuvil-bundle", "release": "1"}, "signatures": []}'])
def test_corrupt_installed_manifest_is_a_corrupt_slot(state, installed):
    (state / POINTER_FILE).write_bytes(b'{"slot": "a"}')
    (state / "slots" / "a").mkdir(parents=True)
    (state / "slots" / "a" / ENVELOPE_FILE).write_bytes(installed)
    with pytest.raises(CorruptSlot, match="slot a"):
        Installer(state, _signed.HW, read_only=True).active_manifest()


def test_corrupt_trust_file_is_a_format_error(state):
    saved = json.loads((state / TRUST_FILE).read_bytes())
    (state / TRUST_FILE).write_bytes(canonical_bytes({**saved, "release_counter": -1}))
    with pytest.raises(FormatError, match="release_counter: must be in"):
        Installer(state, _signed.HW, read_only=True).trust  # noqa: B018
