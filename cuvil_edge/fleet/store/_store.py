"""``FleetStore``: the fleet's registry, rollouts and announcement numbers in a database, written as changes
arrive (one transaction per batch) and queried with filters, counts and keyset paging.

The SQL is the same on every backend; a ``Backend`` (``sqlite.py``, ``postgres.py``) only opens the
connection, runs transactions, names its column types and says how a write transaction locks the rows it
reads. One ``FleetStore`` holds one connection: a thread lock serializes its transactions, and several
processes share a store by each opening their own.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, fields
from datetime import timezone
from typing import Any, Protocol

from ota.errors import FormatError
from ota.metadata import parse_time
from ota.protocol import TelemetryRecord, bucket

from ..lines import line_status
from ._line_state import LineState
from .errors import SchemaMismatch, StoreConflict
from .schema import LATEST, MIGRATIONS, MIGRATIONS_TABLE, render


@dataclass(frozen=True)
class StoreConfig:
    """Limits and timeouts of one store connection (seconds; counts of rows)."""

    #: how long a write waits for another writer's lock before ``StoreUnavailable`` (SQLite's busy
    #: timeout, PostgreSQL's lock_timeout)
    busy_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0
    #: PostgreSQL cancels a statement running longer (``StoreUnavailable``); SQLite has no such limit
    statement_timeout_s: float = 60.0
    #: statuses per transaction: ``apply_statuses`` splits a bigger batch so no write holds the lock long
    max_batch: int = 5000
    #: the most rows ``query_devices`` returns per page
    max_page: int = 1000
    #: SQLite ``synchronous=FULL`` (each commit reaches the disk: an announcement number, once committed,
    #: survives a power loss); False is ``NORMAL`` (WAL: survives a crash of the process, not of the machine)
    durable: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, bool) and (not isinstance(value, int | float) or value <= 0):
                raise ValueError(f"StoreConfig.{f.name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class DeviceFilter:
    """Which device rows a query takes: each field that is not None must be equal. ``line`` is the release
    line ('' = the fleet's single-model line, else a model line); None takes every line a device follows."""

    line: str | None = None
    release: int | None = None
    state: str | None = None
    device_class: str | None = None
    group: str | None = None
    hardware_id: str | None = None


#: DeviceFilter field (and ``count_by`` field) -> its column
_COLUMNS = {"line": "l.line", "release": "l.release", "state": "l.state", "device_class": "d.device_class",
            "group": "d.grp", "hardware_id": "d.hardware_id"}


@dataclass(frozen=True)
class DeviceRow:
    """A device as one release line sees it: the line's state and release, the device's class (its
    profile), group and hardware id, its whole last status and last telemetry summary."""

    device: str
    line: str
    state: str | None
    release: int | None
    target_release: int | None
    device_class: str | None
    group: str
    hardware_id: str | None
    status_time: str | None  # the status's own time, UTC
    received: float  # when the store got it (Unix time)
    status: dict[str, Any]
    telemetry: dict[str, Any] | None
    #: the number of the batch of statuses that last wrote this row (``query_changes``)
    changed: int = 0


@dataclass(frozen=True)
class Page:
    """One page of ``query_devices``; ``after`` continues it (None: this was the last page)."""

    rows: list[DeviceRow]
    after: str | None


@dataclass(frozen=True)
class RolloutRow:
    """A stored rollout: the publisher's record (its ``Rollout`` fields but ``outcomes``) and the outcome
    per device."""

    id: int
    line: str
    record: dict[str, Any]
    outcomes: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return str(self.record["status"])


class Cursor(Protocol):
    """The part of a DB-API cursor the store uses, with ``?`` placeholders on every backend."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Backend(Protocol):
    """What differs between databases; everything else is ``FleetStore``'s shared SQL."""

    name: str
    #: the schema's ``{id}``, ``{blob}`` and ``{real}`` column types
    types: Mapping[str, str]
    #: appended to a write transaction's SELECT of rows it will change: " FOR UPDATE" where writers lock
    #: rows, "" where a write transaction already locks the whole database (SQLite)
    lock_rows: str

    def transaction(self, write: bool) -> AbstractContextManager[Cursor]:
        """A transaction (committed when the block ends, rolled back on an exception); driver errors come
        out as ``FleetStoreError``s. ``write``: take the write lock at once (SQLite ``BEGIN IMMEDIATE``)."""

    def lock_schema(self, cur: Cursor) -> None:
        """Serialize schema migrations of concurrent openers until the transaction ends."""

    def has_table(self, cur: Cursor, name: str) -> bool: ...

    def close(self) -> None: ...


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def utc_key(text: str | None) -> str | None:
    """A status or telemetry time as fixed-width UTC text, so that the database orders times by comparing
    text (a device may report in any offset); None for no time or one that does not parse."""
    if text is None:
        return None
    try:
        return parse_time(text).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except FormatError:
        return None


def _not_older(incoming: str | None, stored: str | None) -> bool:
    """Whether a status at ``incoming`` replaces one at ``stored``; a status without a time always does
    (older agents send none; statuses may arrive out of order from several ingesting processes)."""
    return incoming is None or stored is None or incoming >= stored


def status_lines(status: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each release line a status reports on, with the line's view of it (``fleet.lines.line_status``)."""
    models = status.get("models")
    names = models if isinstance(models, Mapping) else ("",)
    views = ((name, line_status(status, name)) for name in names)
    return {name: view for name, view in views if view is not None}


def _read_key(after: str, what: str, first: type = str) -> tuple[Any, str]:
    """A ``what`` page cursor: [key, text] (query_devices: [device, line]; the others: [number, device])."""
    try:
        key, text = json.loads(after)
    except (ValueError, TypeError):
        raise ValueError(f"not a {what} page cursor: {after!r:.80}") from None
    if not isinstance(key, first) or isinstance(key, bool) or not isinstance(text, str):
        raise ValueError(f"not a {what} page cursor: {after!r:.80}")
    return key, text


def _device_rows(found: Iterable[Sequence[Any]]) -> list[DeviceRow]:
    return [DeviceRow(*r[:10], json.loads(r[10]), json.loads(r[11]) if r[11] else None, int(r[12]))
            for r in found]


_DEVICE_COLUMNS = ("l.device, l.line, l.state, l.release, l.target_release, d.device_class, d.grp, "
                   "d.hardware_id, d.status_time, d.received, d.status, d.telemetry, l.changed")
_JOIN = "FROM device_lines l JOIN devices d ON d.device = l.device"
_UPSERT_DEVICE = (
    "INSERT INTO devices (device, hardware_id, device_class, status_time, received, status, lines) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (device) DO UPDATE SET hardware_id = excluded.hardware_id, "
    "device_class = excluded.device_class, status_time = excluded.status_time, "
    "received = excluded.received, status = excluded.status, lines = excluded.lines "
    "WHERE devices.status_time IS NULL OR excluded.status_time IS NULL "
    "OR devices.status_time <= excluded.status_time")
_UPSERT_LINE = ("INSERT INTO device_lines (line, device, state, release, target_release, bundle, error, "
                "changed) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (line, device) DO UPDATE "
                "SET state = excluded.state, release = excluded.release, "
                "target_release = excluded.target_release, bundle = excluded.bundle, error = excluded.error, "
                "changed = excluded.changed")
_UPSERT_BUCKET = ("INSERT INTO device_buckets (line, bundle_sha256, device, bucket, targeted) "
                  "VALUES (?, ?, ?, ?, ?) ON CONFLICT (line, bundle_sha256, device) "
                  "DO UPDATE SET targeted = excluded.targeted")
#: the stage of a bundle on a line: targeted devices below a bucket bound (device_buckets_stage's range)
_STAGE = "b.line = ? AND b.bundle_sha256 = ? AND b.targeted = 1 AND b.bucket < ?"
_UPSERT_OUTCOME = ("INSERT INTO rollout_outcomes (rollout_id, device, outcome, updated) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT (rollout_id, device) DO UPDATE SET outcome = excluded.outcome, "
                   "updated = excluded.updated")
_ROLLOUT_COLUMNS = "bundle_sha256, release, stages, stage, state, reason, record, updated"
#: devices named in one ``IN (...)`` list (SQLite allows 32766 parameters per statement)
_IN_CHUNK = 500


class FleetStore(LineState):
    """One fleet's state in a database (``open_store`` opens one from a URL). Every method is one
    transaction; ``close`` is idempotent and the store is a context manager."""

    def __init__(self, backend: Backend, config: StoreConfig) -> None:
        self.config = config
        self._backend: Backend | None = backend
        self._lock_rows = backend.lock_rows
        self._lock = threading.Lock()
        try:
            self._migrate()
        except BaseException:
            self.close()
            raise

    @property
    def backend(self) -> str:
        """The backend's name: ``sqlite`` or ``postgresql``."""
        if self._backend is None:
            raise RuntimeError("fleet store is closed")
        return self._backend.name

    def close(self) -> None:
        with self._lock:
            if self._backend is not None:
                self._backend.close()
                self._backend = None

    def __enter__(self) -> FleetStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self, write: bool) -> Iterator[Cursor]:
        with self._lock:
            if self._backend is None:
                raise RuntimeError("fleet store is closed")
            with self._backend.transaction(write) as cur:
                yield cur

    def _versions(self, cur: Cursor) -> set[int]:
        """The store's applied migrations; ``SchemaMismatch`` when one is not this code's."""
        assert self._backend is not None
        if not self._backend.has_table(cur, "schema_migrations"):
            return set()
        cur.execute("SELECT version FROM schema_migrations")
        have = {row[0] for row in cur.fetchall()}
        if unknown := have - {m.version for m in MIGRATIONS}:
            raise SchemaMismatch(max(unknown), LATEST)
        return have

    def _migrate(self) -> None:
        """Apply the migrations this store lacks, in order; refuse a store with versions this code does not
        know (``SchemaMismatch``) before reading or changing anything else. An up-to-date store is only
        read: opening it does not wait for another process's write."""
        assert self._backend is not None
        with self._tx(write=False) as cur:
            if len(self._versions(cur)) == len(MIGRATIONS):
                return
        types = self._backend.types
        with self._tx(write=True) as cur:
            self._backend.lock_schema(cur)
            cur.execute(render(MIGRATIONS_TABLE, types))
            have = self._versions(cur)
            for migration in MIGRATIONS:
                if migration.version not in have:
                    for statement in migration.statements:
                        cur.execute(render(statement, types))
                    cur.execute("INSERT INTO schema_migrations (version, name, applied) VALUES (?, ?, ?)",
                                (migration.version, migration.name, time.time()))

    # -- the fleet ------------------------------------------------------------------------------
    @property
    def fleet(self) -> str | None:
        """The fleet this store belongs to (None until ``bind_fleet``)."""
        with self._tx(write=False) as cur:
            cur.execute("SELECT value FROM fleet_meta WHERE key = 'fleet'")
            row = cur.fetchone()
        return row[0] if row else None

    def bind_fleet(self, fleet: str) -> None:
        """Make this the store of ``fleet``; ``StoreConflict`` when it already belongs to another one."""
        with self._tx(write=True) as cur:
            # insert-or-keep, then read: two controllers binding a new store at once (no row to lock yet)
            # must not both insert
            cur.execute("INSERT INTO fleet_meta (key, value) VALUES ('fleet', ?) "
                        "ON CONFLICT (key) DO NOTHING", (fleet,))
            cur.execute("SELECT value FROM fleet_meta WHERE key = 'fleet'")
            if (owner := cur.fetchone()[0]) != fleet:
                raise StoreConflict(f"this fleet store holds fleet {owner!r}, not {fleet!r}")

    # -- device registry ------------------------------------------------------------------------
    def apply_statuses(self, batch: Iterable[Mapping[str, Any]]) -> int:
        """Record device statuses (as ``ota.protocol.read_status`` returns them), ``config.max_batch`` per
        transaction: each device's row and its release lines. A status older than the stored one (by its
        own ``time``) is dropped, and so is all but the newest of one device's in the batch. Returns the
        number of devices written."""
        latest: dict[str, tuple[str | None, Mapping[str, Any]]] = {}
        for status in batch:
            device, when = status["device"], utc_key(status.get("time"))
            if device not in latest or _not_older(when, latest[device][0]):
                latest[device] = (when, status)
        items = sorted(latest.items())  # rows locked in one order: concurrent writers cannot deadlock
        step = self.config.max_batch
        return sum(self._apply(items[i:i + step]) for i in range(0, len(items), step))

    def _apply(self, items: Sequence[tuple[str, tuple[str | None, Mapping[str, Any]]]]) -> int:
        now = time.time()
        with self._tx(write=True) as cur:
            # this batch's number, its row locked to the commit: batches commit in number order, so a reader
            # that has seen number n has seen every row written with n or less
            cur.execute("INSERT INTO store_counters (name, value) VALUES ('changes', 1) ON CONFLICT (name) "
                        "DO UPDATE SET value = store_counters.value + 1 RETURNING value")
            change = int(cur.fetchone()[0])
            stored = self._stored(cur, [device for device, _ in items])
            fresh = [(d, when, s) for d, (when, s) in items if _not_older(when, stored.get(d, (None,))[0])]
            lines = {d: status_lines(s) for d, _, s in fresh}
            names = {d: _json(sorted(views)) for d, views in lines.items()}
            cur.executemany(_UPSERT_DEVICE, [(d, s.get("hardware_id"), s.get("profile"), when, now, _json(s),
                                              names[d]) for d, when, s in fresh])
            # a device that reports other lines than before loses the rows of the old ones, and its place in
            # their stages (a stage must not wait for it); the rest are updated in place (deleting every
            # row first cost PostgreSQL 20% more per batch)
            moved = [d for d in lines if d in stored and stored[d][1] != names[d]]
            cur.executemany("DELETE FROM device_lines WHERE device = ?", [(d,) for d in moved])
            cur.executemany("DELETE FROM device_buckets WHERE device = ? AND line = ?", [
                (d, line) for d in moved for line in set(json.loads(stored[d][1])) - set(lines[d])])
            cur.executemany(_UPSERT_LINE, [
                (line, d, v.get("state"), v.get("release"), v.get("target_release"), v.get("bundle"),
                 v.get("error"), change) for d, views in lines.items() for line, v in views.items()])
        return len(fresh)

    def _stored(self, cur: Cursor, devices: Sequence[str]) -> dict[str, tuple[str | None, str]]:
        """The stored status time and lines of each known device in ``devices``, its row locked for this
        write."""
        out: dict[str, tuple[str | None, str]] = {}
        for i in range(0, len(devices), _IN_CHUNK):
            chunk = devices[i:i + _IN_CHUNK]
            cur.execute(f"SELECT device, status_time, lines FROM devices WHERE device IN "
                        f"({', '.join('?' * len(chunk))}) ORDER BY device{self._lock_rows}", chunk)
            out.update((d, (when, names)) for d, when, names in cur.fetchall())
        return out

    def apply_telemetry(self, records: Iterable[TelemetryRecord]) -> None:
        """Keep each known device's newest telemetry summary (other events are not kept here); a device
        the registry has no status of yet is skipped."""
        latest: dict[str, tuple[str | None, TelemetryRecord]] = {}
        for r in records:
            when = utc_key(r.time)
            if r.event == "summary" and (r.device not in latest or _not_older(when, latest[r.device][0])):
                latest[r.device] = (when, r)
        with self._tx(write=True) as cur:
            cur.executemany("UPDATE devices SET telemetry = ?, telemetry_time = ? WHERE device = ? AND "
                            "(telemetry_time IS NULL OR telemetry_time <= COALESCE(?, telemetry_time))",
                            [(_json(dict(r.data)), when, d, when) for d, (when, r) in sorted(latest.items())])

    def assign_group(self, devices: Iterable[str], group: str) -> None:
        """Put known devices in an operator's group ('' = none): a status never changes it."""
        with self._tx(write=True) as cur:
            cur.executemany("UPDATE devices SET grp = ? WHERE device = ?", [(group, d) for d in devices])

    def device(self, device: str) -> dict[str, Any] | None:
        """A device's last status as it was sent, or None for a device never seen."""
        with self._tx(write=False) as cur:
            cur.execute("SELECT status FROM devices WHERE device = ?", (device,))
            row = cur.fetchone()
        return json.loads(row[0]) if row else None

    @staticmethod
    def _where(filters: DeviceFilter) -> tuple[list[str], list[Any]]:
        clauses, params = [], []
        for name, column in _COLUMNS.items():
            if (value := getattr(filters, name)) is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        return clauses, params

    def query_devices(self, filters: DeviceFilter = DeviceFilter(), limit: int = 100,
                      after: str | None = None) -> Page:
        """Device rows matching ``filters`` in (device, line) order, at most ``limit`` of them, after the
        page whose ``Page.after`` is ``after``. Keyset paging: rows inserted or changed between pages
        neither repeat nor shift a row off a page; each row is visited at most once."""
        clauses, params = self._where(filters)
        if after is not None:
            device, line = _read_key(after, "query_devices")
            if filters.line is None:  # a row value: both databases seek to it in the (device, line) index
                clauses.append("(l.device, l.line) > (?, ?)")
                params += [device, line]
            else:  # in the (line, device) primary key
                clauses.append("l.device > ?")
                params.append(device)
            # said of the join's other side too: else PostgreSQL's merge join reads devices from the first
            # (page cost grew with the page number: 38 µs/row paging 100k devices, 10 at 1k)
            clauses.append("d.device >= ?")
            params.append(device)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._page(f"{_JOIN}{where} ORDER BY l.device, l.line", params, limit,
                          lambda r: [r.device, r.line])

    def query_fleet(self, limit: int = 100, after: str | None = None) -> Page:
        """Each device once (the row of its first line; its status names the others), in device order, paged
        as ``query_devices``: a device with several lines never straddles two pages."""
        seek, params = ("l.device > ?", [_read_key(after, "query_fleet")[0]]) if after else ("1 = 1", [])
        return self._page(f"{_JOIN} WHERE l.line = (SELECT MIN(m.line) FROM device_lines m WHERE m.device = "
                          f"l.device) AND {seek} ORDER BY l.device", params, limit,
                          lambda r: [r.device, r.line])

    def _page(self, tail: str, params: list[Any], limit: int, key: Callable[[DeviceRow], list[Any]]) -> Page:
        """The rows of ``SELECT <device columns> <tail>``, ``limit`` of them; ``key``: a row's page cursor."""
        if not 0 < limit <= self.config.max_page:
            raise ValueError(f"limit must be within 1..{self.config.max_page}, got {limit}")
        with self._tx(write=False) as cur:
            cur.execute(f"SELECT {_DEVICE_COLUMNS} {tail} LIMIT ?", [*params, limit])
            rows = _device_rows(cur.fetchall())
        return Page(rows, _json(key(rows[-1])) if len(rows) == limit else None)

    def query_changes(self, line: str, since: int, limit: int = 100, after: str | None = None) -> Page:
        """The line's rows written by a batch numbered above ``since`` (``DeviceRow.changed``), in (changed,
        device) order, paged as ``query_devices``: a rollout step reads what changed, not the line."""
        seek, params = "l.changed > ?", [line, since]
        if after is not None:
            seek, params = "(l.changed, l.device) > (?, ?)", [line, *_read_key(after, "query_changes", int)]
        return self._page(f"{_JOIN} WHERE l.line = ? AND {seek} ORDER BY l.changed, l.device", params, limit,
                          lambda r: [r.changed, r.device])

    # -- rollout stages -------------------------------------------------------------------------
    def place_buckets(self, line: str, bundle_sha256: str, placed: Iterable[tuple[str, int, bool]],
                      fresh: bool = False) -> None:
        """Record (device, bucket, targeted) of ``line``'s devices for a bundle; ``fresh``: forget others'."""
        with self._tx(write=True) as cur:
            if fresh:
                cur.execute("DELETE FROM device_buckets WHERE line = ? AND bundle_sha256 <> ?",
                            (line, bundle_sha256))
            cur.executemany(_UPSERT_BUCKET, [(line, bundle_sha256, d, b, int(t)) for d, b, t in placed])

    def stage_size(self, line: str, bundle_sha256: str, below: int) -> int:
        """How many placed devices the bundle targets with a bucket under ``below``: counted in the index."""
        with self._tx(write=False) as cur:
            cur.execute(f"SELECT COUNT(*) FROM device_buckets b WHERE {_STAGE}", (line, bundle_sha256, below))
            return int(cur.fetchone()[0])

    def nth_bucket(self, line: str, bundle_sha256: str, n: int) -> int | None:
        """The ``n``-th smallest bucket (from 0) of the devices the bundle targets, None past the last."""
        with self._tx(write=False) as cur:
            cur.execute("SELECT bucket FROM device_buckets b WHERE b.line = ? AND b.bundle_sha256 = ? AND "
                        "b.targeted = 1 ORDER BY b.bucket LIMIT 1 OFFSET ?", (line, bundle_sha256, n))
            row = cur.fetchone()
        return int(row[0]) if row else None

    def query_stage(self, line: str, bundle_sha256: str, low: int, below: int, limit: int = 100,
                    after: str | None = None) -> Page:
        """Rows of the line's devices the bundle targets with a bucket in [low, below), in bucket order."""
        seek, params = "b.bucket >= ?", [low]
        if after is not None:
            seek, params = "(b.bucket, b.device) > (?, ?)", list(_read_key(after, "query_stage", int))
        return self._page("FROM device_buckets b JOIN device_lines l ON l.line = b.line AND "
                          f"l.device = b.device JOIN devices d ON d.device = b.device WHERE {_STAGE} "
                          f"AND {seek} ORDER BY b.bucket, b.device", [line, bundle_sha256, below, *params],
                          limit, lambda r: [bucket(bundle_sha256, r.device), r.device])

    def device_count(self) -> int:
        """How many devices the registry holds (``count_by`` counts a device once per line it follows)."""
        with self._tx(write=False) as cur:
            cur.execute("SELECT COUNT(*) FROM devices")
            return int(cur.fetchone()[0])

    def count_by(self, field_name: str, filters: DeviceFilter = DeviceFilter()) -> dict[Any, int]:
        """How many device rows matching ``filters`` have each value of ``field_name`` (a DeviceFilter
        field: line, release, state, device_class, group, hardware_id)."""
        if field_name not in _COLUMNS:
            raise ValueError(f"cannot count by {field_name!r}: one of {', '.join(_COLUMNS)}")
        clauses, params = self._where(filters)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        column = _COLUMNS[field_name]
        with self._tx(write=False) as cur:
            cur.execute(f"SELECT {column}, COUNT(*) FROM device_lines l JOIN devices d ON d.device = l.device"
                        f"{where} GROUP BY {column}", params)
            return dict(cur.fetchall())

    # -- rollouts -------------------------------------------------------------------------------
    def save_rollout(self, line: str, record: Mapping[str, Any], outcomes: Mapping[str, str] | None = None,
                     rollout_id: int | None = None) -> int:
        """Store a rollout's record (a new rollout when ``rollout_id`` is None) and the device outcomes that
        changed, in one transaction; returns its id. ``record`` holds at least bundle_sha256, release,
        stages, stage, status and reason; an ``outcomes`` key in it is not stored (give changes only)."""
        kept = {k: v for k, v in record.items() if k != "outcomes"}
        values = (kept["bundle_sha256"], kept["release"], _json(kept["stages"]), kept["stage"],
                  kept["status"], kept["reason"], _json(kept), time.time())
        with self._tx(write=True) as cur:
            if rollout_id is None:
                cur.execute(f"INSERT INTO rollouts (line, {_ROLLOUT_COLUMNS}) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id", (line, *values))
            else:
                cur.execute(f"UPDATE rollouts SET ({_ROLLOUT_COLUMNS}) = (?, ?, ?, ?, ?, ?, ?, ?) "
                            "WHERE id = ? AND line = ? RETURNING id", (*values, rollout_id, line))
            row = cur.fetchone()
            if row is None:
                raise ValueError(f"no rollout {rollout_id} on line {line!r}")
            cur.executemany(_UPSERT_OUTCOME, [(row[0], d, o, values[-1])
                                              for d, o in (outcomes or {}).items()])
        return int(row[0])

    def current_rollout(self, line: str, outcomes: bool = True) -> RolloutRow | None:
        """The line's latest rollout with every device's outcome (``outcomes``), or None before the first."""
        with self._tx(write=False) as cur:
            cur.execute("SELECT id, record FROM rollouts WHERE line = ? ORDER BY id DESC LIMIT 1", (line,))
            row = cur.fetchone()
            if row is None:
                return None
            cur.execute("SELECT device, outcome FROM rollout_outcomes WHERE rollout_id = ?" +
                        ("" if outcomes else " AND 1 = 0"), (row[0],))
            return RolloutRow(int(row[0]), line, json.loads(row[1]), dict(cur.fetchall()))

    def outcome_counts(self, rollout_id: int, named: int = 100) -> tuple[dict[str, int], list[str]]:
        """Devices per outcome of a rollout, and the first ``named`` that failed or timed out."""
        with self._tx(write=False) as cur:
            cur.execute("SELECT outcome, COUNT(*) FROM rollout_outcomes WHERE rollout_id = ? "
                        "GROUP BY outcome", (rollout_id,))
            counts = dict(cur.fetchall())
            cur.execute("SELECT device FROM rollout_outcomes WHERE rollout_id = ? AND outcome IN "
                        "('failed', 'timeout') ORDER BY device LIMIT ?", (rollout_id, named))
            return counts, [r[0] for r in cur.fetchall()]

    # -- announcements --------------------------------------------------------------------------
    def announce(self, line: str, rollout_id: int | None, sign: Callable[[int], bytes],
                 holder: str | None = None) -> tuple[int, bytes]:
        """Take the line's next announcement number and record ``sign(number)`` (the signed announcement)
        in the same transaction, so two controllers never publish one number twice: the second waits for
        the first's commit and gets the next number. Publish only after this returns; when ``sign``
        raises, nothing is recorded and the number is not used. ``holder``: only while it holds the
        line's lease (``take_lease``), checked in the same transaction (``StoreConflict`` otherwise)."""
        with self._tx(write=True) as cur:
            if holder is not None:
                cur.execute(f"SELECT holder, expires FROM line_leases WHERE line = ?{self._lock_rows}",
                            (line,))
                row = cur.fetchone()
                if row is None or row[0] != holder or row[1] < time.time():
                    raise StoreConflict(f"the lease of line {line!r} is not {holder!r}'s: not announcing")
            cur.execute("INSERT INTO line_sequences (line, seq) VALUES (?, 0) ON CONFLICT (line) DO NOTHING",
                        (line,))
            cur.execute("UPDATE line_sequences SET seq = seq + 1 WHERE line = ? RETURNING seq", (line,))
            seq = int(cur.fetchone()[0])
            payload = sign(seq)
            cur.execute("INSERT INTO announcements (line, seq, rollout_id, payload, created) "
                        "VALUES (?, ?, ?, ?, ?)", (line, seq, rollout_id, payload, time.time()))
        return seq, payload

    def sequence(self, line: str) -> int:
        """The line's last announcement number (0 before the first)."""
        with self._tx(write=False) as cur:
            cur.execute("SELECT seq FROM line_sequences WHERE line = ?", (line,))
            row = cur.fetchone()
        return int(row[0]) if row else 0

    def raise_sequence(self, line: str, at_least: int) -> int:
        """Make the line's next announcement number above ``at_least`` (numbers a state file's publisher
        already used); never lowers it. Returns the line's last number."""
        with self._tx(write=True) as cur:
            cur.execute("INSERT INTO line_sequences (line, seq) VALUES (?, ?) ON CONFLICT (line) DO UPDATE "
                        "SET seq = CASE WHEN line_sequences.seq < excluded.seq THEN excluded.seq "
                        "ELSE line_sequences.seq END RETURNING seq", (line, at_least))
            return int(cur.fetchone()[0])

    # -- leases ---------------------------------------------------------------------------------
