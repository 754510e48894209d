"""Profile schema: what the packager and the runtime may assume about a class of device."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from importlib import resources


class ProfileError(Exception):
    """A profile file is missing or does not follow the schema."""


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    family: str  # "x86" or "arm": which kernel variant family suits the CPU
    arch: str  # e.g. "x86_64", "aarch64"
    cores: int
    memory_mb: int
    relaxed_simd: bool  # whether the runtime build on these devices accepts relaxed-SIMD modules
    description: str = ""

    def __post_init__(self) -> None:
        if self.family not in ("x86", "arm"):
            raise ProfileError(f"profile {self.name!r}: family must be x86 or arm, got {self.family!r}")
        if self.cores < 1 or self.memory_mb < 1:
            raise ProfileError(f"profile {self.name!r}: cores and memory_mb must be positive")


def available_profiles() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).joinpath("data").iterdir()
                  if p.name.endswith(".json"))


def load_profile(name: str) -> DeviceProfile:
    path = resources.files(__package__).joinpath("data", f"{name}.json")
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProfileError(f"no device profile {name!r}; available: {available_profiles()}") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(f"profile {name!r} is not valid JSON: {exc}") from exc
    known = {f.name for f in fields(DeviceProfile)}
    unknown = set(data) - known
    if unknown:
        raise ProfileError(f"profile {name!r} has unknown fields {sorted(unknown)}")
    try:
        return DeviceProfile(**data)
    except TypeError as exc:
        raise ProfileError(f"profile {name!r}: {exc}") from exc
