"""Determinism mode: one module and one engine setting on every host, so outputs are bit-identical across
a fleet, NaN and Inf included. Checked here by selection (the same variant whatever the host's family or
engine) and by running that module under engines whose code generator may use different CPU features
(AVX, AVX2, FMA, SSE4.1 on or off), on inputs with NaN, +-Inf, denormals and huge values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cuvil_edge import ALL_TARGETS, CuvilModel, Target
from cuvil_edge.oracle import random_inputs
from cuvil_edge.testing.zoo import mlp, mobilenet, resnet
from cuvil_edge.testing.zoo_transformers import gru_kws
from runtime_wasm import EngineConfig, ModelSource, NoUsableVariant, RuntimePolicy, SupervisedModel
from runtime_wasm.loader import load_model_dir, read_model_dir
from runtime_wasm.spec import VariantSpec
from runtime_wasm.variants import EngineProbes, HostProbes, select_variant
from tests.support.determinism import as_bits, run_under
from tests.support.hostile import hostile_inputs

pytestmark = pytest.mark.integration
#: code-generator settings of hosts with fewer CPU features than this one (x86: what Cranelift may use)
CPU_LEVELS = {"host": (), "no-fma-avx": ("has_fma", "has_avx2", "has_avx"),
              "sse2-only": ("has_fma", "has_avx2", "has_avx", "has_sse41", "has_sse42", "has_ssse3",
                            "has_popcnt")}


def variants(*names: str) -> list[VariantSpec]:
    out = []
    for name in names:
        tier, family = name.split("-")
        out.append(VariantSpec(name=name, tier=tier, family=family, file=f"{name}.wasm", sha256=""))
    return out


ALL = ("relaxed-x86", "simd128-x86", "relaxed-arm", "simd128-arm")
FLEET_WIDE = Target("simd128", "x86").name  # the module determinism mode runs everywhere


@pytest.mark.parametrize("family", ["x86", "arm"])
@pytest.mark.parametrize("relaxed", [True, False])
def test_deterministic_selection_ignores_the_host(family, relaxed):
    chosen = select_variant(variants(*ALL), HostProbes(family, relaxed), engine=EngineProbes(relaxed),
                            deterministic=True)
    assert chosen.name == "simd128-x86"
    assert select_variant(variants("relaxed-arm", "simd128-arm"), HostProbes(family, relaxed),
                          deterministic=True).name == "simd128-arm"
    # without determinism the host's own family wins: the modules differ (pmin/pmax vs min/max on NaN)
    assert select_variant(variants(*ALL), HostProbes(family, relaxed)).family == family


def test_deterministic_mode_needs_a_simd128_variant():
    with pytest.raises(NoUsableVariant, match="determinism mode runs only the simd128 tier"):
        select_variant(variants("relaxed-x86", "relaxed-arm"), HostProbes("x86", True), deterministic=True)


def test_engine_settings_are_part_of_the_cache_key():
    det, plain = EngineConfig("simd128", deterministic=True), EngineConfig("simd128")
    assert det.fingerprint() != plain.fingerprint()
    assert RuntimePolicy(deterministic=True).deterministic and not RuntimePolicy().deterministic




@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("det")
    nets = {"mlp": mlp(), "resnet": resnet(size=32), "mobilenet": mobilenet(size=32), "gru": gru_kws()}
    out = {k: CuvilModel.load(p).optimize(targets=ALL_TARGETS).save(base / k) for k, p in nets.items()}
    calib = list(random_inputs(nets["mobilenet"], 4, seed=1))
    out["mobilenet-int8"] = CuvilModel.load(nets["mobilenet"]).optimize(
        "int8", targets=ALL_TARGETS, calibration=calib).save(base / "mobilenet-int8")
    return out


@pytest.mark.parametrize("net", ["mlp", "resnet", "mobilenet", "gru", "mobilenet-int8"])
def test_the_deterministic_module_gives_the_same_bits_whatever_the_cpu_features(built, net):
    spec = read_model_dir(built[net], FLEET_WIDE)[0]
    feeds = hostile_inputs(spec, seed=3)
    assert any(np.isnan(v).any() for v in feeds[-1].values() if v.dtype == np.float32) or net == "gru"
    results = {level: run_under(built[net], FLEET_WIDE, flags, feeds) for level, flags in CPU_LEVELS.items()}
    for level, got in results.items():
        assert got == results["host"], f"{net}: outputs under {level} differ from the host's"
    # NaN bits differ per ISA unless canonicalized: every NaN that comes out is the one canonical NaN
    for out in results["host"]:
        for k, raw in out.items():
            if spec.outputs[[t.name for t in spec.outputs].index(k)].dtype == "float32":
                bits = np.frombuffer(raw, np.uint32)
                nan = np.isnan(bits.view(np.float32))
                assert (bits[nan] == 0x7FC00000).all(), f"{net}: non-canonical NaN in {k}"


@pytest.mark.parametrize("family", ["x86", "arm"])
def test_loading_in_determinism_mode_runs_the_fleet_wide_module_in_process_and_supervised(built, family):
    """What the device does with ``[policy] deterministic = true``: whatever it detects, it loads the
    fleet-wide variant under the deterministic engine, in process or in a supervised worker, same bits."""
    probes = HostProbes(family, True)
    feeds = hostile_inputs(read_model_dir(built["mobilenet"], FLEET_WIDE)[0], seed=5)
    want = run_under(built["mobilenet"], FLEET_WIDE, (), feeds)
    with load_model_dir(built["mobilenet"], probes=probes, deterministic=True) as m:
        assert [as_bits(m.predict(f)) for f in feeds] == want
    source = ModelSource.from_dir(built["mobilenet"], probes=probes, deterministic=True)
    assert source.variant.name == FLEET_WIDE and source.deterministic
    with SupervisedModel(source, 256 << 20) as worker:
        got = [as_bits(worker.predict(f, 60.0)) for f in feeds]
    assert got == want


def test_determinism_is_one_switch_on_every_path(built, tmp_path):
    """The scheduler under a deterministic policy, ``CuvilModel.deterministic`` and ``cuvil-edge run
    --deterministic`` all run the fleet-wide module under the deterministic engine (same bits as above);
    a source loaded for a relaxed variant is refused by a deterministic policy, never served relaxed."""
    import subprocess
    import sys

    from runtime_wasm import PolicyError, Scheduler

    net = built["mobilenet"]
    feeds = hostile_inputs(read_model_dir(net, FLEET_WIDE)[0], seed=7)
    want = run_under(net, FLEET_WIDE, (), feeds)
    relaxed = ModelSource.from_dir(net, probes=HostProbes("arm", True))
    assert relaxed.variant.tier == "relaxed" and not relaxed.deterministic
    with pytest.raises(PolicyError, match=f"determinism mode runs '{FLEET_WIDE}'"):
        Scheduler(relaxed, RuntimePolicy(deterministic=True))
    plain = ModelSource.from_dir(net, variant=FLEET_WIDE)
    with Scheduler(plain, RuntimePolicy(deterministic=True)) as sched:
        assert [as_bits(sched.predict(f)) for f in feeds] == want
    model = CuvilModel.load(mobilenet(size=32)).optimize(targets=ALL_TARGETS)  # the same build as ``net``
    model.deterministic = True
    assert [as_bits(model.predict(f)) for f in feeds] == want
    np.savez(tmp_path / "in.npz", **feeds[-1])
    proc = subprocess.run([sys.executable, "-m", "cuvil_edge.cli", "run", str(net), "--deterministic",
                           "-i", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as got:
        assert as_bits(dict(got)) == want[-1]
