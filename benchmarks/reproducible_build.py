"""Reproducible int8 builds (issue 36): a real-size net built and signed twice, once on a quiet machine and
once with every core busy (one busy-loop process per core), each build in a fresh process; the two model
directories and signed bundles compared byte for byte, with the sha256 of each file.

The net is one of ``bench_real_size``'s (seeded weights, nothing downloaded): YOLOv8n-style 320 by default
(the net whose timed plan flipped a layer between builds: weights 3,222,272 vs 3,226,560 bytes), static
int8 on ``--calib`` seeded samples, for the host targets. Bundles are signed with one Ed25519 key made for
the run, at a fixed SOURCE_DATE_EPOCH. Both builds run a copy of the packages taken at the start, so an
edit to the working tree during the run (a changed compiler, rightly another ``sources_sha256`` in the
build record) does not count. ``--measured`` also builds the pair with ``kernel_cost="measured"`` (the
opt-in timed plan), which is not expected to match.

    python benchmarks/reproducible_build.py [--net yolov8n|mobilenet_v2|resnet50] [--calib 2] [--measured]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from bench_real_size import _samples, mobilenet_v2, resnet50, yolov8n

ROOT = Path(__file__).resolve().parents[1]
#: the packages a build imports, copied for the run
PACKAGES = ("cuvil_edge", "runtime_wasm", "ota", "device_profiles")
NETS = {"yolov8n": (yolov8n, 320), "mobilenet_v2": (mobilenet_v2, 224), "resnet50": (resnet50, 224)}
#: 2026-01-01T00:00:00Z: the bundles' signing time
EPOCH = "1767225600"


def _spin() -> None:
    while True:
        pass


def child(work: Path, tag: str, kernel_cost: str) -> None:
    """One build in this fresh process: model directory ``tag.cuvil`` and bundle ``tag.cvb`` in ``work``."""
    from cuvil_edge import CuvilModel
    from cuvil_edge.buildcache import BuildCache, BuildCacheConfig
    from cuvil_edge.signing import build_bundle, load_key

    t = time.perf_counter()
    m = CuvilModel.load(work / "model.onnx").optimize(
        "int8", calibration=work / "calib.npz", build_cache=BuildCache(BuildCacheConfig(enabled=False)),
        kernel_cost=True if kernel_cost == "model" else kernel_cost)
    out = m.save(work / f"{tag}.cuvil")
    built = time.perf_counter() - t
    build_bundle(out, work / f"{tag}.cvb", [load_key(work / "release.key")], version="1.0.0", release=1,
                 hardware_ids=["bench"])
    fp32 = [layer["name"] for layer in m.quantization.record["layers"] if layer["choice"] == "fp32"]
    print(json.dumps({"build_s": round(built, 1), "weights": m.spec.weights_size, "fp32_layers": fp32,
                      "sources": m.spec.extra["build"]["compiler"]["sources_sha256"]}))


def _files(work: Path, tag: str) -> dict[str, str]:
    """sha256 of each file of the model directory and of the bundle."""
    d = work / f"{tag}.cuvil"
    out = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}
    out["bundle.cvb"] = hashlib.sha256((work / f"{tag}.cvb").read_bytes()).hexdigest()
    return out


def build_pair(work: Path, kernel_cost: str) -> bool:
    """Quiet build, then a build with every core busy; print both and whether every file matches."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH, "PYTHONPATH": str(work / "src")}
    runs = {}
    for tag, busy in ((f"{kernel_cost}-quiet", 0), (f"{kernel_cost}-loaded", os.cpu_count() or 1)):
        spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(busy)]
        for s in spinners:
            s.start()
        try:
            res = subprocess.run([sys.executable, __file__, "--child", str(work), tag, kernel_cost], env=env,
                                 check=True, capture_output=True, text=True)
        finally:
            for s in spinners:
                s.terminate()
                s.join()
        runs[tag] = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"{tag:16s} {busy} busy processes: built in {runs[tag]['build_s']} s, weights "
              f"{runs[tag]['weights']:,} bytes, fp32 layers {runs[tag]['fp32_layers']}, compiler sources "
              f"{runs[tag]['sources'][:16]}")
    (a, fa), (b, fb) = ((t, _files(work, t)) for t in runs)
    print(f"{'file':32s} {a:>66s} {b:>66s}")
    for name in sorted(set(fa) | set(fb)):
        mark = "same" if fa.get(name) == fb.get(name) else "DIFFERENT"
        print(f"{name:32s} {fa.get(name, '-'):>66s} {fb.get(name, '-'):>66s}  {mark}")
    same = fa == fb
    print(f"{kernel_cost}: {'byte-identical' if same else 'DIFFERENT'}\n")
    return same


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", choices=sorted(NETS), default="yolov8n")
    ap.add_argument("--calib", type=int, default=2, help="seeded calibration samples")
    ap.add_argument("--measured", action="store_true", help="also the pair with kernel_cost='measured'")
    ap.add_argument("--keep", help="work in this directory (kept) instead of a temporary one")
    args = ap.parse_args()
    from cuvil_edge.signing import generate_key

    make, size = NETS[args.net]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for pkg in PACKAGES:
            shutil.copytree(ROOT / pkg, work / "src" / pkg, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        onnx.save(make(size), work / "model.onnx")
        np.savez(work / "calib.npz", x=np.concatenate([s["x"] for s in _samples(size, args.calib, 1)]))
        if not (work / "release.key").exists():
            generate_key(work / "release.key")
        print(f"{args.net} {size}, static int8, {args.calib} calibration samples, {os.cpu_count()} cores, "
              f"SOURCE_DATE_EPOCH={EPOCH}\n")
        same = build_pair(work, "model")
        if args.measured:
            build_pair(work, "measured")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
