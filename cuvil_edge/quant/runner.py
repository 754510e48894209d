"""Compile a graph for this host (one variant) and run samples through it: the measuring stick of
calibration and sensitivity analysis (what a device will compute, not a numpy stand-in)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..codegen.toolchain import Target
from ..host import compile_here
from ..ir.graph import Graph


class Runner:
    """``Runner(graph)(sample) -> {output name: array}``; a context manager that owns its instance."""

    def __init__(self, graph: Graph, target: Target | None = None) -> None:
        self.compiled, self._model = compile_here(graph, target)

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
