"""The fleet store (``cuvil_edge.fleet.store``), every test on both backends: SQLite in a temporary file and
a real PostgreSQL the session starts (``postgres`` in tests/conftest.py: initdb in a temporary directory, a
free loopback port, one fresh database per test, stopped at the end of the session).

A machine without PostgreSQL's server fails these tests with the reason (apt-get install postgresql);
they are never skipped. Waits are bounded; nothing asserts a time.
"""

from __future__ import annotations

import itertools
import multiprocessing
import re
import sqlite3
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cuvil_edge.cli import main as cli_main
from cuvil_edge.fleet.publisher import Rollout
from cuvil_edge.fleet.store import (
    DeviceFilter,
    FleetStoreError,
    SchemaMismatch,
    StoreConfig,
    StoreConflict,
    StoreUnavailable,
    open_store,
)
from cuvil_edge.fleet.store.schema import LATEST
from cuvil_edge.testing.broker import free_port
from ota.protocol import TelemetryRecord, read_status, status_payload
from ota.store import write_json

pytestmark = pytest.mark.integration
SHA = "ab" * 32


def status(device: str, release: int = 1, state: str = "active", profile: str = "pi4",
           time: str = "2026-03-01T10:00:00Z", **extra: Any) -> dict[str, Any]:
    return {"device": device, "release": release, "state": state, "profile": profile,
            "hardware_id": "test-device", "time": time, **extra}


def raw_execute(url: str, sql: str) -> None:
    """Run one statement with the backend's own driver, behind the store's back."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql)
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)


def all_rows(store: Any, filters: DeviceFilter) -> list[tuple[str, str]]:
    """Every (device, line) matching ``filters``, fetched 7 at a time."""
    out, after = [], None
    while True:
        page = store.query_devices(filters, 7, after)
        out += [(r.device, r.line) for r in page.rows]
        if page.after is None:
            return out
        after = page.after


# -- registry: batches, filters, counts ------------------------------------------------------------
FLEET = [status(f"dev-{i:03d}", release=1 + i % 3, state=("active", "failed", "downloading")[i % 4 % 3],
                profile=("pi4", "jetson")[i % 2]) for i in range(40)]
MULTI = {"device": "multi-1", "model": "kws", "state": "active", "release": 5, "profile": "pi4",
         "models": {"kws": {"state": "active", "release": 5}, "vad": {"state": "failed", "release": 2}}}


def test_batches_are_queried_by_each_filter_and_counted(store_url: str) -> None:
    with open_store(store_url) as store:
        assert store.apply_statuses(FLEET[:25]) == 25
        assert store.apply_statuses([*FLEET[25:], MULTI]) == 16
        store.assign_group([f"dev-{i:03d}" for i in range(10)], "site-a")
        single = DeviceFilter(line="")
        cases = {
            DeviceFilter(line="", release=2): {s["device"] for s in FLEET if s["release"] == 2},
            DeviceFilter(line="", state="failed"): {s["device"] for s in FLEET if s["state"] == "failed"},
            DeviceFilter(line="", device_class="jetson"): {s["device"] for s in FLEET
                                                           if s["profile"] == "jetson"},
            DeviceFilter(group="site-a"): {f"dev-{i:03d}" for i in range(10)},
            DeviceFilter(group="site-a", release=1): {f"dev-{i:03d}" for i in range(0, 10, 3)},
            DeviceFilter(line="vad", state="failed"): {"multi-1"},
            DeviceFilter(line="kws"): {"multi-1"},
            DeviceFilter(hardware_id="test-device"): {s["device"] for s in FLEET},
        }
        for filters, want in cases.items():
            assert {d for d, _ in all_rows(store, filters)} == want, filters
        assert store.count_by("release", single) == Counter(s["release"] for s in FLEET)
        assert store.count_by("state", single) == Counter(s["state"] for s in FLEET)
        assert store.count_by("device_class", DeviceFilter(state="active")) == Counter(
            [s["profile"] for s in FLEET if s["state"] == "active"] + ["pi4"])  # multi-1's kws line
        assert store.count_by("group", single) == {"site-a": 10, "": 30}
        assert store.count_by("line") == {"": 40, "kws": 1, "vad": 1}
        first = store.query_devices(DeviceFilter(), 41)  # a page boundary between one device's lines
        rest = store.query_devices(DeviceFilter(), 41, first.after)
        assert [(r.device, r.line) for r in rest.rows] == [("multi-1", "vad")] and rest.after is None
        row = store.query_devices(DeviceFilter(line="vad")).rows[0]
        assert (row.state, row.release, row.status) == ("failed", 2, MULTI)  # the whole status kept
        with pytest.raises(ValueError, match="cannot count by"):
            store.count_by("status; DROP TABLE devices", single)


def test_a_status_replaces_an_older_one_never_a_newer_one(store_url: str) -> None:
    with open_store(store_url) as store:
        newer = status("d1", release=2, time="2026-03-01T12:00:00+02:00")  # 10:00 UTC
        store.apply_statuses([newer])
        assert store.apply_statuses([status("d1", release=1, time="2026-03-01T09:59:59Z")]) == 0
        assert store.device("d1") == newer
        batch = [status("d2", release=3, time="2026-03-01T10:00:02Z"),
                 status("d2", release=4, time="2026-03-01T10:00:01Z")]  # out of order within a batch
        assert store.apply_statuses(batch) == 1
        assert store.device("d2")["release"] == 3
        store.apply_statuses([status("d1", release=7, time="2026-03-01T10:00:01Z")])
        assert store.query_devices(DeviceFilter(release=7)).rows[0].device == "d1"
        assert store.count_by("release") == {3: 1, 7: 1}
        # one second, two statuses (downloading, then active) written in the wrong order by two controllers
        # sharing the stream: the microseconds agents send order them
        store.apply_statuses([status("d3", release=2, time="2026-03-01T10:00:05.000002Z")])
        earlier = status("d3", release=1, state="downloading", time="2026-03-01T10:00:05.000001Z")
        assert store.apply_statuses([earlier]) == 0
        assert store.device("d3")["release"] == 2
        assert re.fullmatch(r".*T\d\d:\d\d:\d\d\.\d{6}Z", read_status(status_payload("d3", "active"))["time"])


def test_the_rows_of_lines_a_device_stops_reporting_are_dropped(store_url: str) -> None:
    """With the line's row, its place in that line's stages goes: a stage never waits for it."""
    with open_store(store_url) as store:
        store.apply_statuses([MULTI])
        store.place_buckets("vad", "ab" * 32, [("multi-1", 5, True)])
        store.place_buckets("kws", "cd" * 32, [("multi-1", 5, True)])
        assert store.stage_size("vad", "ab" * 32, 10) == 1
        store.apply_statuses([{**MULTI, "release": 6, "models": {"kws": {"state": "active", "release": 6}}}])
        assert store.count_by("line") == {"kws": 1}
        assert (store.stage_size("vad", "ab" * 32, 10), store.stage_size("kws", "cd" * 32, 10)) == (0, 1)
        store.apply_statuses([{**MULTI, "release": 7, "models": {"kws": {"state": "failed", "release": 7}}}])
        assert store.count_by("state") == {"active": 1}  # the kws view: the status's own fields (model kws)
        assert store.count_by("release", DeviceFilter(line="kws")) == {7: 1}


def test_batches_larger_than_the_limit_are_split_and_all_written(store_url: str) -> None:
    with open_store(store_url, StoreConfig(max_batch=7)) as store:
        assert store.apply_statuses(FLEET) == len(FLEET)
        assert sum(store.count_by("release").values()) == len(FLEET)


def test_telemetry_summary_is_kept_per_device_newest_first(store_url: str) -> None:
    def summary(device: str, seq: int, time: str, p95: float) -> TelemetryRecord:
        return TelemetryRecord(device, "s", seq, time, "summary", {"models": {"m": {"p95_ms": p95}}})

    with open_store(store_url) as store:
        store.apply_statuses([status("d1"), status("d2")])
        store.apply_telemetry([summary("d1", 2, "2026-03-01T10:05:00Z", 9.0),
                               summary("d1", 1, "2026-03-01T10:04:00Z", 7.0),
                               summary("unknown", 1, "2026-03-01T10:04:00Z", 1.0),
                               TelemetryRecord("d2", "s", 1, "2026-03-01T10:04:00Z", "install", {})])
        store.apply_telemetry([summary("d1", 0, "2026-03-01T10:00:00Z", 1.0)])  # older: not kept
        rows = {r.device: r for r in store.query_devices().rows}
        assert rows["d1"].telemetry == {"models": {"m": {"p95_ms": 9.0}}}
        assert rows["d2"].telemetry is None
        assert "unknown" not in rows


# -- paging ----------------------------------------------------------------------------------------
def test_paging_visits_every_row_once_while_another_connection_inserts(store_url: str) -> None:
    """Keyset paging: between pages another connection inserts devices before and after the page
    cursor and changes existing rows; every device there from the start is visited exactly once, and
    so is every device inserted after the cursor."""
    with open_store(store_url) as reader, open_store(store_url) as writer:
        writer.apply_statuses(status(f"d{i:04d}0") for i in range(200))
        seen: list[str] = []
        ahead: set[str] = set()
        after, n = None, 0
        while True:
            page = reader.query_devices(DeviceFilter(line=""), 13, after)
            seen += [r.device for r in page.rows]
            if page.after is None:
                break
            after, n = page.after, n + 1
            cursor = page.rows[-1].device
            new = [f"d{(n * 7) % 200:04d}5", f"d{(n * 11 + 3) % 200:04d}5"]  # between existing ids
            writer.apply_statuses(status(d, release=9) for d in new)
            writer.apply_statuses([status(cursor, release=2, time="2026-03-02T00:00:00Z")])
            ahead |= {d for d in new if d > cursor}
        assert [d for d, k in Counter(seen).items() if k > 1] == []
        assert {f"d{i:04d}0" for i in range(200)} <= set(seen)
        assert ahead and ahead <= set(seen)


def test_a_page_cursor_that_is_not_one_is_refused(store_url: str) -> None:
    with open_store(store_url) as store:
        for bad in ("nonsense", "[1, 2]", "{}"):
            with pytest.raises(ValueError, match="page cursor"):
                store.query_devices(after=bad)
        with pytest.raises(ValueError, match="limit"):
            store.query_devices(limit=store.config.max_page + 1)


# -- announcement numbers --------------------------------------------------------------------------
def _allocate(url: str, count: int, barrier: Any) -> list[int]:
    """In a child process: its own connection takes ``count`` announcement numbers of line ''."""
    with open_store(url) as store:
        barrier.wait(60)
        return [store.announce("", None, lambda n: f"announcement {n}".encode())[0] for _ in range(count)]


def test_two_processes_never_get_the_same_announcement_number(store_url: str) -> None:
    open_store(store_url).close()  # the schema exists before both start
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(2)
        with ctx.Pool(2) as pool:
            runs = [pool.apply_async(_allocate, (store_url, 40, barrier)) for _ in range(2)]
            got = [r.get(120) for r in runs]
    assert sorted(got[0] + got[1]) == list(range(1, 81))
    assert all(a < b for run in got for a, b in itertools.pairwise(run))  # each process's own order
    with open_store(store_url) as store:
        assert store.sequence("") == 80
        assert store.sequence("other-line") == 0
        assert store.announce("other-line", None, lambda n: b"x") == (1, b"x")  # one sequence per line


def _bind(url: str, barrier: Any) -> str:
    """In a child process: bind fleet 'lab' once released; the error's text, or '' when it worked."""
    with open_store(url) as store:
        barrier.wait(60)
        try:
            store.bind_fleet("lab")
        except FleetStoreError as exc:
            return str(exc)
    return ""


def test_controllers_binding_a_new_store_at_once_both_succeed(store_url: str) -> None:
    """Two processes bind the same fleet to a store that has none yet, released together, 12 times: no
    unique-key error (a locking read finds no row to lock, so both used to insert: 2 of 12 rounds on
    PostgreSQL), one owner; another fleet is still refused."""
    open_store(store_url).close()  # the schema exists before both start
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        for _ in range(12):
            raw_execute(store_url, "DELETE FROM fleet_meta")
            barrier = manager.Barrier(2)
            errors = [r.get(120) for r in [pool.apply_async(_bind, (store_url, barrier)) for _ in range(2)]]
            assert errors == ["", ""]
    with open_store(store_url) as store:
        assert store.fleet == "lab"
        with pytest.raises(StoreConflict, match="'lab'"):
            store.bind_fleet("other")


def test_a_failed_signature_uses_no_number(store_url: str) -> None:
    def broken(_seq: int) -> bytes:
        raise OSError("key unreadable")

    with open_store(store_url) as store:
        store.announce("", None, lambda n: b"a")
        with pytest.raises(OSError):
            store.announce("", None, broken)
        assert store.announce("", None, lambda n: b"b") == (2, b"b")


# -- lifecycle, schema, errors ---------------------------------------------------------------------
def test_a_reopened_store_sees_what_was_written(store_url: str) -> None:
    store = open_store(store_url)
    store.bind_fleet("lab")
    store.apply_statuses(FLEET)
    rollout_id = store.save_rollout("", {"bundle_sha256": SHA, "release": 2, "stages": [10, 100], "stage": 0,
                                         "status": "rolling", "reason": ""}, {"dev-000": "active"})
    store.announce("", rollout_id, lambda n: b"signed")
    store.close()
    store.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        store.device("dev-000")
    with open_store(store_url) as again:
        assert again.fleet == "lab"
        assert again.device("dev-007") == FLEET[7]
        assert sum(again.count_by("state").values()) == len(FLEET)
        rollout = again.current_rollout("")
        assert (rollout.id, rollout.record["release"]) == (rollout_id, 2)
        assert rollout.outcomes == {"dev-000": "active"}
        assert again.sequence("") == 1
        again.bind_fleet("lab")
        with pytest.raises(StoreConflict, match="holds fleet 'lab'"):
            again.bind_fleet("other")


def test_a_store_of_a_newer_schema_is_refused(store_url: str) -> None:
    with open_store(store_url) as store:
        store.apply_statuses([status("d1")])
    raw_execute(store_url, f"INSERT INTO schema_migrations (version, name, applied) VALUES ({LATEST + 1}, "
                           "'from the future', 0)")
    with pytest.raises(SchemaMismatch) as refused:
        open_store(store_url)
    assert (refused.value.found, refused.value.expected) == (LATEST + 1, LATEST)
    raw_execute(store_url, f"DELETE FROM schema_migrations WHERE version = {LATEST + 1}")
    with open_store(store_url) as store:  # nothing was changed by the refused open
        assert store.device("d1") == status("d1")


def test_driver_errors_come_out_typed(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable):
        open_store(tmp_path / "no-such-dir" / "fleet.db")
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(FleetStoreError):
        open_store(tmp_path / "junk.db")
    with pytest.raises(StoreUnavailable):
        open_store(f"postgresql://nobody@127.0.0.1:{free_port()}/fleet", StoreConfig(connect_timeout_s=2))
    with pytest.raises(FleetStoreError, match="scheme"):
        open_store("mysql://somewhere/fleet")
    with pytest.raises(FleetStoreError, match="sqlite:///"):
        open_store("sqlite://fleet.db")
    with pytest.raises(ValueError, match="max_batch"):
        StoreConfig(max_batch=0)


def test_a_sqlite_writer_waiting_past_the_busy_timeout_is_unavailable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    open_store(url).close()
    with sqlite3.connect(tmp_path / "fleet.db", isolation_level=None) as holder:
        holder.execute("BEGIN IMMEDIATE")  # another process's writer holding the lock
        with open_store(url, StoreConfig(busy_timeout_s=0.2)) as store, pytest.raises(StoreUnavailable):
            store.apply_statuses([status("d1")])
        holder.execute("ROLLBACK")


# -- migration of a publisher state file -----------------------------------------------------------
def state_file(path: Path, fleet: str = "lab", seq: int = 7, sha: str = SHA) -> Path:
    """A state file as ``Publisher`` writes it (``write_json`` of its state, ``asdict`` of its Rollout)."""
    rollout = Rollout(sha, "kws", 2, "2.0", 32768, ["cd" * 32], 1000, [10.0, 100.0], 5.0, False, stage=1,
                      select_below=4096, outcomes={"dev-001": "active", "dev-002": "failed"},
                      stage_started=1.0e9, hardware_ids=["test-device"])
    write_json(path, {"fleet": fleet, "model": "", "seq": seq, "rollout": asdict(rollout),
                      "devices": {s["device"]: s for s in FLEET}})
    return path


def test_a_json_state_file_is_migrated_once(store_url: str, tmp_path: Path, capsys: Any) -> None:
    path = state_file(tmp_path / "fleet-lab.json")
    for _ in range(2):  # the second run changes nothing
        assert cli_main(["fleet", "migrate-state", str(path), "--store", store_url]) == 0
        assert "fleet lab, the single-model line: 40 devices" in capsys.readouterr().out
        with open_store(store_url) as store:
            assert store.fleet == "lab"
            assert store.count_by("release", DeviceFilter(line="")) == Counter(s["release"] for s in FLEET)
            assert store.device("dev-003") == FLEET[3]
            rollout = store.current_rollout("")
            assert rollout.id == 1 and rollout.outcomes == {"dev-001": "active", "dev-002": "failed"}
            assert Rollout(**rollout.record, outcomes=rollout.outcomes).select_below == 4096  # reads back
            assert store.sequence("") == 7
    with open_store(store_url) as store:
        assert store.announce("", rollout.id, lambda n: b"next")[0] == 8  # after the file's numbers


def test_a_store_of_another_fleet_or_rollout_is_refused(store_url: str, tmp_path: Path, capsys: Any) -> None:
    first = state_file(tmp_path / "a.json")
    assert cli_main(["fleet", "migrate-state", str(first), "--store", store_url]) == 0
    for path, why in ((state_file(tmp_path / "b.json", fleet="other"), "holds fleet 'lab'"),
                      (state_file(tmp_path / "c.json", sha="ef" * 32), "another rollout")):
        assert cli_main(["fleet", "migrate-state", str(path), "--store", store_url]) == 2
        assert why in capsys.readouterr().err
    with open_store(store_url) as store:
        assert store.fleet == "lab" and store.current_rollout("").record["bundle_sha256"] == SHA


def test_a_broken_state_file_is_refused_before_writing(store_url: str, tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "bad.json"
    write_json(bad, {"fleet": "lab", "seq": 1, "devices": {"d1": status("d2")}, "rollout": None})
    assert cli_main(["fleet", "migrate-state", str(bad), "--store", store_url]) == 2
    assert "another device's id" in capsys.readouterr().err
    with open_store(store_url) as store:
        assert store.fleet is None and store.sequence("") == 0
