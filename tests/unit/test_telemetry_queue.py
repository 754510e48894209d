"""The telemetry queue on disk, without a broker: order, bounds, persistence, torn and corrupt records;
the record schema; the serving counters turned into events and summaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import cuvil_agent.telemetry
from cuvil_agent.config import TelemetrySettings, load_agent_config
from cuvil_agent.serve import ModelRegistry
from cuvil_agent.telemetry import (
    CURSOR_FILE,
    SEGMENT_SUFFIX,
    ServingWatch,
    Telemetry,
    TelemetryQueue,
    quantile_ms,
)
from cuvil_edge.fleet.telemetry import DeviceTelemetry
from ota.errors import FormatError, LengthMismatch, TelemetryError
from ota.protocol import MAX_TELEMETRY_BYTES, TelemetryRecord
from runtime_wasm.counts import SERVING_COUNTS


def payload(seq: int, size: int = 40) -> bytes:
    return json.dumps({"seq": seq, "pad": "x" * size}).encode()


def fill(q: TelemetryQueue, n: int, size: int = 40) -> list[int]:
    return [q.append(lambda s: payload(s, size)) for _ in range(n)]


def seqs(q: TelemetryQueue) -> list[int]:
    got = q.pending(10_000)
    assert all(json.loads(p)["seq"] == s for s, p in got), "a payload read back under another seq"
    return [s for s, _ in got]


def segments(d: Path) -> list[Path]:
    return sorted(d.glob(f"*{SEGMENT_SUFFIX}"), key=lambda p: int(p.stem))


def test_records_keep_their_order_and_survive_a_reopen(tmp_path):
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20, segment_bytes=200) as q:
        assert fill(q, 10) == list(range(10))
    assert len(segments(tmp_path)) > 1, "the test wants several segments"
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20, segment_bytes=200) as q:
        assert seqs(q) == list(range(10))
        assert q.append(lambda s: payload(s)) == 10  # numbering goes on after a restart


def test_acknowledged_records_are_removed_and_their_segments_deleted(tmp_path):
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20, segment_bytes=200) as q:
        fill(q, 10)
        q.ack(4)
        assert seqs(q) == list(range(5, 10))
        before = len(segments(tmp_path))
        q.ack(9)
        assert seqs(q) == [] and segments(tmp_path) == [] and before > 0
        q.ack(3)  # an old acknowledgement changes nothing
        assert q.stats()["dropped"] == 0
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        assert seqs(q) == [] and q.append(lambda s: payload(s)) == 10  # seq never goes back


def test_a_new_or_damaged_cursor_starts_a_new_stream(tmp_path):
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        first = q.stream
        fill(q, 3)
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        assert q.stream == first, "a restart keeps the stream"
    (tmp_path / CURSOR_FILE).write_text("{not json")
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        assert q.stream != first and seqs(q) == [0, 1, 2], "records already queued are kept"


def test_ack_persists_across_a_restart(tmp_path):
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        fill(q, 6)
        q.ack(2)
    assert json.loads((tmp_path / CURSOR_FILE).read_text())["removed_through"] == 2
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        assert seqs(q) == [3, 4, 5]


def test_count_bound_drops_the_oldest_and_counts_them(tmp_path):
    with TelemetryQueue(tmp_path, max_events=5, max_bytes=1 << 20, segment_bytes=100) as q:
        fill(q, 12)
        assert seqs(q) == list(range(7, 12))
        assert q.stats()["dropped"] == 7
    with TelemetryQueue(tmp_path, max_events=5, max_bytes=1 << 20) as q:
        assert q.stats()["dropped"] == 7 and seqs(q) == list(range(7, 12))
    assert len(segments(tmp_path)) <= 3, "segments of dropped records must be deleted"


def test_byte_bound_holds_and_a_record_over_it_is_dropped(tmp_path):
    size = len(payload(0)) + 20  # framed
    with TelemetryQueue(tmp_path, max_events=1000, max_bytes=3 * size, segment_bytes=size) as q:
        fill(q, 10)
        st = q.stats()
        assert seqs(q) == [7, 8, 9] and st["queued_bytes"] <= 3 * size and st["dropped"] == 7
        assert sum(p.stat().st_size for p in segments(tmp_path)) <= 4 * size
        big = q.append(lambda s: payload(s, 10 * size))
        assert big == 10 and q.stats()["dropped"] == 8
        assert seqs(q) == [7, 8, 9], "an oversize record must not push out the others"


def test_lowered_bounds_apply_at_open(tmp_path):
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        fill(q, 10)
    with TelemetryQueue(tmp_path, max_events=4, max_bytes=1 << 20) as q:
        assert seqs(q) == [6, 7, 8, 9] and q.stats()["dropped"] == 6


def test_torn_last_record_is_cut_and_earlier_ones_survive(tmp_path):
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        fill(q, 5)
    last = segments(tmp_path)[-1]
    data = last.read_bytes()
    last.write_bytes(data[:-7])  # a crash in the middle of writing record 4
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        assert seqs(q) == [0, 1, 2, 3] and q.stats()["torn_segments"] == 1
        fill(q, 2)  # appends after the cut read back intact
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        assert seqs(q) == [0, 1, 2, 3, 4, 5] and q.stats()["torn_segments"] == 0


def test_a_torn_header_is_cut_too(tmp_path):
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        fill(q, 3)
    last = segments(tmp_path)[-1]
    last.write_bytes(last.read_bytes() + b"CVT1\x00")  # a header cut short
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        assert seqs(q) == [0, 1, 2] and q.stats()["torn_segments"] == 1


def test_checksum_catches_a_flipped_byte(tmp_path):
    size = len(payload(0)) + 20
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20, segment_bytes=size) as q:
        fill(q, 5)
    segs = segments(tmp_path)
    assert len(segs) == 5, "one record per segment"
    damaged = bytearray(segs[2].read_bytes())
    damaged[-3] ^= 0x01  # inside the payload: only the CRC can notice
    segs[2].write_bytes(bytes(damaged))
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        assert seqs(q) == [0, 1, 3, 4] and q.stats()["torn_segments"] == 1


def disk_full(_fd: int) -> None:
    raise OSError(28, "No space left on device")


def test_a_failed_write_leaves_no_partial_frame(tmp_path, monkeypatch):
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        fill(q, 2)
        monkeypatch.setattr(cuvil_agent.telemetry.os, "fsync", disk_full)
        with pytest.raises(TelemetryError, match="No space"):
            q.append(payload)
        monkeypatch.undo()
        fill(q, 1)
        assert seqs(q) == [0, 1, 3]
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        assert seqs(q) == [0, 1, 3] and q.stats()["torn_segments"] == 0


def test_emit_counts_what_the_disk_refused(tmp_path, monkeypatch):
    logged = []
    with Telemetry("dev", tmp_path, TelemetrySettings(), lambda event, **f: logged.append(event)) as t:
        monkeypatch.setattr(cuvil_agent.telemetry.os, "fsync", disk_full)
        assert t.emit("update_state", state="active") is None
        monkeypatch.undo()
        assert t.emit("update_state", state="active") is not None
        assert t.stats()["lost"] == 1 and logged == ["telemetry_lost"]


def test_discard_counts_a_refused_record(tmp_path):
    with TelemetryQueue(tmp_path, max_events=100, max_bytes=1 << 20) as q:
        fill(q, 3)
        q.discard(0)
        assert seqs(q) == [1, 2] and q.stats()["dropped"] == 1


def test_closed_queue_refuses_appends(tmp_path):
    q = TelemetryQueue(tmp_path, max_events=10, max_bytes=1 << 20)
    q.close()
    q.close()  # idempotent
    with pytest.raises(RuntimeError):
        q.append(payload)


# -- the record schema ----------------------------------------------------------------------------------
def test_record_round_trip_and_refusals():
    r = TelemetryRecord("dev-1", "0123abcd", 7, "2026-01-01T00:00:00Z", "install_failed",
                        {"error": "HashMismatch"})
    assert TelemetryRecord.from_bytes(r.to_bytes()) == r
    body = json.loads(r.to_bytes())
    assert body["type"] == "cuvil-telemetry" and body["format"] == 1
    for bad in ({**body, "format": 2}, {**body, "stream": 5}, {**body, "type": "cuvil-command"},
                {**body, "seq": -1}, {**body, "seq": True}, {**body, "data": []},
                {**body, "time": "yesterday"}, {k: v for k, v in body.items() if k != "seq"}):
        with pytest.raises(FormatError):
            TelemetryRecord.from_bytes(json.dumps(bad).encode())
    with pytest.raises(LengthMismatch):
        TelemetryRecord.from_bytes(b" " * (MAX_TELEMETRY_BYTES + 1))
    with pytest.raises(ValueError):
        TelemetryRecord("dev-1", "s", 0, body["time"], "no_such_event", {}).to_bytes()
    newer = {**body, "event": "from_a_newer_agent"}  # receivers keep events they do not know
    assert TelemetryRecord.from_bytes(json.dumps(newer).encode()).event == "from_a_newer_agent"


def test_config_table(tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text('[agent]\ndevice_id = "d"\nfleet = "f"\nstate_dir = "s"\n'
                   '[telemetry]\nmax_events = 50\nmax_bytes = 65536\ndirectory = "/var/q"\n')
    t = load_agent_config(cfg).telemetry
    assert (t.max_events, t.max_bytes, t.directory) == (50, 65536, "/var/q")
    cfg.write_text(cfg.read_text() + "max_event = 3\n")
    with pytest.raises(ValueError, match="unknown setting"):
        load_agent_config(cfg)
    with pytest.raises(ValueError):
        TelemetrySettings(max_events=0)


# -- serving counters -> events and summaries ------------------------------------------------------------
def test_quantile_interpolates_within_buckets():
    le = [1.0, 2.0, 4.0]
    assert quantile_ms(le, [0, 0, 0, 0], 0.5) is None
    assert quantile_ms(le, [0, 10, 0, 0], 0.5) == pytest.approx(1.5)
    assert quantile_ms(le, [10, 0, 0, 0], 0.95) == pytest.approx(0.95)
    assert quantile_ms(le, [0, 0, 0, 5], 0.5) == 4.0  # above the last bound: that bound


class FakeHost:
    """What ``ServingWatch`` reads of a ``ModelHost``: its name, scheduler metrics and what it serves."""

    def __init__(self) -> None:
        self.name, self.shadow = "m", None
        histogram = {"le": [1.0, 2.0], "cumulative": [0, 0, 0], "sum_ms": 0.0}
        self.m: dict[str, Any] = {**{c.key: 0 for c in SERVING_COUNTS}, "failed": {},
                                  "latency_ms": {"p50": None, "p95": None, "p99": None, "count": 0},
                                  "thermal": {"degraded": False, "temp_c": None, "action": "none"},
                                  "latency_histogram_ms": {"simd128": histogram}}

    def metrics(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.m))

    def served(self) -> Any:
        return type("Served", (), {"release": 3, "version": "1.0.3", "variant": "simd128",
                                 "golden": None})()


def test_serving_watch_reports_growth_and_flips():
    host = FakeHost()
    models = ModelRegistry()
    models.add(host)  # type: ignore[arg-type]
    watch = ServingWatch(models)
    assert watch.events() == []
    host.m.update(deadline_kills=2, worker_restarts=2, failed={"DeadlineExceeded": 2, "Overloaded": 9})
    host.m["thermal"] = {"degraded": True, "temp_c": 91.0, "action": "shed"}
    got = {e: d for e, d in watch.events()}
    assert got["deadline_kill"]["count"] == 2 and got["worker_restart"]["total"] == 2
    assert got["serving_error"]["error"] == "DeadlineExceeded", "shedding is counted, not an event"
    assert got["thermal"]["degraded"] is True and got["thermal"]["release"] == 3
    assert watch.events() == [], "nothing new, nothing sent"
    host.m["deadline_kills"] = 1  # a reload: a new scheduler counts from zero
    assert [(e, d["count"]) for e, d in watch.events()] == [("deadline_kill", 1)]


def test_summary_percentiles_cover_the_last_interval():
    host = FakeHost()
    models = ModelRegistry()
    models.add(host)  # type: ignore[arg-type]
    watch = ServingWatch(models)
    hist = host.m["latency_histogram_ms"]["simd128"]
    hist["cumulative"] = [10, 10, 10]  # 10 requests under 1 ms
    first = watch.summary()["m"]["variants"]["simd128"]
    assert first["requests"] == 10 and first["p50_ms"] <= 1.0
    hist["cumulative"] = [10, 20, 20]  # then 10 between 1 and 2 ms
    second = watch.summary()["m"]["variants"]["simd128"]
    assert second["requests"] == 10 and 1.0 <= second["p50_ms"] <= 2.0


# -- the receiver: repeats, gaps and a new stream ---------------------------------------------------------
def test_receiver_drops_repeats_and_names_gaps():
    def rec(stream: str, seq: int, event: str = "update_state") -> TelemetryRecord:
        return TelemetryRecord("d", stream, seq, "2026-01-01T00:00:00Z", event, {"dropped": 0})

    d = DeviceTelemetry(keep=3)
    assert [d.add(rec("a", s)) for s in (4, 5, 5, 3, 8, 9)] == [True, True, False, False, True, True]
    assert d.duplicates == 2 and d.gaps == [(6, 7)] and d.missing == 2
    assert [r.seq for r in d.records] == [5, 8, 9], "at most ``keep`` records"
    assert d.add(rec("b", 0, "summary")) and d.streams == 2, "a wiped queue starts over: not a repeat"
    assert d.summary is not None and d.summary.stream == "b" and d.gaps == [(6, 7)]
