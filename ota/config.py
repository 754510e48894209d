"""Limits and tolerances of the update path: typed fields whose names carry their units."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class OtaConfig:
    """Bounds every read from the network or disk, so hostile input cannot exhaust memory or storage."""

    max_manifest_bytes: int = 1 << 20  # the signed header: manifest + signatures + golden vectors
    max_bundle_bytes: int = 512 << 20  # header + every payload
    max_root_bytes: int = 64 << 10
    max_root_chain_length: int = 32  # root versions applied in one update
    expiry_grace_seconds: int = 0  # tolerated clock error on devices without a trusted clock
    chunk_bytes: int = 1 << 16  # read/write granularity for payloads
    selftest_rtol: float = 1e-4
    selftest_atol: float = 1e-4

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"OtaConfig.{f.name} must be a non-negative number, got {value!r}")
        if self.chunk_bytes == 0 or self.max_root_chain_length == 0:
            raise ValueError("OtaConfig.chunk_bytes and max_root_chain_length must be positive")
