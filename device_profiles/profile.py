"""Profile schema: what the packager and the runtime may assume about a class of device.

One JSON file per device class in ``data/``. Loading is typed: a missing or unknown key, a wrong type
or an out-of-range value is a ``ProfileError`` naming the field, because a profile drives both the build
and the device, and a silently ignored field is a wrong assumption across a whole fleet.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from importlib import resources
from typing import Any

from runtime_wasm.errors import PolicyError
from runtime_wasm.policy import RuntimePolicy
from runtime_wasm.variants import ARCH_FAMILY

#: SIMD features a profile may name, per family: canonical names (detection maps the kernel's onto these)
SIMD_FEATURES = {
    "arm": frozenset({"neon", "dotprod", "i8mm", "fp16"}),
    "x86": frozenset({"sse4.1", "avx2", "fma", "avx512f", "avx512vnni", "avx_vnni"}),
}


class DeviceProfilesError(Exception):
    """Base class of every error this package raises, as ``OtaError`` and ``RuntimeWasmError`` are of theirs:
    profiles drive the host build and the device alike, so their errors belong to neither of those."""


class ProfileError(DeviceProfilesError):
    """A profile file is missing or does not follow the schema."""


@dataclass(frozen=True)
class Cores:
    """Physical cores by type (SMT siblings are not cores): big (performance) and little (efficiency)."""

    big: int
    little: int

    @property
    def total(self) -> int:
        return self.big + self.little


@dataclass(frozen=True)
class Caches:
    """Bytes of each cache level as cpu0 sees it (sysfs ``cache/index*/size``): per core for a private
    level, per cluster or chip for a shared one. 0: no such level (or, for a detected host, unknown)."""

    l1d_bytes: int
    l2_bytes: int
    l3_bytes: int


@dataclass(frozen=True)
class Thermal:
    """Where temperature is read (glob patterns allowed; the hottest reading counts, as the scheduler's
    ``read_cpu_temp_c`` does) and the °C at which the platform starts throttling by itself."""

    sensors: tuple[str, ...]
    limit_c: float


@dataclass(frozen=True)
class DeviceProfile:
    """A device class: its CPU (for the build's variants and the device's selection), its resources, and
    the sandbox limits and runtime policy a model is served under there unless the agent says otherwise."""

    name: str
    arch: str  # "x86_64" or "aarch64"
    family: str  # "x86" or "arm": which kernel variant family suits the CPU
    features: frozenset[str]  # SIMD features every device of the class has (see SIMD_FEATURES)
    cores: Cores
    caches: Caches
    memory_mb: int  # RAM of the common SKU (the description names it)
    thermal: Thermal
    policy: RuntimePolicy  # validated by RuntimePolicy.from_dict: memory cap, deadline, thermal budget...
    threads: int  # inference threads a served model uses by default: a core stays with the agent and app
    relaxed_simd: bool  # whether the runtime build on these devices accepts relaxed-SIMD modules
    description: str

    def __post_init__(self) -> None:
        def bad(msg: str) -> ProfileError:
            return ProfileError(f"profile {self.name!r}: {msg}")

        if self.arch not in ARCH_FAMILY:
            raise bad(f"arch must be one of {sorted(ARCH_FAMILY)}, got {self.arch!r}")
        if self.family != ARCH_FAMILY[self.arch]:
            raise bad(f"family {self.family!r} does not match arch {self.arch!r} "
                      f"(expected {ARCH_FAMILY[self.arch]!r})")
        unknown = self.features - SIMD_FEATURES[self.family]
        if unknown:
            raise bad(f"features {sorted(unknown)} are not {self.family} SIMD features "
                      f"(known: {sorted(SIMD_FEATURES[self.family])})")
        if self.cores.big < 1 or self.cores.little < 0:
            raise bad("cores.big must be at least 1 and cores.little at least 0")
        if self.caches.l1d_bytes < 1 or self.caches.l2_bytes < 0 or self.caches.l3_bytes < 0:
            raise bad("caches.l1d_bytes must be positive, l2_bytes and l3_bytes non-negative")
        if self.memory_mb < 1:
            raise bad("memory_mb must be positive")
        if not self.thermal.sensors or not all(s.startswith("/") for s in self.thermal.sensors):
            raise bad("thermal.sensors must list at least one absolute path")
        if not 0 < self.thermal.limit_c < 150:
            raise bad(f"thermal.limit_c must be in (0, 150) °C, got {self.thermal.limit_c}")
        if self.policy.max_cpu_temp_c > self.thermal.limit_c:
            raise bad(f"policy.max_cpu_temp_c {self.policy.max_cpu_temp_c} is above thermal.limit_c "
                      f"{self.thermal.limit_c}: the platform would throttle before the policy degrades")
        if self.policy.memory_cap_bytes > self.memory_mb << 20:
            raise bad(f"policy.memory_cap_bytes {self.policy.memory_cap_bytes} exceeds memory_mb")
        if not 1 <= self.threads <= self.cores.total:
            raise bad(f"threads must be between 1 and the {self.cores.total} cores, got {self.threads}")


def available_profiles() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).joinpath("data").iterdir()
                  if p.name.endswith(".json"))


@cache
def load_profile(name: str) -> DeviceProfile:
    """The shipped profile ``name``, validated (profiles are immutable, so each is read once)."""
    if name not in available_profiles():  # also keeps a name like "../x" from reading outside data/
        raise ProfileError(f"no device profile {name!r}; known: {available_profiles()}")
    try:
        table = json.loads(resources.files(__package__).joinpath("data", f"{name}.json").read_text())
    except json.JSONDecodeError as exc:
        raise ProfileError(f"profile {name!r} is not valid JSON: {exc}") from exc
    profile = profile_from_dict(table, what=f"profile {name!r}")
    if profile.name != name:
        raise ProfileError(f"profile file {name}.json names itself {profile.name!r}")
    return profile


def load_profiles() -> list[DeviceProfile]:
    return [load_profile(n) for n in available_profiles()]


def profile_from_dict(table: Mapping[str, Any], what: str = "profile") -> DeviceProfile:
    """Typed load of one profile table (``what`` prefixes error messages)."""

    def convert(kind: Any, value: Any, field: str) -> Any:
        if kind is RuntimePolicy:
            if not isinstance(value, Mapping):
                raise ProfileError(f"{what}: {field} must be a table of policy settings, got {value!r}")
            try:
                return RuntimePolicy.from_dict(value)
            except PolicyError as exc:  # its message names the setting ("policy.x: ...")
                raise ProfileError(f"{what}: {exc}") from exc
        if is_dataclass(kind):
            return build(kind, value, f"{field}.")
        origin = typing.get_origin(kind)
        if origin in (frozenset, tuple):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ProfileError(f"{what}: {field} must be a list of strings, got {value!r}")
            if len(set(value)) != len(value):
                raise ProfileError(f"{what}: {field} lists a value twice: {value!r}")
            return origin(value)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise ProfileError(f"{what}: {field} must be {kind.__name__}, got {value!r}")
        return value

    def build(cls: type, value: Any, prefix: str) -> Any:
        if not isinstance(value, Mapping):
            raise ProfileError(f"{what}: {prefix.rstrip('.') or 'a profile'} must be a table, got {value!r}")
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(value) - set(names))
        missing = [n for n in names if n not in value]
        if unknown:
            raise ProfileError(f"{what}: unknown field(s) {[prefix + k for k in unknown]}")
        if missing:
            raise ProfileError(f"{what}: missing field(s) {[prefix + k for k in missing]}")
        hints = typing.get_type_hints(cls)
        return cls(**{n: convert(hints[n], value[n], prefix + n) for n in names})

    return build(DeviceProfile, table, "")
