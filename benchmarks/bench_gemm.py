"""f32 GEMM throughput: our wasm kernels (simd128 and relaxed tiers) next to numpy, one thread.

The wasm side is a standalone harness around the generated ``f32-gemm`` family compiled with
``compile_c``: B is packed once outside the timed loop (constant weights are packed at build time;
conv's im2col writes panels directly), then ``f32_gemm`` runs ``reps`` times inside one call, so the
wasmtime call overhead does not enter the figure. numpy is measured in a subprocess pinned to one
OpenBLAS thread (the env var must be set before numpy loads), with the caller's env otherwise intact.

    python benchmarks/bench_gemm.py [--runs 5] [--min-time 0.2] [--tiers simd128,relaxed]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import wasmtime

from cuvil_edge.codegen.kernels import kernel_source
from cuvil_edge.codegen.toolchain import Target, compile_c
from runtime_wasm.engine import EngineConfig

#: (label, M, N, K): square, conv 3x3 on 56x56x64, late ResNet conv 3x3, MLP batch 32, GEMV-like (1-2 rows)
SHAPES = [
    ("square 1024^3", 1024, 1024, 1024),
    ("conv 64x3136x576", 64, 3136, 576),
    ("conv 512x49x4608", 512, 49, 4608),
    ("mlp b32 32x512x784", 32, 512, 784),
    ("mlp b1 1x512x784", 1, 512, 784),
    ("mlp b2 2x512x784", 2, 512, 784),
    ("gemv 1x3072x768", 1, 3072, 768),
    ("small conv 16x256x144", 16, 256, 144),
    ("1x1 conv 16x1024x64", 16, 1024, 64),
]
MEM_FLOATS = 5_000_000  # room for A, B, packed B and C of the largest shape (20 MB)

HARNESS = f"""
static float MEM[{MEM_FLOATS}] __attribute__((aligned(64)));
EXPORT("mem") unsigned mem(void) {{ return (unsigned)(uintptr_t)MEM; }}
EXPORT("pack") void pack(int M, int N, int K) {{
  f32_pack_b(K, N, MEM + (size_t)M * K, N, MEM + (size_t)M * K + (size_t)K * N);
}}
EXPORT("bench") void bench(int M, int N, int K, int reps) {{
  const float* A = MEM; const float* Bp = MEM + (size_t)M * K + (size_t)K * N;
  float* C = (float*)Bp + (size_t)K * ((N + 7) / 8 * 8);
  for (int r = 0; r < reps; r++) f32_gemm(M, N, K, A, K, Bp, C, N, 0, 0, (Act){{ACT_NONE, 0, 0}});
}}
"""

NUMPY_CHILD = """
import json, sys, time
import numpy as np
shapes, runs, min_time = json.loads(sys.argv[1])
out = []
for m, n, k in shapes:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    reps, dt = 1, 0.0
    while True:
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        dt = time.perf_counter() - t
        if dt >= min_time:
            break
        reps *= 2
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        times.append((time.perf_counter() - t) / reps)
    out.append(sorted(times)[len(times) // 2])
print(json.dumps(out))
"""


class WasmGemm:
    """One compiled harness instance for a tier."""

    def __init__(self, tier: str) -> None:
        source = "\n".join([kernel_source("common"), kernel_source("f32-gemm"), HARNESS])
        wasm = compile_c(source, Target(tier, "x86"))
        engine = wasmtime.Engine(EngineConfig(tier).build())
        self.store = wasmtime.Store(engine)
        inst = wasmtime.Instance(self.store, wasmtime.Module(engine, wasm), [])
        ex = inst.exports(self.store)
        self._pack, self._bench, memory = ex["pack"], ex["bench"], ex["memory"]
        base = ex["mem"](self.store)
        ptr = memory.get_buffer_ptr(self.store, MEM_FLOATS * 4, base)
        self.mem = np.frombuffer(ptr, np.float32, MEM_FLOATS)

    def prepare(self, a: np.ndarray, b: np.ndarray) -> None:
        m, k = a.shape
        n = b.shape[1]
        self.mem[: m * k] = a.reshape(-1)
        self.mem[m * k: m * k + k * n] = b.reshape(-1)
        self._pack(self.store, m, n, k)

    def result(self, m: int, n: int, k: int) -> np.ndarray:
        off = m * k + k * n + k * (-(-n // 8) * 8)
        return self.mem[off: off + m * n].reshape(m, n).copy()

    def run(self, m: int, n: int, k: int, reps: int) -> None:
        self._bench(self.store, m, n, k, reps)


def time_wasm(g: WasmGemm, m: int, n: int, k: int, runs: int, min_time: float) -> float:
    """Median seconds per GEMM; reps per run are doubled until one run takes ``min_time``."""
    reps = 1
    while True:
        t = time.perf_counter()
        g.run(m, n, k, reps)
        if time.perf_counter() - t >= min_time:
            break
        reps *= 2
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        g.run(m, n, k, reps)
        times.append((time.perf_counter() - t) / reps)
    return statistics.median(times)


def time_numpy(shapes: list[tuple[int, int, int]], runs: int, min_time: float) -> list[float]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-c", NUMPY_CHILD, json.dumps([shapes, runs, min_time])],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs per shape (median reported)")
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds per timed run, at least")
    ap.add_argument("--tiers", default="simd128,relaxed")
    ap.add_argument("--shapes", default="", help="comma-separated row numbers of SHAPES (default: all)")
    args = ap.parse_args(argv)
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    tiers = [t for t in args.tiers.split(",") if t]
    gemms = {t: WasmGemm(t) for t in tiers}
    rng = np.random.default_rng(0)
    rows = []
    for label, m, n, k in shapes:
        a = rng.standard_normal((m, k), np.float32)
        b = rng.standard_normal((k, n), np.float32)
        ref = a.astype(np.float64) @ b
        row = [label]
        for t, g in gemms.items():
            g.prepare(a, b)
            g.run(m, n, k, 1)
            err = np.abs(g.result(m, n, k) - ref).max() / max(1.0, np.abs(ref).max())
            if err > 1e-4:
                raise SystemExit(f"{t} GEMM {label} is wrong: relative error {err:.2e}")
            row.append(2 * m * n * k / time_wasm(g, m, n, k, args.runs, args.min_time) / 1e9)
        rows.append(row)
    np_times = time_numpy([(m, n, k) for _, m, n, k in shapes], args.runs, args.min_time)
    for row, (_, m, n, k), t in zip(rows, shapes, np_times):
        row.append(2 * m * n * k / t / 1e9)
    head = ["shape (M x N x K)", *(f"wasm {t}" for t in tiers), "numpy 1 thread"]
    print(f"{head[0]:<22}" + "".join(f"{h:>16}" for h in head[1:]) + "   (GFLOP/s, median)")
    for row in rows:
        print(f"{row[0]:<22}" + "".join(f"{v:>16.1f}" for v in row[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
