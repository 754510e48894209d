"""Device runtime: load cuvil-edge modules into wasmtime and run them (no host dependencies)."""

from .admission import AdmissionGate, DeviceAdmission, divide_threads
from .cache import ModuleCache
from .engine import EngineConfig, cpu_fingerprint, engine_for
from .errors import (
    DeadlineExceeded,
    InferenceInputError,
    InferenceTrap,
    ModuleLoadError,
    NoUsableVariant,
    Overloaded,
    PolicyError,
    ProcessingError,
    RuntimeWasmError,
    SpecError,
    StaleInput,
    WorkerCrashed,
)
from .instance import WasmModel
from .policy import RuntimePolicy
from .processing import Classification, ProcessingConfig, Processor, Span
from .scheduler import Scheduler, read_cpu_temp_c, should_wait
from .spec import ModelSpec, TensorSpec, VariantSpec
from .supervisor import ModelSource, SupervisedModel
from .variants import EngineProbes, HostProbes, probe_engine, probe_host, select_variant

__all__ = [
    "AdmissionGate", "Classification", "DeadlineExceeded", "DeviceAdmission", "EngineConfig", "EngineProbes",
    "HostProbes", "InferenceInputError", "InferenceTrap", "ModelSource", "ModelSpec", "ModuleCache",
    "ModuleLoadError", "NoUsableVariant", "Overloaded", "PolicyError", "ProcessingConfig", "ProcessingError",
    "Processor", "RuntimePolicy", "RuntimeWasmError", "Scheduler", "Span", "SpecError", "StaleInput",
    "SupervisedModel", "TensorSpec", "VariantSpec", "WasmModel", "WorkerCrashed", "cpu_fingerprint",
    "divide_threads", "engine_for", "probe_engine", "probe_host", "read_cpu_temp_c", "select_variant",
    "should_wait",
]
