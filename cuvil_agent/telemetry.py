"""Device telemetry over MQTT: events and periodic summaries go through a bounded queue on disk and are
published in order, each removed only after the broker acknowledged it.

A device may be offline for hours; what happened meanwhile (an install that failed, a worker killed at
its deadline) is exactly what an operator wants to see afterwards, so records wait on disk rather than in
memory, and survive agent restarts. The queue is bounded in records and bytes: past either bound the
oldest records are dropped, counted (persisted, reported in every summary and as a Prometheus counter)
and visible to the receiver as a gap in ``seq``.

On disk (``TelemetryQueue``): append-only segment files ``<first seq>.seg`` of framed records
(magic, length, seq, CRC-32 of seq and payload; then the payload, the record as published) and
``cursor.json`` (written atomically): every record up to ``removed_through`` was sent or dropped,
``dropped`` counts the drops, and ``stream`` names this numbering (a new queue starts a new one). A
crash mid-append leaves a torn last record, which the next open cuts off: it loses at most that record,
never an earlier one. A segment is deleted once all its records are gone.

Delivery (``Telemetry``) is at least once: a crash between the PUBACK and the cursor write, or a resend
after a lost PUBACK, repeats records under the same ``seq``; receivers drop the repeats
(``cuvil_edge.fleet.telemetry``).
"""

from __future__ import annotations

import logging
import os
import secrets
import struct
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ota.errors import FormatError, TelemetryError, TransportError
from ota.parse import parse_decimal
from ota.protocol import TelemetryRecord, format_time
from ota.store import read_json, write_json
from ota.transport import MqttClient
from runtime_wasm import schema
from runtime_wasm.counts import serving_counts

from .config import TelemetrySettings
from .serve import ModelHost, ModelRegistry, ServedModel

log = logging.getLogger(__name__)
CURSOR_FILE = "cursor.json"
#: ``cursor.json``; ``removed_through`` is -1 before the first record is gone
CURSOR_SCHEMA = schema.record({"stream": schema.text(64, min_len=1), "removed_through": schema.integer(-1),
                               "dropped": schema.integer()})
SEGMENT_SUFFIX = ".seg"
_HEADER = struct.Struct(">4sIQI")  # magic, payload length, seq, crc32(seq + payload)
_MAGIC = b"CVT1"
#: records sent between two cursor writes: a crash re-sends at most this many (each cursor write is an
#: fsync'd rename, too slow to pay per record when a long outage is flushed)
SEND_BATCH = 32
#: the sender's longest sleep when nothing wakes it (a new record and a reconnect both do)
IDLE_WAIT_S = 1.0
#: scheduler error types that are the client's doing or load shedding, counted in summaries, not events
_CLIENT_ERRORS = frozenset({"Overloaded", "StaleInput", "InferenceInputError"})


@dataclass(frozen=True)
class _Entry:
    seq: int
    segment: Path
    offset: int
    size: int  # framed: header + payload


class TelemetryQueue:
    """The records not yet acknowledged, oldest first, on disk; thread-safe (one appender, one sender)."""

    def __init__(self, directory: str | os.PathLike[str], max_events: int, max_bytes: int,
                 segment_bytes: int | None = None) -> None:
        self.dir = Path(directory)
        self.max_events, self.max_bytes = max_events, max_bytes
        self.segment_bytes = segment_bytes or max(max_bytes // 8, 4096)
        self._lock = threading.Lock()
        self._index: deque[_Entry] = deque()
        self._bytes = 0
        self._out: BinaryIO | None = None  # the segment being appended to
        self._closed = False
        self.torn = 0  # segments cut at a torn or corrupt record when opened
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.stream, self._removed, self.dropped = self._read_cursor()
            self._next = self._removed + 1
            for segment in self._segments():
                self._scan(segment)
        except OSError as exc:
            raise TelemetryError(f"telemetry directory {self.dir} is unusable: {exc}") from exc
        with self._lock:
            if self._shrink(0):  # the bounds may have been lowered since the records were written
                self._save()
            self._collect_locked()

    # -- reading what is on disk ----------------------------------------------------------------
    def _read_cursor(self) -> tuple[str, int, int]:
        """(stream, removed_through, dropped). A new queue, or a damaged cursor (``CURSOR_SCHEMA``; it is
        written atomically, so only outside damage does that), starts a new stream, so that receivers take
        numbering that starts over for what it is, not for repeats; records already queued keep the stream
        they name."""
        try:
            cursor = read_json(self.dir / CURSOR_FILE, None, CURSOR_SCHEMA)
            if cursor is not None:
                return cursor["stream"], cursor["removed_through"], cursor["dropped"]
        except FormatError as exc:
            log.warning("telemetry cursor unreadable (%s): a new stream", exc)
        self.stream = secrets.token_hex(8)
        self._removed, self.dropped = -1, 0
        self._save()
        return self.stream, -1, 0

    def _segments(self) -> list[Path]:
        return sorted((p for p in self.dir.glob(f"*{SEGMENT_SUFFIX}") if parse_decimal(p.stem) is not None),
                      key=lambda p: int(p.stem))

    def _scan(self, segment: Path) -> None:
        """Index the segment's records; cut it at the first torn or corrupt one."""
        data = segment.read_bytes()
        offset = 0
        while offset < len(data):
            record = _parse(data, offset)
            if record is None:
                log.warning("telemetry segment %s: torn or corrupt record at byte %d of %d; cut there",
                            segment, offset, len(data))
                self.torn += 1
                try:
                    with open(segment, "r+b") as f:
                        f.truncate(offset)
                        os.fsync(f.fileno())
                except OSError as exc:  # appends go to a new segment anyway; cut again at the next open
                    log.warning("telemetry segment %s not cut: %s", segment, exc)
                return
            seq, payload = record
            size = _HEADER.size + len(payload)
            if seq > self._removed and seq >= self._next:
                self._index.append(_Entry(seq, segment, offset, size))
                self._bytes += size
            self._next = max(self._next, seq + 1)
            offset += size

    # -- appending --------------------------------------------------------------------------------
    def append(self, build: Callable[[int], bytes]) -> int:
        """Queue the record ``build(seq)`` makes (it carries its own seq) and return that seq; the oldest
        records make room past the bounds. A record larger than ``max_bytes`` is dropped at once (its seq
        is a gap). ``TelemetryError`` when the disk refuses the write."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the telemetry queue is closed")
            seq = self._next
            payload = build(seq)
            self._next += 1
            size = _HEADER.size + len(payload)
            if size > self.max_bytes:
                log.warning("telemetry record %d is %d bytes, over the queue's %d: dropped", seq, size,
                            self.max_bytes)
                self.dropped += 1
                self._save()
                return seq
            dropped = self._shrink(size)
            self._write(seq, payload)
            if dropped:
                self._save()
                self._collect_locked()
            return seq

    def _shrink(self, incoming: int) -> int:
        """Drop the oldest records until one of ``incoming`` bytes fits both bounds; the number dropped."""
        n = 0
        while self._index and (len(self._index) + (1 if incoming else 0) > self.max_events
                               or self._bytes + incoming > self.max_bytes):
            entry = self._index.popleft()
            self._bytes -= entry.size
            self._removed = entry.seq
            n += 1
        self.dropped += n
        return n

    def _write(self, seq: int, payload: bytes) -> None:
        frame = _HEADER.pack(_MAGIC, len(payload), seq, _crc(seq, payload)) + payload
        if self._out is None or self._out.tell() >= self.segment_bytes:
            self._rotate(seq)
        assert self._out is not None
        offset = self._out.tell()
        try:
            self._out.write(frame)
            self._out.flush()
            os.fsync(self._out.fileno())
        except OSError as exc:  # leave no partial frame for later appends to follow
            self._abandon_segment(offset)
            raise TelemetryError(f"cannot write telemetry record {seq}: {exc}") from exc
        self._index.append(_Entry(seq, Path(self._out.name), offset, len(frame)))
        self._bytes += len(frame)

    def _rotate(self, seq: int) -> None:
        if self._out is not None:
            self._out.close()
        try:
            self._out = open(self.dir / f"{seq:016d}{SEGMENT_SUFFIX}", "ab")
        except OSError as exc:
            self._out = None
            raise TelemetryError(f"cannot open a telemetry segment in {self.dir}: {exc}") from exc

    def _abandon_segment(self, offset: int) -> None:
        assert self._out is not None
        try:
            self._out.truncate(offset)
            self._out.close()
        except OSError:
            pass  # the next open cuts the torn frame off
        self._out = None

    # -- sending -----------------------------------------------------------------------------------
    def pending(self, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` of the oldest records as (seq, payload); a record that no longer reads back
        intact (damaged on disk) is dropped and counted."""
        out: list[tuple[int, bytes]] = []
        with self._lock:
            for entry in list(self._index)[:limit]:
                try:
                    with open(entry.segment, "rb") as f:
                        f.seek(entry.offset)
                        record = _parse(f.read(entry.size), 0)
                except OSError:
                    record = None
                if record is None or record[0] != entry.seq:
                    if out:
                        break  # send those first: dropping this one must not take them along
                    log.warning("telemetry record %d unreadable in %s: dropped", entry.seq, entry.segment)
                    self._remove_through(entry.seq, dropped=True)
                    continue
                out.append(record)
        return out

    def ack(self, seq: int) -> None:
        """Every record up to ``seq`` reached the broker: remove them."""
        with self._lock:
            self._remove_through(seq, dropped=False)

    def discard(self, seq: int) -> None:
        """Record ``seq`` cannot be delivered (refused by the broker, again and again): drop it, counted."""
        with self._lock:
            self._remove_through(seq, dropped=True)

    def _remove_through(self, seq: int, dropped: bool) -> None:
        if seq <= self._removed:
            return  # already dropped to make room while it was being sent
        while self._index and self._index[0].seq <= seq:
            entry = self._index.popleft()
            self._bytes -= entry.size
            self.dropped += int(dropped)
        self._removed = seq
        self._save()
        self._collect_locked()

    # -- housekeeping -----------------------------------------------------------------------------
    def _save(self) -> None:
        try:
            write_json(self.dir / CURSOR_FILE, {"stream": self.stream, "removed_through": self._removed,
                                                "dropped": self.dropped})
        except OSError as exc:  # the records are re-sent (or re-dropped) after a restart; nothing is lost
            log.warning("telemetry cursor not saved: %s", exc)

    def _collect_locked(self) -> None:
        """Delete the segments whose records are all gone (the one being appended to included)."""
        live = {e.segment for e in self._index}
        for segment in self._segments():
            if segment in live:
                break  # later segments hold newer records
            if self._out is not None and Path(self._out.name) == segment:
                self._out.close()
                self._out = None
            try:
                segment.unlink(missing_ok=True)
            except OSError as exc:  # tried again after the next removal
                log.warning("telemetry segment %s not deleted: %s", segment, exc)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"queued": len(self._index), "queued_bytes": self._bytes, "dropped": self.dropped,
                    "next_seq": self._next, "torn_segments": self.torn}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._out is not None:
                self._out.close()
                self._out = None

    def __enter__(self) -> TelemetryQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _crc(seq: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(seq.to_bytes(8, "big")))


def _parse(data: bytes, offset: int) -> tuple[int, bytes] | None:
    """(seq, payload) of the frame at ``offset``; None when it is torn or fails its checksum."""
    if len(data) - offset < _HEADER.size:
        return None
    magic, length, seq, crc = _HEADER.unpack_from(data, offset)
    start = offset + _HEADER.size
    payload = data[start:start + length]
    if magic != _MAGIC or len(payload) != length or _crc(seq, payload) != crc:
        return None
    return seq, payload


class Telemetry:
    """The device's telemetry: ``emit`` queues a record on disk (never blocks on the network); after
    ``start`` a sender thread publishes the queue in order, QoS 1, whenever the client is connected.

    A publish that fails because the link dropped is retried after the reconnect, without limit; one
    refused or unacknowledged while connected is retried ``max_attempts`` times, ``retry_s`` apart, then
    dropped (counted), so one bad record cannot hold the queue forever."""

    def __init__(self, device: str, directory: str | os.PathLike[str], settings: TelemetrySettings,
                 log_event: Callable[..., None]) -> None:
        self.device, self.settings, self._log = device, settings, log_event
        self.queue = TelemetryQueue(directory, settings.max_events, settings.max_bytes)
        self.sent = self.lost = 0  # lost: records the disk refused
        self._mqtt: MqttClient | None = None
        self._topic = ""
        self._attempts = 0  # of the oldest record, while connected
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def emit(self, event: str, /, **data: Any) -> int | None:
        """Queue one record (``event`` from ``protocol.TELEMETRY_EVENTS``); its seq, None if it was lost."""
        when = format_time(datetime.now(timezone.utc))
        try:
            seq = self.queue.append(lambda s: TelemetryRecord(self.device, self.queue.stream, s, when, event,
                                                              data).to_bytes())
        except TelemetryError as exc:
            self.lost += 1
            self._log("telemetry_lost", telemetry_event=event, error=str(exc))
            return None
        self._wake.set()
        return seq

    def start(self, mqtt: MqttClient, topic: str) -> None:
        self._mqtt, self._topic = mqtt, topic
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Something changed (the client reconnected): look at the queue now."""
        self._wake.set()

    def stats(self) -> dict[str, int]:
        return {**self.queue.stats(), "sent": self.sent, "lost": self.lost}

    def close(self) -> None:
        """Stop sending (what is queued stays on disk for the next start) and close the queue."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(self.settings.publish_timeout_s + 5.0)
        self.queue.close()

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.is_set():
            self._wake.wait(wait)
            self._wake.clear()
            try:
                wait = self._flush()
            except Exception:  # a bug must not end the sender: records keep piling up on disk otherwise
                log.exception("telemetry sender failed; retrying")
                wait = self.settings.retry_s or IDLE_WAIT_S

    def _flush(self) -> float:
        """Send until the queue is empty or a publish fails; the time to wait before looking again."""
        assert self._mqtt is not None
        while not self._stop.is_set() and self._mqtt.connected:
            batch = self.queue.pending(SEND_BATCH)
            if not batch:
                break
            done = None
            try:
                for seq, payload in batch:
                    self._mqtt.publish(self._topic, payload, expiry_s=self.settings.message_expiry_s or None,
                                       timeout_s=self.settings.publish_timeout_s)
                    done, self._attempts = seq, 0
                    self.sent += 1
                    if self._stop.is_set():
                        break
            except TransportError as exc:
                return self._failed(seq, exc)
            finally:
                if done is not None:
                    self.queue.ack(done)
        return IDLE_WAIT_S

    def _failed(self, seq: int, exc: TransportError) -> float:
        assert self._mqtt is not None
        if not self._mqtt.connected:
            return IDLE_WAIT_S  # the link dropped: resent after the reconnect, whatever it takes
        self._attempts += 1
        self._log("telemetry_retry", seq=seq, attempt=self._attempts, error=str(exc))
        if self._attempts >= self.settings.max_attempts:
            self.queue.discard(seq)
            self._attempts = 0
            self._log("telemetry_dropped", seq=seq, error=type(exc).__name__)
        return self.settings.retry_s


# -- what the agent reports -------------------------------------------------------------------------
def _grown(new: int, old: int) -> int:
    """How much a counter grew; a smaller value is a new scheduler (a reload) counting from zero."""
    return new - old if new >= old else new


def quantile_ms(le: list[float], counts: list[int], q: float) -> float | None:
    """``q`` quantile of a histogram (``counts`` per bucket, not cumulative; the last is above ``le[-1]``),
    interpolated within its bucket as Prometheus' ``histogram_quantile`` does; None for no samples."""
    total = sum(counts)
    if not total:
        return None
    rank, seen = q * total, 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i == len(le):
                return le[-1]  # above the last bound: that bound is all that is known
            low = le[i - 1] if i else 0.0
            return low + (le[i] - low) * (rank - seen) / n
        seen += n
    return le[-1]


class ServingWatch:
    """Turns what every served model's scheduler already counts (``Scheduler.metrics()``, the same numbers
    ``/metrics`` shows) into telemetry: events when a counter grows or the thermal state flips, and
    summaries with latency percentiles per model and variant over the last interval."""

    def __init__(self, models: ModelRegistry) -> None:
        self._models = models
        self._seen: dict[str, dict[str, Any]] = {}  # model -> metrics at the last ``events``
        self._hist: dict[tuple[str, str], list[int]] = {}  # (model, variant) -> cumulative at last summary

    def _read(self) -> Iterator[tuple[ModelHost, dict[str, Any], ServedModel, dict[str, Any]]]:
        """(host, scheduler metrics, what is served, its release fields) of every loaded model."""
        for host, _priority, m, served in self._models.states():
            if m is not None and served is not None:
                yield host, m, served, {"release": served.release, "version": served.version,
                                        "variant": served.variant}

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        """What happened in serving since the last call, as (event, data)."""
        out: list[tuple[str, dict[str, Any]]] = []
        for host, m, _, fields in self._read():
            name = host.name
            old = self._seen.get(name, {})
            model = {"model": name, **fields}
            for key, event in (("deadline_kills", "deadline_kill"), ("worker_restarts", "worker_restart")):
                if n := _grown(m[key], old.get(key, 0)):
                    out.append((event, {**model, "count": n, "total": m[key]}))
            for error, total in sorted(m["failed"].items()):
                n = _grown(total, old.get("failed", {}).get(error, 0))
                if n and error not in _CLIENT_ERRORS:
                    out.append(("serving_error", {**model, "error": error, "count": n, "total": total}))
            thermal = m["thermal"]
            if thermal["degraded"] != old.get("thermal", {}).get("degraded", False):
                out.append(("thermal", {**model, "degraded": thermal["degraded"], "temp_c": thermal["temp_c"],
                                        "action": thermal["action"]}))
            self._seen[name] = m
        return out

    def summary(self) -> dict[str, Any]:
        """Per model: counters since its load, window percentiles, per variant the requests and latency
        percentiles since the previous summary (from the cumulative histograms), and for the rollout gates
        the self-test's golden figures and the shadow sample's drift since the previous summary."""
        models: dict[str, Any] = {}
        for host, m, served, fields in self._read():
            name = host.name
            variants = {}
            for variant, h in m["latency_histogram_ms"].items():
                cum = h["cumulative"]
                prev = self._hist.get((name, variant), [0] * len(cum))
                if prev[-1] > cum[-1]:  # a reload: the histogram restarted
                    prev = [0] * len(cum)
                self._hist[(name, variant)] = cum
                delta = [c - p for c, p in zip(cum, prev)]
                per_bucket = [delta[0]] + [b - a for a, b in zip(delta, delta[1:])]
                pct = {f"p{q}_ms": quantile_ms(h["le"], per_bucket, q / 100) for q in (50, 95, 99)}
                variants[variant] = {"requests": delta[-1], **pct}
            models[name] = {**fields, **serving_counts(m), "failed": m["failed"], "thermal": m["thermal"],
                            "latency_ms": m["latency_ms"], "variants": variants}
            if served.golden:
                models[name]["golden"] = dict(served.golden)
            if host.shadow is not None and (drift := host.shadow.take(served.release)):
                models[name]["drift"] = drift
        return models


class TelemetryMetrics:
    """The queue's counts for ``/metrics`` (a custom prometheus collector, read at scrape time)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self._telemetry.stats()
        counters: Mapping[str, tuple[str, int]] = {
            "cuvil_telemetry_dropped": ("telemetry records dropped (oldest past the queue's bound, or "
                                        "refused by the broker)", s["dropped"]),
            "cuvil_telemetry_sent": ("telemetry records acknowledged by the broker since start", s["sent"]),
            "cuvil_telemetry_lost": ("telemetry records the disk refused since start", s["lost"]),
        }
        for name, (doc, value) in counters.items():
            yield CounterMetricFamily(name, doc, value=value)
        yield GaugeMetricFamily("cuvil_telemetry_queued", "telemetry records waiting on disk",
                                value=s["queued"])
        yield GaugeMetricFamily("cuvil_telemetry_queued_bytes", "their framed size", value=s["queued_bytes"])
