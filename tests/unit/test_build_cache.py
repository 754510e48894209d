"""Build cache (issue 10): a second ``optimize`` of the same model bytes, options and compiler reuses the
first build without compiling, any change misses, corrupt entries are rebuilt, concurrent builders agree,
and the cache stays under its size bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import cuvil_edge.buildcache
import cuvil_edge.model
from cuvil_edge import ALL_TARGETS, CuvilModel
from cuvil_edge.buildcache import (
    MANIFEST,
    STAT_RECORD,
    BuildCache,
    BuildCacheConfig,
    BuildCacheError,
    data_digest,
)
from cuvil_edge.errors import ModelFormatError, QuantizationError
from cuvil_edge.here import host_target
from runtime_wasm.loader import SPEC_FILE, WEIGHTS_FILE

X = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)


def tiny(seed: int = 0) -> onnx.ModelProto:
    """MatMul + Add + Relu: quantizable (one gemm layer) and quick to build."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def calib(seed: int = 2) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(4)]


@pytest.fixture
def cache(tmp_path: Path) -> BuildCache:
    return BuildCache(BuildCacheConfig(tmp_path / "builds"))


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per ``compile_graph`` call made by ``optimize``."""
    return counted(monkeypatch, cuvil_edge.model, "compile_graph")


def counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """``module.name`` still runs, and each call appends to the list returned."""
    calls: list[int] = []
    real = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def build(cache: BuildCache | None, model: onnx.ModelProto | None = None, **options) -> CuvilModel:
    """``optimize`` through ``cache``; None: a fresh build with caching off."""
    cache = cache or BuildCache(BuildCacheConfig(enabled=False))
    options = {"targets": [host_target()], **options}
    return CuvilModel.load(model or tiny()).optimize(build_cache=cache, **options)


def entries(cache: BuildCache) -> list[Path]:
    return sorted(p for p in cache.directory.iterdir() if not p.name.startswith("."))


def test_second_optimize_hits_without_compiling_and_matches_a_fresh_build(cache, monkeypatch):
    options = {"precision": "int8", "calibration": calib()}
    first = build(cache, **options)
    assert not first.build_cache_hit and len(entries(cache)) == 1

    def never(*_a, **_k):
        raise AssertionError("the compiler ran on a cache hit")

    with monkeypatch.context() as m:
        for name in ("compile_graph", "optimize_graph"):
            m.setattr(cuvil_edge.model, name, never)
        m.setattr("cuvil_edge.quant.quantize", never)
        second = build(cache, **options)
        assert second.build_cache_hit and cache.hits == 1
        got = second.predict({"x": X})["y"]
    fresh = build(None, **options)
    np.testing.assert_array_equal(got, fresh.predict({"x": X})["y"])  # bit for bit
    # the host's view comes back on demand (here the compiler may run again)
    assert second.compiled.spec.to_json() == fresh.compiled.spec.to_json()
    assert second.quantization.record == fresh.quantization.record


def test_calibration_from_a_generator_is_hashed_and_still_fully_used(cache):
    first = build(cache, precision="int8", calibration=(s for s in calib()))
    assert first.quantization.record["calibration_samples"] == len(calib())
    assert build(cache, precision="int8", calibration=iter(calib())).build_cache_hit


def test_calibration_holding_objects_is_not_cached_and_is_refused_as_a_quantization_error(cache):
    """Python-API samples of objects: no digest (nothing to key a build on), then the quantizer's typed
    error, never a ``TypeError``; nothing was stored."""
    samples = [{"x": np.array([object()] * 16).reshape(1, 16)}]
    assert data_digest(iter(samples))[0] is None and data_digest(calib())[0] is not None
    with pytest.raises(QuantizationError, match="calibration data"):
        build(cache, precision="int8", calibration=samples)
    assert not cache.directory.exists() or entries(cache) == []


def test_save_of_a_hit_writes_the_same_model_directory(cache, tmp_path):
    build(None).save(tmp_path / "fresh")
    build(cache)
    hit = build(cache)
    assert hit.build_cache_hit
    hit.save(tmp_path / "hit")
    files = sorted(p.name for p in (tmp_path / "fresh").iterdir())
    assert SPEC_FILE in files and WEIGHTS_FILE in files
    assert files == sorted(p.name for p in (tmp_path / "hit").iterdir())
    for name in files:
        assert (tmp_path / "fresh" / name).read_bytes() == (tmp_path / "hit" / name).read_bytes()


@pytest.mark.parametrize("change", [
    {"model": tiny(seed=5)},
    {"precision": "fp16"},
    {"calibration": calib(seed=3)},
    {"accuracy_budget": 0.05},
    {"observer": "percentile"},
    {"targets": [host_target(), *[t for t in ALL_TARGETS if t != host_target()][:1]]},
    {"compiler": "another compiler"},
], ids=["model", "precision", "calibration", "budget", "quant-option", "targets", "compiler"])
def test_any_change_that_shapes_the_output_misses(cache, compiles, monkeypatch, change):
    base = {"precision": "int8", "calibration": calib()}
    build(cache, **base)
    build(cache, **base)
    assert len(compiles) == 1, "same inputs must hit"
    if "compiler" in change:
        monkeypatch.setattr("cuvil_edge.buildcache.compiler_fingerprint", lambda: change["compiler"])
    changed = build(cache, **{**base, **{k: v for k, v in change.items() if k != "compiler"}})
    assert not changed.build_cache_hit and len(compiles) == 2


def corrupt_module(entry: Path) -> None:
    wasm = next(entry.glob("*.wasm"))
    data = bytearray(wasm.read_bytes())
    data[len(data) // 2] ^= 0x40
    wasm.write_bytes(bytes(data))


def truncate_manifest(entry: Path) -> None:
    m = entry / MANIFEST
    m.write_bytes(m.read_bytes()[:20])


def drop_weights(entry: Path) -> None:
    (entry / WEIGHTS_FILE).unlink()


@pytest.mark.parametrize("damage", [corrupt_module, truncate_manifest, drop_weights])
def test_a_corrupt_entry_is_rebuilt_never_used(cache, compiles, damage):
    want = build(cache).predict({"x": X})["y"]
    (entry,) = entries(cache)
    damage(entry)
    rebuilt = build(cache)
    assert not rebuilt.build_cache_hit and cache.rejected == 1 and len(compiles) == 2
    np.testing.assert_array_equal(rebuilt.predict({"x": X})["y"], want)
    assert build(cache).build_cache_hit and len(compiles) == 2, "the rebuilt entry is valid again"


def flip_weights(entry: Path) -> None:
    """One bit of the entry's weights, in place (same size, same inode: an open handle sees it)."""
    with open(entry / WEIGHTS_FILE, "r+b") as f:
        f.seek(os.fstat(f.fileno()).st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))


def test_a_hit_reads_its_weights_once_straight_into_the_instance(cache, compiles, monkeypatch):
    """A hit leaves the weights in the entry's file, held open: not read (nor hashed) by ``optimize``, read
    into linear memory by the first instance (checked there), so an eviction meanwhile changes nothing."""
    want = build(cache).predict({"x": X})["y"]
    (entry,) = entries(cache)
    size = (entry / WEIGHTS_FILE).stat().st_size
    hashed: list[int] = []
    real = cuvil_edge.buildcache._digest
    monkeypatch.setattr(cuvil_edge.buildcache, "_digest", lambda data: hashed.append(len(data)) or real(data))
    hit = build(cache)
    assert hit.build_cache_hit and size not in hashed, "optimize read the weights"
    cache.discard(entry.name)  # evicted after the lookup
    assert not entries(cache)
    np.testing.assert_array_equal(hit.predict({"x": X})["y"], want)
    hit.close()  # a new instance reads the held file again, from its start
    np.testing.assert_array_equal(hit.predict({"x": X})["y"], want)
    hit.save(cache.directory.parent / "saved")  # the held file, read and checked against the manifest
    assert (cache.directory.parent / "saved" / WEIGHTS_FILE).stat().st_size == size and size in hashed
    assert len(compiles) == 1 and cache.rejected == 0, "nothing was rebuilt"


@pytest.mark.parametrize("use", ["predict", "save"])
def test_weights_damaged_after_the_lookup_are_caught_and_rebuilt(cache, compiles, tmp_path, use):
    """Weights changed on disk between ``optimize`` (a hit) and their first read never run: the instance
    (or ``save``) finds the digest wrong, the entry is dropped and the model built again, and the next
    build hits a valid entry."""
    want = build(cache).predict({"x": X})["y"]
    hit = build(cache)
    assert hit.build_cache_hit and len(compiles) == 1
    flip_weights(entries(cache)[0])
    if use == "predict":
        np.testing.assert_array_equal(hit.predict({"x": X})["y"], want)
    else:
        hit.save(tmp_path / "saved")
    assert cache.rejected == 1 and len(compiles) == 2
    again = build(cache)
    assert again.build_cache_hit and len(compiles) == 2, "the rebuilt entry is valid again"
    np.testing.assert_array_equal(again.predict({"x": X})["y"], want)
    if use == "save":  # what was saved is the rebuilt model's directory, not the damaged weights
        build(None).save(tmp_path / "fresh")
        for f in (tmp_path / "fresh").iterdir():
            assert (tmp_path / "saved" / f.name).read_bytes() == f.read_bytes()


_BUILDER = textwrap.dedent("""
    import hashlib, sys
    import numpy as np
    from cuvil_edge import ALL_TARGETS, CuvilModel
    from cuvil_edge.here import host_target
    from cuvil_edge.buildcache import BuildCache, BuildCacheConfig
    cache = BuildCache(BuildCacheConfig(sys.argv[2]))
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
    m = CuvilModel.load(sys.argv[1]).optimize(targets=[host_target()], build_cache=cache)
    print(hashlib.sha256(m.predict({"x": x})["y"].tobytes()).hexdigest())
""")


def test_two_concurrent_builders_both_succeed_and_leave_one_valid_entry(tmp_path, cache):
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny(), model)
    procs = [subprocess.Popen([sys.executable, "-c", _BUILDER, str(model), str(cache.directory)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    assert results[0][0] == results[1][0]
    assert [p.name for p in cache.directory.iterdir()] == [entries(cache)[0].name], "no temp dirs left"
    assert cache.get(entries(cache)[0].name) is not None and cache.rejected == 0


def test_least_recently_used_entries_go_first_at_the_size_bound(tmp_path):
    cache = BuildCache(BuildCacheConfig(tmp_path, max_bytes=2500))
    blob = {"weights.bin": bytes(1000)}
    for i, key in enumerate(("a", "b")):
        cache.put(key, blob)
        os.utime(tmp_path / key, (1000 + i, 1000 + i))
    assert cache.get("a") is not None  # now "a" is the most recently used
    cache.put("c", blob)  # three entries > 2500 bytes (with manifests): the least recent ("b") goes
    assert [p.name for p in entries(cache)] == ["a", "c"]
    cache.put("huge", {"weights.bin": bytes(3000)})  # larger than the bound on its own: never stored
    assert [p.name for p in entries(cache)] == ["a", "c"]
    assert sum(f.stat().st_size for d in entries(cache) for f in d.iterdir()) <= 2500


def test_puts_rescan_the_cache_only_after_a_share_of_its_bound(tmp_path):
    """A put scans every entry (``evict``) on this process's first put and then once a sixteenth of
    ``max_bytes`` was put since the last scan: a cache of thousands of entries no longer pays a full scan
    per put, and the bound is overshot by at most that share (plus the entry that crossed it)."""
    scans = []

    class Counted(BuildCache):
        def evict(self) -> None:
            scans.append(sum(f.stat().st_size for d in entries(self) for f in d.iterdir()))
            super().evict()

    cache = Counted(BuildCacheConfig(tmp_path, max_bytes=16_000))
    for i in range(60):
        cache.put(f"k{i:02d}", {"weights.bin": bytes(300)})
    assert 1 < len(scans) < 20  # the first put, then every ~1,000 bytes put, not 60 times
    total = sum(f.stat().st_size for d in entries(cache) for f in d.iterdir())
    entry = total // len(entries(cache))
    assert max(scans) <= 16_000 + 16_000 // 16 + 2 * entry


def test_environment_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("CUVIL_BUILD_CACHE_DIR", raising=False)
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUVIL_BUILD_CACHE_MAX_BYTES", "12345")
    config = BuildCacheConfig.from_env()
    assert config.directory == tmp_path / "builds" and config.max_bytes == 12345 and config.enabled
    monkeypatch.setenv("CUVIL_BUILD_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert BuildCacheConfig.from_env().directory == tmp_path / "elsewhere"
    monkeypatch.delenv("CUVIL_BUILD_CACHE_DIR")
    monkeypatch.setenv("CUVIL_BUILD_CACHE", "0")
    assert not BuildCacheConfig.from_env().enabled
    CuvilModel.load(tiny()).optimize(targets=[host_target()])
    assert not (tmp_path / "builds").exists()
    monkeypatch.setenv("CUVIL_BUILD_CACHE_MAX_BYTES", "lots")
    with pytest.raises(BuildCacheError, match="MAX_BYTES"):
        BuildCacheConfig.from_env()
    with pytest.raises(BuildCacheError):
        BuildCacheConfig(tmp_path, max_bytes=-1)


def test_manifest_lists_every_file_with_its_digest(cache):
    build(cache)
    (entry,) = entries(cache)
    manifest = json.loads((entry / MANIFEST).read_bytes())
    assert set(manifest["files"]) == {p.name for p in entry.iterdir()} - {MANIFEST}


@pytest.fixture
def imports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """One entry per ONNX import; ``load``'s import records go to a fresh default cache."""
    import cuvil_edge.frontend.onnx as frontend

    monkeypatch.setenv("CUVIL_BUILD_CACHE_DIR", str(tmp_path / "default-builds"))
    return counted(monkeypatch, frontend, "import_onnx")


def test_a_model_imported_before_is_imported_only_when_its_graph_is_needed(cache, imports, tmp_path):
    """A second process's ``load().optimize()`` of a cached build is a lookup: no ONNX parse, check or
    conversion (the import record says the bytes import); ``graph`` still gives the model's graph."""
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny(), path)
    first = CuvilModel.load(path).optimize(targets=[host_target()], build_cache=cache)
    assert len(imports) == 1 and not first.build_cache_hit
    second = CuvilModel.load(path).optimize(targets=[host_target()], build_cache=cache)
    assert len(imports) == 1 and second.build_cache_hit
    np.testing.assert_array_equal(second.predict({"x": X})["y"], first.predict({"x": X})["y"])
    assert [n.op for n in second.graph.nodes] == [n.op for n in first.graph.nodes] and len(imports) == 2
    # a build not cached yet imports on the way (the record only says the import succeeds)
    int8 = CuvilModel.load(path)
    assert len(imports) == 2
    int8.optimize("int8", targets=[host_target()], calibration=calib(), build_cache=cache)
    assert len(imports) == 3 and int8.quantization is not None


def test_a_file_changed_after_load_is_refused_when_its_import_runs(cache, imports, tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny(), path)
    CuvilModel.load(path)
    model = CuvilModel.load(path)  # import deferred
    onnx.save(tiny(seed=1), path)
    with pytest.raises(ModelFormatError, match="changed since"):
        model.optimize(targets=[host_target()], build_cache=cache)


def test_a_model_with_external_data_is_never_cached(cache, imports, tmp_path):
    """Its tensors live in files the key's hash does not cover (``b"location"`` in the bytes): every load
    imports (onnx reads those files), no build or import record is kept, and a changed tensor file is what
    the next build runs."""
    path = tmp_path / "ext.onnx"

    def save(seed: int, name: str) -> None:  # every tensor into tmp_path/w.bin (onnx appends: start anew)
        (tmp_path / "w.bin").unlink(missing_ok=True)
        onnx.save_model(tiny(seed), tmp_path / name, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="w.bin", size_threshold=0)

    def records() -> list[str]:  # load()'s import records (the ``imports`` fixture's default cache)
        return sorted(p.name for p in (tmp_path / "default-builds").glob("[!.]*"))

    save(0, path.name)
    first = CuvilModel.load(path).optimize(targets=[host_target()], build_cache=cache)
    assert not records() and (not cache.directory.exists() or not entries(cache))
    np.testing.assert_array_equal(first.predict({"x": X})["y"], build(None).predict({"x": X})["y"])
    save(1, "other.onnx")  # same shapes: ext.onnx's bytes are unchanged, its weights are not
    assert len(imports) == 2
    before = records()  # the reference build's import record
    second = CuvilModel.load(path).optimize(targets=[host_target()], build_cache=cache)
    assert not second.build_cache_hit and len(imports) == 3 and records() == before
    np.testing.assert_array_equal(second.predict({"x": X})["y"], build(None, tiny(1)).predict({"x": X})["y"])


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per model read and hashed by ``load`` (not counting the deferred import's re-read)."""
    return counted(monkeypatch, cuvil_edge.model, "_model_bytes")


def test_a_settled_file_loads_again_by_its_state_without_being_read(imports, reads, tmp_path, monkeypatch):
    monkeypatch.setattr(cuvil_edge.buildcache, "SETTLED_NS", 0)  # the file counts as settled at once
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny(), path)
    CuvilModel.load(path)
    second = CuvilModel.load(path)
    assert (len(reads), len(imports)) == (1, 1), "the second load read or imported the file"
    np.testing.assert_array_equal(second.optimize(targets=[host_target()]).predict({"x": X})["y"],
                                  build(None).predict({"x": X})["y"])
    # same size and mtime, other bytes: ctime moved, so the state differs and the file is read again
    before = path.stat()
    onnx.save(tiny(seed=1), path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    read_before = len(reads)
    third = CuvilModel.load(path)
    assert len(reads) == read_before + 1
    want = build(None, tiny(seed=1)).predict({"x": X})["y"]
    np.testing.assert_array_equal(third.predict({"x": X})["y"], want)


def test_a_file_that_has_not_settled_is_read_at_every_load(imports, reads, tmp_path, monkeypatch):
    """A write in the same timestamp tick as a record would leave the state unchanged: no record for it."""
    monkeypatch.setattr(cuvil_edge.buildcache, "SETTLED_NS", 10**18)
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny(), path)
    CuvilModel.load(path)
    CuvilModel.load(path)
    assert len(reads) == 2 and not list((tmp_path / "default-builds").glob(f"*/{STAT_RECORD}"))


def test_a_corrupt_import_record_means_importing_at_load(imports, tmp_path):
    CuvilModel.load(tiny())
    (record,) = (p for p in (tmp_path / "default-builds").iterdir() if not p.name.startswith("."))
    (record / cuvil_edge.model.IMPORT_RECORD).write_bytes(b'{"stateful": "maybe"}')
    CuvilModel.load(tiny())
    assert len(imports) == 2, "an entry failing its manifest is discarded"
    CuvilModel.load(tiny())
    assert len(imports) == 2, "and replaced by a good one"


def test_a_model_that_fails_to_import_fails_at_every_load(imports):
    bad = tiny()
    bad.graph.node[0].op_type = "NoSuchOp"
    for _ in range(2):
        with pytest.raises(ModelFormatError, match="NoSuchOp"):
            CuvilModel.load(bad)


def test_a_users_converter_is_part_of_the_model_key(imports):
    """A custom op's converter shapes the import: builds and import records made with one registered must
    not serve a process without it (there, the op fails at load, naming it)."""
    from cuvil_edge.frontend.onnx import converter

    before = CuvilModel.load(tiny())._source_digest

    @converter("CuvilTestBuildCacheNoop")
    def noop(ctx) -> None:  # never called: tiny() has no such node
        raise AssertionError

    assert CuvilModel.load(tiny())._source_digest not in (before, None)
