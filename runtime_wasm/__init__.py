"""Device runtime: load cuvil-edge modules into wasmtime and run them (no host dependencies)."""

from .cache import ModuleCache
from .engine import EngineConfig, cpu_fingerprint, engine_for
from .errors import (
    InferenceInputError,
    InferenceTrap,
    ModuleLoadError,
    NoUsableVariant,
    RuntimeWasmError,
    SpecError,
)
from .instance import WasmModel
from .spec import ModelSpec, TensorSpec, VariantSpec
from .variants import HostProbes, probe_host, select_variant

__all__ = [
    "EngineConfig", "HostProbes", "InferenceInputError", "InferenceTrap", "ModelSpec", "ModuleCache",
    "ModuleLoadError", "NoUsableVariant", "RuntimeWasmError", "SpecError", "TensorSpec", "VariantSpec",
    "WasmModel", "cpu_fingerprint", "engine_for", "probe_host", "select_variant",
]
