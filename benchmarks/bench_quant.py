"""Quantized DistilBERT-shaped encoder at one thread: cuvil int8 / int4 (wasm) next to onnxruntime fp32
and int8-dynamic (native) and onnxruntime-web int8 (WASM under Node): latency, peak RSS, size, fidelity.

The model is ``cuvil_edge.testing.zoo_transformers.bert_encoder`` (6 layers x 768, 12 heads, FFN 3072,
seq 128, attention mask; random weights). Builds happen in this process; every engine then runs in its own
process so its peak RSS (VmHWM) is its own: ours load a saved model directory with
``runtime_wasm.loader.load_model_dir`` (the device side, no compiler). Size is the model directory
(spec + one module variant + weights) or the .onnx file. Fidelity is the cosine similarity of the
output to onnxruntime fp32's. onnxruntime-web runs the ``quantize_dynamic`` model (IR version lowered
to 10, the newest 1.30 accepts) through ``_peers.ort_web``; its RSS is not measured.

    python benchmarks/bench_quant.py [--seq 128] [--layers 6] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from _peers import ort_web

from cuvil_edge.here import host_target
from cuvil_edge.testing.zoo_transformers import bert_encoder, bert_feeds
from cuvil_edge.tools.bench import median_p95, timings_ms

#: engine -> cuvil precision (ours) or None (onnxruntime); static int8 calibrates on random ids
OURS = {"cuvil-int8-dynamic": "int8-dynamic", "cuvil-int8": "int8", "cuvil-int4": "int4"}
ORT = ("ort-fp32", "ort-int8-dynamic")
WEB_IR_VERSION = 10


def _peak_rss_mb() -> float:
    """VmHWM (this process image only: ru_maxrss would carry the parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_one(engine: str, wd: Path, repeat: int) -> dict[str, float]:
    """Child process: load one engine's artifact, time ``repeat`` runs, save the output."""
    feeds = dict(np.load(wd / "feeds.npz"))
    if engine in ORT:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(wd / f"{engine}.onnx"), opts, providers=["CPUExecutionProvider"])
        y = sess.run(None, feeds)[0]
        times = timings_ms(lambda: sess.run(None, feeds), 2, repeat)
    else:
        from runtime_wasm.loader import load_model_dir

        inst = load_model_dir(wd / engine)
        y = inst.predict(feeds)["last_hidden_state"]
        times = timings_ms(inst.run, 2, repeat)  # zero-copy serving path: inputs already in place
    np.save(wd / f"{engine}.npy", y)
    med, p95 = median_p95(times)
    return {"median_ms": med, "p95_ms": p95, "peak_rss_mb": _peak_rss_mb()}


def build(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], seq: int, wd: Path) -> dict[str, str]:
    """Write every engine's artifact into ``wd``; returns engine -> why it could not be built."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from cuvil_edge import CuvilModel

    failed = {}
    onnx.save(proto, wd / "ort-fp32.onnx")
    quantize_dynamic(wd / "ort-fp32.onnx", wd / "ort-int8-dynamic.onnx", weight_type=QuantType.QInt8)
    np.savez(wd / "feeds.npz", **feeds)
    calib = [bert_feeds(seq, seed=1 + i) for i in range(4)]
    for engine, precision in OURS.items():
        try:
            m = CuvilModel.load(proto).optimize(precision, targets=[host_target()],
                                                calibration=calib if precision == "int8" else None)
            m.save(wd / engine)
        except Exception as exc:  # noqa: BLE001 - a benchmark reports and moves on
            failed[engine] = f"build failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    return failed


def _size_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, Path(args.workdir), args.repeat)))
        return
    proto = bert_encoder(layers=args.layers, seq=args.seq)
    feeds = bert_feeds(args.seq)
    with tempfile.TemporaryDirectory(prefix="bench-quant-") as tmp:
        wd = Path(tmp)
        rows: dict[str, dict[str, float] | str] = dict(build(proto, feeds, args.seq, wd))
        for engine in (*ORT, *OURS):
            if engine in rows:
                continue
            cmd = [sys.executable, __file__, "--one", engine, "--workdir", tmp, "--repeat", str(args.repeat)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                rows[engine] = f"failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
                continue
            rows[engine] = json.loads(proc.stdout.strip().splitlines()[-1])
            rows[engine]["size_mb"] = _size_mb(wd / (f"{engine}.onnx" if engine in ORT else engine))
            rows[engine]["cosine"] = _cosine(np.load(wd / f"{engine}.npy"), np.load(wd / "ort-fp32.npy"))
        web_model = onnx.load(wd / "ort-int8-dynamic.onnx")
        web_model.ir_version = min(web_model.ir_version, WEB_IR_VERSION)
        web = ort_web(web_model, feeds, args.repeat, warmup=2)
        if isinstance(web, str):
            rows["ort-web-int8-dynamic"] = web
        else:
            rows["ort-web-int8-dynamic"] = {
                "median_ms": web.median_ms, "p95_ms": web.p95_ms, "peak_rss_mb": float("nan"),
                "size_mb": _size_mb(wd / "ort-int8-dynamic.onnx"),
                "cosine": _cosine(web.outputs["last_hidden_state"], np.load(wd / "ort-fp32.npy"))}
    print(f"DistilBERT-shaped encoder: {args.layers} layers x 768, 12 heads, FFN 3072, seq {args.seq}, "
          f"1 thread, {args.repeat} timed runs")
    print(f"{'engine':22s} {'median ms':>10s} {'p95 ms':>9s} {'peak RSS MB':>12s} {'size MB':>9s} "
          f"{'cos vs fp32':>12s}")
    for engine, r in rows.items():
        if isinstance(r, str):
            print(f"{engine:22s} {r}")
        else:
            print(f"{engine:22s} {r['median_ms']:10.1f} {r['p95_ms']:9.1f} {r['peak_rss_mb']:12.1f} "
                  f"{r['size_mb']:9.2f} {r['cosine']:12.5f}")


if __name__ == "__main__":
    main()
