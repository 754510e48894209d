"""Peer runtimes the benchmarks time next to ours, shared by bench_models.py and bench_transformers.py.

onnxruntime-web's WASM execution provider runs under Node through ``benchmarks/node/run.mjs``
(``npm install`` in benchmarks/node/ first). The inputs travel as raw little-endian files with a JSON
manifest, so every runtime sees the same seeded data, and the outputs come back for an accuracy check.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

NODE_DIR = Path(__file__).with_name("node")
#: the newest ONNX IR version onnxruntime-web 1.30 loads (onnxruntime 1.32's quantizers write newer)
WEB_IR_VERSION = 10


@dataclass
class WebTiming:
    """One onnxruntime-web run: latency, its settings, and its outputs by name."""

    median_ms: float
    p95_ms: float
    threads: int
    simd: bool | str
    version: str | None
    outputs: dict[str, np.ndarray]


def ort_web_missing() -> str | None:
    """Why onnxruntime-web cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not on PATH"
    if not (NODE_DIR / "node_modules" / "onnxruntime-web").is_dir():
        return f"run `npm install` in {NODE_DIR}"
    return None


def _write_arrays(d: Path, arrays: dict[str, np.ndarray]) -> Path:
    manifest = {}
    for k, (name, a) in enumerate(arrays.items()):
        a = np.ascontiguousarray(a)
        (d / f"{k}.bin").write_bytes(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
        manifest[name] = {"dtype": str(a.dtype), "shape": list(a.shape), "file": f"{k}.bin"}
    path = d / "feeds.json"
    path.write_text(json.dumps(manifest))
    return path


def _read_arrays(d: Path) -> dict[str, np.ndarray]:
    manifest = json.loads((d / "outputs.json").read_text())
    return {name: np.frombuffer((d / m["file"]).read_bytes(), np.dtype(m["dtype"]).newbyteorder("<"))
            .reshape(m["shape"]) for name, m in manifest.items()}


def ort_web(model: onnx.ModelProto, feeds: dict[str, np.ndarray], repeat: int, warmup: int = 3,
            timeout_s: float = 1800, threads: int = 1) -> WebTiming | str:
    """Time ``model`` in onnxruntime-web (WASM EP, ``threads`` threads) on ``feeds`` (its IR version
    lowered to ``WEB_IR_VERSION`` if newer); a string says why not."""
    missing = ort_web_missing()
    if missing:
        return f"skipped ({missing})"
    if model.ir_version > WEB_IR_VERSION:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.ir_version = WEB_IR_VERSION
    with tempfile.TemporaryDirectory(prefix="cuvil-web-") as tmp:
        d = Path(tmp)
        (d / "model.onnx").write_bytes(model.SerializeToString())
        (d / "in").mkdir()
        spec = _write_arrays(d / "in", feeds)
        cmd = ["node", str(NODE_DIR / "run.mjs"), str(d / "model.onnx"), str(spec), "--repeat", str(repeat),
               "--warmup", str(warmup), "--threads", str(threads), "--out", str(d / "out")]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=NODE_DIR, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"failed: no result within {timeout_s:.0f} s"
        if proc.returncode:
            lines = proc.stderr.strip().splitlines()
            return f"failed: {lines[0] if lines else f'exit {proc.returncode}'}"
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        return WebTiming(r["median_ms"], r["p95_ms"], r["threads"], r["simd"], r["version"],
                         _read_arrays(d / "out"))
