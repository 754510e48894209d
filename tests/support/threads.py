"""Intra-op threads for the thread tests: a model built for up to N threads (one variant, relaxed x86),
opened on a given number of them over one shared memory, and seeded inputs for any model spec."""

from __future__ import annotations

import numpy as np

from cuvil_edge.codegen.toolchain import Target
from cuvil_edge.model import CuvilModel
from runtime_wasm.cache import ModuleCache
from runtime_wasm.engine import EngineConfig, engine_for
from runtime_wasm.instance import WasmModel
from runtime_wasm.spec import ModelSpec

TARGET = Target("relaxed", "x86")  # one variant keeps the builds short; the kernels split alike in all


def build_threaded(proto, precision: str = "fp32", max_threads: int = 4, **options) -> CuvilModel:
    return CuvilModel.load(proto.SerializeToString()).optimize(precision, targets=[TARGET],
                                                               max_threads=max_threads, **options)


def open_threaded(model: CuvilModel, threads: int, memory_limit: int | None = None) -> WasmModel:
    spec = model.spec
    files = model._built()
    config = EngineConfig(TARGET.tier)
    module = ModuleCache().load(files.modules[TARGET.name], config)
    return WasmModel(engine_for(config), module, spec, files.weights, memory_limit=memory_limit,
                     threads=threads)


def seeded_inputs(spec: ModelSpec, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, t.index_bound or 2, t.shape).astype(t.dtype) if np.dtype(t.dtype).kind in "iu"
            else rng.standard_normal(t.shape).astype(t.dtype) for t in spec.inputs]
