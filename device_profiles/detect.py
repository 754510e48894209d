"""CPU feature detection on the device (Linux /proc/cpuinfo; falls back to platform.machine())."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuInfo:
    arch: str
    family: str  # "x86" or "arm"
    model: str
    features: frozenset[str]
    cores: int


def detect_cpu(cpuinfo_text: str | None = None, machine: str | None = None) -> CpuInfo:
    """Parse cpuinfo text (read from /proc when not given): pure given its inputs, so testable."""
    arch = machine or platform.machine()
    if cpuinfo_text is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo_text = f.read()
        except OSError:
            cpuinfo_text = ""
    model, feats = "", set()
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features"):
            feats.update(value.split())
    is_arm = arch.lower().startswith(("arm", "aarch64")) or bool({"asimd", "neon"} & feats)
    fam = "arm" if is_arm else "x86"
    return CpuInfo(arch, fam, model, frozenset(feats), os.cpu_count() or 1)
