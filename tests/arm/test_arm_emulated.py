"""Issue 13, ARM proven: the device runtime on an emulated arm64 host (qemu user mode, Debian's arm64
CPython 3.11, the aarch64 wheels of wasmtime/numpy/cryptography) against the same models run here on x86.

``bash .ci/arm_emulated.sh`` sets the emulated host up under ``$CUVIL_ARM_ROOT`` (default
``~/.cache/cuvil-edge/arm64``; ``.ci/run`` runs it). Without it these tests skip, saying so, except in CI
(``CI=true``) or with ``CUVIL_ARM_REQUIRED=1``, where a missing setup is a failure. The x86 side builds
every variant of each model, runs it, and runs ``driver.py`` under emulation with only the device packages
importable; the emulated run must pick the arm family, detect neon from the auxiliary vector (qemu shows
this machine's /proc/cpuinfo), give x86's outputs within 1e-5 in the default mode and x86's bits in
determinism mode, NaN and Inf included.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from cuvil_edge import ALL_TARGETS, CuvilModel, Target
from cuvil_edge.oracle import random_inputs
from cuvil_edge.testing.zoo import mlp, mobilenet, resnet
from cuvil_edge.testing.zoo_transformers import bert_encoder, gru_kws
from runtime_wasm.loader import load_model_dir, read_model_dir
from tests.support.hostile import hostile_inputs

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
ARM_ROOT = Path(os.environ.get("CUVIL_ARM_ROOT") or Path.home() / ".cache/cuvil-edge/arm64")
MODELS = ("mlp", "resnet", "mobilenet", "mobilenet-int8", "mobilenet-int4", "bert", "gru")
#: default mode: different modules (relaxed-arm vs relaxed-x86: FMA, pmin vs min) on finite inputs
RTOL = 1e-5
#: a hang guard for the emulated run, far above what it takes; nothing asserts on time
DRIVER_TIMEOUT_S = 1800
FLEET_WIDE = Target("simd128", "x86").name  # the module determinism mode runs on every host
SIMD128 = (FLEET_WIDE, Target("simd128", "arm").name)


def arm_env() -> dict[str, str]:
    """The emulated host's paths (``env.sh`` of a finished setup); skip, or fail when required, without."""
    env_file = ARM_ROOT / "env.sh"
    if (ARM_ROOT / "ready").is_file() and env_file.is_file():
        env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
        if all(Path(env.get(k, "")).exists() for k in ("QEMU", "SYSROOT", "ARM_PYTHON", "ARM_SITE")):
            return env
    why = f"no arm64 emulation under {ARM_ROOT}: run `bash .ci/arm_emulated.sh` to set it up"
    if os.environ.get("CUVIL_ARM_REQUIRED") == "1" or os.environ.get("CI") == "true":
        pytest.fail(why + " (required here: CI=true or CUVIL_ARM_REQUIRED=1)")
    pytest.skip(why)


def build_models(base: Path) -> dict[str, Path]:
    nets = {"mlp": mlp(), "resnet": resnet(size=32), "mobilenet": mobilenet(size=32),
            "bert": bert_encoder(layers=1, hidden=64, heads=2, ffn=128, seq=16), "gru": gru_kws()}
    out = {k: CuvilModel.load(p).optimize(targets=ALL_TARGETS).save(base / k) for k, p in nets.items()}
    calib = list(random_inputs(nets["mobilenet"], 4, seed=1))
    for precision in ("int8", "int4"):
        out[f"mobilenet-{precision}"] = CuvilModel.load(nets["mobilenet"]).optimize(
            precision, targets=ALL_TARGETS, calibration=calib).save(base / f"mobilenet-{precision}")
    return out


def run_here(model_dir: Path, feeds) -> dict[str, list[dict[str, np.ndarray]]]:
    """What driver.py does, on this x86 host."""
    def run(**kw):
        with load_model_dir(model_dir, **kw) as m:
            return [{k: np.array(v, copy=True) for k, v in m.predict(f).items()} for f in feeds]
    spec = read_model_dir(model_dir, deterministic=True)[0]
    results = {"default": run(), "deterministic": run(deterministic=True),
               "deterministic-threads": run(deterministic=True, threads=2)}
    results.update({v.name: run(variant=v.name) for v in spec.variants})
    return results


def read_outputs(path: Path) -> dict[str, list[dict[str, np.ndarray]]]:
    out: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    with np.load(path) as z:
        for key in z.files:
            mode, index, name = key.split("/", 2)
            out.setdefault(mode, {}).setdefault(int(index), {})[name] = z[key]
    return {mode: [by_index[i] for i in sorted(by_index)] for mode, by_index in out.items()}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    env = arm_env()
    base = tmp_path_factory.mktemp("arm")
    job, here = {"models": {}}, {}
    for name, model_dir in build_models(base / "models").items():
        feeds = hostile_inputs(read_model_dir(model_dir, deterministic=True)[0], seed=7)
        inputs = base / f"{name}-inputs.npz"
        np.savez(inputs, **{f"{i}/{k}": a for i, f in enumerate(feeds) for k, a in f.items()})
        job["models"][name] = {"dir": str(model_dir), "inputs": str(inputs)}
        here[name] = (feeds, run_here(model_dir, feeds))
    (base / "job.json").write_text(json.dumps(job))
    out = base / "arm-out"
    out.mkdir()
    cache = base / "arm-module-cache"  # the emulated runtime compiles every module itself
    child_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base), "LANG": "C.UTF-8",
                 "PYTHONPATH": f"{REPO}:{env['ARM_SITE']}", "PYTHONNOUSERSITE": "1",
                 "PYTHONDONTWRITEBYTECODE": "1", "CUVIL_CACHE_DIR": str(cache)}
    started = time.monotonic()
    argv = [env["QEMU"], "-L", env["SYSROOT"], env["ARM_PYTHON"], str(REPO / "tests/arm/driver.py"),
            str(base / "job.json"), str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=child_env, cwd=base,
                          timeout=DRIVER_TIMEOUT_S)
    assert proc.returncode == 0, f"emulated driver failed:\n{proc.stdout}\n{proc.stderr}"
    print(f"\nemulated arm64 run: {time.monotonic() - started:.1f} s\n{proc.stdout}")
    report = json.loads((out / "report.json").read_text())
    arm = {name: read_outputs(out / f"{name}.npz") for name in job["models"]}
    return report, here, arm


def bits(outputs: dict[str, np.ndarray]) -> dict[str, bytes]:
    return {k: np.ascontiguousarray(v).tobytes() for k, v in outputs.items()}


def test_the_emulated_host_is_arm64_with_neon_read_from_the_auxiliary_vector(emulated):
    report, _, _ = emulated
    assert report["machine"] == "aarch64"
    found = report["detect"]
    assert (found["arch"], found["family"]) == ("aarch64", "arm"), found
    # qemu user mode shows this x86 machine's /proc/cpuinfo: neon can only have come from the auxv HWCAPs
    assert found["feature_source"] == "auxv" and "neon" in found["features"], found
    assert "flags" in Path("/proc/cpuinfo").read_text()  # the host's cpuinfo is x86's
    assert report["probe_host"]["family"] == "arm"


@pytest.mark.parametrize("net", MODELS)
def test_default_selection_runs_the_arm_family(emulated, net):
    report, _, _ = emulated
    chosen = report["models"][net]
    assert chosen["default"]["family"] == "arm", chosen
    assert chosen["default"]["tier"] == ("relaxed" if report["engine_relaxed_simd"] else "simd128")
    assert sorted(chosen["variants"]) == sorted(t.name for t in ALL_TARGETS)
    assert chosen["deterministic"] == FLEET_WIDE


def assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str) -> None:
    """Elementwise within RTOL of x86's value, or within RTOL of the output's largest magnitude (an element
    near zero is a sum that cancelled: its relative error says nothing)."""
    assert set(got) == set(want), what
    for k, ref in want.items():
        assert got[k].dtype == ref.dtype and got[k].shape == ref.shape, f"{what} {k}"
        scale = float(np.abs(ref).max()) if ref.size and np.isfinite(ref).all() else 0.0
        np.testing.assert_allclose(got[k], ref, rtol=RTOL, atol=RTOL * scale, err_msg=f"{what} output {k!r}")


@pytest.mark.parametrize("net", MODELS)
def test_every_mode_and_variant_gives_x86s_outputs_on_finite_inputs(emulated, net):
    """Default selection (relaxed-arm there, relaxed-x86 here) and each variant named explicitly; on the
    plain feed only: with NaN in the input the families' modules may differ on purpose (pmin vs min)."""
    _, here, arm = emulated
    feeds, x86 = here[net]
    for mode in x86:
        assert_close(arm[net][mode][0], x86[mode][0], f"{net} {mode} (arm64 vs x86)")
    # the same simd128 module is the same wasm semantics on either ISA: bit-identical on finite inputs
    for mode in SIMD128:
        assert bits(arm[net][mode][0]) == bits(x86[mode][0]), f"{net} {mode}: bits differ on a finite input"


@pytest.mark.parametrize("net", MODELS)
def test_determinism_mode_gives_x86s_bits_nan_and_inf_included(emulated, net):
    _, here, arm = emulated
    feeds, x86 = here[net]
    float_inputs = [a for a in feeds[-1].values() if a.dtype == np.float32]
    assert not float_inputs or any(np.isnan(a).any() and np.isinf(a).any() for a in float_inputs)
    assert len(arm[net]["deterministic"]) == len(feeds) == 3
    for i, (got, want) in enumerate(zip(arm[net]["deterministic"], x86["deterministic"])):
        assert bits(got) == bits(want), f"{net}: determinism-mode bits differ on feed #{i} (arm64 vs x86)"
    # two threads (atomics and barriers on arm64's weaker memory order) give the one-thread bits
    for i, (got, want) in enumerate(zip(arm[net]["deterministic-threads"], x86["deterministic"])):
        assert bits(got) == bits(want), f"{net}: 2-thread bits differ on feed #{i} (arm64 vs x86)"
        for k, a in got.items():  # canonicalized: no input NaN's sign or payload comes through
            if a.dtype == np.float32:
                nan_bits = a.view(np.uint32)[np.isnan(a)]
                assert (nan_bits == 0x7FC00000).all(), f"{net}: non-canonical NaN in {k}"
