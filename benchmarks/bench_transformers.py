"""DistilBERT-shaped encoder (6 x 768, 12 heads, FFN 3072, seq 128, attention mask) at one thread:
our compiled module in wasmtime next to onnxruntime fp32 native, same model, same inputs.

Ours is timed on the zero-copy serving path (``set_inputs`` once, ``instance.run()`` per call). With
``--web``, onnxruntime-web's WASM backend under Node runs the same model file (needs
``npm install`` in benchmarks/node/); it is skipped with a note when Node or the package is missing.

    python benchmarks/bench_transformers.py [--repeat 10] [--layers 6] [--seq 128] [--web]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session
from cuvil_edge.zoo_transformers import bert_encoder, bert_feeds
from runtime_wasm import probe_host

NODE_DIR = Path(__file__).with_name("node")


def median_ms(fn, warmup: int, repeat: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times)


def ort_web_ms(model_path: Path, feeds: dict[str, np.ndarray], repeat: int) -> float | str:
    """Median ms from benchmarks/node/run.mjs, or why it did not run."""
    if shutil.which("node") is None or not (NODE_DIR / "node_modules" / "onnxruntime-web").exists():
        return "skipped (node or benchmarks/node/node_modules/onnxruntime-web missing)"
    spec = {k: {"shape": list(v.shape), "data": v.reshape(-1).tolist()} for k, v in feeds.items()}
    proc = subprocess.run(["node", str(NODE_DIR / "run.mjs"), str(model_path), json.dumps(spec), str(repeat)],
                          capture_output=True, text=True, cwd=NODE_DIR)
    if proc.returncode:
        return f"failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["median_ms"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--web", action="store_true", help="also run onnxruntime-web (WASM) under Node")
    args = ap.parse_args()

    model = bert_encoder(layers=args.layers, seq=args.seq)
    feeds = bert_feeds(args.seq)
    probes = probe_host()
    t0 = time.perf_counter()
    cm = CuvilModel.load(model).optimize(targets=[Target("relaxed" if probes.relaxed_simd else "simd128",
                                                         probes.family)])
    build_s = time.perf_counter() - t0
    sess = ort_session(model)
    want = sess.run(None, feeds)[0]
    got = cm.predict(feeds)["last_hidden_state"]
    err = float(np.abs(got - want).max())
    inst = cm.instance
    inst.set_inputs(feeds)
    ours = median_ms(inst.run, 2, args.repeat)
    ort_ms = median_ms(lambda: sess.run(None, feeds), 2, args.repeat)
    rows = [("cuvil-edge (wasmtime, 1 thread)", ours), ("onnxruntime fp32 native (1 thread)", ort_ms)]
    if args.web:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bert.onnx"
            path.write_bytes(model.SerializeToString())
            rows.append(("onnxruntime-web wasm (Node, 1 thread)", ort_web_ms(path, feeds, args.repeat)))
    print(f"DistilBERT-shaped encoder: {args.layers} layers x 768, 12 heads, FFN 3072, seq {args.seq}; "
          f"build {build_s:.1f} s; max |ours - ORT| = {err:.2e}")
    print(f"{'runtime':40s} {'median ms':>10s} {'vs ours':>8s}")
    for name, ms in rows:
        if isinstance(ms, str):
            print(f"{name:40s} {ms}")
        else:
            print(f"{name:40s} {ms:10.1f} {ms / ours:7.2f}x")
    print(f"ours / ORT native = {ours / ort_ms:.2f} (target <= 3)", file=sys.stdout)


if __name__ == "__main__":
    main()
