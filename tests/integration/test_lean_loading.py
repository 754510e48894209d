"""Lean loading on the device (issue 10): weights go from the file straight into linear memory, checked
against the spec's sha256 on the way in; supervised workers read the file themselves.

Peak RSS is read from ``/proc/self/status`` (VmHWM) in a fresh process: a child's ``ru_maxrss``
inherits the parent's high-water mark across fork+exec (MEASUREMENTS.md), so it would measure pytest."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
import wasmtime
from onnx import TensorProto, helper, numpy_helper

from cuvil_edge import CuvilModel
from cuvil_edge.buildcache import BuildCache, BuildCacheConfig
from cuvil_edge.here import host_target
from runtime_wasm import ModelSource, ModuleCache, SpecError, SupervisedModel
from runtime_wasm.digest import TREE_CHUNK, TREE_CHUNK_MIN, weights_tree_sha256
from runtime_wasm.engine import EngineConfig, engine_for
from runtime_wasm.instance import _shared_memory_type, _SharedMemory
from runtime_wasm.loader import SPEC_FILE, WEIGHTS_FILE, load_model_dir, read_model_dir
from runtime_wasm.spec import EXPORT_WEIGHTS
from tests.support.procfs import vm_flags

pytestmark = pytest.mark.integration
NO_CACHE = BuildCache(BuildCacheConfig(enabled=False))


def matmul_model(n: int, seed: int = 0) -> onnx.ModelProto:
    """y = relu(x @ W + b) with W n x n: 4 n^2 bytes of weights in one tensor."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((n, n), dtype=np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(n, dtype=np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build_dir(path: Path, n: int) -> tuple[Path, dict[str, np.ndarray], np.ndarray]:
    """A saved model directory, an input and the host build's output for it."""
    model = CuvilModel.load(matmul_model(n)).optimize(targets=[host_target()], build_cache=NO_CACHE)
    x = {"x": np.random.default_rng(1).standard_normal((1, n), dtype=np.float32)}
    want = model.predict(x)["y"]
    model.save(path)
    model.close()
    return path, x, want


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray], np.ndarray]:
    return build_dir(tmp_path_factory.mktemp("lean") / "mm.cuvil", 256)


@pytest.fixture
def modules(tmp_path: Path) -> ModuleCache:
    return ModuleCache(tmp_path / "modules")


def test_outputs_are_unchanged_from_the_host_build(small, modules):
    path, x, want = small
    with load_model_dir(path, cache=modules) as m:
        np.testing.assert_array_equal(m.predict(x)["y"], want)
    with load_model_dir(path, cache=modules) as m:  # precompiled-cache hit
        np.testing.assert_array_equal(m.predict(x)["y"], want)
    assert modules.hits == 1


def tamper(src: Path, dst: Path, how: str) -> Path:
    import shutil

    shutil.copytree(src, dst)
    w = dst / WEIGHTS_FILE
    data = bytearray(w.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 1
    w.write_bytes(bytes(data[:-4] if how == "truncate" else data))
    return dst


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_a_tampered_weights_file_is_refused(small, modules, tmp_path, how):
    """Whether the hash (on a thread of its own, behind the reads) or the read finds it, the thread ends."""
    bad = tamper(small[0], tmp_path / "bad", how)
    with pytest.raises(SpecError, match="weights"):
        load_model_dir(bad, cache=modules)
    assert not [t for t in threading.enumerate() if t.name.startswith("cuvil-weights-sha256")]


def respec(src: Path, dst: Path, **fields: object) -> Path:
    """A copy of a model directory whose spec has ``fields`` replaced (``None``: removed)."""
    import shutil

    shutil.copytree(src, dst)
    d = json.loads((dst / SPEC_FILE).read_text())
    d.update(fields)
    (dst / SPEC_FILE).write_text(json.dumps({k: v for k, v in d.items() if v is not None}))
    return dst


def test_the_tree_hash_is_what_a_load_checks(small, modules, tmp_path):
    """A built spec carries the tree; a load checks it (and not the flat hash) when it is there."""
    path, x, want = small
    spec = read_model_dir(path)[0]
    weights = (path / WEIGHTS_FILE).read_bytes()
    assert spec.weights_tree_chunk == TREE_CHUNK
    assert spec.weights_tree_sha256 == weights_tree_sha256(weights, TREE_CHUNK)
    flat_wrong = respec(path, tmp_path / "flat", weights_sha256="0" * 64)
    with load_model_dir(flat_wrong, cache=modules) as m:
        np.testing.assert_array_equal(m.predict(x)["y"], want)
    tree_wrong = respec(path, tmp_path / "tree", weights_tree_sha256="0" * 64)
    with pytest.raises(SpecError, match="tree sha256"):
        load_model_dir(tree_wrong, cache=modules)


def test_a_chunk_of_many_is_checked(small, modules, tmp_path):
    """Small chunks (the 256 KB weights in four): a flipped byte in the last but one is found."""
    path, x, want = small
    root = weights_tree_sha256((path / WEIGHTS_FILE).read_bytes(), TREE_CHUNK_MIN, 4)
    many = respec(path, tmp_path / "many", weights_tree_chunk=TREE_CHUNK_MIN, weights_tree_sha256=root)
    with load_model_dir(many, cache=modules) as m:
        np.testing.assert_array_equal(m.predict(x)["y"], want)
    w = many / WEIGHTS_FILE
    data = bytearray(w.read_bytes())
    data[2 * TREE_CHUNK_MIN + 5] ^= 0x80
    w.write_bytes(bytes(data))
    with pytest.raises(SpecError, match="tree sha256"):
        load_model_dir(many, cache=modules)
    assert not [t for t in threading.enumerate() if t.name.startswith("cuvil-weights-sha256")]


def test_a_spec_from_before_the_tree_still_loads_and_is_checked(small, modules, tmp_path):
    path, x, want = small
    old = respec(path, tmp_path / "old", weights_tree_sha256=None, weights_tree_chunk=None)
    assert not read_model_dir(old)[0].weights_tree_sha256
    with load_model_dir(old, cache=modules) as m:
        np.testing.assert_array_equal(m.predict(x)["y"], want)
    bad = tamper(old, tmp_path / "old-bad", "flip")
    with pytest.raises(SpecError, match="recorded sha256"):
        load_model_dir(bad, cache=modules)


def test_workers_read_the_weights_file_themselves(small, tmp_path):
    path, x, want = small
    source = ModelSource.from_dir(path, cache_dir=str(tmp_path / "modules"))
    assert isinstance(source.weights, str), "a path travels to workers, not the bytes"
    assert len(pickle.dumps(source)) < source.spec.weights_size / 4
    with SupervisedModel(source, 64 << 20) as sm:
        np.testing.assert_array_equal(sm.predict(x, timeout_s=30)["y"], want)
    bad = ModelSource.from_dir(tamper(path, tmp_path / "bad", "flip"), cache_dir=str(tmp_path / "modules"))
    with pytest.raises(SpecError, match="weights"):
        SupervisedModel(bad, 64 << 20)


_PEAK = textwrap.dedent("""
    import json, sys
    import numpy as np
    from runtime_wasm import ModuleCache
    from runtime_wasm.loader import instantiate, load_model_dir, read_model_dir

    def hwm():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

    path, cache, mode = sys.argv[1], ModuleCache(sys.argv[2]), sys.argv[3]
    base = hwm()
    if mode == "file":
        m = load_model_dir(path, cache=cache)
    else:  # the old way: weights read into bytes, then copied into linear memory
        spec, variant, wasm, weights = read_model_dir(path)
        m = instantiate(spec, wasm, weights.read_bytes(), variant, cache)
    m.run()
    print(json.dumps({"base": base, "peak": hwm(), "weights": m.spec.weights_size}))
""")


def peak_growth(path: Path, cache: Path, mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", _PEAK, str(path), str(cache), mode], capture_output=True,
                         text=True, check=True).stdout
    r = json.loads(out)
    return r["peak"] - r["base"], r["weights"]


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    return build_dir(tmp_path_factory.mktemp("lean") / "big.cuvil", 5000)[0]  # 100 MB of weights


def _rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_instantiating_a_threaded_module_touches_none_of_its_weights(big, modules):
    """Its weights lie above the static data, not in ``.bss``: the start function zero-filled ``.bss`` of the
    imported shared memory, faulting in every page of the weights before they were read (RSS +100 MB)."""
    spec, variant, wasm, _ = read_model_dir(big)
    config = EngineConfig(variant.tier)
    module = modules.load(wasm, config)
    memory_type = _shared_memory_type(module)
    assert spec.threads > 1 and memory_type is not None
    memory = _SharedMemory(engine_for(config), memory_type)
    before = _rss()
    wasmtime.Instance(wasmtime.Store(engine_for(config)), module, [memory])
    grown = _rss() - before
    assert grown < spec.weights_size / 10, f"instantiation faulted in {grown / 1e6:.0f} MB"


def test_the_weights_are_loaded_onto_huge_pages(big, modules):
    """Advised before they are read (one fault per 2 MiB instead of per 4 KiB: a fifth of a 46.5 MB load)."""
    with load_model_dir(big, cache=modules) as m:
        base = m._exports[EXPORT_WEIGHTS](m._store)
        middle = m._view(base + m.spec.weights_size // 2, np.dtype(np.uint8), (1,)).ctypes.data
        assert "hg" in vm_flags(middle)


def test_peak_rss_holds_the_weights_once(big, tmp_path):
    """Loading ~100 MB of weights grows peak RSS by the weights (in linear memory) plus at most half their
    size for everything else (module, arena, chunk buffers; measured: a few MB). Read into bytes first, the
    weights were held twice (the ``bytes`` mode, kept here to show the measurement tells them apart)."""
    path = big
    cache = tmp_path / "modules"
    peak_growth(path, cache, "file")  # compile once: both measured loads hit the module cache
    lean, weights = peak_growth(path, cache, "file")
    old, _ = peak_growth(path, cache, "bytes")
    assert weights >= 100_000_000
    assert lean < 1.5 * weights, f"lean load grew peak RSS by {lean / weights:.2f}x the weights"
    assert old > 1.8 * weights, f"old load grew peak RSS by {old / weights:.2f}x the weights"
