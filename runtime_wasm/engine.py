"""wasmtime engine configuration per module tier, and the fingerprint that keys compiled artifacts."""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import wasmtime

#: the module tiers: plain WASM SIMD128 (every engine) and relaxed SIMD (engines that validate it); these
#: strings are what spec JSON, bundle manifests and ``--targets`` carry, so spell them only here
TIER_SIMD128 = "simd128"
TIER_RELAXED = "relaxed"
TIERS = (TIER_SIMD128, TIER_RELAXED)


@dataclass(frozen=True)
class EngineConfig:
    """Settings that change generated machine code (and so the cache key)."""

    tier: str = TIER_SIMD128
    max_wasm_stack: int = 1 << 20  # bytes; runaway recursion traps instead of crashing the host
    parallel_compilation: bool = True
    #: determinism mode: NaNs canonicalized (their bits differ per ISA otherwise) and relaxed-SIMD ops with
    #: one behaviour on every platform
    deterministic: bool = False

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"tier must be one of {TIERS}, got {self.tier!r}")

    def build(self) -> wasmtime.Config:
        cfg = wasmtime.Config()
        cfg.cranelift_opt_level = "speed"
        cfg.wasm_simd = True
        cfg.wasm_relaxed_simd = self.tier == TIER_RELAXED
        cfg.max_wasm_stack = self.max_wasm_stack
        cfg.parallel_compilation = self.parallel_compilation
        cfg.cranelift_nan_canonicalization = self.deterministic
        cfg.wasm_relaxed_simd_deterministic = self.deterministic
        cfg.wasm_threads = True  # threaded modules: one shared memory, atomics (plain modules are unaffected)
        cfg.shared_memory = True
        return cfg

    def fingerprint(self) -> str:
        """Artifacts are only valid for the same wasmtime, settings and CPU (it picks ISA features)."""
        parts = [f"wasmtime-{wasmtime_version()}", f"tier={self.tier}", "opt=speed",
                 f"stack={self.max_wasm_stack}", f"det={int(self.deterministic)}", "threads=1",
                 f"cpu={cpu_fingerprint()}"]
        return "|".join(parts)


@lru_cache(maxsize=1)
def wasmtime_version() -> str:
    """The installed wheel's version, read from its dist-info name beside the package (importing
    ``importlib.metadata`` cost 20 ms of a device's start); from ``importlib.metadata`` when that is not
    one unambiguous directory."""
    found = list(Path(wasmtime.__file__).parent.parent.glob("wasmtime-*.dist-info"))
    if len(found) == 1:
        return found[0].name.removeprefix("wasmtime-").removesuffix(".dist-info")
    from importlib.metadata import version

    return version("wasmtime")


@lru_cache(maxsize=1)
def cpu_fingerprint() -> str:
    """Machine architecture plus a digest of the CPU's model and feature flags."""
    text = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags", "Features", "CPU part"))]
        text += "".join(sorted(set(lines)))
    except OSError:
        pass
    return platform.machine() + "-" + hashlib.sha256(text.encode()).hexdigest()[:16]


_ENGINES: dict[EngineConfig, wasmtime.Engine] = {}


def engine_for(config: EngineConfig) -> wasmtime.Engine:
    """One shared Engine per config: engines are thread-safe and compiled modules are tied to one."""
    eng = _ENGINES.get(config)
    if eng is None:
        eng = _ENGINES[config] = wasmtime.Engine(config.build())
    return eng
