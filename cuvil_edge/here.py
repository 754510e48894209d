"""This machine as a place builds run: the variant it selects, and a build instantiated here. One home for
both, so calibration, profiling, ``bench`` and ``CuvilModel.predict`` run what a device would."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from runtime_wasm import ModuleCache, WasmModel
from runtime_wasm.engine import TIER_RELAXED, TIER_SIMD128
from runtime_wasm.loader import instantiate
from runtime_wasm.spec import ModelSpec, VariantSpec
from runtime_wasm.variants import probe_host, select_variant

from .buildcache import DeferredFile
from .codegen.toolchain import Target
from .compiler import CompiledModel, compile_graph
from .ir.graph import Graph


class Built(Protocol):
    """A build's device files: a ``CompiledModel`` or what ``CuvilModel`` keeps of one."""

    spec: ModelSpec
    modules: Mapping[str, bytes]  # variant name -> wasm bytes
    weights: bytes | DeferredFile  # a build-cache entry's weights file, opened but not yet read


def host_tiers() -> tuple[str, ...]:
    """The tiers this host's engine runs, fastest last: simd128, and relaxed where it validates relaxed SIMD
    (what a check of every tier, here, iterates over)."""
    return (TIER_SIMD128, TIER_RELAXED) if probe_host().relaxed_simd else (TIER_SIMD128,)


def host_target() -> Target:
    """The module variant this host would select (the fastest tier its engine validates)."""
    return Target(host_tiers()[-1], probe_host().family)


def instantiate_here(built: Built, variant: VariantSpec | None = None, threads: int = 1,
                     deterministic: bool = False) -> WasmModel:
    """``built``'s module for ``variant`` (default: the one this host selects; in determinism mode the
    one every host runs, under the deterministic engine settings) in a fresh instance. Weights
    made in this process are not hashed again (0.12 s of a 180 MB encoder's first predict); a build-cache
    entry's weights file goes straight into linear memory, checked against the spec's digest on the way
    in as a device checks its install (a ``SpecError`` if it changed since the lookup)."""
    v = variant or select_variant(built.spec.variants, probe_host(), deterministic=deterministic)
    deferred = isinstance(built.weights, DeferredFile)
    return instantiate(built.spec, built.modules[v.name], built.weights, v, ModuleCache(), threads=threads,
                       check_weights=deferred, deterministic=deterministic)


def compile_here(graph: Graph, target: Target | None = None,
                 profile: bool = False) -> tuple[CompiledModel, WasmModel]:
    """``graph`` compiled for one target (default: ``host_target()``) and instantiated: (build, instance)."""
    c = compile_graph(graph, [target or host_target()], profile=profile)
    return c, instantiate_here(c, c.spec.variants[0])
