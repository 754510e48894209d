"""Drift of a new release from the one it replaced, on a sample of real requests, for the rollout's drift
gate (``cuvil_edge.fleet.gates.drift_gate``): only statistics leave the device.

After a switch to a newer release with the same inputs and outputs, ``ModelHost`` hands the previous
release's scheduler (its workers already loaded, under the policy's memory cap: nothing more is allocated)
to its ``ShadowSampler`` instead of closing it. The request path only offers: a ``shadow_fraction`` of the
answered requests is copied into a bounded queue, dropped when it is full, so a slow previous release
never delays a reply; one background thread runs each through the previous release and compares. The
previous release is closed once ``shadow_max_samples`` were compared, after ``shadow_timeout_s``, at the
next switch or when the host closes, whichever comes first.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime_wasm import Scheduler

from .config import TelemetrySettings

log = logging.getLogger(__name__)
#: requests waiting for the previous release at most; more are dropped
QUEUE_DEPTH = 4
Tensors = Mapping[str, np.ndarray]


@dataclass
class Drift:
    """``release`` against ``against`` since the last summary took them: samples compared, how many agree
    on the top-1 class (argmax over the first output's last axis, every row), the largest absolute
    difference of any output."""

    release: int
    against: int
    samples: int = 0
    top1_agree: int = 0
    max_abs: float = 0.0

    def add(self, new: Tensors, old: Tensors, first: str) -> None:
        self.samples += 1
        self.top1_agree += bool(np.array_equal(np.argmax(new[first], -1), np.argmax(old[first], -1)))
        for name, value in new.items():
            a, b = np.asarray(value, np.float64), np.asarray(old[name], np.float64)
            if a.size:  # equal values (infinities included) differ by 0, not by inf - inf
                self.max_abs = max(self.max_abs, float(np.max(np.where(a == b, 0.0, np.abs(a - b)))))

    def to_dict(self) -> dict[str, Any]:
        return {"against": self.against, "samples": self.samples, "top1_agree": self.top1_agree,
                "max_abs": self.max_abs}


class _Session:
    """One switch: the previous release's scheduler, the queue of requests waiting for it, its thread."""

    def __init__(self, previous: Scheduler, first: str, timeout_s: float) -> None:
        self.previous, self.first = previous, first
        self.deadline = time.monotonic() + timeout_s
        self.queue: queue.Queue[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = \
            queue.Queue(QUEUE_DEPTH)
        self.stop = threading.Event()
        self.compared = 0
        self.thread: threading.Thread | None = None


class ShadowSampler:
    """A model host's shadow sample (one switch at a time); ``take`` hands its statistics to a summary."""

    def __init__(self, fraction: float, max_samples: int, timeout_s: float) -> None:
        self.fraction, self.max_samples, self.timeout_s = fraction, max_samples, timeout_s
        self.dropped = 0  # offered while the queue was full
        self.compared = 0  # samples of the latest switch run through both releases
        self._lock = threading.Lock()
        self._session: _Session | None = None
        self._drift: Drift | None = None
        self._release: int | None = None  # the release whose requests are sampled
        self._random = random.Random()

    @property
    def sampling(self) -> bool:
        """Whether a previous release is held loaded for the sample."""
        with self._lock:
            return self._session is not None

    def start(self, previous: Scheduler, against: int, release: int, first_output: str) -> None:
        """Sample ``release``'s requests against ``previous`` (which this sampler now owns and closes); a
        sample still running for an earlier switch ends (its model closed by its own thread)."""
        session = _Session(previous, first_output, self.timeout_s)
        session.thread = threading.Thread(target=self._run, args=(session,), name="shadow", daemon=True)
        with self._lock:
            if self._session is not None:
                self._session.stop.set()
            self._session, self._release, self._drift = session, release, Drift(release, against)
            self.compared = 0
        session.thread.start()

    def offer(self, release: int, inputs: Tensors, outputs: Tensors) -> None:
        """A request ``release`` answered (the request path: never blocks, never raises)."""
        with self._lock:
            s = self._session
            if s is None or release != self._release or self._random.random() >= self.fraction \
                    or s.compared + s.queue.qsize() >= self.max_samples:
                return
        try:  # copies: the caller may go on to change its arrays (processing) while the shadow runs
            s.queue.put_nowait(({k: np.array(v) for k, v in inputs.items()},
                                {k: np.array(v) for k, v in outputs.items()}))
        except queue.Full:
            with self._lock:
                self.dropped += 1

    def take(self, release: int) -> dict[str, Any] | None:
        """The statistics of ``release`` since the last call (summaries carry each sample once: the gate
        sums them); None when there are none."""
        with self._lock:
            drift = self._drift
            if drift is None or drift.release != release or not drift.samples:
                return None
            self._drift = Drift(drift.release, drift.against)
        return drift.to_dict()

    def close(self) -> None:
        """End the sample and wait until its model is closed (bounded by the policy's deadline)."""
        with self._lock:
            s, self._session = self._session, None
        if s is not None:
            s.stop.set()
            if s.thread is not None:
                s.thread.join()

    def _run(self, s: _Session) -> None:
        try:
            while s.compared < self.max_samples and not s.stop.is_set():
                left = s.deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    inputs, outputs = s.queue.get(timeout=min(left, 0.2))
                except queue.Empty:
                    continue
                try:
                    old = s.previous.predict(inputs)
                except Exception as exc:  # Overloaded, a deadline: that sample is skipped
                    log.info("shadow sample skipped: %s: %s", type(exc).__name__, exc)
                    continue
                with self._lock:
                    if self._session is not s or self._drift is None:
                        break
                    self._drift.add(outputs, old, s.first)
                    s.compared += 1
                    self.compared = s.compared
        finally:
            with self._lock:
                if self._session is s:
                    self._session = None
            s.previous.close()


def shadow_sampler(settings: TelemetrySettings) -> ShadowSampler | None:
    """The sampler ``[telemetry]`` asks for; None when ``shadow_fraction`` is 0 (the default: off)."""
    if not settings.shadow_fraction:
        return None
    return ShadowSampler(settings.shadow_fraction, settings.shadow_max_samples, settings.shadow_timeout_s)
