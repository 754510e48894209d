"""Whole-model latency: our compiled module in wasmtime next to onnxruntime, both one thread.

Ours is timed on the zero-copy serving path (inputs written into the instance once with
``set_inputs``, then ``instance.run()`` per call), ORT as ``session.run`` with the same inputs. Each
side gets warm-up calls, then ``--repeat`` timed calls; the table shows medians (and our p95), the
build time (import + passes + clang, with an empty build cache), the cold instantiation (Cranelift
compile, empty module cache) and the module size. ``--web`` adds onnxruntime-web's WASM backend (one
thread, under Node, same inputs; see ``_peers.py``). The last line is the per-call overhead: a
one-element Relu timed through ``run()`` and through ``predict()``.

    python benchmarks/bench_models.py [--repeat 100] [--models mlp,resnet,...] [--light] [--web]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from _peers import ort_web

from cuvil_edge import CuvilError, CuvilModel, Target
from cuvil_edge.here import host_target
from cuvil_edge.oracle import ort_peer, random_inputs
from cuvil_edge.testing.zoo import NETS, NetBuilder
from cuvil_edge.tools.bench import median_p95, timings_ms


def light_resnet50() -> onnx.ModelProto:
    return onnx.load(str(Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"))


def per_call_model() -> onnx.ModelProto:
    b = NetBuilder("overhead")
    return b.build([("x", [1, 1])], b.op("Relu", ["x"]), [1, 1])


@dataclass
class Row:
    name: str
    ours_med: float
    ours_p95: float
    ort_med: float
    build_s: float
    inst_ms: float
    module_kib: float
    web: float | str | None = None  # onnxruntime-web median ms, why it did not run, or not asked for

    def line(self) -> str:
        web = f" {self.web:>9.3f}" if isinstance(self.web, float) else f"  {self.web}" if self.web else ""
        return (f"{self.name:<12} {self.ours_med:>9.3f} {self.ours_p95:>9.3f} {self.ort_med:>9.3f} "
                f"{self.ours_med / self.ort_med:>7.2f} {self.build_s:>7.2f} {self.inst_ms:>8.1f} "
                f"{self.module_kib:>8.0f}{web}")


HEADER = (f"{'model':<12} {'ours ms':>9} {'ours p95':>9} {'ORT ms':>9} {'ratio':>7} {'build s':>7} "
          f"{'inst ms':>8} {'KiB':>8}")


def bench_model(name: str, proto: onnx.ModelProto, target: Target, warmup: int, repeat: int,
                web: bool = False) -> Row:
    feeds = next(random_inputs(proto, 1, seed=0))
    t0 = time.perf_counter()
    model = CuvilModel.load(proto).optimize(targets=[target])
    build_s = time.perf_counter() - t0
    assert model.compiled is not None
    t0 = time.perf_counter()
    model.threads = 1  # the one-thread comparison (bench_threads.py: more)
    inst = model.instance
    inst_ms = (time.perf_counter() - t0) * 1e3
    inst.set_inputs(feeds)
    ours = timings_ms(inst.run, warmup, repeat)
    sess = ort_peer(proto)
    ort = timings_ms(lambda: sess.run(None, feeds), warmup, repeat)
    model.close()
    peer = ort_web(proto, feeds, repeat, warmup) if web else None
    return Row(name, statistics.median(ours), median_p95(ours)[1], statistics.median(ort), build_s, inst_ms,
               len(model.compiled.modules[target.name]) / 1024,
               peer if peer is None or isinstance(peer, str) else peer.median_ms)


def overhead_line(target: Target, warmup: int, repeat: int) -> str:
    proto = per_call_model()
    with CuvilModel.load(proto).optimize(targets=[target]) as model:
        x = {"x": np.ones((1, 1), np.float32)}
        model.instance.set_inputs(x)
        run = statistics.median(timings_ms(model.instance.run, warmup, repeat)) * 1e3
        predict = statistics.median(timings_ms(lambda: model.predict(x), warmup, repeat)) * 1e3
    sess = ort_peer(proto)
    ort = statistics.median(timings_ms(lambda: sess.run(None, x), warmup, repeat)) * 1e3
    return (f"per-call overhead (1-element Relu): run() {run:.1f} us, predict() {predict:.1f} us, "
            f"ORT {ort:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=100, help="timed calls per model and runtime")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--models", default=",".join(NETS), help=f"comma-separated, from {','.join(NETS)}")
    parser.add_argument("--light", action="store_true", help="add onnx's light ResNet-50 (224x224)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--web", action="store_true", help="add onnxruntime-web (WASM, 1 thread) under Node")
    args = parser.parse_args()
    unknown = set(args.models.split(",")) - set(NETS)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; choose from {list(NETS)}")

    # an empty build and module cache, so build and instantiation times are what a first build costs
    os.environ["CUVIL_CACHE_DIR"] = tempfile.mkdtemp(prefix="cuvil-bench-")
    target = host_target()
    cases: list[tuple[str, Callable[[], onnx.ModelProto]]] = [
        (m, lambda m=m: NETS[m]("initializer", args.batch)) for m in args.models.split(",")]
    if args.light:
        cases.append(("resnet50-l", light_resnet50))
    print(f"variant {target.name}, batch {args.batch}, {args.repeat} timed calls after {args.warmup} warm-up")
    print(HEADER + (f" {'web ms':>9}" if args.web else ""))
    for name, build in cases:
        try:
            print(bench_model(name, build(), target, args.warmup, args.repeat, args.web).line(), flush=True)
        except CuvilError as exc:  # an op still missing must not hide the other rows
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            print(f"{name:<12} not compiled: {reason}", flush=True)
    print(overhead_line(target, args.warmup, max(args.repeat, 1000)))


if __name__ == "__main__":
    main()
