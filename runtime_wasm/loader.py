"""Load a compiled model directory (spec + modules + weights) and instantiate the best variant."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .cache import ModuleCache
from .engine import EngineConfig, engine_for
from .errors import SpecError
from .instance import WasmModel, Weights, resolve_threads
from .spec import SPEC_FILE, WEIGHTS_FILE, ModelSpec, VariantSpec
from .variants import HostProbes, probe_host, select_variant


def instantiate(spec: ModelSpec, wasm: bytes, weights: Weights, variant: VariantSpec,
                cache: ModuleCache | None = None, memory_limit: int | None = None,
                deterministic: bool = False, threads: int = 1, check_weights: bool = True) -> WasmModel:
    """Check the module against the spec's hash, compile it (cached) and instantiate it; the weights
    (bytes, or a file read straight into linear memory) are checked against the spec's hash as they are
    copied in, unless ``check_weights`` is False (bytes this process built or already verified: the
    host's own builds). ``deterministic``: the engine settings of determinism mode (``EngineConfig``);
    ``threads``: how many to run on (0: every available core; at most what the module was built for)."""
    digest = hashlib.sha256(wasm).digest()  # checked here, and the cache key: hashed once
    if variant.sha256 and digest.hex() != variant.sha256:
        raise SpecError(f"module for variant {variant.name!r} does not match its recorded sha256")
    config = EngineConfig(variant.tier, deterministic=deterministic)
    module = (cache or ModuleCache()).load(wasm, config, digest)
    return WasmModel(engine_for(config), module, spec, weights, memory_limit=memory_limit,
                     check_weights=check_weights,
                     threads=resolve_threads(threads, spec.threads))


def read_model_dir(path: str | os.PathLike[str], variant: str | None = None,
                   probes: HostProbes | None = None,
                   deterministic: bool = False) -> tuple[ModelSpec, VariantSpec, bytes, Path]:
    """(spec, chosen variant, module bytes, weights file) of a model directory: the named variant or the
    best for this host (in determinism mode: the one every host runs). Its module must lie inside the
    directory: a spec naming ``../other/m.wasm`` or an absolute path would load code from outside what was
    installed (and hashed) there. The weights are not read here: ``WasmModel`` reads them straight into
    linear memory."""
    root = Path(path)
    try:
        spec = ModelSpec.from_json((root / SPEC_FILE).read_bytes())
    except FileNotFoundError as exc:
        raise SpecError(f"{root} has no {SPEC_FILE}") from exc
    except OSError as exc:  # a directory in its place, no permission: the typed error, naming the file
        raise SpecError(f"{root / SPEC_FILE} cannot be read: {exc.strerror}") from exc
    if variant is not None:
        chosen = next((v for v in spec.variants if v.name == variant), None)
        if chosen is None:
            raise SpecError(f"no variant {variant!r} (have {[v.name for v in spec.variants]})")
    else:
        chosen = select_variant(spec.variants, probes or probe_host(), deterministic=deterministic)
    base = root.resolve()
    module = (base / chosen.file).resolve()
    if module.parent != base:
        raise SpecError(f"variant {chosen.name!r} names {chosen.file!r}, outside the model directory")
    weights = root / WEIGHTS_FILE
    if not weights.is_file():
        raise SpecError(f"{root} has no {WEIGHTS_FILE}")
    try:
        return spec, chosen, module.read_bytes(), weights
    except OSError as exc:  # the variant's module missing or unreadable: a broken directory, typed
        raise SpecError(f"variant {chosen.name!r}: {module.name} cannot be read: {exc.strerror}") from exc


def load_model_dir(path: str | os.PathLike[str], variant: str | None = None,
                   probes: HostProbes | None = None, cache: ModuleCache | None = None,
                   memory_limit: int | None = None, deterministic: bool = False,
                   threads: int = 1) -> WasmModel:
    spec, chosen, wasm, weights = read_model_dir(path, variant, probes, deterministic)
    return instantiate(spec, wasm, weights, chosen, cache, memory_limit, deterministic, threads)
