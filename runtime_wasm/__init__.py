"""Device runtime: load cuvil-edge modules into wasmtime and run them (no host dependencies).

Names load on first use (PEP 562): a device that only loads and runs a model does not pay for the
scheduler, supervisor or processing imports in its cold start."""

from __future__ import annotations

from .lazy import lazy_exports

#: public name -> the submodule defining it
_WHERE = {
    "AdmissionGate": "admission",
    "Classification": "processing",
    "DeadlineExceeded": "errors",
    "DeviceAdmission": "admission",
    "EngineConfig": "engine",
    "EngineProbes": "variants",
    "HostProbes": "variants",
    "InferenceInputError": "errors",
    "InferenceTrap": "errors",
    "ModelSource": "supervisor",
    "ModelSpec": "spec",
    "ModuleCache": "cache",
    "ModuleLoadError": "errors",
    "NoUsableVariant": "errors",
    "Overloaded": "errors",
    "PolicyError": "errors",
    "ProcessingConfig": "processing",
    "ProcessingError": "errors",
    "Processor": "processing",
    "RuntimePolicy": "policy",
    "RuntimeWasmError": "errors",
    "Scheduler": "scheduler",
    "Span": "processing",
    "SpecError": "errors",
    "StaleInput": "errors",
    "SupervisedModel": "supervisor",
    "TensorSpec": "spec",
    "VariantSpec": "spec",
    "WasmModel": "instance",
    "WorkerCrashed": "errors",
    "cpu_fingerprint": "engine",
    "divide_threads": "admission",
    "engine_for": "engine",
    "probe_engine": "variants",
    "probe_host": "variants",
    "read_cpu_temp_c": "scheduler",
    "select_variant": "variants",
    "should_wait": "scheduler",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _WHERE)
