"""Quantized latency, peak RSS, bundle size and fidelity at one thread: cuvil int8 / int4 (wasm) next to
onnxruntime fp32 and int8-dynamic (native).

The model is a DistilBERT-shaped *stand-in*: 6 blocks of the encoder's matrix work (Q, K, V, O
projections 768x768 and the 768-3072-768 FFN with ReLU, residual adds) over ``--seq`` tokens, random
weights. Attention itself, LayerNorm and GELU are left out (the transformer ops are being added
separately); the MatMuls are over 95% of DistilBERT's FLOPs, which is what quantization changes.
Each engine runs in its own process so peak RSS (VmHWM) is its own.

    python benchmarks/bench_quant.py [--seq 32] [--layers 6] [--repeat 10]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HIDDEN, FFN = 768, 3072
ENGINES = ("ort-fp32", "ort-int8-dynamic", "cuvil-fp32", "cuvil-int8", "cuvil-int4")


def build_model(seq: int, layers: int, path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"

    def mm(inp: str, k: int, n: int, name: str) -> str:
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"{name}_w"))
        nodes.append(helper.make_node("MatMul", [inp, f"{name}_w"], [name]))
        return name

    for i in range(layers):
        q, k, v = (mm(x, HIDDEN, HIDDEN, f"l{i}_{t}") for t in "qkv")
        nodes += [helper.make_node("Add", [q, k], [f"l{i}_qk"]),
                  helper.make_node("Add", [f"l{i}_qk", v], [f"l{i}_qkv"])]
        o = mm(f"l{i}_qkv", HIDDEN, HIDDEN, f"l{i}_o")
        nodes.append(helper.make_node("Add", [x, o], [f"l{i}_r1"]))
        h = mm(f"l{i}_r1", HIDDEN, FFN, f"l{i}_f1")
        nodes.append(helper.make_node("Relu", [h], [f"l{i}_a"]))
        f2 = mm(f"l{i}_a", FFN, HIDDEN, f"l{i}_f2")
        out = "y" if i == layers - 1 else f"l{i}_out"
        nodes.append(helper.make_node("Add", [f"l{i}_r1", f2], [out]))
        x = out
    g = helper.make_graph(nodes, "encoder_standin",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, HIDDEN])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, HIDDEN])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def run_one(engine: str, model: Path, workdir: Path, repeat: int, seq: int) -> dict[str, float]:
    """Build/load one engine, time ``repeat`` runs, save its output for the fidelity check."""
    x = np.random.default_rng(1).standard_normal((seq, HIDDEN)).astype(np.float32)
    size = 0
    if engine.startswith("ort"):
        import onnxruntime as ort

        path = model
        if engine == "ort-int8-dynamic":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            path = workdir / "ort_int8.onnx"
            quantize_dynamic(model, path, weight_type=QuantType.QInt8)
        size = path.stat().st_size
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        fn = lambda: sess.run(None, {"x": x})[0]  # noqa: E731
    else:
        from cuvil_edge import CuvilModel

        precision = engine.split("-", 1)[1]
        calib = [np.random.default_rng(2 + i).standard_normal((seq, HIDDEN)).astype(np.float32)
                 for i in range(4)]
        m = CuvilModel.load(model).optimize(precision, calibration=calib)
        c = m.compiled
        assert c is not None
        size = len(c.weights) + len(c.spec.to_json()) + max(v.size for v in c.spec.variants)  # one variant
        fn = lambda: m.predict({"x": x})["y"]  # noqa: E731
    y = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    np.save(workdir / f"{engine}.npy", y)
    return {"median_ms": float(np.median(times) * 1e3), "bundle_bytes": size,
            "peak_rss_mb": _peak_rss_mb()}


def _peak_rss_mb() -> float:
    """VmHWM (this process image only: ru_maxrss would carry the parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        wd = Path(args.workdir)
        print(json.dumps(run_one(args.one, wd / "model.onnx", wd, args.repeat, args.seq)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-quant-") as tmp:
        wd = Path(tmp)
        build_model(args.seq, args.layers, wd / "model.onnx")
        rows = {}
        for engine in ENGINES:
            cmd = [sys.executable, __file__, "--one", engine, "--workdir", tmp, "--seq", str(args.seq),
                   "--repeat", str(args.repeat)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            rows[engine] = json.loads(out.strip().splitlines()[-1])
        ref = np.load(wd / "ort-fp32.npy").reshape(-1).astype(np.float64)
        print(f"encoder stand-in: {args.layers} x (4x{HIDDEN}^2 + 2x{HIDDEN}x{FFN}) MatMuls, seq {args.seq}, "
              "1 thread")
        print(f"{'engine':18s} {'median ms':>10s} {'peak RSS MB':>12s} {'bundle MB':>10s} "
              f"{'cos vs fp32':>12s}")
        for engine, r in rows.items():
            y = np.load(wd / f"{engine}.npy").reshape(-1).astype(np.float64)
            cos = float(y @ ref / np.linalg.norm(y) / np.linalg.norm(ref))
            print(f"{engine:18s} {r['median_ms']:10.2f} {r['peak_rss_mb']:12.1f} "
                  f"{r['bundle_bytes'] / 2**20:10.2f} {cos:12.5f}")


if __name__ == "__main__":
    main()
