"""Compile a graph for this host (one variant) and run samples through it: the measuring stick of
calibration and sensitivity analysis (what a device will compute, not a numpy stand-in)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from runtime_wasm import ModuleCache, WasmModel
from runtime_wasm.loader import instantiate
from runtime_wasm.variants import probe_host

from ..codegen.toolchain import Target
from ..compiler import compile_graph
from ..ir.graph import Graph


def host_target() -> Target:
    probes = probe_host()
    return Target("relaxed" if probes.relaxed_simd else "simd128", probes.family)


class Runner:
    """``Runner(graph)(sample) -> {output name: array}``; a context manager that owns its instance."""

    def __init__(self, graph: Graph, target: Target | None = None) -> None:
        t = target or host_target()
        c = compile_graph(graph, [t])
        self.compiled = c
        self._model: WasmModel = instantiate(c.spec, c.modules[t.name], c.weights, c.spec.variants[0],
                                             ModuleCache())

    def __call__(self, sample: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: np.array(v) for k, v in self._model.predict(dict(sample)).items()}

    def run_all(self, samples: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        return [self(s) for s in samples]

    def close(self) -> None:
        self._model.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
