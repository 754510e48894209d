"""``CuvilModel``: load -> optimize -> predict / save, the host-side Python API."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from device_profiles import available_profiles, load_profile
from runtime_wasm import InferenceInputError, ModuleCache, WasmModel
from runtime_wasm.loader import SPEC_FILE, WEIGHTS_FILE, instantiate
from runtime_wasm.variants import probe_host, select_variant

from .codegen.toolchain import ALL_TARGETS, Target
from .compiler import CompiledModel, compile_graph, optimize_graph
from .errors import InputError, TargetError
from .ir.graph import Graph

if TYPE_CHECKING:
    from .quant import QuantResult

PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic", "int4", "mixed")


class CuvilModel:
    """A model on its way to the edge: imported graph, optimized IR, compiled modules, a live instance."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.compiled: CompiledModel | None = None
        self._instance: WasmModel | None = None
        self._optimized = False
        self.quantization: QuantResult | None = None

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str] | bytes | Any,
             input_shapes: Mapping[str, Sequence[int]] | None = None) -> CuvilModel:
        """Import an ONNX model (path, bytes or ModelProto); input shapes fix dynamic dims."""
        from .frontend.onnx import import_onnx

        name = Path(os.fspath(path)).stem if isinstance(path, (str, os.PathLike)) else None
        return cls(import_onnx(path, input_shapes, name=name))

    # -- build --------------------------------------------------------------------------------
    def optimize(self, precision: str = "fp32", targets: Sequence[Target] | str | None = None,
                 progress: Callable[[str], None] | None = None, calibration: Any = None,
                 accuracy_budget: float = 0.01, profiles: Sequence[str] = (),
                 **quant_options: Any) -> CuvilModel:
        """Run the passes and compile modules: ``targets`` = "host" (the default: this machine's family,
        both tiers), "all" (every tier x family) or a list of ``Target``; or instead ``profiles``, device
        profile names: only the variants those devices need (``profile_targets``), and the names are
        recorded in the spec so a bundle signed from it targets them. ``precision`` other than fp32
        quantizes the optimized graph (``cuvil_edge.quant``): ``calibration`` is an .npz file, a
        directory of .npy/.npz or an iterable of samples; ``accuracy_budget`` bounds ``mixed``;
        ``quant_options``: observer ("minmax", "percentile", "mse"), group_size, max_samples."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}")
        if profiles and targets is not None:
            raise TargetError("give either targets or profiles: profiles choose the targets")
        chosen = (profile_targets(profiles) if profiles
                  else _resolve_targets("host" if targets is None else targets))
        if not self._optimized:
            optimize_graph(self.graph, progress)
            self._optimized = True
        graph, extra = self.graph, {"profiles": list(profiles)} if profiles else {}
        self.quantization = None
        if precision != "fp32":
            from .quant import quantize

            self.quantization = quantize(self.graph, precision, calibration, accuracy_budget,
                                         progress=progress, **quant_options)
            graph, extra = self.quantization.graph, {**extra, "quantization": self.quantization.record}
        self.compiled = compile_graph(graph, chosen, progress, extra=extra)
        self._close_instance()
        return self

    # -- run ----------------------------------------------------------------------------------
    @property
    def instance(self) -> WasmModel:
        if self._instance is None:
            if self.compiled is None:
                self.optimize()
            c = self.compiled
            assert c is not None
            variant = select_variant(c.spec.variants, probe_host())
            self._instance = instantiate(c.spec, c.modules[variant.name], c.weights, variant, ModuleCache())
        return self._instance

    def predict(self, inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray) -> dict[str, np.ndarray]:
        """Run once in wasmtime. Inputs: dict by name, list in order, or one array for one input."""
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        try:
            return self.instance.predict(inputs)
        except InferenceInputError as exc:
            raise InputError(str(exc)) from exc

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.graph.inputs]

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write spec, modules and weights to a directory (written aside, then renamed into place)."""
        if self.compiled is None:
            self.optimize()
        c = self.compiled
        assert c is not None
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        (tmp / SPEC_FILE).write_text(c.spec.to_json())
        (tmp / WEIGHTS_FILE).write_bytes(c.weights)
        for v in c.spec.variants:
            (tmp / v.file).write_bytes(c.modules[v.name])
        if out.exists():
            import shutil

            old = out.with_name(f".{out.name}.old")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
        return out

    def close(self) -> None:
        self._close_instance()

    def _close_instance(self) -> None:
        if self._instance is not None:
            self._instance.close()
            self._instance = None

    def __enter__(self) -> CuvilModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def profile_targets(profiles: Sequence[str]) -> tuple[Target, ...]:
    """The variants devices of these classes need, in ``ALL_TARGETS`` order: each profile's family at the
    relaxed tier when its runtime accepts relaxed SIMD, and always at simd128, which ``select_variant``
    falls back to on an engine that does not validate relaxed-SIMD modules."""
    known = available_profiles()
    unknown = sorted(set(profiles) - set(known))
    if unknown or not profiles:
        raise TargetError(f"unknown device profile(s) {unknown}; known: {known}" if unknown
                          else f"no device profile given; known: {known}")
    chosen = [load_profile(name) for name in profiles]
    return tuple(t for t in ALL_TARGETS
                 if any(p.family == t.family and (t.tier == "simd128" or p.relaxed_simd) for p in chosen))


def _resolve_targets(targets: Sequence[Target] | str) -> tuple[Target, ...]:
    if targets == "all":
        return ALL_TARGETS
    if targets == "host":
        fam = probe_host().family
        return tuple(t for t in ALL_TARGETS if t.family == fam)
    if isinstance(targets, str):
        raise ValueError(f"targets must be 'host', 'all' or a list of Target, got {targets!r}")
    return tuple(targets)
