"""Per-node timing: build a profiling module that exports every node, then time each one in wasmtime."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from runtime_wasm import ModuleCache
from runtime_wasm.loader import instantiate

from .codegen.toolchain import Target
from .compiler import compile_graph
from .model import CuvilModel
from .oracle import random_feeds


@dataclass(frozen=True)
class NodeTiming:
    name: str
    op: str
    kernel: str
    output: str
    median_us: float


RELAXED = Target("relaxed")


def profile_model(model: CuvilModel, target: Target = RELAXED, repeat: int = 20,
                  seed: int = 0) -> list[NodeTiming]:
    """Median time of each node (run in order, on seeded inputs) of the graph the model was compiled
    from (the quantized one after ``optimize(precision=...)``), in a module built for ``target``."""
    if model.compiled is None:
        model.optimize(targets=[target])
    assert model.compiled is not None
    graph = model.compiled.graph
    compiled = compile_graph(graph, [target], profile=True)
    variant = compiled.spec.variants[0]
    nodes = {n.name: n for n in graph.nodes}
    with instantiate(compiled.spec, compiled.modules[variant.name], compiled.weights, variant,
                     ModuleCache()) as inst:
        inst.set_inputs(random_feeds(compiled.spec.inputs, seed))
        calls = [inst.export_function(f"cuvil_node_{i}") for i in range(len(compiled.program.profiled_nodes))]
        samples: list[list[float]] = [[] for _ in calls]
        for _ in range(repeat + 1):  # the first pass warms caches and is dropped
            for i, call in enumerate(calls):
                t = time.perf_counter()
                call()
                samples[i].append(time.perf_counter() - t)
    out = []
    for name, times in zip(compiled.program.profiled_nodes, samples):
        n = nodes[name]
        out.append(NodeTiming(name, n.op, compiled.kernels.get(name, "-"), str(n.outputs[0].type),
                              float(np.median(times[1:])) * 1e6))
    return out
