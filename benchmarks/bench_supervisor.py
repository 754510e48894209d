"""What deadline enforcement costs: in-process ``run()`` vs a supervised worker vs wasmtime epochs.

Per model (built here with the host compiler, best variant for this host), medians over ``--repeat``
timed calls after warm-up, one thread:

- ``in-process``: ``WasmModel.run()`` on inputs already in linear memory (no deadline at all);
- ``epoch``: the same module compiled with ``epoch_interruption`` (deadline set far away, so this is
  the cost of the checks Cranelift puts on every loop back-edge, not of an interrupt);
- ``supervised``: ``SupervisedModel.run(1, deadline)`` on inputs already in the shared slot: one pipe
  round trip to the worker plus its two slot <-> linear-memory copies;
- ``scheduler``: ``Scheduler.predict`` end to end (validation, queue, dispatcher thread, copies);
- ``restart``: kill a worker and wait until its replacement has loaded the model (module cache warm).

    python benchmarks/bench_supervisor.py [--repeat 300] [--models mlp,mlp32,resnet]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import wasmtime

from cuvil_edge import CuvilModel
from cuvil_edge.here import host_target
from cuvil_edge.testing.zoo import mlp, resnet
from cuvil_edge.tools.bench import median_p95, timings_ms
from runtime_wasm import ModelSource, RuntimePolicy, Scheduler, SupervisedModel, WasmModel
from runtime_wasm.engine import EngineConfig

MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": mlp, "mlp32": lambda: mlp(batch=32), "resnet": lambda: resnet(size=64),
}
CAP = 512 << 20
DEADLINE_S = 10.0


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    return median_p95(timings_ms(fn, max(repeat // 10, 3), repeat))[0]


def build(name: str, root: Path) -> ModelSource:
    model = CuvilModel.load(MODELS[name]())
    model.optimize(targets=[host_target()])
    return ModelSource.from_dir(model.save(root / f"{name}.cuvil"), cache_dir=str(root / "cache"))


def epoch_model(src: ModelSource) -> WasmModel:
    cfg = EngineConfig(src.variant.tier).build()
    cfg.epoch_interruption = True
    engine = wasmtime.Engine(cfg)
    return WasmModel(engine, wasmtime.Module(engine, src.wasm), src.spec, src.weights, epoch_deadline=1 << 40)


def restart_ms(sup: SupervisedModel, times: int) -> float:
    out = []
    for _ in range(times):
        t0 = time.perf_counter_ns()
        sup.restart()  # what a deadline kill does, minus the deadline
        sup.wait_ready()
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(out)


def bench(name: str, root: Path, repeat: int) -> list[str]:
    src = build(name, root)
    inputs = [np.random.default_rng(0).standard_normal(t.shape).astype(t.dtype) for t in src.spec.inputs]
    with src.load(CAP) as inproc:
        inproc.set_inputs(inputs)
        t_in = median_ms(inproc.run, repeat)
    with epoch_model(src) as ep:
        ep.set_inputs(inputs)
        t_ep = median_ms(ep.run, repeat)
    with SupervisedModel(src, CAP) as sup:
        sup.set_inputs(inputs)
        t_sup = median_ms(lambda: sup.run(1, DEADLINE_S), repeat)
        t_restart = restart_ms(sup, 5)
    with Scheduler(src, RuntimePolicy(memory_cap_bytes=CAP, deadline_ms=DEADLINE_S * 1e3)) as sched:
        t_sched = median_ms(lambda: sched.predict(inputs), repeat)
    return [name, f"{t_in:.3f}", f"{t_ep:.3f} ({t_ep / t_in - 1:+.0%})", f"{t_sup:.3f} (+{t_sup - t_in:.3f})",
            f"{t_sched:.3f} (+{t_sched - t_in:.3f})", f"{t_restart:.0f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    header = ["model", "in-process ms", "epoch ms (vs in-proc)", "supervised ms (+ms)", "scheduler ms (+ms)",
              "restart ms"]
    with tempfile.TemporaryDirectory(prefix="bench-supervisor-") as tmp:
        rows = [bench(name, Path(tmp), args.repeat) for name in args.models.split(",")]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
