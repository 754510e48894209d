"""Intra-op threads at real sizes: MobileNetV2 224, ResNet-50 224, a YOLOv8n-style 320 detector and a
DistilBERT-shaped encoder (sequence 128) with 1, 2 and all threads, ours next to onnxruntime (native,
``intra_op_num_threads``) and onnxruntime-web (WASM EP under Node, ``numThreads``) with the same counts,
in one run. Ours and onnxruntime are timed in one process in interleaved blocks (a noisy neighbour hits
every engine alike); onnxruntime-web runs in Node right after, on the same inputs, and its outputs are
checked against onnxruntime's. Our thread counts all run one module (built for up to 4 threads): their
outputs are compared bit for bit.

    python benchmarks/bench_threads.py [--repeat 20] [--nets mobilenet_v2,resnet50,yolov8n,encoder]
        [--precision fp32|int8] [--no-web] [--barriers]

A third set of columns runs ours and onnxruntime on 2 threads while a busy loop (a child ``sh`` spinning)
holds a core, one loop started before and killed after each round of the busy engines' blocks (ours on 1,
2 and 2 pinned, onnxruntime's), the same for all: a static split waits at every barrier for the thread
that shares its core, chunks claimed from a counter do not.

``--barriers`` also runs a copy of each module with counters patched into its barrier (no timing): the
barriers a run passes and how many waits outlasted the spin and slept (a wake-up of tens of microseconds
each; many of them mean the spin, CUVIL_SPINS in kernels/templates/common.c.in, is short for the host).

onnxruntime-web needs ``npm install`` in benchmarks/node/ (the table says so when it is missing).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).parent))
from _peers import WebTiming, ort_web  # noqa: E402
from bench_real_size import mobilenet_v2, resnet50, timings_ms, yolov8n  # noqa: E402

from cuvil_edge import CuvilModel  # noqa: E402
from cuvil_edge.codegen.toolchain import compile_c  # noqa: E402
from cuvil_edge.here import host_target  # noqa: E402
from cuvil_edge.oracle import ort_peer, ort_session  # noqa: E402
from cuvil_edge.testing.zoo_transformers import bert_encoder, bert_feeds  # noqa: E402
from runtime_wasm.instance import WasmModel, available_cores  # noqa: E402
from runtime_wasm.loader import instantiate  # noqa: E402

NETS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mobilenet_v2": lambda: mobilenet_v2(224), "resnet50": lambda: resnet50(224),
    "yolov8n": lambda: yolov8n(320), "encoder": lambda: bert_encoder(seq=128),
}


def feeds_for(name: str, proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    if name == "encoder":
        return bert_feeds(seq=128)
    size = proto.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    return {"x": np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)}


def build(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], precision: str) -> CuvilModel:
    calib = None if precision == "fp32" else [feeds]
    return CuvilModel.load(proto).optimize(precision, targets=[host_target()], calibration=calib)


#: suffix of an engine timed while a busy loop holds a core
BUSY = " busy"


@contextmanager
def busy_core() -> Iterator[None]:
    """A child process spinning on a core (the scheduler's to place) for as long as the block runs."""
    child = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    time.sleep(0.05)  # running before the first call
    try:
        yield
    finally:
        child.kill()
        child.wait()


def interleaved(engines: dict[str, Callable[[], object]], warmup: int, repeat: int) -> dict[str, float]:
    """Median ms per engine, timed in blocks of 5 calls taken in turn (bench_real_size's); the engines whose
    name ends in BUSY take their turns (and warm-up) together while one busy loop holds a core, so each
    block compares them under the same placement of that loop (one started per engine's block made the
    busy columns differ by up to 10% from block to block by where the scheduler put it)."""
    times: dict[str, list[float]] = {k: [] for k in engines}
    quiet = {k: fn for k, fn in engines.items() if not k.endswith(BUSY)}
    busy = {k: fn for k, fn in engines.items() if k.endswith(BUSY)}
    for block in range(max(1, repeat // 5) + 1):
        for group in (quiet, busy):
            with busy_core() if group is busy and busy else nullcontext():
                for k, fn in group.items():
                    if block:
                        times[k] += timings_ms(fn, 0, 5)
                    else:
                        timings_ms(fn, warmup, 0)
    return {k: statistics.median(v) for k, v in times.items()}


#: (text, replacement) in the generated C: counters of barrier passes (by every thread) and of waits that
#: slept, read through two extra exports
_COUNTERS = (
    ("static int cuvil_wait_change(",
     "static int32_t cuvil_passes, cuvil_sleeps;\n"
     'EXPORT("cuvil_passes") int cuvil_passes_get(void) { return cuvil_passes; }\n'
     'EXPORT("cuvil_sleeps") int cuvil_sleeps_get(void) { return cuvil_sleeps; }\n'
     "static int cuvil_wait_change("),
    ("if (spin >= CUVIL_SPINS) __builtin_wasm_memory_atomic_wait32((int*)p, old, -1);",
     "if (spin >= CUVIL_SPINS) { __atomic_add_fetch(&cuvil_sleeps, 1, __ATOMIC_RELAXED); "
     "__builtin_wasm_memory_atomic_wait32((int*)p, old, -1); }"),
    ("void cuvil_barrier_n(int32_t nt) {\n  if (nt == 1) return;\n",
     "void cuvil_barrier_n(int32_t nt) {\n  if (nt == 1) return;\n"
     "  __atomic_add_fetch(&cuvil_passes, 1, __ATOMIC_RELAXED);\n"),
)


def barrier_counts(model: CuvilModel, feeds: dict[str, np.ndarray], threads: int,
                   runs: int = 5) -> tuple[float, float]:
    """(barriers passed, waits that slept) per run on ``threads`` threads, from a counting copy of the
    module (same spec and weights: the module finds them through its exports)."""
    program, spec, target = model.compiled.program, model.spec, host_target()
    source = program.source
    for old, new in _COUNTERS:
        if old not in source:
            raise SystemExit(f"--barriers: the generated C no longer has {old!r}; update _COUNTERS")
        source = source.replace(old, new)
    wasm = compile_c(source, target, extra_flags=program.link_flags())
    variant = dataclasses.replace(next(v for v in spec.variants if v.name == target.name),
                                  sha256=hashlib.sha256(wasm).hexdigest())
    with instantiate(spec, wasm, model._built().weights, variant, threads=threads) as m:
        m.predict(feeds)  # the first run starts the threads
        read = [m._exports[f"cuvil_{k}"] for k in ("passes", "sleeps")]
        before = [f(m._store) for f in read]
        for _ in range(runs):
            m.predict(feeds)
        passes, sleeps = (f(m._store) - b for f, b in zip(read, before))
    return passes / threads / runs, sleeps / runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20, help="timed calls per engine and thread count")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--precision", default="fp32", choices=("fp32", "int8"))
    ap.add_argument("--no-web", action="store_true", help="leave out onnxruntime-web")
    ap.add_argument("--barriers", action="store_true", help="count barrier passes and sleeping waits")
    args = ap.parse_args()
    os.environ.setdefault("CUVIL_CACHE_DIR", tempfile.mkdtemp(prefix="cuvil-bench-"))
    cores = available_cores()
    counts = sorted({1, 2, cores})
    target = host_target()
    print(f"{args.precision}, {target.name}, {cores} cores available; medians of "
          f"{max(1, args.repeat // 5) * 5} interleaved calls (ours, onnxruntime); onnxruntime-web after")
    head = "".join(f" {'ours ' + str(n):>9s} {'ORT ' + str(n):>9s} {'web ' + str(n):>9s}" for n in counts)
    rows = []
    for name in args.nets.split(","):
        proto = NETS[name]()
        feeds = feeds_for(name, proto)
        model = build(proto, feeds, args.precision)
        spec, files = model.spec, model._built()
        variant = next(v for v in spec.variants if v.name == target.name)
        engines: dict[str, Callable[[], object]] = {}
        ours: dict[int, WasmModel] = {}
        busy: list[WasmModel] = []
        outputs = {}
        for n in counts:
            ours[n] = m = instantiate(spec, files.modules[variant.name], files.weights, variant, threads=n)
            outputs[n] = m.predict(feeds)
            m.set_inputs(feeds)
            engines[f"ours {n}"] = m.run
            sess = ort_peer(proto, threads=n)
            engines[f"ORT {n}"] = lambda s=sess, f=feeds: s.run(None, f)
            if n == 2:  # under a busy core: own instances (a thread chooser then sees only that load): 1
                # thread, 2 as shipped, and 2 pinned (no chooser: what the barriers alone do)
                for key, t, chooser in (("ours 1" + BUSY, 1, False), ("ours 2" + BUSY, 2, True),
                                        ("ours 2 pinned" + BUSY, 2, False)):
                    busy.append(b := instantiate(spec, files.modules[variant.name], files.weights, variant,
                                                 threads=t))
                    b.thread_chooser = b.thread_chooser if chooser else None
                    b.set_inputs(feeds)
                    engines[key] = b.run
                engines["ORT 2" + BUSY] = engines["ORT 2"]
        same = all(np.array_equal(outputs[n][k], outputs[1][k]) for n in counts for k in outputs[1])
        ref = ort_session(proto).run(None, feeds)[0]
        err = float(np.abs(next(iter(outputs[1].values())) - ref).max())
        med = interleaved(engines, args.warmup, args.repeat)
        for m in (*ours.values(), *busy):
            m.close()
        web: dict[int, WebTiming | str] = {}
        for n in counts:
            web[n] = "skipped (--no-web)" if args.no_web else ort_web(proto, feeds, args.repeat, args.warmup,
                                                                      threads=n)
        rows.append((name, med, web, same, err))
        if args.barriers:
            for n in counts[1:]:
                passes, sleeps = barrier_counts(model, feeds, n)
                print(f"{name}: {n} threads pass {passes:.0f} barriers per run; {sleeps:.0f} waits slept "
                      f"(a parked thread's wait for the next run included)")
        print(f"\n{'net':13s}{head}  threads bit-identical, max |ours - ORT|")
        for r_name, r_med, r_web, r_same, r_err in rows[-1:]:
            cells = ""
            for n in counts:
                w = r_web[n]
                cells += f" {r_med[f'ours {n}']:9.2f} {r_med[f'ORT {n}']:9.2f} " + (
                    f"{w.median_ms:9.2f}" if isinstance(w, WebTiming) else f"{'n/a':>9s}")
            print(f"{r_name:13s}{cells}  {r_same}, {r_err:.1e}")
            notes = {w for w in r_web.values() if isinstance(w, str)}
            for note in notes:
                print(f"  onnxruntime-web: {note}")
    print("\n2 threads while a busy loop holds a core (ours and onnxruntime alike), ms, and the speed-up "
          "from 1 thread (quiet); ours as shipped (its thread chooser runs on 1 thread while that is faster: "
          "runtime_wasm.contention) and pinned to 2; last: ours 1 thread under the same busy core, and "
          "its time over ours 2 busy (shipped) and pinned")
    print(f"{'net':13s} " + " ".join(f"{e + ' ' + c:>13s}" for e in ("ours", "ORT")
                                     for c in ("1", "2", "2 busy", "1/2", "1/2 busy"))
          + f" {'ours 1 busy':>12s} {'ours pinned':>12s} {'busy 1/2':>9s} {'pinned':>7s}")
    for name, med, _, _, _ in rows:
        cells = ""
        for e in ("ours", "ORT"):
            one, two, busy = med[f"{e} 1"], med[f"{e} 2"], med[f"{e} 2{BUSY}"]
            cells += f" {one:13.2f} {two:13.2f} {busy:13.2f} {one / two:12.2f}x {one / busy:12.2f}x"
        one_busy, pinned, two_busy = med[f"ours 1{BUSY}"], med[f"ours 2 pinned{BUSY}"], med[f"ours 2{BUSY}"]
        print(f"{name:13s}{cells} {one_busy:12.2f} {pinned:12.2f} {one_busy / two_busy:8.2f}x "
              f"{one_busy / pinned:6.2f}x")
    print("\nratios (ms / ms): speed-up of ours from 1 thread; ours against each peer at the same count")
    print(f"{'net':13s} " + " ".join(f"{'ours 1/' + str(n):>10s}" for n in counts[1:]) + " "
          + " ".join(f"{'/ORT ' + str(n):>9s} {'/web ' + str(n):>9s}" for n in counts))
    for name, med, web, _, _ in rows:
        cells = " ".join(f"{med['ours 1'] / med[f'ours {n}']:9.2f}x" for n in counts[1:])
        for n in counts:
            w = web[n]
            wr = f"{med[f'ours {n}'] / w.median_ms:8.2f}x" if isinstance(w, WebTiming) else f"{'n/a':>9s}"
            cells += f" {med[f'ours {n}'] / med[f'ORT {n}']:8.2f}x {wr}"
        print(f"{name:13s} {cells}")


if __name__ == "__main__":
    main()
