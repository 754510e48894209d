"""``RuntimePolicy``: the business rules a device serves a model under, declared once and validated.

Field names carry their units. A policy is a frozen dataclass built from keyword arguments, a dict
(``from_dict``) or a TOML table (``from_toml``; the agent's config embeds it as ``[policy]``); unknown
keys, wrong types and out-of-range values are errors, because a silently ignored limit is no limit.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .errors import PolicyError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

#: what the scheduler does while the CPU is hotter than ``max_cpu_temp_c``
DEGRADE_ACTIONS = ("throttle", "cheaper_variant", "shed")


@dataclass(frozen=True)
class RuntimePolicy:
    """Latency SLA, batching, energy/thermal budget, data freshness and memory cap for one model."""

    # latency SLA
    p95_budget_ms: float = 100.0  # end-to-end target; dynamic batching waits only while it still fits
    deadline_ms: float = 1000.0  # per request, from submission; past it the worker is killed
    # batching (compiled models have a fixed batch dimension: a batch is N runs in one dispatch)
    max_batch_size: int = 1
    batch_window_ms: float = 0.0  # longest the oldest queued request waits for company
    max_queue_depth: int = 64  # further requests are refused with ``Overloaded``
    # energy / thermal budget
    max_cpu_temp_c: float = 0.0  # 0: no thermal check
    thermal_hysteresis_c: float = 5.0  # leave the degraded state below max_cpu_temp_c - this
    thermal_poll_ms: float = 1000.0  # sensor read interval
    duty_cycle_cap: float = 1.0  # fraction of wall time the model may compute (1: no cap)
    degrade_action: str = "throttle"
    throttle_duty_cycle: float = 0.25  # duty cycle while degraded by "throttle"
    # data freshness
    max_input_age_ms: float = 0.0  # 0: no bound; older inputs fail with ``StaleInput``
    # determinism: the same module and engine settings on every host, bit-identical outputs (NaN, Inf
    # included) at the cost of the relaxed tier (docs/RUNTIME.md)
    deterministic: bool = False
    # cores: threads one inference runs on (0: every core the agent may use), at most what the module was
    # built for; the fallback worker runs only while the primary does not, so they share this budget
    threads: int = 0
    # sandbox
    memory_cap_bytes: int = 256 << 20  # wasm linear memory per instance (Store limit)
    worker_start_timeout_s: float = 60.0  # process start + compile (cached after the first time)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "str":
                continue
            if f.type == "bool":
                if not isinstance(value, bool):
                    raise PolicyError(f"RuntimePolicy.{f.name} must be true or false, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise PolicyError(f"RuntimePolicy.{f.name} must be a non-negative number, got {value!r}")
        positive = ("p95_budget_ms", "deadline_ms", "max_batch_size", "max_queue_depth", "memory_cap_bytes",
                    "worker_start_timeout_s", "duty_cycle_cap", "throttle_duty_cycle")
        for name in positive:
            if not getattr(self, name) > 0:
                raise PolicyError(f"RuntimePolicy.{name} must be positive")
        if self.deadline_ms < self.p95_budget_ms:
            raise PolicyError("RuntimePolicy.deadline_ms must be at least p95_budget_ms")
        if self.duty_cycle_cap > 1 or self.throttle_duty_cycle > 1:
            raise PolicyError("RuntimePolicy duty cycles are fractions in (0, 1]")
        if self.degrade_action not in DEGRADE_ACTIONS:
            raise PolicyError(f"RuntimePolicy.degrade_action must be one of {DEGRADE_ACTIONS}, "
                              f"got {self.degrade_action!r}")

    @classmethod
    def from_dict(cls, table: Mapping[str, Any]) -> RuntimePolicy:
        """Typed load: unknown keys and wrong types are errors (ints are accepted for float fields)."""
        hints = typing.get_type_hints(cls)
        for key, value in table.items():
            kind = hints.get(key)
            if kind is None:
                raise PolicyError(f"policy: unknown setting {key!r}")
            ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
            if not ok or (isinstance(value, bool) and kind is not bool):
                raise PolicyError(f"policy.{key}: expected {kind.__name__}, got {value!r}")
        return cls(**{k: float(v) if hints[k] is float else v for k, v in table.items()})

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str], table: str = "policy") -> RuntimePolicy:
        """The ``[policy]`` table of a TOML file (defaults when the file has none)."""
        with open(path, "rb") as f:
            doc = tomllib.load(f)
        return cls.from_dict(doc.get(table, {}))
