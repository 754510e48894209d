"""Start-up cost in fresh processes (issue 10): process start -> ready and -> first result, and peak RSS.

(a) Device path: ``load_model_dir`` (warm precompiled-module cache) then one inference, next to
    onnxruntime session creation + first inference (one thread); "ready" is when the model could take a
    request (the start proper), "first" adds one inference (where the per-inference gap shows), for
    the DistilBERT-shaped encoder fp32, int8 and int4 (ours: static int8 on 4 calibration samples, int4
    weights; ORT: dynamic int8 for both) and MobileNetV2 224 fp32. Our peak RSS is also shown against
    onnxruntime fp32 on the same model (the issue's targets: fp32 <= 1.0x, int8 <= 0.5x, int4 <= 0.35x).
(b) Host path: ``CuvilModel.load(onnx).optimize(...).predict(...)`` in a new process, first (empty
    build cache) and second (the build cache holds the first's build).

Every measurement is its own process (``python -c``); runs of different engines interleave, medians of
``--repeat`` runs are printed with ratios. Peak RSS is VmHWM from ``/proc/self/status`` in the child.

    python benchmarks/bench_startup.py [--repeat 3] [--workdir DIR] [--tiny]

``--tiny`` runs every step on small models (a check that the script works, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from bench_real_size import mobilenet_v2

from cuvil_edge import CuvilModel
from cuvil_edge.here import host_target
from cuvil_edge.testing.zoo_transformers import bert_encoder, bert_feeds

CALIB_SAMPLES = 4
#: our peak RSS over onnxruntime fp32's on the same model, by precision (issue 10)
RSS_TARGETS = {"fp32": 1.0, "int8": 0.5, "int4": 0.35}

_CHILD = """
import json, sys, time
import numpy as np

def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

def ready():
    print("ready", flush=True)

mode, path, feeds_path = sys.argv[1:4]
with np.load(feeds_path) as z:
    feeds = {k: z[k] for k in z.files}
if mode == "device":
    from runtime_wasm.loader import load_model_dir
    model = load_model_dir(path)
    ready()
    out = model.predict(feeds)
elif mode == "ort":
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ready()
    out = sess.run(None, feeds)
else:  # host: precision [calibration dir]
    from cuvil_edge import CuvilModel
    from cuvil_edge.here import host_target
    precision, calib = sys.argv[4], (sys.argv[5] if len(sys.argv) > 5 else None)
    t0 = time.perf_counter()
    loaded = CuvilModel.load(path)
    t1 = time.perf_counter()
    m = loaded.optimize(precision, targets=[host_target()], calibration=calib)
    steps = [t1 - t0, time.perf_counter() - t1]
    ready()
    out = m.predict(feeds)
print(json.dumps({"peak": peak(), "steps": steps if mode == "host" else [0.0, 0.0]}), flush=True)
"""


@dataclass(frozen=True)
class Case:
    """One model as both sides run it: our model directory, ORT's .onnx, the inputs, the host build."""

    name: str
    model_dir: Path
    ort_model: Path
    onnx_path: Path
    feeds: Path
    precision: str
    calib: Path | None


@dataclass(frozen=True)
class Start:
    """One fresh process: seconds from spawn until the model could take a request (``ready``) and until
    the first result, and the child's peak RSS in bytes."""

    ready: float
    result: float
    peak: int
    steps: tuple[float, float] = (0.0, 0.0)  # host path: seconds in load() and in optimize()


def run_child(args: list[str], env: dict[str, str] | None = None) -> Start:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, *args], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    first = proc.stdout.readline()
    ready = time.perf_counter() - t0
    line = proc.stdout.readline()
    result = time.perf_counter() - t0
    proc.wait()
    if proc.returncode or first.strip() != "ready" or not line:
        raise SystemExit(f"child {args[:2]} failed (rc {proc.returncode})")
    got = json.loads(line)
    return Start(ready, result, got["peak"], tuple(got["steps"]))


def median_start(runs: list[Start]) -> Start:
    return Start(statistics.median(r.ready for r in runs), statistics.median(r.result for r in runs),
                 int(statistics.median(r.peak for r in runs)),
                 (statistics.median(r.steps[0] for r in runs), statistics.median(r.steps[1] for r in runs)))


def prepare(wd: Path, name: str, proto: onnx.ModelProto, feeds: dict[str, np.ndarray], precision: str,
            calib: list[dict[str, np.ndarray]] | None) -> Case:
    onnx_path = wd / f"{name}.onnx"
    onnx.save(proto, onnx_path)
    np.savez(wd / f"{name}.feeds.npz", **feeds)
    calib_dir = None
    if calib is not None:
        calib_dir = wd / f"{name}.calib"
        calib_dir.mkdir(exist_ok=True)
        for i, sample in enumerate(calib):
            np.savez(calib_dir / f"{i}.npz", **sample)
    model = CuvilModel.load(onnx_path).optimize(precision, targets=[host_target()], calibration=calib_dir)
    model_dir = model.save(wd / f"{name}.cuvil")
    ort_model = onnx_path
    if precision != "fp32":
        from onnxruntime.quantization import quantize_dynamic

        ort_model = wd / f"{name}.ort-int8.onnx"
        quantize_dynamic(str(onnx_path), str(ort_model))
    return Case(name, model_dir, ort_model, onnx_path, wd / f"{name}.feeds.npz", precision, calib_dir)


def interleave(runs: dict[str, Callable[[], Start]], repeat: int) -> dict[str, Start]:
    """Medians per run name, the names taking turns."""
    got: dict[str, list[Start]] = {k: [] for k in runs}
    for _ in range(repeat):
        for k, fn in runs.items():
            got[k].append(fn())
    return {k: median_start(v) for k, v in got.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", help="keep models and caches here (default: a temp dir)")
    ap.add_argument("--tiny", action="store_true", help="small models: check that the script runs")
    args = ap.parse_args()
    wd = Path(args.workdir or tempfile.mkdtemp(prefix="cuvil-startup-"))
    wd.mkdir(parents=True, exist_ok=True)
    os.environ["CUVIL_BUILD_CACHE_DIR"] = str(wd / "builds-prepare")  # keep big entries out of ~/.cache

    seq, size = (16, 32) if args.tiny else (128, 224)
    encoder = bert_encoder(layers=1, hidden=64, heads=2, ffn=128, seq=seq) if args.tiny else bert_encoder()
    feeds = bert_feeds(seq=seq)
    calib = [bert_feeds(seq=seq, seed=i) for i in range(1, CALIB_SAMPLES + 1)]
    rng = np.random.default_rng(0)
    image = {"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)}
    print(f"preparing models in {wd} ...", flush=True)
    cases = [prepare(wd, "encoder-fp32", encoder, feeds, "fp32", None),
             prepare(wd, "encoder-int8", encoder, feeds, "int8", calib),
             prepare(wd, "encoder-int4", encoder, feeds, "int4", None),
             prepare(wd, f"mobilenetv2-{size}", mobilenet_v2(size), image, "fp32", None)]
    for c in cases:  # warm the precompiled-module cache (the device path is measured warm)
        run_child(["device", str(c.model_dir), str(c.feeds)])

    print(f"\n(a) device path, process start -> ready (model loaded) and -> first result; medians of "
          f"{args.repeat} (ORT: int8 dynamic on the quantized rows; 'vs fp32': ours over ORT fp32 peak RSS)")
    print(f"{'model':18s} {'ours ready':>10s} {'ORT ready':>9s} {'ratio':>6s} {'ours first':>10s} "
          f"{'ORT first':>9s} {'ratio':>6s} {'ours MB':>8s} {'ORT MB':>7s} {'ratio':>6s} "
          f"{'ORT fp32 MB':>11s} {'vs fp32':>7s} {'target':>7s}")
    for c in cases:
        runs = {"ours": lambda c=c: run_child(["device", str(c.model_dir), str(c.feeds)]),
                "ort": lambda c=c: run_child(["ort", str(c.ort_model), str(c.feeds)])}
        if c.ort_model != c.onnx_path:  # the memory targets compare with ORT fp32
            runs["ort-fp32"] = lambda c=c: run_child(["ort", str(c.onnx_path), str(c.feeds)])
        r = interleave(runs, args.repeat)
        us, ort = r["ours"], r["ort"]
        fp32 = r.get("ort-fp32", ort).peak
        print(f"{c.name:18s} {us.ready:10.2f} {ort.ready:9.2f} {us.ready / ort.ready:5.2f}x "
              f"{us.result:10.2f} {ort.result:9.2f} {us.result / ort.result:5.2f}x {us.peak / 1e6:8.0f} "
              f"{ort.peak / 1e6:7.0f} {us.peak / ort.peak:5.2f}x {fp32 / 1e6:11.0f} {us.peak / fp32:6.2f}x "
              f"{'<= ' + str(RSS_TARGETS[c.precision]):>7s}")

    print(f"\n(b) host path load().optimize().predict() in new processes; medians of {args.repeat}")
    print(f"{'model':18s} {'first s':>8s} {'second s':>9s} {'first/second':>13s} {'ORT start s':>12s}"
          f"   second's load() + optimize() s")
    for c in cases:
        host = ["host", str(c.onnx_path), str(c.feeds), c.precision, *([str(c.calib)] if c.calib else [])]
        rounds: dict[str, list[Start]] = {"first": [], "second": [], "ort": []}
        for i in range(args.repeat):
            env = {"CUVIL_BUILD_CACHE_DIR": str(wd / f"builds-{c.name}-{i}")}  # empty: the first run builds
            rounds["first"].append(run_child(host, env))
            rounds["second"].append(run_child(host, env))
            rounds["ort"].append(run_child(["ort", str(c.onnx_path), str(c.feeds)]))
        first, second, ort = (median_start(rounds[k]).result for k in ("first", "second", "ort"))
        load_s, optimize_s = median_start(rounds["second"]).steps
        print(f"{c.name:18s} {first:8.2f} {second:9.2f} {first / second:12.1f}x {ort:12.2f}"
              f"   {load_s:.3f} + {optimize_s:.3f}   (second / ORT {second / ort:.2f}x)")

if __name__ == "__main__":
    main()
