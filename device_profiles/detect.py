"""What this machine is, in profile terms, and which shipped profile it is closest to.

``gather`` only reads files (any of them may be missing); every ``parse_*`` function and ``describe`` is
pure over what was read, so inputs recorded on real boards exercise the same code a device runs.

ARM SIMD features come from the auxiliary vector (the HWCAP/HWCAP2 words the kernel hands this process),
not from /proc/cpuinfo: under qemu user-mode emulation /proc/cpuinfo describes the build host's CPU while
the auxiliary vector describes the emulated one. x86 features come from the cpuinfo ``flags`` line.

Closest profile (``closest_profile``), compared in this order:
  1. the family must match (a profile of the other family is never named);
  2. fewest profile features the host lacks (0: the profile's features are a subset of the host's);
  3. most profile features the host has (the most specific subset wins: an AVX-512 VNNI host is an
     x86-64-avx512, not an x86-64-avx2);
  4. smallest size distance: sum of |log2(host / profile)| over total cores and memory, each counted only
     when detected (so a 4 GB Raspberry Pi 4 is not the 1 GB generic-arm64);
  5. the name, so the answer is deterministic.
"""

from __future__ import annotations

import math
import os
import platform
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from runtime_wasm.variants import family_of

from .profile import Caches, Cores, DeviceProfile, Thermal, load_profiles

# auxiliary vector entry types (<linux/auxvec.h>)
AT_NULL, AT_HWCAP, AT_HWCAP2 = 0, 16, 26

#: arm64 <asm/hwcap.h> bits per canonical feature: (auxv entry, bits that must all be set)
ARM64_HWCAPS: dict[str, tuple[int, int]] = {
    "neon": (AT_HWCAP, 1 << 1),  # HWCAP_ASIMD
    "fp16": (AT_HWCAP, 1 << 9 | 1 << 10),  # HWCAP_FPHP | HWCAP_ASIMDHP: scalar and vector half precision
    "dotprod": (AT_HWCAP, 1 << 20),  # HWCAP_ASIMDDP
    "i8mm": (AT_HWCAP2, 1 << 13),  # HWCAP2_I8MM
}

#: /proc/cpuinfo flag names per canonical feature (all must be listed)
CPUINFO_FEATURES: dict[str, dict[str, tuple[str, ...]]] = {
    "arm": {"neon": ("asimd",), "fp16": ("fphp", "asimdhp"), "dotprod": ("asimddp",), "i8mm": ("i8mm",)},
    "x86": {"sse4.1": ("sse4_1",), "avx2": ("avx2",), "fma": ("fma",), "avx512f": ("avx512f",),
            "avx512vnni": ("avx512_vnni",), "avx_vnni": ("avx_vnni",)},
}

#: Arm "CPU part" numbers of the cores the shipped profiles describe (cpuinfo names no arm64 model)
ARM_PARTS = {"0xd03": "Cortex-A53", "0xd05": "Cortex-A55", "0xd08": "Cortex-A72", "0xd0b": "Cortex-A76",
             "0xd42": "Cortex-A78AE"}

#: a core whose capacity (or max frequency) is below this fraction of the fastest one's is a little core
LITTLE_BELOW = 0.8

_CPU_FILES = ("cpu_capacity", "cpufreq/cpuinfo_max_freq", "topology/core_id", "topology/physical_package_id")


@dataclass(frozen=True)
class HostInputs:
    """Everything detection reads, as read: file texts, the auxv bytes, and sysfs directories as
    ``{directory name: {relative file: text}}``. Empty where a file was missing or unreadable."""

    machine: str  # platform.machine()
    cpuinfo: str = ""
    auxv: bytes = b""
    meminfo: str = ""
    caches: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # cpu0/cache/index*
    cpus: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # cpu<N>
    thermal: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # thermal_zone<N>
    cpu_count: int = 0  # os.cpu_count() of the live machine: the last resort for the number of cores


@dataclass(frozen=True)
class DetectedHost:
    """This machine described like a profile (0 or empty: could not be read) and the closest profile."""

    arch: str
    family: str
    model: str
    features: frozenset[str]
    feature_source: str  # "auxv", "cpuinfo" or "none": where the features were read
    cores: Cores
    caches: Caches
    memory_mb: int
    thermal: Thermal  # limit_c: the lowest passive (else critical) kernel trip point
    closest: str | None = None


@dataclass(frozen=True)
class CpuinfoFacts:
    model: str
    flags: frozenset[str]
    cores: int  # distinct (physical id, core id) pairs, else processor entries; 0: none listed


# -- gathering: the only part that touches the file system -------------------------------------------
def gather(root: str | os.PathLike[str] = "/", machine: str | None = None) -> HostInputs:
    """Read every input under ``root`` (a recorded tree in tests); missing files are simply absent."""
    base = Path(root)
    cpu = base / "sys/devices/system/cpu"
    return HostInputs(
        machine=machine or platform.machine(),
        cpuinfo=_text(base / "proc/cpuinfo"),
        auxv=_bytes(base / "proc/self/auxv"),
        meminfo=_text(base / "proc/meminfo"),
        caches=_dirs(cpu / "cpu0/cache", "index*", ("level", "type", "size")),
        cpus=_dirs(cpu, "cpu[0-9]*", _CPU_FILES),
        thermal=_dirs(base / "sys/class/thermal", "thermal_zone*", ("type", "temp", "trip_point_*")),
        cpu_count=(os.cpu_count() or 0) if base.resolve() == Path("/") else 0,  # a recorded tree has none
    )


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _dirs(parent: Path, pattern: str, files: Iterable[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for d in sorted(parent.glob(pattern)):
        values = {str(p.relative_to(d)): _text(p).strip() for f in files for p in sorted(d.glob(f))}
        if values:
            out[d.name] = values
    return out


# -- parsing: pure functions of what was read --------------------------------------------------------
def parse_auxv(data: bytes) -> dict[int, int]:
    """``{a_type: a_val}`` from /proc/self/auxv: 64-bit little-endian pairs up to AT_NULL (the layout of
    both architectures wasmtime runs on); a truncated tail is ignored."""
    out: dict[int, int] = {}
    for a_type, a_val in struct.iter_unpack("<QQ", data[: len(data) // 16 * 16]):
        if a_type == AT_NULL:
            break
        out[a_type] = a_val
    return out


def arm64_features(auxv: Mapping[int, int]) -> frozenset[str]:
    return frozenset(name for name, (entry, bits) in ARM64_HWCAPS.items()
                     if auxv.get(entry, 0) & bits == bits)


def cpuinfo_features(family: str, flags: Iterable[str]) -> frozenset[str]:
    have = set(flags)
    return frozenset(name for name, needed in CPUINFO_FEATURES[family].items() if have.issuperset(needed))


def parse_cpuinfo(text: str) -> CpuinfoFacts:
    first: dict[str, str] = {}  # first value of each key
    flags: set[str] = set()
    processors = 0
    physical: set[tuple[str, str]] = set()
    package = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        first.setdefault(key, value)
        if key == "processor" and value.isdigit():
            processors += 1
        elif key in ("flags", "features"):
            flags.update(value.split())
        elif key == "physical id":
            package = value
        elif key == "core id":
            physical.add((package, value))
    # x86 names the CPU in "model name" ("model" is a number there); Raspberry Pi kernels add the board's
    # "Model"; arm64 otherwise names only the core's part number
    board = first.get("model", "")
    model = first.get("model name") or ("" if board.isdigit() else board) or first.get("hardware", "")
    if "cpu part" in first:
        part = ARM_PARTS.get(first["cpu part"], f"CPU part {first['cpu part']}")
        model = f"{model} ({part})" if model else part
    return CpuinfoFacts(model, frozenset(flags), len(physical) or processors)


def parse_size(text: str) -> int:
    """sysfs cache sizes ("32K", "1024K", "2M") in bytes; 0 when unreadable."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    return int(digits) * scale if digits.isdigit() else 0


def parse_caches(entries: Mapping[str, Mapping[str, str]]) -> Caches:
    """L1 data, L2 and L3 sizes from cpu0's ``cache/index*`` entries (instruction caches ignored)."""
    sizes = {1: 0, 2: 0, 3: 0}
    for entry in entries.values():
        level = entry.get("level", "")
        if level.isdigit() and int(level) in sizes and entry.get("type") in ("Data", "Unified"):
            sizes[int(level)] = parse_size(entry.get("size", ""))
    return Caches(sizes[1], sizes[2], sizes[3])


def parse_cores(cpus: Mapping[str, Mapping[str, str]]) -> Cores:
    """Physical cores (SMT siblings share a package and core id) split into big and little: a core whose
    capacity, else max frequency, is below ``LITTLE_BELOW`` of the fastest is little. Cores(0, 0): no data."""
    strength: dict[tuple[str, str], int] = {}
    for name, files in cpus.items():
        core = (files.get("topology/physical_package_id", ""), files.get("topology/core_id", name))
        value = files.get("cpu_capacity") or files.get("cpufreq/cpuinfo_max_freq") or ""
        strength[core] = max(strength.get(core, 0), int(value) if value.isdigit() else 0)
    fastest = max(strength.values(), default=0)
    little = sum(1 for s in strength.values() if s < LITTLE_BELOW * fastest)
    return Cores(len(strength) - little, little)


def parse_meminfo(text: str) -> int:
    """MemTotal in MiB; 0 when absent."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "MemTotal":
            amount = value.split()
            return int(amount[0]) // 1024 if amount and amount[0].isdigit() else 0
    return 0


def parse_thermal(zones: Mapping[str, Mapping[str, str]]) -> Thermal:
    """Each zone's sensor path and the lowest passive trip point (where the kernel starts throttling),
    else the lowest critical one, in °C; 0.0 when the zones declare neither."""
    sensors = tuple(f"/sys/class/thermal/{zone}/temp" for zone, files in sorted(zones.items())
                    if "temp" in files)
    trips: dict[str, list[float]] = {"passive": [], "critical": []}
    for files in zones.values():
        for name, kind in files.items():
            if name.startswith("trip_point_") and name.endswith("_type") and kind in trips:
                temp = files.get(name[: -len("_type")] + "_temp", "")
                if temp.lstrip("-").isdigit():
                    trips[kind].append(int(temp) / 1000.0)
    limit = min(trips["passive"] or trips["critical"] or [0.0])
    return Thermal(sensors, limit)


def describe(inputs: HostInputs, profiles: Sequence[DeviceProfile] = ()) -> DetectedHost:
    """The host described by ``inputs``, naming the closest of ``profiles`` (none given: None)."""
    facts = parse_cpuinfo(inputs.cpuinfo)
    arch, family = family_of(inputs.machine, facts.flags)
    auxv = parse_auxv(inputs.auxv)
    if family == "arm" and AT_HWCAP in auxv:
        features, source = arm64_features(auxv), "auxv"
    elif facts.flags:
        features, source = cpuinfo_features(family, facts.flags), "cpuinfo"
    else:
        features, source = frozenset(), "none"
    cores = parse_cores(inputs.cpus)
    if cores.total == 0:
        cores = Cores(facts.cores or inputs.cpu_count, 0)
    host = DetectedHost(arch, family, facts.model, features, source, cores, parse_caches(inputs.caches),
                        parse_meminfo(inputs.meminfo), parse_thermal(inputs.thermal))
    return replace(host, closest=closest_profile(host, profiles))


def closest_profile(host: DetectedHost, profiles: Sequence[DeviceProfile]) -> str | None:
    """The profile ``host`` is closest to, by the order in this module's docstring; None: no profile of
    its family."""
    same_family = [p for p in profiles if p.family == host.family]
    if not same_family:
        return None
    return min(same_family, key=lambda p: (len(p.features - host.features), -len(p.features & host.features),
                                           _size_distance(host, p), p.name)).name


def _size_distance(host: DetectedHost, profile: DeviceProfile) -> float:
    pairs = ((host.cores.total, profile.cores.total), (host.memory_mb, profile.memory_mb))
    return sum(abs(math.log2(h / p)) for h, p in pairs if h > 0)


def detect(root: str | os.PathLike[str] = "/", machine: str | None = None) -> DetectedHost:
    """This machine (or the tree recorded under ``root``) and the closest shipped profile."""
    return describe(gather(root, machine), load_profiles())

