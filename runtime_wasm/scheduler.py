"""The policy scheduler: a request queue in front of supervised workers that applies a ``RuntimePolicy``.

- Dynamic batching, latency-budgeted (``should_wait``): hold requests for company only while the
  oldest one's remaining p95 budget exceeds the expected latency of the bigger batch (an EWMA of
  measured compute time per batch size) and the batching window is open. Compiled modules have a
  fixed batch dimension, so a batch is N queued requests run back to back in ONE worker dispatch
  (one pipe round trip, N shared-memory slots); batch-N module variants are not used.
- Deadlines: each request's deadline runs from submission; it bounds the queue wait and the
  dispatch (the worker is killed past it), so the caller gets ``DeadlineExceeded``, never a hang.
- Freshness: inputs captured longer ago than ``max_input_age_ms`` fail with ``StaleInput`` (checked
  at submission and again at dispatch: data also goes stale in the queue).
- Energy/thermal: the duty cycle is capped by idling between dispatches; while the CPU is over
  ``max_cpu_temp_c`` the ``degrade_action`` applies (throttle harder, switch to the cheaper model,
  or shed new requests) until it cools by ``thermal_hysteresis_c``.
- Priorities: with an ``AdmissionGate`` (``runtime_wasm.admission``) every request must also be admitted
  by the device-wide controller shared with the other models; refused ones fail with ``Overloaded``
  (counted as ``priority_shed``) before they take a queue slot.
- Nothing a caller sends can kill the dispatcher: every failure lands in that request's future.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .admission import AdmissionGate
from .errors import (
    DeadlineExceeded,
    InferenceInputError,
    Overloaded,
    PolicyError,
    RuntimeWasmError,
    StaleInput,
    WorkerCrashed,
)
from .instance import check_inputs
from .policy import RuntimePolicy
from .spec import from_storage, storage_dtype
from .supervisor import ModelSource, SupervisedModel, same_signature

THERMAL_ROOT = Path("/sys/class/thermal")
_EWMA_ALPHA = 0.2
_LATENCY_WINDOW = 1024  # completed requests kept for percentiles
#: upper bounds (ms) of the cumulative latency histogram (Prometheus buckets): from a tiny model's
#: dispatch (0.25 ms) to past the default deadline; a last, unbounded bucket catches the rest
LATENCY_BUCKETS_MS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0,
                      5000.0, 10000.0)


def read_cpu_temp_c(root: Path = THERMAL_ROOT) -> float | None:
    """Hottest thermal zone in °C (sysfs reports millidegrees); None where the kernel exposes none.

    The hottest zone rather than one named "cpu": zone names differ per SoC and a hot SoC is hot.
    """
    temps = []
    for path in root.glob("thermal_zone*/temp"):
        try:
            temps.append(int(path.read_text().strip()) / 1000.0)
        except (OSError, ValueError):
            continue
    return max(temps, default=None)


def batch_wait_ms(ages_ms: Sequence[float], budget_ms: float, expected_ms: Callable[[int], float],
                  max_batch: int, window_ms: float) -> float:
    """How long to keep holding the queued requests (ages in ms, any order) before dispatching; 0: now.

    Wait only while the batch can still grow, the window is open, and the oldest request's remaining
    budget exceeds the expected latency of a batch one bigger than now.
    """
    n = len(ages_ms)
    if n == 0 or n >= max_batch:
        return 0.0
    oldest = max(ages_ms)
    slack = (budget_ms - oldest) - expected_ms(n + 1)
    return max(0.0, min(slack, window_ms - oldest))


def should_wait(ages_ms: Sequence[float], budget_ms: float, expected_ms: Callable[[int], float],
                max_batch: int, window_ms: float) -> bool:
    """The seed's ``should_wait``: a pure function of queue ages, budget and latency estimates."""
    return batch_wait_ms(ages_ms, budget_ms, expected_ms, max_batch, window_ms) > 0


class LatencyModel:
    """EWMA of measured dispatch latency per batch size; unseen sizes scale the nearest seen one."""

    def __init__(self) -> None:
        self.ewma_ms: dict[int, float] = {}

    def observe(self, batch: int, ms: float) -> None:
        old = self.ewma_ms.get(batch)
        self.ewma_ms[batch] = ms if old is None else old + _EWMA_ALPHA * (ms - old)

    def expected_ms(self, batch: int) -> float:
        """0 before any measurement: the batching window alone bounds the first waits."""
        if batch in self.ewma_ms:
            return self.ewma_ms[batch]
        if not self.ewma_ms:
            return 0.0
        nearest = min(self.ewma_ms, key=lambda k: abs(k - batch))
        return self.ewma_ms[nearest] / nearest * batch


class LatencyHistogram:
    """End-to-end latency counts per ``LATENCY_BUCKETS_MS`` bucket since start: unlike the percentile
    window, they only grow, which is what a scraper (``rate()``, quantiles across devices) needs."""

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)  # per bucket, not cumulative; last: > max
        self.sum_ms = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        self.sum_ms += ms

    def snapshot(self) -> dict[str, Any]:
        """``le``: bucket bounds in ms; ``cumulative``: requests at or under each (then all of them)."""
        return {"le": list(LATENCY_BUCKETS_MS), "cumulative": list(itertools.accumulate(self.counts)),
                "sum_ms": self.sum_ms}


@dataclass
class _Request:
    inputs: list[np.ndarray]  # spec order, cast, owned (the caller may reuse its arrays)
    submitted: float  # monotonic s
    captured_at: float | None  # wall-clock s when the input was captured (freshness)
    future: Future[dict[str, np.ndarray]]


class Scheduler:
    """Serves one model (plus an optional cheaper fallback) under ``policy``; ``close`` ends it."""

    def __init__(self, source: ModelSource, policy: RuntimePolicy, fallback: ModelSource | None = None,
                 temperature_c: Callable[[], float | None] = read_cpu_temp_c,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time, admission: AdmissionGate | None = None,
                 warm: SupervisedModel | None = None) -> None:
        """``admission``: the device-wide gate when several models share the device (None: only this
        scheduler's own queue bounds the load). ``warm``: a worker already loaded (an install's self-test
        kept it, ``Installer.take_warm``), owned from here on: the primary when it runs what this scheduler
        would start (``SupervisedModel.runs``), else closed and a fresh one started."""
        self._workers: list[SupervisedModel] = []
        try:
            if fallback is not None and not same_signature(source.spec, fallback.spec):
                raise PolicyError("the fallback model must have the same inputs and outputs as the primary")
            if fallback is not None and policy.degrade_action == "cheaper_variant" and source.spec.stateful:
                raise PolicyError("a stateful model's state lives in its one worker: a cheaper_variant "
                                  "fallback would answer from a second, separate state (use degrade_action "
                                  "throttle or shed)")
            source = source.in_mode(policy.deterministic)
            fallback = fallback and fallback.in_mode(policy.deterministic)
            if warm is not None and warm.runs(source, policy.memory_cap_bytes, policy.max_batch_size,
                                              policy.threads):
                warm.start_timeout_s = policy.worker_start_timeout_s  # for its restarts from here on
                self._workers.append(warm)
            elif warm is not None:
                warm.close()
            for src in (source if not self._workers else None,
                        fallback if policy.degrade_action == "cheaper_variant" else None):
                if src is not None:  # the fallback is kept warm: switching must not wait for a compile
                    self._workers.append(SupervisedModel(src, policy.memory_cap_bytes, policy.max_batch_size,
                                                         policy.worker_start_timeout_s, policy.threads))
        except BaseException:
            self._close_workers()
            if warm is not None:
                warm.close()  # idempotent: it may be one of the workers
            raise
        self.policy, self.spec, self._admission = policy, source.spec, admission
        self._temperature_c, self._clock, self._wall = temperature_c, clock, wall_clock
        self._latency = [LatencyModel() for _ in self._workers]
        #: what labels each worker's latency histogram: its variant, the fallback's marked as such (the
        #: cheaper model may have a variant of the same name)
        self.variants = tuple(("fallback:" if i else "") + w.variant for i, w in enumerate(self._workers))
        self._queue: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._closed = False
        # thermal / energy state
        self._degraded = False
        self._temp: float | None = None
        self._next_poll = float("-inf")
        self._next_start = float("-inf")  # duty cycle: earliest start of the next dispatch
        # metrics
        self._counts: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._batch_sizes: Counter[int] = Counter()
        self._throttled_ms = 0.0
        self._latencies: deque[float] = deque(maxlen=_LATENCY_WINDOW)
        self._histograms = [LatencyHistogram() for _ in self._workers]
        self._thread = threading.Thread(target=self._loop, name=f"sched-{source.spec.name}", daemon=True)
        self._thread.start()

    # -- callers ----------------------------------------------------------------------------------
    def submit(self, inputs: Mapping[str, Any] | Sequence[Any], captured_at: float | None = None
               ) -> Future[dict[str, np.ndarray]]:
        """Queue one request; its future holds the outputs or the typed error. ``captured_at``: wall-clock
        seconds (``time.time()``) when the input data was captured, for the freshness bound."""
        future: Future[dict[str, np.ndarray]] = Future()
        try:
            try:
                arrays = [np.array(a, dtype=storage_dtype(t.dtype)) for t, a in
                          zip(self.spec.inputs, check_inputs(self.spec.inputs, inputs))]
            except (ValueError, TypeError) as exc:  # ragged lists, objects numpy cannot read
                raise exc if isinstance(exc, InferenceInputError) else InferenceInputError(str(exc)) from exc
            with self._cond:
                self._counts["submitted"] += 1
                if self._closed:
                    raise Overloaded("the scheduler is closed")
                self._check_fresh(captured_at)
                self._poll_thermal()
                if self._degraded and self.policy.degrade_action == "shed":
                    self._counts["shed"] += 1
                    raise Overloaded(f"load shed: CPU at {self._temp} °C, "
                                     f"budget {self.policy.max_cpu_temp_c} °C")
                if len(self._queue) >= self.policy.max_queue_depth:
                    self._counts["queue_full"] += 1
                    raise Overloaded(f"queue full ({self.policy.max_queue_depth} requests)")
                if self._admission is not None:
                    self._admit(self._admission, future)
                self._queue.append(_Request(arrays, self._clock(), captured_at, future))
                self._cond.notify()
        except RuntimeWasmError as exc:
            self._fail([future], exc)
        return future

    def _admit(self, gate: AdmissionGate, future: Future[dict[str, np.ndarray]]) -> None:
        """With the lock held: pass the device-wide gate; the slot is given back when ``future`` ends,
        however it ends (answered, failed, cancelled, or failed by ``close``)."""
        try:
            gate.enter()
        except Overloaded:
            self._counts["priority_shed"] += 1
            raise
        future.add_done_callback(lambda _: gate.leave())

    def predict(self, inputs: Mapping[str, Any] | Sequence[Any], captured_at: float | None = None
                ) -> dict[str, np.ndarray]:
        """Blocking ``submit``: outputs, or the request's typed error raised here."""
        bound_s = self.policy.deadline_ms / 1e3 + self.policy.worker_start_timeout_s + 1.0
        return self.submit(inputs, captured_at).result(timeout=bound_s)

    @property
    def pids(self) -> tuple[int | None, ...]:
        """The worker processes serving, primary first (None: one being restarted)."""
        return tuple(w.pid for w in self._workers)

    def metrics(self) -> dict[str, Any]:
        """Counters, latency percentiles (end to end, last 1024 requests), cumulative latency histograms
        per variant and the degrade state. ``shed``: refused while over the thermal budget; ``queue_full``:
        refused for a full queue; ``priority_shed``: refused by the device-wide admission (all fail with
        ``Overloaded``, counted in ``failed`` too); ``stale``: ``failed``'s ``StaleInput``. The counts' names
        and meanings are ``runtime_wasm.counts.SERVING_COUNTS``."""
        with self._cond:
            lat = np.array(self._latencies)
            pct = {f"p{q}": float(np.percentile(lat, q)) if lat.size else None for q in (50, 95, 99)}
            return {
                **{k: self._counts[k] for k in ("submitted", "completed", "batches", "shed", "queue_full",
                                                "priority_shed", "degraded_dispatches",
                                                "degrade_activations")},
                "failed": dict(self._errors),
                "stale": self._errors.get("StaleInput", 0),
                "queue_depth": len(self._queue),
                "batch_sizes": dict(self._batch_sizes),
                "latency_ms": {**pct, "count": int(lat.size)},
                "compute_ms_ewma": {i: dict(m.ewma_ms) for i, m in enumerate(self._latency)},
                "latency_histogram_ms": {v: h.snapshot() for v, h in zip(self.variants, self._histograms)},
                "worker_restarts": sum(w.restarts for w in self._workers),
                "deadline_kills": sum(w.deadline_kills for w in self._workers),
                "thermal": {"temp_c": self._temp, "degraded": self._degraded,
                            "action": self._effective_action(), "throttled_ms": self._throttled_ms},
            }

    # -- dispatcher thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait(0.5)
                if self._closed:
                    return
                batch = self._take_batch()
            try:
                self._dispatch(batch)
            except Exception as exc:  # a scheduler bug must fail requests, not end the dispatcher
                self._fail([r.future for r in batch if not r.future.done()],
                           WorkerCrashed(f"dispatch failed: {type(exc).__name__}: {exc}"))

    def _take_batch(self) -> list[_Request]:
        """With the lock held: wait while ``batch_wait_ms`` says so, then take up to max_batch_size."""
        p = self.policy
        latency = self._latency[self._worker_index()]
        while self._queue and not self._closed:
            now = self._clock()
            ages = [(now - r.submitted) * 1e3 for r in list(self._queue)[:p.max_batch_size]]
            wait_ms = batch_wait_ms(ages, p.p95_budget_ms, latency.expected_ms, p.max_batch_size,
                                    p.batch_window_ms)
            if wait_ms <= 0:
                break
            self._cond.wait(wait_ms / 1e3)
        taken = [self._queue.popleft() for _ in range(min(len(self._queue), p.max_batch_size))]
        return [r for r in taken if r.future.set_running_or_notify_cancel()]  # drop cancelled requests

    def _dispatch(self, batch: list[_Request]) -> None:
        p = self.policy
        live = []
        for r in batch:
            try:
                self._check_fresh(r.captured_at)
                if (self._clock() - r.submitted) * 1e3 >= p.deadline_ms:
                    raise DeadlineExceeded(f"expired after {p.deadline_ms} ms in the queue")
                live.append(r)
            except RuntimeWasmError as exc:
                self._fail([r.future], exc)
        if not live:
            return
        with self._cond:
            self._poll_thermal()
            index = self._worker_index()
            if self._degraded:
                self._counts["degraded_dispatches"] += 1
        worker = self._workers[index]
        self._idle_for_duty_cycle()
        worker.wait_ready()
        for i, r in enumerate(live):
            for t, a in zip(self.spec.inputs, r.inputs):
                np.copyto(worker.slot(i)[0][t.name], a)
        start = self._clock()
        timeout_s = min(r.submitted for r in live) + p.deadline_ms / 1e3 - start
        try:
            if timeout_s <= 0:  # spent idling or waiting for a restarted worker
                raise DeadlineExceeded(f"expired after {p.deadline_ms} ms before reaching the worker")
            results = worker.run(len(live), timeout_s)
        except RuntimeWasmError as exc:
            self._fail([r.future for r in live], exc)
            return
        end = self._clock()
        busy = end - start
        self._next_start = end + busy * (1 / self._duty_cycle() - 1)
        with self._cond:
            self._counts["batches"] += 1
            self._batch_sizes[len(live)] += 1
            self._latency[index].observe(len(live), busy * 1e3)
        for i, (r, res) in enumerate(zip(live, results)):
            if isinstance(res, Exception):
                self._fail([r.future], res)
                continue
            r.future.set_result({t.name: from_storage(t.dtype, worker.slot(i)[1][t.name].copy())
                                 for t in self.spec.outputs})
            with self._cond:
                self._counts["completed"] += 1
                self._latencies.append((end - r.submitted) * 1e3)
                self._histograms[index].observe((end - r.submitted) * 1e3)

    # -- policy pieces ----------------------------------------------------------------------------
    def _check_fresh(self, captured_at: float | None) -> None:
        bound = self.policy.max_input_age_ms
        if bound and captured_at is not None:
            age_ms = (self._wall() - captured_at) * 1e3
            if age_ms > bound:
                raise StaleInput(f"input is {age_ms:.0f} ms old; the freshness bound is {bound:g} ms")

    def _poll_thermal(self) -> None:
        """With the lock held: read the sensor at most every ``thermal_poll_ms``; enter/leave degraded."""
        p = self.policy
        now = self._clock()
        if not p.max_cpu_temp_c or now < self._next_poll:
            return
        self._next_poll = now + p.thermal_poll_ms / 1e3
        try:
            self._temp = self._temperature_c()
        except (OSError, ValueError):
            self._temp = None  # a broken sensor must not stop serving
        if self._temp is None:
            return
        if not self._degraded and self._temp > p.max_cpu_temp_c:
            self._degraded = True
            self._counts["degrade_activations"] += 1
        elif self._degraded and self._temp < p.max_cpu_temp_c - p.thermal_hysteresis_c:
            self._degraded = False

    def _effective_action(self) -> str:
        """``cheaper_variant`` without a fallback model degrades to ``throttle``."""
        action = self.policy.degrade_action
        return "throttle" if action == "cheaper_variant" and len(self._workers) < 2 else action

    def _worker_index(self) -> int:
        return 1 if self._degraded and self._effective_action() == "cheaper_variant" else 0

    def _duty_cycle(self) -> float:
        p = self.policy
        if self._degraded and self._effective_action() == "throttle":
            return min(p.duty_cycle_cap, p.throttle_duty_cycle)
        return p.duty_cycle_cap

    def _idle_for_duty_cycle(self) -> None:
        delay = self._next_start - self._clock()
        if delay > 0:
            with self._cond:
                self._throttled_ms += delay * 1e3
            self._stop.wait(delay)

    def _fail(self, futures: list[Future[dict[str, np.ndarray]]], exc: RuntimeWasmError) -> None:
        with self._cond:
            self._errors[type(exc).__name__] += len(futures)
        for f in futures:
            if not f.done():  # a caller may have cancelled a queued request
                f.set_exception(exc)

    # -- lifecycle ----------------------------------------------------------------------------------
    def _close_workers(self) -> None:
        for w in self._workers:
            w.close()

    def close(self) -> None:
        """Stop taking requests, fail queued ones with ``Overloaded``, end the workers (idempotent)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            pending, self._queue = list(self._queue), deque()
            self._cond.notify_all()
        self._stop.set()
        self._thread.join(self.policy.deadline_ms / 1e3 + 5.0)
        self._fail([r.future for r in pending], Overloaded("the scheduler closed before serving the request"))
        self._close_workers()

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
