"""Variant selection: a pure function from (host probes, available variants) to one variant."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import wasmtime

from device_profiles import DeviceProfile, detect_cpu

from .engine import EngineConfig, engine_for
from .errors import NoUsableVariant
from .spec import VariantSpec

#: preference order: the faster tier first; a host family mismatch still runs (it is only slower).
TIER_ORDER = ("relaxed", "simd128")

_RELAXED_PROBE_WAT = ("(module (func (result v128) v128.const i64x2 0 0 v128.const i64x2 0 0 "
                      "v128.const i64x2 0 0 f32x4.relaxed_madd))")


@dataclass(frozen=True)
class HostProbes:
    """What selection needs to know about a host: measured on the device, or read from its profile."""

    family: str  # "x86" or "arm"
    relaxed_simd: bool

    @classmethod
    def from_profile(cls, profile: DeviceProfile) -> HostProbes:
        return cls(profile.family, profile.relaxed_simd)


@lru_cache(maxsize=1)
def probe_host() -> HostProbes:
    """Ask the engine itself: a relaxed-SIMD module must validate, or that tier cannot load here."""
    try:
        wasmtime.Module.validate(engine_for(EngineConfig("relaxed")), wasmtime.wat2wasm(_RELAXED_PROBE_WAT))
        relaxed = True
    except wasmtime.WasmtimeError:
        relaxed = False
    return HostProbes(family=detect_cpu().family, relaxed_simd=relaxed)


def select_variant(variants: Sequence[VariantSpec], probes: HostProbes,
                   allow_relaxed: bool = True) -> VariantSpec:
    """Best runnable variant: relaxed tier if the engine validates it, matching host family first."""
    usable = [v for v in variants if v.tier == "simd128" or (v.tier == "relaxed" and probes.relaxed_simd
                                                                and allow_relaxed)]
    if not usable:
        raise NoUsableVariant(f"no variant runs here (have {[v.name for v in variants]}, host {probes})")
    return min(usable, key=lambda v: (v.family != probes.family, TIER_ORDER.index(v.tier)))
