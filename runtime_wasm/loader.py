"""Load a compiled model directory (spec + modules + weights) and instantiate the best variant."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .cache import ModuleCache
from .engine import EngineConfig, engine_for
from .errors import SpecError
from .instance import WasmModel
from .spec import ModelSpec, VariantSpec
from .variants import HostProbes, probe_host, select_variant

SPEC_FILE = "model.json"
WEIGHTS_FILE = "weights.bin"


def instantiate(spec: ModelSpec, wasm: bytes, weights: bytes, variant: VariantSpec,
                cache: ModuleCache | None = None, memory_limit: int | None = None) -> WasmModel:
    """Check the module against the spec's hash, compile it (cached) and instantiate it."""
    if variant.sha256 and hashlib.sha256(wasm).hexdigest() != variant.sha256:
        raise SpecError(f"module for variant {variant.name!r} does not match its recorded sha256")
    if spec.weights_sha256 and hashlib.sha256(weights).hexdigest() != spec.weights_sha256:
        raise SpecError("weights do not match their recorded sha256")
    config = EngineConfig(variant.tier)
    module = (cache or ModuleCache()).load(wasm, config)
    return WasmModel(engine_for(config), module, spec, weights, memory_limit=memory_limit)


def load_model_dir(path: str | os.PathLike[str], variant: str | None = None,
                   probes: HostProbes | None = None, cache: ModuleCache | None = None,
                   memory_limit: int | None = None) -> WasmModel:
    root = Path(path)
    try:
        spec = ModelSpec.from_json((root / SPEC_FILE).read_bytes())
    except FileNotFoundError as exc:
        raise SpecError(f"{root} has no {SPEC_FILE}") from exc
    if variant is not None:
        chosen = next((v for v in spec.variants if v.name == variant), None)
        if chosen is None:
            raise SpecError(f"no variant {variant!r} (have {[v.name for v in spec.variants]})")
    else:
        chosen = select_variant(spec.variants, probes or probe_host())
    return instantiate(spec, (root / chosen.file).read_bytes(), (root / WEIGHTS_FILE).read_bytes(), chosen,
                       cache, memory_limit)
