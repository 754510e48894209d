"""The signed bundle format ("a device must never run unsigned code"): the header is exactly its canonical
JSON with no duplicate keys and bounded nesting, so every reader sees the one document the signatures
cover; golden inputs cover each input's real range. Real Ed25519 keys, real compiled models."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.signing import (
    Keyring,
    add_signatures,
    build_bundle,
    golden_vectors,
    make_manifest,
    sign_envelope,
)
from ota import FormatError, OtaConfig, TrustState, read_header, verify_bundle
from ota.bundle import MAGIC
from ota.crypto import MAX_JSON_DEPTH, canonical_bytes, nesting_depth, parse_json
from ota.golden import GOLDEN_FILE, decode_vector
from runtime_wasm import ModelSpec
from runtime_wasm.errors import InferenceInputError, SpecError
from runtime_wasm.loader import load_model_dir
from tests.support.install import compile_matmul

HW = "test-device"
RELEASE = 3
TABLE_ROWS = 50  # the smaller of the two tables the id input indexes


def compile_onnx(out: Path, nodes, inputs, outputs, initializers=()) -> Path:
    graph = helper.make_graph(nodes, out.name, inputs, outputs, list(initializers))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return CuvilModel.load(proto).optimize(targets=[Target()]).save(out)


def vi(name: str, elem: int, shape: list[int]):
    return helper.make_tensor_value_info(name, elem, shape)


class World:
    """A 1-of-1 keyring, the device's trust state, and the compiled test models."""

    def __init__(self, base: Path) -> None:
        self.ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1,
                                 release_threshold=1)
        self.trust = TrustState(self.ring.root_envelope(1))
        rng = np.random.default_rng(0)
        w = rng.standard_normal((16, 8)).astype(np.float32)
        self.float_model = compile_onnx(
            base / "mm",
            [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
            [vi("x", TensorProto.FLOAT, [2, 16])], [vi("y", TensorProto.FLOAT, [2, 8])],
            [numpy_helper.from_array(w, "w")])
        self.byte_models = {
            dt: compile_onnx(base / dt, [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
                             [vi("x", elem, [4, 64])], [vi("y", TensorProto.FLOAT, [4, 64])])
            for dt, elem in (("uint8", TensorProto.UINT8), ("int8", TensorProto.INT8))}
        # ids index an 80-row table directly and the 50-row one through a cast and a reshape: the bound is
        # the smaller table, found through value-preserving ops
        self.table = rng.standard_normal((TABLE_ROWS, 4)).astype(np.float32)
        big = rng.standard_normal((80, 4)).astype(np.float32)
        self.ids_model = compile_onnx(
            base / "ids",
            [helper.make_node("Gather", ["big", "ids"], ["y_big"]),
             helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
             helper.make_node("Reshape", ["ids32", "flat"], ["ids_flat"]),
             helper.make_node("Gather", ["table", "ids_flat"], ["y"])],
            [vi("ids", TensorProto.INT64, [2, 32])],
            [vi("y", TensorProto.FLOAT, [64, 4]), vi("y_big", TensorProto.FLOAT, [2, 32, 4])],
            [numpy_helper.from_array(self.table, "table"), numpy_helper.from_array(big, "big"),
             numpy_helper.from_array(np.array([64], np.int64), "flat")])
        self.manifest, self.payloads = make_manifest(self.float_model, version="1.0.3", release=RELEASE,
                                                     hardware_ids=[HW])
        self.envelope = sign_envelope(self.manifest, self.ring.release_keys())

    def bundle(self, header: bytes) -> io.BytesIO:
        """A bundle file with ``header`` as given and this world's payloads."""
        body = b"".join(self.payloads[f["name"]] for f in self.manifest["files"])
        return io.BytesIO(MAGIC + len(header).to_bytes(4, "big") + header + body)

    def verify(self, header: bytes):
        return verify_bundle(self.bundle(header), self.trust, datetime.now(timezone.utc), HW)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return World(tmp_path_factory.mktemp("bundle_format"))


def refused(world: World, header: bytes, match: str) -> None:
    """Refused by the header reader alone and by the whole verification, as a ``FormatError``."""
    with pytest.raises(FormatError, match=match):
        read_header(world.bundle(header), OtaConfig())
    with pytest.raises(FormatError, match=match):
        world.verify(header)


# -- 1. duplicate keys, non-canonical headers ---------------------------------------------------------
@pytest.mark.parametrize("anchor, first", [
    (b'"signatures":', b'"signatures":[],'),  # first copy: unsigned
    (b'"release":%d' % RELEASE, b'"release":1,'),  # first copy: an older release
    (b'"hardware_ids":', b'"hardware_ids":["elsewhere"],'),  # first copy: another target (nested)
], ids=["envelope_signatures", "signed_release", "nested_hardware_ids"])
def test_duplicate_key_in_the_header_is_refused(world, anchor, first):
    """The last copy is the validly signed one, so a last-wins parser accepted the bundle while a
    first-wins tool saw another manifest under the same signature."""
    header = canonical_bytes(world.envelope)
    assert header.count(anchor) == 1
    dup = header.replace(anchor, first + anchor)
    key = first.split(b'"')[1].decode()
    assert json.loads(dup) == world.envelope  # what a last-wins parser made of it: signed and valid
    refused(world, dup, f"duplicate key '{key}'")
    with pytest.raises(FormatError, match=f"duplicate key '{key}'"):
        parse_json(dup, "message")  # everywhere parse_json reads: MQTT messages, installed manifests


@pytest.mark.parametrize("render", [
    lambda env: json.dumps(env, sort_keys=True).encode(),  # spaces after ',' and ':'
    lambda env: json.dumps(env, separators=(",", ":")).encode(),  # keys in insertion order
    lambda env: canonical_bytes(env).replace(b'"cuvil-bundle"', b'"cuvil\\u002dbundle"'),  # needless escape
], ids=["spaces", "key_order", "escape"])
def test_non_canonical_header_is_refused(world, render):
    header = render(world.envelope)
    assert header != canonical_bytes(world.envelope) and json.loads(header) == world.envelope
    refused(world, header, "not canonical")


def test_canonical_header_is_accepted(world):
    envelope, manifest = world.verify(canonical_bytes(world.envelope))
    assert envelope == world.envelope and manifest.release == RELEASE


def test_host_writes_canonical_headers(world, tmp_path):
    """``build_bundle`` (via ``write_bundle``) and ``add_signatures`` write exactly the canonical header."""
    path = tmp_path / "m.cvb"
    build_bundle(world.float_model, path, world.ring.release_keys(), version="1.0.3", release=RELEASE,
                 hardware_ids=[HW])
    for envelope in (read_header(io.BytesIO(path.read_bytes()), OtaConfig()),
                     add_signatures(path, world.ring.release_keys())):
        data = path.read_bytes()
        assert data[12:12 + int.from_bytes(data[8:12], "big")] == canonical_bytes(envelope)
        with path.open("rb") as f:
            assert verify_bundle(f, world.trust, datetime.now(timezone.utc), HW)[1].release == RELEASE


# -- 2. nesting depth ---------------------------------------------------------------------------------
def test_parse_json_accepts_the_depth_limit_and_refuses_one_more():
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x") is not None
    assert parse_json('{"a":' * MAX_JSON_DEPTH + "0" + "}" * MAX_JSON_DEPTH, "x") is not None
    with pytest.raises(FormatError, match="deeper than"):
        parse_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "x")
    with pytest.raises(FormatError, match="deeper than"):
        parse_json(b"[" * 100000 + b"]" * 100000, "x")


def test_brackets_inside_strings_do_not_count():
    assert nesting_depth('{"a":"[[[[{{{\\"[[[","b":[1]}') == 2
    assert parse_json('["' + "[" * 1000 + '"]', "x") == ["[" * 1000]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 900, 100000])
def test_deeply_nested_spec_is_refused_at_parse(world, depth):
    """900 levels passed the parser and failed later (RecursionError in canonical_bytes or the spec);
    now any depth over the limit is a ``FormatError`` from the parser, before anything else runs."""
    header = canonical_bytes({**world.envelope, "signed": {**world.manifest, "spec": "@"}})
    refused(world, header.replace(b'"@"', b"[" * depth + b"]" * depth), "deeper than")


def test_real_headers_nest_far_below_the_limit(world, tmp_path):
    """The deepest real header is a mixed-precision release (its per-layer plan is in spec and manifest)."""
    rng = np.random.default_rng(1)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "mixed",
        [vi("x", TensorProto.FLOAT, [2, 16])], [vi("y", TensorProto.FLOAT, [2, 8])],
        [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
         for n, s in (("w1", (16, 32)), ("w2", (32, 8)))])
    mixed = CuvilModel.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    calibration = [{"x": rng.standard_normal((2, 16)).astype(np.float32)} for _ in range(8)]
    mixed.optimize("mixed", targets=[Target()], calibration=calibration).save(tmp_path / "mixed")
    releases = [(m, None) for m in (world.float_model, world.ids_model, *world.byte_models.values())]
    assert mixed.quantization is not None
    for model, quantization in [*releases, (tmp_path / "mixed", mixed.quantization.record)]:
        manifest, _ = make_manifest(model, version="1.0.1", release=1, hardware_ids=[HW],
                                    quantization=quantization)
        header = canonical_bytes(sign_envelope(manifest, world.ring.release_keys()))
        assert nesting_depth(header.decode()) < 10


# -- 3. golden inputs over each input's real range ----------------------------------------------------
def golden_inputs(model_dir: Path, name: str) -> np.ndarray:
    return np.concatenate([decode_vector(v)[0][name].ravel() for v in golden_vectors(model_dir)])


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_golden_bytes_cover_the_whole_dtype_range(world, dtype):
    """Normal draws cast to int only ever gave -3..3 (0..3 and 253..255 for uint8): a byte model's
    self-test never saw most values."""
    x = golden_inputs(world.byte_models[dtype], "x")
    info = np.iinfo(dtype)
    assert x.dtype == dtype and x.min() <= info.min + 10 and x.max() >= info.max - 10
    assert len(np.unique(x)) > 128  # 512 uniform draws: about 222 of the 256 values


def test_golden_ids_index_real_rows_of_the_smallest_table(world):
    spec = ModelSpec.from_json((world.ids_model / "model.json").read_text())
    assert spec.inputs[0].index_bound == TABLE_ROWS
    for v in golden_vectors(world.ids_model):
        inputs, outputs = decode_vector(v)
        ids = inputs["ids"]
        assert ids.dtype == np.int64 and 0 <= ids.min() and ids.max() < TABLE_ROWS
        assert len(np.unique(ids)) > 10
        np.testing.assert_array_equal(outputs["y"], world.table[ids.ravel()])


def test_golden_floats_are_unchanged_and_seeded(world):
    rng = np.random.default_rng(0)
    vectors = golden_vectors(world.float_model)
    for v in vectors:  # the same draws as before integer ranges were added
        want = rng.standard_normal((2, 16)).astype(np.float32)
        np.testing.assert_array_equal(decode_vector(v)[0]["x"], want)
    assert golden_vectors(world.float_model) == vectors != golden_vectors(world.float_model, seed=1)


@pytest.mark.parametrize("bad", [TABLE_ROWS, 10**6, -TABLE_ROWS - 1])
def test_ids_past_the_table_are_refused_not_clamped(world, bad):
    """The compiled lookup clamps an id to a row; the runtime refuses ids outside [-rows, rows) before the
    run (socket, scheduler and Python callers alike); ids inside, negative ones counting from the end as in
    ONNX, still give the table's rows."""
    model = load_model_dir(world.ids_model)
    ids = np.resize(np.int64([0, 7, -1, -TABLE_ROWS, TABLE_ROWS - 1]), model.spec.inputs[0].shape)
    np.testing.assert_array_equal(model.predict([ids])["y"], world.table[ids.ravel()])
    ids.flat[3] = bad
    with pytest.raises(InferenceInputError, match=f"table of {TABLE_ROWS} rows"):
        model.predict([ids])


def test_index_bound_is_optional_in_the_spec(world):
    """Specs written before the field load unchanged (and are written without it); a bound < 1 is refused."""
    d = json.loads((world.ids_model / "model.json").read_text())
    assert d["inputs"][0]["index_bound"] == TABLE_ROWS
    del d["inputs"][0]["index_bound"]
    old = ModelSpec.from_json(json.dumps(d))
    assert old.inputs[0].index_bound is None
    assert "index_bound" not in old.to_json()
    d["inputs"][0]["index_bound"] = 0
    with pytest.raises(SpecError, match="index_bound"):
        ModelSpec.from_json(json.dumps(d))


def test_golden_vectors_past_the_header_ship_as_a_signed_payload(tmp_path):
    """A model whose outputs are large (2 x 250,000 floats, ~2.7 MB of golden vector each): the default two
    vectors would pass the 4 MiB header a device reads, so they ship whole in the ``golden.json`` payload
    (its sha256 under the signature like every payload's) and the header stays under the limit; small
    vectors stay in the header, where agents from before the payload read them."""
    model = compile_matmul(tmp_path / "wide", seed=3, n_in=1, n_out=250_000)
    ring = Keyring.init(tmp_path / "keys", 1, 1, 1, 1)
    manifest, payloads = make_manifest(model, version="1.0.0", release=1, hardware_ids=["hw"])
    assert manifest["golden"] == [] and len(canonical_bytes(manifest)) < OtaConfig().max_manifest_bytes
    vectors = json.loads(payloads[GOLDEN_FILE])
    assert vectors == golden_vectors(model)  # both default vectors, none dropped
    entry = next(f for f in manifest["files"] if f["name"] == GOLDEN_FILE)
    assert entry["sha256"] == hashlib.sha256(payloads[GOLDEN_FILE]).hexdigest()
    out = tmp_path / "wide.cvb"
    build_bundle(model, out, ring.release_keys(), version="1.0.0", release=1, hardware_ids=["hw"])
    with out.open("rb") as f:
        signed = read_header(f, OtaConfig())["signed"]
    assert signed["golden"] == [] and GOLDEN_FILE in [f["name"] for f in signed["files"]]
    small, small_payloads = make_manifest(compile_matmul(tmp_path / "small", seed=3, n_in=1, n_out=4),
                                          version="1.0.0", release=1, hardware_ids=["hw"])
    assert len(small["golden"]) == 2 and GOLDEN_FILE not in small_payloads
