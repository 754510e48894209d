"""Sandbox supervision and the policy scheduler with real wasmtime and real worker processes
(docs/THREATS.md: 17-20, 25): runaway guests, memory bombs, malformed modules, capability escapes,
stale input, thermal pressure and bad requests. Deadlines are generous; nothing here asserts a timing."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import wasmtime

from runtime_wasm import (
    DeadlineExceeded,
    InferenceInputError,
    ModelSource,
    ModelSpec,
    ModuleLoadError,
    Overloaded,
    RuntimePolicy,
    Scheduler,
    StaleInput,
    SupervisedModel,
    TensorSpec,
    VariantSpec,
)

CAP = 4 << 20  # bytes of linear memory per worker
VARIANT = VariantSpec("inline", "simd128", "x86", "")
SPEC = ModelSpec("tiny", (TensorSpec("x", "float32", (4,), 0),), (TensorSpec("y", "float32", (4,), 16),),
                 weights_size=4, arena_size=32)

MODULE = """
(module
  (memory (export "memory") {pages})
  (func (export "cuvil_weights") (result i32) i32.const 0)
  (func (export "cuvil_arena") (result i32) i32.const 1024)
  (func (export "run") {body}))
"""
#: y[i] = 2 x[i] + w[0], as in tests/unit/test_runtime.py
DOUBLE = """(local $i i32)
    (loop $l
      (f32.store offset=1040 (local.get $i)
        (f32.add (f32.mul (f32.load offset=1024 (local.get $i)) (f32.const 2)) (f32.load (i32.const 0))))
      (local.set $i (i32.add (local.get $i) (i32.const 4)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 16))))"""
#: a runaway guest when x[0] < 0, the doubling model otherwise: the restarted worker can be checked
GUARDED = DOUBLE.replace("(local $i i32)", "(local $i i32)\n    (if (f32.lt (f32.load (i32.const 1024)) "
                         "(f32.const 0)) (then (loop $spin (br $spin))))")
#: grows memory until refused; y = [pages, last grow result] as int32
GROW = """(local $r i32)
    (loop $g
      (local.set $r (memory.grow (i32.const 16)))
      (br_if $g (i32.ne (local.get $r) (i32.const -1))))
    (i32.store (i32.const 1040) (memory.size))
    (i32.store (i32.const 1044) (local.get $r))"""
GROW_SPEC = ModelSpec("grow", SPEC.inputs, (TensorSpec("y", "int32", (2,), 16),), weights_size=4,
                      arena_size=32)
X = np.float32([1, 2, 3, 4])


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("modules"))


def source(cache_dir: str, body: str = DOUBLE, pages: int = 1, spec: ModelSpec = SPEC, bias: float = 0.5,
           wasm: bytes | None = None) -> ModelSource:
    wasm = wasm if wasm is not None else wasmtime.wat2wasm(MODULE.format(pages=pages, body=body))
    return ModelSource(spec, wasm, np.float32([bias]).tobytes(), VARIANT, cache_dir)


def test_runaway_guest_is_killed_and_restarted_while_other_models_keep_serving(cache_dir):
    with SupervisedModel(source(cache_dir), CAP) as healthy, \
            SupervisedModel(source(cache_dir, GUARDED), CAP) as guarded:
        healthy_pid, guarded_pid = healthy.pid, guarded.pid
        with pytest.raises(DeadlineExceeded):
            guarded.predict([-X], timeout_s=0.5)
        assert guarded.restarts == 1 and guarded.pid != guarded_pid
        np.testing.assert_array_equal(healthy.predict([X], timeout_s=10)["y"], 2 * X + 0.5)
        assert healthy.pid == healthy_pid and healthy.restarts == 0
        # the restarted worker serves the next request
        np.testing.assert_array_equal(guarded.predict([X], timeout_s=10)["y"], 2 * X + 0.5)


def test_memory_bombs_fail_cleanly_under_the_cap(cache_dir):
    huge_minimum = source(cache_dir, DOUBLE, pages=65536)  # 4 GiB, far above CAP
    with pytest.raises(ModuleLoadError, match="instantiate"):
        SupervisedModel(huge_minimum, CAP)
    with SupervisedModel(source(cache_dir, GROW, spec=GROW_SPEC), CAP) as grower:
        pid = grower.pid
        pages, last = grower.predict([X], timeout_s=10)["y"]
        assert last == -1 and 0 < pages * 65536 <= CAP
        assert grower.predict([X], timeout_s=10)["y"][1] == -1 and grower.pid == pid  # worker alive


@pytest.mark.parametrize("how", ["random", "truncated"])
def test_malformed_module_is_a_load_error_not_a_crash(cache_dir, how):
    good = wasmtime.wat2wasm(MODULE.format(pages=1, body=DOUBLE))
    wasm = np.random.default_rng(7).bytes(512) if how == "random" else good[: len(good) // 2]
    with pytest.raises(ModuleLoadError):
        SupervisedModel(source(cache_dir, wasm=wasm), CAP)


@pytest.mark.parametrize("imports", [
    '(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))',
    '(import "wasi_snapshot_preview1" "sock_accept" (func (param i32 i32 i32) (result i32)))',
    '(import "env" "host_call" (func))',
    '(import "env" "table" (table 1 funcref))',
])
def test_capability_imports_are_refused_at_link(cache_dir, imports):
    wasm = wasmtime.wat2wasm(MODULE.format(pages=1, body=DOUBLE).replace("(module", "(module " + imports, 1))
    with pytest.raises(ModuleLoadError, match="imports"):
        SupervisedModel(source(cache_dir, wasm=wasm), CAP)


def policy(**kw) -> RuntimePolicy:
    return RuntimePolicy(**{"memory_cap_bytes": CAP, "deadline_ms": 2000.0, **kw})


def test_scheduler_serves_batches_survives_bad_input_and_runaway_requests(cache_dir):
    with Scheduler(source(cache_dir, GUARDED), policy(max_batch_size=4, batch_window_ms=20.0)) as sched:
        futures = [sched.submit({"x": X + i}) for i in range(6)]
        for i, f in enumerate(futures):
            np.testing.assert_array_equal(f.result(timeout=30)["y"], 2 * (X + i) + 0.5)
        for bad in ({"x": np.zeros(3, np.float32)}, {"z": X}, [X, X], {"x": [[1, 2], [3]]}, {"x": "four"},
                    {"x": np.int32([1, 2, 3, 4])}, None):
            with pytest.raises(InferenceInputError):
                sched.predict(bad)
        with pytest.raises(DeadlineExceeded):
            sched.submit([-X]).result(timeout=30)
        np.testing.assert_array_equal(sched.predict([X])["y"], 2 * X + 0.5)  # the restarted worker
        m = sched.metrics()
    assert m["completed"] == 7 and sum(m["batch_sizes"].values()) >= 1
    assert m["failed"] == {"InferenceInputError": 7, "DeadlineExceeded": 1}
    assert m["worker_restarts"] == 1 and m["latency_ms"]["count"] == 7 and m["latency_ms"]["p95"] > 0


def test_stale_input_is_refused(cache_dir):
    with Scheduler(source(cache_dir), policy(max_input_age_ms=100.0)) as sched:
        with pytest.raises(StaleInput):
            sched.predict([X], captured_at=time.time() - 5)
        fresh = sched.predict([X], captured_at=time.time())
        np.testing.assert_array_equal(fresh["y"], 2 * X + 0.5)
        assert sched.metrics()["failed"] == {"StaleInput": 1}


def test_thermal_budget_switches_to_the_cheaper_model_and_back(cache_dir):
    temp = [60.0]
    cheap = source(cache_dir, bias=100.0)  # same signature, outputs tell which model answered
    pol = policy(max_cpu_temp_c=80.0, thermal_poll_ms=0.0, degrade_action="cheaper_variant")
    with Scheduler(source(cache_dir), pol, fallback=cheap, temperature_c=lambda: temp[0]) as sched:
        np.testing.assert_array_equal(sched.predict([X])["y"], 2 * X + 0.5)
        temp[0] = 90.0
        np.testing.assert_array_equal(sched.predict([X])["y"], 2 * X + 100)
        hot = sched.metrics()
        temp[0] = 78.0  # inside the hysteresis band: still degraded
        np.testing.assert_array_equal(sched.predict([X])["y"], 2 * X + 100)
        temp[0] = 70.0
        np.testing.assert_array_equal(sched.predict([X])["y"], 2 * X + 0.5)
        cool = sched.metrics()
    assert hot["thermal"] == {"temp_c": 90.0, "degraded": True, "action": "cheaper_variant",
                              "throttled_ms": 0.0}
    assert hot["degrade_activations"] == 1 and hot["degraded_dispatches"] == 1
    assert cool["degraded_dispatches"] == 2 and not cool["thermal"]["degraded"]


def test_thermal_budget_sheds_load_and_throttle_is_the_fallback_action(cache_dir):
    temp = [95.0]
    with Scheduler(source(cache_dir), policy(max_cpu_temp_c=80.0, thermal_poll_ms=0.0, degrade_action="shed"),
                   temperature_c=lambda: temp[0]) as sched:
        with pytest.raises(Overloaded, match="shed"):
            sched.predict([X])
        temp[0] = 50.0
        np.testing.assert_array_equal(sched.predict([X])["y"], 2 * X + 0.5)
        assert sched.metrics()["shed"] == 1
    # cheaper_variant without a fallback model throttles instead
    with Scheduler(source(cache_dir), policy(max_cpu_temp_c=80.0, thermal_poll_ms=0.0,
                                             degrade_action="cheaper_variant"),
                   temperature_c=lambda: 95.0) as sched:
        np.testing.assert_array_equal(sched.predict([X])["y"], 2 * X + 0.5)
        thermal = sched.metrics()["thermal"]
    assert thermal["degraded"] and thermal["action"] == "throttle"


def test_closed_scheduler_refuses_and_close_is_idempotent(cache_dir):
    sched = Scheduler(source(cache_dir), policy())
    sched.close()
    sched.close()
    with pytest.raises(Overloaded):
        sched.predict([X])


def test_agent_serves_through_the_scheduler_when_its_config_has_a_policy(cache_dir, tmp_path):
    from cuvil_agent.serve import InferenceServer, ModelHost, infer
    from ota.errors import OtaError
    from ota.installer import ActiveModel

    slot = tmp_path / "slot"
    slot.mkdir()
    variant = VariantSpec("f32-wasmsimd-x86", "simd128", "x86", "model.wasm")
    (slot / "model.wasm").write_bytes(wasmtime.wat2wasm(MODULE.format(pages=1, body=GUARDED)))
    (slot / "weights.bin").write_bytes(np.float32([0.5]).tobytes())
    (slot / "model.json").write_text(ModelSpec(**{**SPEC.__dict__, "variants": (variant,)}).to_json())
    manifest = SimpleNamespace(release=3, name="m", version="1.0.3")
    installer = SimpleNamespace(active_model=lambda: ActiveModel(slot, manifest, cache_dir),
                                take_warm=lambda _: None)
    host = ModelHost(installer, policy(deadline_ms=500.0, max_input_age_ms=1000.0))
    server = InferenceServer(tmp_path / "infer.sock", host)
    try:
        release, out = infer(server.path, {"x": X}, timeout_s=30)
        assert release == 3
        np.testing.assert_array_equal(out["y"], 2 * X + 0.5)
        with pytest.raises(OtaError, match="DeadlineExceeded"):
            infer(server.path, {"x": -X}, timeout_s=30)
        with pytest.raises(OtaError, match="StaleInput"):
            infer(server.path, {"x": X}, timeout_s=30, captured_at=time.time() - 60)
        np.testing.assert_array_equal(infer(server.path, {"x": X}, timeout_s=30)[1]["y"], 2 * X + 0.5)
        assert host.metrics()["worker_restarts"] == 1
    finally:
        server.close()
        host.close()
