"""The operator's side of device telemetry: subscribe to a fleet's telemetry topics and keep, per device,
the records in order, with the duplicates and gaps the sequence numbers reveal.

Devices publish at least once and in order (``cuvil_agent.telemetry``), so a record whose ``seq`` is not above
the last one seen is a repeat and is dropped here; a jump in ``seq`` is a gap (records dropped at the
device's bound, torn by a crash, or sent before this collector first subscribed). The collector's
client id is fixed per fleet by default, so with the persistent MQTT session the broker queues telemetry
for it while it is away (up to the broker's ``max_queued_messages``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ota.config import BrokerSettings, TransferLimits
from ota.errors import VerificationError
from ota.protocol import TelemetryRecord, Topics
from ota.transport import MqttClient
from runtime_wasm.counts import SHED_KEYS

from .publisher import FleetError

log = logging.getLogger(__name__)


@dataclass
class DeviceTelemetry:
    """What one device said, oldest first (at most ``keep`` records), and what its sequence numbers show."""

    keep: int = 1000
    records: deque[TelemetryRecord] = field(default_factory=deque)
    stream: str = ""
    streams: int = 0  # numberings seen: more than one when the device's queue was wiped
    last_seq: int = -1  # in ``stream``
    duplicates: int = 0
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (first, last) missing seq, inclusive
    summary: TelemetryRecord | None = None  # the latest

    def add(self, record: TelemetryRecord) -> bool:
        """Keep a new record; False for a repeat."""
        if record.stream != self.stream:  # numbering starts over; nothing before it is missing
            self.stream, self.last_seq = record.stream, -1
            self.streams += 1
        elif record.seq <= self.last_seq:
            self.duplicates += 1
            return False
        if self.last_seq >= 0 and record.seq > self.last_seq + 1:
            self.gaps.append((self.last_seq + 1, record.seq - 1))
        self.last_seq = record.seq
        self.records.append(record)
        while len(self.records) > self.keep:
            self.records.popleft()
        if record.event == "summary":
            self.summary = record
        return True

    @property
    def missing(self) -> int:
        return sum(b - a + 1 for a, b in self.gaps)


class TelemetryCollector:
    """A fleet's telemetry as it arrives; ``on_record`` (network thread) sees each new record once."""

    def __init__(self, broker: BrokerSettings, fleet: str, client_id: str = "",
                 limits: TransferLimits | None = None, keep: int = 1000,
                 on_record: Callable[[TelemetryRecord], None] | None = None, persistent: bool = True) -> None:
        """``persistent``: the broker queues telemetry for this client id while it is away (a collector that
        must not miss records); False: a clean session, nothing left behind (a dashboard's view)."""
        self.topics = Topics(broker.topic_prefix, fleet)
        self.keep, self._on_record = keep, on_record
        self.devices: dict[str, DeviceTelemetry] = {}
        self.refused = 0  # malformed records, or records naming another device than their topic
        self._cv = threading.Condition()
        self.mqtt = MqttClient(broker, client_id or f"cuvil-telemetry-{fleet}", self._on, limits,
                               persistent=persistent)
        self.mqtt.subscribe([self.topics.all_telemetry])

    def start(self, timeout_s: float = 15.0) -> TelemetryCollector:
        self.mqtt.start(wait_s=timeout_s)
        return self

    def close(self) -> None:
        self.mqtt.close()

    def __enter__(self) -> TelemetryCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on(self, topic: str, payload: bytes, _retained: bool) -> None:
        device = topic.rpartition("/")[2]
        try:
            record = TelemetryRecord.from_bytes(payload)
            if record.device != device:
                raise VerificationError(f"record of {record.device!r} on {device!r}'s topic")
        except VerificationError as exc:
            self.refused += 1
            log.warning("telemetry on %s refused: %s", topic, exc)
            return
        with self._cv:
            new = self.devices.setdefault(device, DeviceTelemetry(self.keep)).add(record)
            self._cv.notify_all()
        if new and self._on_record:
            self._on_record(record)

    def records(self, device: str) -> list[TelemetryRecord]:
        with self._cv:
            d = self.devices.get(device)
            return list(d.records) if d else []

    def wait(self, pred: Callable[[dict[str, DeviceTelemetry]], Any], timeout_s: float,
             what: str = "") -> Any:
        """Wait until ``pred(devices)`` is truthy and return it; ``FleetError`` after ``timeout_s``."""
        end = time.monotonic() + timeout_s
        with self._cv:
            while not (hit := pred(self.devices)):
                left = end - time.monotonic()
                if left <= 0:
                    raise FleetError(f"telemetry: timed out after {timeout_s}s waiting for {what or pred}")
                self._cv.wait(left)
            return hit


def format_record(r: TelemetryRecord) -> str:
    """One line for people: time, device, seq, event, then the data (a summary's models in short)."""
    data = dict(r.data)
    if r.event == "summary":
        models = data.pop("models", {})
        data["models"] = ", ".join(
            f"{name} r{m.get('release')} {m.get('completed')}/{m.get('submitted')} ok "
            f"shed {sum(m.get(k, 0) for k in SHED_KEYS)} stale {m.get('stale')} "
            f"p95 {m.get('latency_ms', {}).get('p95')}" for name, m in models.items()) or "-"
    fields = " ".join(f"{k}={v}" for k, v in sorted(data.items()) if v is not None)
    return f"{r.time} {r.device} #{r.seq} {r.event} {fields}".rstrip()
