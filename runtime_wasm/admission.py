"""Sharing one device between several models: a core budget and a per-device admission controller.

Each model keeps its own ``Scheduler`` (queue, batching, deadlines under its own ``RuntimePolicy``); in
front of them all sits one ``DeviceAdmission`` that counts the requests pending on the device (queued or
running, every model together). The highest priority may fill the whole budget (``max_pending``); each
priority level below it may only fill what is left after ``reserve`` slots per level above it. When the
device saturates, the lowest priority hits its lower ceiling first and is refused with ``Overloaded``
(shed, an HTTP 503) while higher priorities still find room, so their queues stay short and their latency
within budget. Nothing waits in the controller: a request is admitted or refused at once.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Sequence

from .errors import Overloaded, PolicyError


def divide_threads(wanted: Sequence[tuple[int, int]], cores: int = 0) -> list[int]:
    """Threads per model from one core budget, for models that can run at the same time.

    ``wanted``: (priority, threads) per model, threads 0 meaning "every core it may use"; ``cores``: the
    budget (0: ``os.cpu_count()``). Highest priority first (ties in the given order), each model gets what
    it asks for, capped by what is left after keeping one core for every model still to serve; a model
    asking for 0 gets all of that. Every model gets at least 1 (more models than cores share cores).
    Returned in the order of ``wanted``."""
    left = cores or os.cpu_count() or 1
    order = sorted(range(len(wanted)), key=lambda i: -wanted[i][0])
    out = [0] * len(wanted)
    for rank, i in enumerate(order):
        later = len(order) - rank - 1
        avail = max(1, left - later)
        want = wanted[i][1]
        out[i] = avail if want == 0 else min(want, avail)
        left -= out[i]
    return out


class DeviceAdmission:
    """Admits requests of every model on a device against one pending-request budget, by priority."""

    def __init__(self, max_pending: int = 32, reserve: int = 8) -> None:
        if max_pending < 1 or reserve < 0:
            raise PolicyError("DeviceAdmission needs max_pending >= 1 and reserve >= 0")
        self.max_pending, self.reserve = max_pending, reserve
        self._lock = threading.Lock()
        self._levels: set[int] = set()
        self._pending = 0
        self.shed: Counter[int] = Counter()  # refused, by priority

    def gate(self, priority: int) -> AdmissionGate:
        """The gate one model's scheduler passes its requests through."""
        with self._lock:
            self._levels.add(priority)
        return AdmissionGate(self, priority)

    def ceiling(self, priority: int) -> int:
        """Pending requests (all models) below which a request of ``priority`` is admitted; at least 1, so
        an idle device serves every model."""
        with self._lock:
            above = sum(1 for level in self._levels if level > priority)
        return max(1, self.max_pending - self.reserve * above)

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def _enter(self, priority: int) -> None:
        ceiling = self.ceiling(priority)
        with self._lock:
            if self._pending >= ceiling:
                self.shed[priority] += 1
                raise Overloaded(f"device busy: {self._pending} requests pending, priority {priority} is "
                                 f"admitted below {ceiling}")
            self._pending += 1

    def _leave(self) -> None:
        with self._lock:
            self._pending -= 1


class AdmissionGate:
    """One model's way through a ``DeviceAdmission``: ``enter`` before queueing (``Overloaded`` when its
    priority's ceiling is reached), ``leave`` once the request is answered or failed."""

    def __init__(self, device: DeviceAdmission, priority: int) -> None:
        self.device, self.priority = device, priority

    def enter(self) -> None:
        self.device._enter(self.priority)

    def leave(self) -> None:
        self.device._leave()
