"""Run under qemu-aarch64 by tests/arm/test_arm_emulated.py: the device side of a model on an arm64 host.

Only the device packages and their wheels are importable here (no cuvil_edge, onnx or compiler). For each
model directory in the job it loads the model the way a device does (default selection), each variant by
name, and in determinism mode (also on 2 threads), runs every input file and writes the outputs to
``<out>/<model>.npz`` as ``<mode>/<input index>/<output name>``; ``<out>/report.json`` says what this
process is and chose.

    python3.11 driver.py JOB.json OUT_DIR
JOB.json: ``{"models": {name: {"dir": model dir, "inputs": npz path}}}``; the npz holds
``<input index>/<input name>`` arrays.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from device_profiles import detect
from runtime_wasm.loader import load_model_dir, read_model_dir
from runtime_wasm.variants import probe_engine, probe_host


def feeds_of(path: str) -> list[dict[str, np.ndarray]]:
    with np.load(path) as z:
        out: dict[int, dict[str, np.ndarray]] = {}
        for key in z.files:
            index, name = key.split("/", 1)
            out.setdefault(int(index), {})[name] = z[key]
    return [out[i] for i in sorted(out)]


def run_mode(model_dir: str, feeds, variant: str | None = None, deterministic: bool = False,
             threads: int = 1):
    with load_model_dir(model_dir, variant=variant, deterministic=deterministic, threads=threads) as m:
        return [{k: np.array(v, copy=True) for k, v in m.predict(f).items()} for f in feeds]


def main(job_path: str, out_dir: str) -> None:
    job = json.loads(Path(job_path).read_text())
    out = Path(out_dir)
    host = detect()
    report: dict = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "detect": {"arch": host.arch, "family": host.family, "features": sorted(host.features),
                   "feature_source": host.feature_source, "model": host.model, "closest": host.closest},
        "probe_host": {"family": probe_host().family, "relaxed_simd": probe_host().relaxed_simd},
        "engine_relaxed_simd": probe_engine().relaxed_simd,
        "models": {},
    }
    for name, entry in job["models"].items():
        started = time.monotonic()
        feeds = feeds_of(entry["inputs"])
        spec, default, _, _ = read_model_dir(entry["dir"])
        _, fleet_wide, _, _ = read_model_dir(entry["dir"], deterministic=True)
        results = {"default": run_mode(entry["dir"], feeds)}
        for v in spec.variants:
            results[v.name] = run_mode(entry["dir"], feeds, variant=v.name)
        results["deterministic"] = run_mode(entry["dir"], feeds, deterministic=True)
        results["deterministic-threads"] = run_mode(entry["dir"], feeds, deterministic=True, threads=2)
        np.savez(out / f"{name}.npz", **{f"{mode}/{i}/{k}": a for mode, outs in results.items()
                                         for i, o in enumerate(outs) for k, a in o.items()})
        report["models"][name] = {
            "default": {"name": default.name, "tier": default.tier, "family": default.family},
            "deterministic": fleet_wide.name, "variants": [v.name for v in spec.variants],
            "seconds": round(time.monotonic() - started, 1)}
        print(f"{name}: default {default.name}, {report['models'][name]['seconds']} s", flush=True)
    (out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
