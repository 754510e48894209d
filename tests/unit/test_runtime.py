"""Device runtime: variant selection, module cache, spec round trip, sandbox exports, fast call."""

from __future__ import annotations

import numpy as np
import pytest
import wasmtime

from device_profiles import load_profile
from runtime_wasm import (
    EngineConfig,
    HostProbes,
    InferenceTrap,
    ModelSource,
    ModelSpec,
    ModuleCache,
    ModuleLoadError,
    NoUsableVariant,
    SpecError,
    TensorSpec,
    VariantSpec,
    WasmModel,
    engine_for,
    probe_host,
    select_variant,
)
from runtime_wasm.loader import load_model_dir

VARIANTS = (
    VariantSpec("f32-wasmsimd-x86", "simd128", "x86", "a.wasm"),
    VariantSpec("f32-wasmrelaxedsimd-x86", "relaxed", "x86", "b.wasm"),
    VariantSpec("f32-wasmsimd-arm", "simd128", "arm", "c.wasm"),
    VariantSpec("f32-wasmrelaxedsimd-arm", "relaxed", "arm", "d.wasm"),
)


@pytest.mark.parametrize(("family", "relaxed", "expected"), [
    ("x86", True, "f32-wasmrelaxedsimd-x86"),
    ("x86", False, "f32-wasmsimd-x86"),
    ("arm", True, "f32-wasmrelaxedsimd-arm"),
    ("arm", False, "f32-wasmsimd-arm"),
])
def test_select_variant_prefers_relaxed_tier_and_host_family(family, relaxed, expected):
    assert select_variant(VARIANTS, HostProbes(family, relaxed)).name == expected


def test_select_variant_falls_back_to_other_family_and_never_picks_unvalidated_tier():
    only_arm = [v for v in VARIANTS if v.family == "arm"]
    assert select_variant(only_arm, HostProbes("x86", False)).name == "f32-wasmsimd-arm"
    only_relaxed = [v for v in VARIANTS if v.tier == "relaxed"]
    with pytest.raises(NoUsableVariant):
        select_variant(only_relaxed, HostProbes("x86", False))


def test_selection_from_device_profile():
    probes = HostProbes.from_profile(load_profile("raspberry-pi-4"))
    assert select_variant(VARIANTS, probes).name == "f32-wasmrelaxedsimd-arm"


def test_probe_host_validates_relaxed_simd_with_the_engine():
    # wasmtime 50 on x86-64 and aarch64 supports relaxed SIMD; the probe must say so.
    assert probe_host().relaxed_simd is True


MODULE_WAT = """
(module
  (memory (export "memory") 1)
  (func (export "cuvil_weights") (result i32) i32.const 0)
  (func (export "cuvil_arena") (result i32) i32.const 1024)
  ;; out[i] = in[i] * 2 + w[0] for 4 floats: arena+0 is the input, arena+16 the output
  (func (export "run")
    (local $i i32)
    (loop $l
      (f32.store offset=1040 (local.get $i)
        (f32.add (f32.mul (f32.load offset=1024 (local.get $i)) (f32.const 2)) (f32.load (i32.const 0))))
      (local.set $i (i32.add (local.get $i) (i32.const 4)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 16))))))
"""

SPEC = ModelSpec("tiny", (TensorSpec("x", "float32", (4,), 0),), (TensorSpec("y", "float32", (4,), 16),),
                 weights_size=4, arena_size=32)


def _instance(wat: str = MODULE_WAT, spec: ModelSpec = SPEC, **kw) -> WasmModel:
    cfg = EngineConfig()
    module = wasmtime.Module(engine_for(cfg), wasmtime.wat2wasm(wat))
    return WasmModel(engine_for(cfg), module, spec, np.float32([0.5]).tobytes(), **kw)


def test_zero_copy_views_and_predict():
    with _instance() as m:
        m.input_views["x"][:] = [1, 2, 3, 4]
        m.run()
        np.testing.assert_array_equal(m.output_views["y"], [2.5, 4.5, 6.5, 8.5])
        out = m.predict({"x": np.float32([0, 1, 0, 1])})
        np.testing.assert_array_equal(out["y"], [0.5, 2.5, 0.5, 2.5])
        # the output is a copy: the next run does not change it
        m.predict([np.float32([9, 9, 9, 9])])
        np.testing.assert_array_equal(out["y"], [0.5, 2.5, 0.5, 2.5])


def test_close_is_idempotent_and_blocks_runs():
    m = _instance()
    m.close()
    m.close()
    with pytest.raises(RuntimeError):
        m.run()


def test_trap_becomes_inference_trap():
    wat = MODULE_WAT.replace("(local $i i32)", "(local $i i32) unreachable")
    with _instance(wat) as m, pytest.raises(InferenceTrap):
        m.run()


def test_module_with_imports_or_missing_exports_is_rejected():
    with pytest.raises(ModuleLoadError, match="imports"):
        _instance(MODULE_WAT.replace("(module", '(module (import "env" "f" (func))'))
    with pytest.raises(ModuleLoadError, match="cuvil_arena"):
        _instance(MODULE_WAT.replace('(export "cuvil_arena")', ""))


def test_threaded_module_reporting_no_room_for_its_weights_is_refused():
    """A threaded module's weights sit at a fixed address above its static data; its getter says 0 when
    the data reached them, and running it would overwrite its own tables."""
    threaded = "".join(f' (func (export "{name}"))' for name in ("cuvil_worker", "cuvil_stop", "cuvil_reset"))
    threaded = ('(import "env" "memory" (memory 1 1 shared)) (global (export "__stack_pointer") (mut i32) '
                '(i32.const 0)) (func (export "cuvil_set_threads") (param i32)) '
                f'(func (export "cuvil_stacks") (result i32) i32.const 0){threaded}')
    wat = MODULE_WAT.replace('(memory (export "memory") 1)', threaded)
    with pytest.raises(ModuleLoadError, match="no room for its weights"):
        _instance(wat)
    room = wat.replace("(result i32) i32.const 0)\n", "(result i32) i32.const 512)\n", 1)
    with _instance(room.replace("(f32.load (i32.const 0))", "(f32.load (i32.const 512))")) as m:
        assert m.predict({"x": np.float32([1, 1, 1, 1])})["y"].tolist() == [2.5] * 4


def test_memory_limit_refuses_oversized_module():
    big = MODULE_WAT.replace('(memory (export "memory") 1)', '(memory (export "memory") 64)')
    with pytest.raises(ModuleLoadError):
        _instance(big, memory_limit=65536)


def test_spec_round_trip_keeps_unknown_fields_and_checks_bounds():
    spec = ModelSpec.from_json(SPEC.to_json())
    assert spec == SPEC
    text = SPEC.to_json().replace('"name": "tiny"', '"name": "tiny", "future_field": 7')
    assert ModelSpec.from_json(text).extra["future_field"] == 7
    with pytest.raises(SpecError):
        ModelSpec.from_json(SPEC.to_json().replace('"arena_size": 32', '"arena_size": 8'))
    with pytest.raises(SpecError):
        ModelSpec.from_json(b"{not json")


@pytest.mark.parametrize("export", ["cuvil_weights", "cuvil_arena"])
def test_negative_export_address_is_refused_not_a_host_memory_view(export):
    """wasmtime returns i32 signed: a negative address passed the bounds check and numpy got a view
    outside linear memory (SIGSEGV, or host memory read and written)."""
    getter = f'(func (export "{export}") (result i32) i32.const'
    value = -65536 if export == "cuvil_weights" else -(1 << 31)
    wat = MODULE_WAT.replace(f"{getter} {0 if export == 'cuvil_weights' else 1024})", f"{getter} {value})")
    assert wat != MODULE_WAT
    with pytest.raises(ModuleLoadError, match="negative"):
        _instance(wat)


def test_every_view_is_bounds_checked():
    with _instance() as m:
        end = m._memory.data_len(m._store)
        assert m._view(end - 4, np.dtype(np.float32), (1,)).shape == (1,)
        for offset, shape in ((end - 2, (1,)), (-4, (1,)), (0, (-1,))):
            with pytest.raises(SpecError):
                m._view(offset, np.dtype(np.float32), shape)


@pytest.mark.parametrize("change", ["negative_dim", "string_dtype", "object_dtype", "extra_not_object"])
def test_malformed_spec_is_a_spec_error(change):
    """Each of these passed ``from_json`` and later raised a plain ValueError/AttributeError."""
    text = {"negative_dim": SPEC.to_json().replace('"shape": [\n    4\n   ]', '"shape": [-1]', 1),
            "string_dtype": SPEC.to_json().replace('"float32"', '"<U1"', 1),
            "object_dtype": SPEC.to_json().replace('"float32"', '"O"', 1),
            "extra_not_object": SPEC.to_json().replace('"extra": {}', '"extra": []')}[change]
    assert text != SPEC.to_json()
    with pytest.raises(SpecError):
        ModelSpec.from_json(text)


@pytest.mark.parametrize("file", ["../other/m.wasm", "/tmp/outside.wasm", "."])
def test_variant_file_outside_the_model_directory_is_refused(tmp_path, file):
    """Loading a model directory never reads a module from elsewhere (another slot, an absolute path)."""
    outside = tmp_path / "other"
    outside.mkdir()
    (outside / "m.wasm").write_bytes(wasmtime.wat2wasm(MODULE_WAT))
    model = tmp_path / "model"
    model.mkdir()
    spec = ModelSpec(**{**SPEC.__dict__, "variants": (VariantSpec("v", "simd128", "x86", file),)})
    (model / "model.json").write_text(spec.to_json())
    (model / "weights.bin").write_bytes(np.float32([0.5]).tobytes())
    for load in (load_model_dir, ModelSource.from_dir):
        with pytest.raises(SpecError, match="outside"):
            load(model, variant="v")


def test_module_cache_hits_and_recovers_from_corrupt_entries(tmp_path):
    wasm = wasmtime.wat2wasm(MODULE_WAT)
    cache = ModuleCache(tmp_path)
    cfg = EngineConfig()
    cache.load(wasm, cfg)
    cache.load(wasm, cfg)
    assert (cache.hits, cache.misses) == (1, 1)
    entry = next(tmp_path.glob("*.cwasm"))
    entry.write_bytes(b"garbage")
    module = cache.load(wasm, cfg)
    assert cache.misses == 2 and {e.name for e in module.exports} >= {"run", "memory"}
    # a different engine config is a different key (artifacts are tied to the config)
    assert cache.key(wasm, cfg) != cache.key(wasm, EngineConfig("relaxed"))
    assert not list(tmp_path.glob(".tmp-*"))
