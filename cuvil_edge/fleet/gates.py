"""Quality gates of a staged rollout (issue 39, part 4): before a stage is widened (and before the last one
completes), the publisher judges what the stage's devices said in their telemetry summaries, per device
class (a status's ``profile``, else its ``hardware_id``):

- ``latency``: the new release's p95 over the previous release's, on the same device class, at most
  ``latency_p95`` (a ratio). Each side is the request-weighted mean of the per-window p95 of every summary
  of that release from devices of the class (summaries before a device switched, and devices of the class
  still on the old release): window quantiles of different devices cannot be merged exactly.
- ``drift``: the statistics a device computes on a shadow sample of its real inputs run through both the
  new and the previous release (only the statistics leave it): the largest absolute output difference at
  most ``drift``, the share of samples whose top-1 agrees at least ``top1``.
- ``golden``: each device's self-test on the manifest's golden vectors, as the chosen variant ran them:
  the largest error at most the tolerance the device checked against (or ``golden_atol``), exactly 0 on a
  device in determinism mode.

A gate passes, fails (the publisher halts the rollout with the verdict's text, naming the gate, the class
and the figures) or waits for evidence (the stage is not widened; at the stage timeout it halts). Gates are
pure functions of the evidence (``Evidence``: sums per device and release, fed by records and statuses), so
``replay`` judges a recording of the fleet's messages exactly as the publisher judged them live.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ota.errors import OtaError
from ota.protocol import TELEMETRY_TYPE, TelemetryRecord, read_status

from ..errors import CuvilError
from .store import GateWindow

GATES = ("latency", "drift", "golden")
ROLLOUT_TYPE = "cuvil-rollout"  # the publisher's rollout summaries (``publisher.ROLLOUT_TYPE``)


class GateError(CuvilError):
    """A gate configuration that cannot be judged (a ratio under 1 is allowed, a negative one is not)."""


@dataclass(frozen=True)
class GateConfig:
    """Which gates a rollout has and their limits; None (False) leaves a gate out. Stored in the rollout's
    record (``to_dict``), so a restarted publisher judges with the same configuration."""

    latency_p95: float | None = None  # new/old p95 ratio per device class
    drift: float | None = None  # largest absolute output difference on the shadow sample
    top1: float | None = None  # least share of shadow samples whose top-1 agrees (0-1)
    golden: bool = False
    golden_atol: float | None = None  # None: the tolerance the device's self-test used
    min_requests: int = 20  # per class and release, before the latency gate judges
    min_samples: int = 10  # shadow samples per class, before the drift gate judges

    def __post_init__(self) -> None:
        for name in ("latency_p95", "drift", "golden_atol"):
            if (value := getattr(self, name)) is not None and not value >= 0:
                raise GateError(f"gate {name} must be a number of at least 0, got {value!r}")
        if self.top1 is not None and not 0 <= self.top1 <= 1:
            raise GateError(f"gate top1 is a share from 0 to 1, got {self.top1!r}")
        if self.min_requests < 1 or self.min_samples < 1:
            raise GateError("gate minimums must be at least 1")

    @property
    def enabled(self) -> tuple[str, ...]:
        on = {"latency": self.latency_p95 is not None,
              "drift": self.drift is not None or self.top1 is not None, "golden": self.golden}
        return tuple(g for g in GATES if on[g])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) if self.enabled else {}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GateConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def device_class(status: Mapping[str, Any]) -> str:
    """A device's class as gates group it: its profile, else its hardware id."""
    return str(status.get("profile") or status.get("hardware_id") or "unknown")


@dataclass
class Window:
    """One device's summaries of one release, summed: latency, shadow-sample drift, latest golden report."""

    requests: int = 0
    p95_sum: float = 0.0  # sum of p95 * requests over windows
    samples: int = 0
    agree: int = 0
    max_abs: float = 0.0
    golden: dict[str, Any] | None = None
    variant: str = ""

    def add(self, model: Mapping[str, Any]) -> None:
        self.variant = str(model.get("variant") or self.variant)
        for v in (model.get("variants") or {}).values():
            if (n := v.get("requests") or 0) and v.get("p95_ms") is not None:
                self.requests += n
                self.p95_sum += n * v["p95_ms"]
        if drift := model.get("drift"):
            self.samples += drift.get("samples") or 0
            self.agree += drift.get("top1_agree") or 0
            self.max_abs = max(self.max_abs, drift.get("max_abs") or 0.0)
        if model.get("golden"):
            self.golden = dict(model["golden"])


@dataclass
class Evidence:
    """What gates judge: per device its class (from statuses) and, per release it served, its summaries
    summed (``Window``). Fed from the MQTT thread; ``add`` drops repeated records (same stream, seq not
    above the last). ``model``: the line whose entry of a summary counts ("": every entry, a single-model
    device has one)."""

    model: str = ""
    classes: dict[str, str] = field(default_factory=dict)
    windows: dict[str, dict[int, Window]] = field(default_factory=dict)
    _last: dict[str, tuple[str, int]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _changed: set[tuple[str, int]] = field(default_factory=set, init=False, repr=False)

    def saw_status(self, status: Mapping[str, Any]) -> None:
        with self._lock:
            self.classes[status["device"]] = device_class(status)

    def add(self, record: TelemetryRecord) -> None:
        with self._lock:
            last = self._last.get(record.device)
            if last and last[0] == record.stream and record.seq <= last[1]:
                return
            self._last[record.device] = (record.stream, record.seq)
            if record.event != "summary":
                return
            models = record.data.get("models") or {}
            if self.model:
                entries = [models[self.model]] if self.model in models else []
            else:
                entries = list(models.values())
            for entry in entries:
                if release := entry.get("release"):
                    self.windows.setdefault(record.device, {}).setdefault(release, Window()).add(entry)
                    self._changed.add((record.device, release))

    def take_changed(self) -> list[GateWindow]:
        """The windows changed since the last take, as a store keeps them (``requeue`` them when the
        write failed)."""
        with self._lock:
            keys, self._changed = sorted(self._changed), set()
            return [GateWindow(d, r, asdict(self.windows[d][r]), *self._last[d]) for d, r in keys]

    def requeue(self, windows: Iterable[GateWindow]) -> None:
        with self._lock:
            self._changed.update((w.device, w.release) for w in windows)

    def restore(self, stored: Iterable[GateWindow]) -> None:
        """Take the windows a store kept (a controller started after the summaries were sent): each
        device's last counted record is its highest-numbered one, so a repeat is still dropped."""
        with self._lock:
            for w in stored:
                self.windows.setdefault(w.device, {})[w.release] = Window(**w.window)
                if w.seq > self._last.get(w.device, ("", -1))[1]:
                    self._last[w.device] = (w.stream, w.seq)

    def by_class(self, release: int, devices: Iterable[str]) -> dict[str, tuple[list[Window], list[Window]]]:
        """Per class of ``devices``: the windows of ``release`` (those devices') and of earlier releases
        (every device of the class)."""
        with self._lock:
            scope = {self.classes.get(d, "unknown") for d in devices}
            out: dict[str, tuple[list[Window], list[Window]]] = {c: ([], []) for c in sorted(scope)}
            members = set(devices)
            for d, per in self.windows.items():
                c = self.classes.get(d, "unknown")
                if c not in out:
                    continue
                for r, w in per.items():
                    if r == release and d in members:
                        out[c][0].append(w)
                    elif 0 < r < release:
                        out[c][1].append(w)
            return out

    def reporting(self, release: int) -> set[str]:
        """Devices that sent summaries of ``release``."""
        with self._lock:
            return {d for d, per in self.windows.items() if release in per}


@dataclass(frozen=True)
class Verdict:
    """One gate's judgement of a stage: ``status`` pass, fail or wait; ``device_class`` the failing (or
    waiting) class; ``detail`` the figures, for the halt reason and the dashboard."""

    gate: str
    status: str
    detail: str
    device_class: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _p95(windows: list[Window]) -> tuple[int, float]:
    n = sum(w.requests for w in windows)
    return n, (sum(w.p95_sum for w in windows) / n if n else 0.0)


def latency_gate(config: GateConfig, cls: str, new: list[Window], old: list[Window]) -> Verdict:
    limit = config.latency_p95
    assert limit is not None
    (n_new, p_new), (n_old, p_old) = _p95(new), _p95(old)
    if n_new < config.min_requests or n_old < config.min_requests:
        return Verdict("latency", "wait", f"device class {cls!r}: {n_new} requests on the new release and "
                       f"{n_old} on the previous one, {config.min_requests} needed on each", cls)
    ratio = p_new / p_old if p_old > 0 else (1.0 if p_new <= 0 else float("inf"))
    figures = (f"device class {cls!r}: p95 {p_new:.2f} ms vs {p_old:.2f} ms on the previous release "
               f"(x{ratio:.2f}, limit x{limit:g}; {n_new}/{n_old} requests)")
    return Verdict("latency", "fail" if ratio > limit else "pass", figures, cls)


def drift_gate(config: GateConfig, cls: str, new: list[Window], _old: list[Window]) -> Verdict:
    samples = sum(w.samples for w in new)
    if samples < config.min_samples:
        return Verdict("drift", "wait", f"device class {cls!r}: {samples} shadow samples, "
                       f"{config.min_samples} needed", cls)
    worst, agree = max(w.max_abs for w in new), sum(w.agree for w in new) / samples
    bad = (config.drift is not None and worst > config.drift) \
        or (config.top1 is not None and agree < config.top1)
    limits = ", ".join(filter(None, (config.drift is not None and f"limit {config.drift:g}",
                                     config.top1 is not None and f"top-1 at least {config.top1:.0%}")))
    return Verdict("drift", "fail" if bad else "pass",
                   f"device class {cls!r}: max abs difference {worst:.3g} from the previous release, top-1 "
                   f"agreement {agree:.1%} over {samples} shadow samples ({limits})", cls)


def golden_gate(config: GateConfig, cls: str, new: list[Window], _old: list[Window]) -> Verdict:
    reports = [w for w in new if w.golden]
    if not reports:
        return Verdict("golden", "wait", f"device class {cls!r}: no self-test report on the new release", cls)

    def excess(w: Window) -> tuple[float, float]:
        g = w.golden or {}
        tol = 0.0 if g.get("deterministic") else (config.golden_atol if config.golden_atol is not None
                                                   else float(g.get("atol") or 0.0))
        return float(g.get("max_abs") or 0.0), tol

    err, tol, w = max(((*excess(w), w) for w in reports), key=lambda t: t[0] - t[1])
    exact = (w.golden or {}).get("deterministic")
    mode = "bit-identical (determinism mode)" if exact else f"tolerance {tol:g}"
    return Verdict("golden", "fail" if err > tol else "pass",
                   f"device class {cls!r} variant {w.variant or '?'}: golden max error {err:.3g}, {mode}, "
                   f"over {len(reports)} devices", cls)


_JUDGES: dict[str, Callable[[GateConfig, str, list[Window], list[Window]], Verdict]] = {
    "latency": latency_gate, "drift": drift_gate, "golden": golden_gate}


def judge(config: GateConfig, evidence: Evidence, release: int, devices: Iterable[str]) -> list[Verdict]:
    """Each enabled gate over the device classes of ``devices`` (the stage's, on ``release``): the first
    failing class's verdict, else the first waiting one's, else a pass with every class's figures."""
    per_class = evidence.by_class(release, devices)
    out = []
    for gate in config.enabled:
        if not per_class:
            out.append(Verdict(gate, "wait", "no device of the stage is on the new release yet"))
            continue
        verdicts = [_JUDGES[gate](config, c, new, old) for c, (new, old) in per_class.items()]
        worst = next((v for s in ("fail", "wait") for v in verdicts if v.status == s), None)
        out.append(worst or Verdict(gate, "pass", "; ".join(v.detail for v in verdicts)))
    return out


@dataclass(frozen=True)
class StageVerdict:
    """A stage's verdicts in a replay: the stage counted from 1, and why it was judged then."""

    stage: int
    percent: float | None
    when: str  # widened, halted, complete, end of recording
    verdicts: list[Verdict]

    def format(self) -> str:
        head = f"stage {self.stage}" + (f" ({self.percent:g}%)" if self.percent is not None else "")
        return "\n".join([f"{head}, judged when {self.when}:"] +
                         [f"  {v.gate}: {v.status} - {v.detail}" for v in self.verdicts])


def replay(lines: Iterable[str | bytes], config: GateConfig, release: int | None = None,
           model: str = "") -> list[StageVerdict]:
    """Judge a recording of a fleet's messages (one JSON message a line, as published: telemetry records,
    statuses, the publisher's rollout summaries) against ``config``: each stage when the recording shows it
    widened, halted or completed, and the stage still open at its end. Without rollout summaries, one
    verdict for ``release`` (default: the highest release a summary reported) at the end."""
    evidence, stage, percent = Evidence(model), 0, None
    latest: dict[str, tuple[str, int]] = {}  # device -> (state, release) of its last status
    judged: set[int] = set()
    out: list[StageVerdict] = []

    def verdict(when: str) -> None:
        if stage in judged:
            return
        judged.add(stage)
        rel = release or max((r for per in evidence.windows.values() for r in per), default=0)
        active = {d for d, (state, r) in latest.items() if state == "active" and r >= rel}
        out.append(StageVerdict(stage + 1, percent, when, judge(config, evidence, rel,
                                                                 active | evidence.reporting(rel))))

    for line in lines:
        if not line.strip():
            continue
        text = line if isinstance(line, bytes) else line.encode()
        try:
            doc = json.loads(text)
            if doc.get("type") == TELEMETRY_TYPE:
                evidence.add(TelemetryRecord.from_bytes(text))
            elif doc.get("type") == ROLLOUT_TYPE:
                if doc.get("model", "") != model or (release and doc.get("release") != release):
                    continue
                release = doc["release"]
                if doc["stage"] > stage:
                    verdict("widened")
                stage, percent = doc["stage"], doc["stages"][doc["stage"]]
                if doc["status"] in ("halted", "complete"):
                    verdict(doc["status"])
            else:
                status = read_status(text)
                evidence.saw_status(status)
                latest[status["device"]] = (status.get("state", ""), status.get("release") or 0)
        except (ValueError, OtaError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise GateError(f"replay: a message that cannot be read: {exc}") from None
    verdict("the recording ended")
    return out
