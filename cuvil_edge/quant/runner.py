"""Compile a graph (one variant) and run samples through it: the measuring stick of calibration and
sensitivity analysis (what a device will compute, not a numpy stand-in).

By default it runs the module and engine settings of determinism mode (``deterministic_variant``): the
relaxed-SIMD tier's results differ in low bits between CPUs (fused or not), and calibration ranges feed
the scales in the compiled weights, so a build on another machine would otherwise differ in its bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from runtime_wasm.engine import TIER_SIMD128
from runtime_wasm.variants import DETERMINISTIC_FAMILY_ORDER

from ..codegen.toolchain import Target
from ..compiler import compile_graph
from ..here import instantiate_here
from ..ir.graph import Graph

#: the module every host runs alike (determinism mode's)
DETERMINISTIC_TARGET = Target(TIER_SIMD128, DETERMINISTIC_FAMILY_ORDER[0])


class Runner:
    """``Runner(graph)(sample) -> {output name: array}``; a context manager that owns its instance."""

    def __init__(self, graph: Graph, target: Target = DETERMINISTIC_TARGET) -> None:
        self.compiled = compile_graph(graph, [target])
        self._model = instantiate_here(self.compiled, self.compiled.spec.variants[0],
                                       deterministic=target == DETERMINISTIC_TARGET)

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
