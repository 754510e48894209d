"""The signed-install world: a seeded MatMul+Relu compiled as a model directory, hand-written WAT model
directories, bundles signed without the host's checks, a keyring with releases 1 and 2 and a template
device state with release 1 installed, and the checks that a state still serves what it should."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import wasmtime
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel, Target
from cuvil_edge.signing import Keyring, build_bundle, make_manifest, sign_envelope, write_signed_bundle
from ota import Installer
from ota.bundle import MAGIC
from ota.crypto import canonical_bytes
from ota.golden import decode_vector
from ota.installer import ENVELOPE_FILE
from runtime_wasm import ModelSpec, TensorSpec, VariantSpec
from runtime_wasm.loader import load_model_dir

ROOT = Path(__file__).resolve().parents[2]
HW = "test-device"
RELEASE_FIELDS = {"hardware_ids": [HW]}


def compile_matmul(out: Path, seed: int, n_in: int = 16, n_out: int = 8,
                   targets: Sequence[Target] = (Target(),)) -> Path:
    """MatMul + Relu with seeded weights, compiled (for one variant unless told) and saved as a model
    directory."""
    w = np.random.default_rng(seed).standard_normal((n_in, n_out)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], f"mm{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n_out])],
        [numpy_helper.from_array(w, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return CuvilModel.load(proto).optimize(targets=list(targets)).save(out)


def wat_model(out: Path, run: str = '(func (export "run") unreachable)', weights_ptr: int = 1024,
              arena_ptr: int = 2048, pages: int = 1, file: str = "m.wasm") -> Path:
    """A hand-written model directory (x: f32[4] at arena+0, y: f32[4] at arena+16) whose ``run`` is
    ``run``; by default it satisfies the loader but executes ``unreachable``."""
    wasm = wasmtime.wat2wasm(f"""(module (memory (export "memory") {pages}) {run}
        (func (export "cuvil_weights") (result i32) i32.const {weights_ptr})
        (func (export "cuvil_arena") (result i32) i32.const {arena_ptr}))""")
    variant = VariantSpec("f32-wasmsimd-x86", "simd128", "x86", file, hashlib.sha256(wasm).hexdigest(),
                          len(wasm))
    spec = ModelSpec("wat", (TensorSpec("x", "float32", (4,), 0),), (TensorSpec("y", "float32", (4,), 16),),
                     weights_size=0, arena_size=32, variants=(variant,),
                     weights_sha256=hashlib.sha256().hexdigest())
    out.mkdir()
    (out / "model.json").write_text(spec.to_json())
    (out / "weights.bin").write_bytes(b"")
    (out / file).write_bytes(wasm)
    return out


def write_raw_bundle(path: Path, manifest: dict, keys, payloads: dict[str, bytes]) -> Path:
    """A validly signed bundle written without the host's own checks (as a compromised build could)."""
    header = canonical_bytes(sign_envelope(manifest, keys))
    path.write_bytes(MAGIC + len(header).to_bytes(4, "big") + header
                     + b"".join(payloads[f["name"]] for f in manifest["files"]))
    return path


class World:
    """Everything the tests share: keyring, model dirs, release manifests and bundles, a template state."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.ring = Keyring.init(base / "keys", root_keys=3, root_threshold=2, release_keys=2,
                                 release_threshold=2)
        self.models = {n: compile_matmul(base / f"m{n}", seed=n) for n in (1, 2)}
        self.bundles = {n: self.bundle(n, self.models[n]) for n in (1, 2)}
        self.manifest2, self.payloads2 = make_manifest(self.models[2], version="1.0.2", release=2,
                                                       **RELEASE_FIELDS)
        self.template = base / "template"
        Installer(self.template, HW, root=self.ring.root_envelope(1)).install(self.bundles[1])

    def bundle(self, release: int, model_dir: Path, **fields) -> Path:
        out = self.base / f"r{release}-{len(list(self.base.glob('*.cvb')))}.cvb"
        build_bundle(model_dir, out, self.ring.release_keys(), version=f"1.0.{release}", release=release,
                     **{**RELEASE_FIELDS, **fields})
        return out

    def signed(self, path: Path, keys, **changes) -> Path:
        """Release 2's payloads under a manifest changed by ``changes``, signed by ``keys``."""
        write_signed_bundle(path, sign_envelope({**self.manifest2, **changes}, keys), self.payloads2)
        return path


def assert_serving(state_dir: Path, release: int) -> None:
    """A fresh installer (as after a restart) finds ``release`` active, intact and passing its self-test,
    and nothing partial anywhere."""
    inst = Installer(state_dir, HW)
    assert inst.verify_active().release == release
    manifest = inst.active_manifest()
    inputs, want = decode_vector(manifest.golden[0])
    with load_model_dir(inst.active_dir(), cache=inst.cache) as model:
        np.testing.assert_allclose(model.predict(inputs)["y"], want["y"], rtol=1e-5, atol=1e-5)
    assert not list(state_dir.rglob("*.tmp"))
    for slot in (state_dir / "slots").iterdir():
        assert (slot / ENVELOPE_FILE).exists(), f"partial files left in slot {slot.name}"


def only_active_slot(state_dir: Path) -> None:
    assert len(list((state_dir / "slots").iterdir())) == 1, "the rejected bundle left a slot behind"
