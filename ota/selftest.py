"""What an install's self-test measured on the golden vectors, kept with the slot it tested.

The rollout's golden gate (``cuvil_edge.fleet.gates.golden_gate``) judges these figures, which the agent
sends under ``models.<m>.golden`` in its telemetry summaries (``ota.protocol.SUMMARY_DATA_SCHEMA``): how
many vectors ran, the largest absolute error against their expected outputs, the tolerance applied, the
variant that ran them and whether in determinism mode (where the gate wants the error exactly 0). The
installer writes the record (``SELFTEST_FILE``) into the slot before it becomes active; a slot installed
by an older agent has none, and then nothing is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runtime_wasm import schema

from .errors import FormatError
from .store import read_json

SELFTEST_FILE = "selftest.json"
#: ``SELFTEST_FILE``: a ``GoldenReport``
GOLDEN_SCHEMA = schema.record({
    "vectors": schema.integer(), "max_abs": schema.number(0), "atol": schema.number(0),
    "variant": schema.text(256), "deterministic": schema.boolean()})


@dataclass(frozen=True)
class GoldenReport:
    """One self-test's figures. ``atol`` is the absolute bound the check allowed at the largest expected
    magnitude (``selftest_atol + selftest_rtol * max |expected|``): every error of a passing self-test is
    within it, so the gate fails a device only on a stricter ``--gate-golden-atol`` or in determinism mode."""

    vectors: int
    max_abs: float
    atol: float
    variant: str
    deterministic: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class GoldenCheck:
    """``np.allclose`` per output, as the self-test always judged, measuring the errors as it goes."""

    def __init__(self, rtol: float, atol: float) -> None:
        self.rtol, self.atol = rtol, atol
        self.vectors, self.max_abs, self.largest = 0, 0.0, 0.0

    def differing(self, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> list[str]:
        """The outputs of one vector that are missing or not close (sorted names of the mismatch when the
        output names differ); their errors are counted only when every output is present."""
        if set(got) != set(want):
            return sorted(set(got) ^ set(want))
        self.vectors += 1
        bad = []
        for name, expected in want.items():
            a, b = np.asarray(got[name], np.float64), np.asarray(expected, np.float64)
            if a.shape != b.shape or not np.allclose(a, b, rtol=self.rtol, atol=self.atol):
                bad.append(name)
                continue
            if b.size:  # equal values (infinities included) count 0, not inf - inf
                self.max_abs = max(self.max_abs, float(np.max(np.where(a == b, 0.0, np.abs(a - b)))))
                self.largest = max(self.largest, float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0)))
        return bad

    def report(self, variant: str, deterministic: bool) -> GoldenReport:
        return GoldenReport(self.vectors, self.max_abs, self.atol + self.rtol * self.largest, variant,
                            deterministic)


def read_report(slot: Path) -> dict[str, Any] | None:
    """The slot's self-test record as summaries carry it; None when it has none or it is unreadable (it
    only informs a gate: a damaged record must not stop serving)."""
    try:
        return read_json(slot / SELFTEST_FILE, None, GOLDEN_SCHEMA)
    except FormatError:
        return None
