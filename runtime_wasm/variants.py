"""Variant selection: a pure function from (host or profile, engine probes, variants) to one variant.

The host side (a ``DeviceProfile``, or ``HostProbes`` measured here) says which family suits the CPU and
whether the runtime build accepts relaxed SIMD (a profile is only read here: ``device_profiles`` builds on
this package, for its ``RuntimePolicy`` and ``ARCH_FAMILY``); the engine side (``EngineProbes``) says whether
the wasmtime engine in this process validates relaxed-SIMD modules. A relaxed variant is chosen only when
both allow it, because a module the engine cannot validate does not load at all.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import wasmtime

from .engine import TIER_RELAXED, TIER_SIMD128, EngineConfig, engine_for
from .errors import NoUsableVariant
from .spec import VariantSpec

if TYPE_CHECKING:
    from device_profiles import DeviceProfile

#: the kernel-variant family of each CPU architecture wasmtime compiles for
ARCH_FAMILY = {"x86_64": "x86", "aarch64": "arm"}
#: the names ``platform.machine()`` gives those architectures (lower-cased)
_MACHINE_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
#: preference order: the faster tier first; a host family mismatch still runs (it is only slower).
TIER_ORDER = (TIER_RELAXED, TIER_SIMD128)

_RELAXED_PROBE_WAT = ("(module (func (result v128) v128.const i64x2 0 0 v128.const i64x2 0 0 "
                      "v128.const i64x2 0 0 f32x4.relaxed_madd))")


def family_of(machine: str, flags: Iterable[str] = ()) -> tuple[str, str]:
    """(arch, family) from ``platform.machine()``; an unknown machine is judged by its cpuinfo flags (every
    machine wasmtime runs on has a known name, so the runtime's own probe needs none)."""
    m = machine.lower()
    if m in _MACHINE_ARCH:
        return _MACHINE_ARCH[m], ARCH_FAMILY[_MACHINE_ARCH[m]]
    is_arm = m.startswith("arm") or bool({"asimd", "neon"} & set(flags))
    return machine, "arm" if is_arm else "x86"


@dataclass(frozen=True)
class HostProbes:
    """What selection needs to know about a host: measured on the device, or read from its profile."""

    family: str  # "x86" or "arm"
    relaxed_simd: bool

    @classmethod
    def from_profile(cls, profile: DeviceProfile) -> HostProbes:
        return cls(profile.family, profile.relaxed_simd)


@dataclass(frozen=True)
class EngineProbes:
    """What the wasmtime engine in this process accepts, found by validating probe modules."""

    relaxed_simd: bool


@lru_cache(maxsize=1)
def probe_engine() -> EngineProbes:
    """Ask the engine itself: a relaxed-SIMD module must validate, or that tier cannot load here."""
    try:
        probe = wasmtime.wat2wasm(_RELAXED_PROBE_WAT)
        wasmtime.Module.validate(engine_for(EngineConfig(TIER_RELAXED)), probe)
        return EngineProbes(relaxed_simd=True)
    except wasmtime.WasmtimeError:
        return EngineProbes(relaxed_simd=False)


@lru_cache(maxsize=1)
def probe_host() -> HostProbes:
    """This machine's family and whether this engine validates relaxed SIMD."""
    return HostProbes(family=family_of(platform.machine())[1], relaxed_simd=probe_engine().relaxed_simd)


#: determinism mode runs the same module on every host: this family's when the model ships it
DETERMINISTIC_FAMILY_ORDER = ("x86", "arm")


def deterministic_variant(variants: Sequence[VariantSpec]) -> VariantSpec:
    """The module determinism mode runs on every host: the simd128 tier of the first family in
    ``DETERMINISTIC_FAMILY_ORDER`` the build has."""
    usable = [v for v in variants if v.tier == TIER_SIMD128 and v.family in DETERMINISTIC_FAMILY_ORDER]
    if not usable:
        raise NoUsableVariant(_nothing_fits(variants, ["determinism mode runs only the simd128 tier"]))
    return min(usable, key=lambda v: DETERMINISTIC_FAMILY_ORDER.index(v.family))


def select_variant(variants: Sequence[VariantSpec], probes: HostProbes | DeviceProfile,
                   allow_relaxed: bool = True, engine: EngineProbes | None = None,
                   deterministic: bool = False) -> VariantSpec:
    """Best runnable variant: the relaxed tier when host, engine and caller all allow it, matching host
    family first. ``NoUsableVariant`` says what is missing when nothing runs.

    ``deterministic``: one and the same module on every host whatever its family or engine, so outputs
    are bit-identical across a fleet: the simd128 tier (relaxed SIMD is not available everywhere, and the
    families' modules differ, e.g. ``pmin`` vs ``min`` on NaN) of a fixed family, never the host's."""
    if deterministic:
        return deterministic_variant(variants)
    host = probes if isinstance(probes, HostProbes) else HostProbes.from_profile(probes)
    no_relaxed = []  # why the relaxed tier cannot run here
    if not host.relaxed_simd:
        no_relaxed.append("the host probes report no relaxed SIMD" if isinstance(probes, HostProbes)
                          else f"profile {probes.name!r} says its runtime build lacks relaxed SIMD")
    if engine is not None and not engine.relaxed_simd:
        no_relaxed.append("the engine does not validate relaxed-SIMD modules")
    if not allow_relaxed:
        no_relaxed.append("the caller disabled the relaxed tier")
    runnable = {TIER_SIMD128} if no_relaxed else set(TIER_ORDER)
    usable = [v for v in variants if v.tier in runnable]
    if not usable:
        raise NoUsableVariant(_nothing_fits(variants, no_relaxed))
    return min(usable, key=lambda v: (v.family != host.family, TIER_ORDER.index(v.tier)))


def _nothing_fits(variants: Sequence[VariantSpec], no_relaxed: list[str]) -> str:
    if not variants:
        return "the model lists no module variants"
    tiers = sorted({v.tier for v in variants})
    why = [f"the model ships only {'/'.join(tiers)} variants {[v.name for v in variants]}"]
    if set(tiers) - {TIER_SIMD128}:
        why += no_relaxed
    unknown = sorted(set(tiers) - set(TIER_ORDER))
    if unknown:
        why.append(f"tier(s) {unknown} are unknown to this runtime")
    return ("no variant runs here: " + "; ".join(why)
            + "; a simd128 variant runs on every host (build --targets simd128-x86,simd128-arm)")
