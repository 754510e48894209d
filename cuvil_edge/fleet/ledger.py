"""Where a publisher keeps its line's bookkeeping: device statuses, the rollout record and the announcement
counter. ``FileLedger`` is the JSON state file (rewritten whole at each save: the default, unchanged);
``StoreLedger`` is a fleet store (``cuvil_edge.fleet.store``): statuses written in batches as they arrive,
the line's devices read back from the registry, only the outcomes that changed written per step, and
announcement numbers allocated in the transaction that records the announcement. Given a lease time, a
store ledger also makes its publisher the line's one leader (``lead``): the others wait as standbys and
take over, from the stored rollout, once the leader's lease runs out.

Both hold the rollout as a plain record (the publisher's ``Rollout`` fields, outcomes included), so this
module needs nothing from the publisher. Both also say which devices a rollout's current stage holds
(``stage``): the file ledger by hashing every device's bucket, the store ledger from a bucket index kept in
the store and the line's rows that changed since the last step, so a step costs what changed, not the fleet.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ota.errors import WrongTarget
from ota.protocol import BUCKETS, bucket
from ota.store import read_json, write_json
from ota.trust import check_target

from .lines import line_status
from .store import DeviceFilter, DeviceRow, FleetStore, FleetStoreError, Page, StoreConflict

log = logging.getLogger(__name__)
#: statuses queued before the MQTT thread writes them without waiting for the next step (the store's
#: measured batch: docs/FLEET_STORE.md)
STATUS_BATCH = 500
#: the longest a queued status waits for its batch (a standby, or a controller that only ingests, never
#: steps: its last statuses would otherwise wait for the next message)
FLUSH_EVERY_S = 0.2
Sign = Callable[[int], bytes]


def _line_name(model: str) -> str:
    return f"model line {model!r}" if model else "the fleet's single-model line"


class LedgerError(ValueError):
    """The bookkeeping belongs to another release line (the publisher turns it into a ``FleetError``)."""


class Selection(Protocol):
    """What of a rollout picks its devices (the publisher's ``Rollout`` has these fields)."""

    bundle_sha256: str
    select_below: int
    hardware_ids: list[str]
    profiles: list[str]


@dataclass(frozen=True)
class Stage:
    """A rollout's current stage as one step sees it: how many devices it holds, and those whose outcome
    the step must (re)consider, with their line status: all of them (file ledger), or those whose row
    changed since the last step and those new to the stage (store ledger)."""

    size: int
    due: dict[str, dict[str, Any]]


def targets(rollout: Selection, status: Mapping[str, Any]) -> bool:
    """Whether the release is for this device: its reported hardware id and profile pass the device's own
    target rule; a status without them (an older agent) counts as targeted."""
    if "hardware_id" not in status:
        return True
    try:
        check_target("release", rollout.hardware_ids, rollout.profiles, status["hardware_id"],
                     status.get("profile") or None)
    except WrongTarget:
        return False
    return True


def stage_bound(percent: float, targeted: int, nth: Callable[[int], int | None]) -> int:
    """The bucket bound that takes ``percent`` of ``targeted`` devices (all at 100%), given the ``nth``
    smallest of their buckets (from 0)."""
    if percent >= 100:
        return BUCKETS
    if not targeted or percent == 0:
        return 0
    found = nth(max(1, math.ceil(percent / 100 * targeted)) - 1)
    return 0 if found is None else found + 1


def copy_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A rollout record that shares nothing with ``record``: its values are scalars, lists of scalars and
    the outcomes (device -> word), so one level of copying is a deep copy, at a fraction of its cost."""
    return {k: dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v
            for k, v in record.items()}


class FileLedger:
    """The publisher's JSON state file: every device's last status, the rollout and the counter, written
    atomically and whole at each save."""

    def __init__(self, path: str | os.PathLike[str], fleet: str, model: str) -> None:
        self.path, self.model = Path(path), model
        self.state: dict[str, Any] = read_json(self.path, {"fleet": fleet, "model": model, "seq": 0,
                                                           "devices": {}, "rollout": None})
        if (owner := self.state.get("model", "")) != model:  # one counter and rollout per line
            raise LedgerError(f"state file {self.path} belongs to {_line_name(owner)}, not to "
                              f"{_line_name(model)}: give each model line its own state file")
        self._lock = threading.Lock()

    def __str__(self) -> str:
        return str(self.path)

    def add(self, status: dict[str, Any]) -> None:
        with self._lock:
            self.state["devices"][status["device"]] = status

    def devices(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self.state["devices"].items()}

    def line_devices(self) -> dict[str, dict[str, Any]]:
        views = ((d, line_status(s, self.model)) for d, s in self.devices().items())
        return {d: view for d, view in views if view is not None}

    def count(self) -> int:
        return len(self.line_devices())

    def _placed(self, rollout: Selection) -> dict[str, tuple[int, dict[str, Any]]]:
        """The line's devices the release is for, each with its bucket and line status."""
        return {d: (bucket(rollout.bundle_sha256, d), v) for d, v in self.line_devices().items()
                if targets(rollout, v)}

    def stage_members(self, rollout: Selection) -> dict[str, dict[str, Any]]:
        """Every device of the stage with its line status."""
        return {d: v for d, (b, v) in self._placed(rollout).items() if b < rollout.select_below}

    def stage(self, rollout: Selection) -> Stage:
        members = self.stage_members(rollout)
        return Stage(len(members), members)

    def stage_size(self, rollout: Selection) -> int:
        return len(self.stage_members(rollout))

    def bound(self, rollout: Selection, percent: float) -> int:
        """``select_below`` for a stage of ``percent``: from every targeted device's bucket."""
        buckets = sorted(b for b, _ in self._placed(rollout).values())
        return stage_bound(percent, len(buckets), buckets.__getitem__)

    def rollout(self) -> dict[str, Any] | None:
        record = self.state.get("rollout")
        return copy_record(record) if record else None

    def new_rollout(self) -> None:
        """Nothing to do: the file holds one rollout, replaced by the next save."""

    def renew(self) -> None:
        """Nothing to do: a state file has no lease (one publisher per file, by convention)."""

    def save_rollout(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.state["rollout"] = copy_record(record)
        self.flush()

    def announce(self, sign: Sign) -> bytes:
        """The next number, saved before the signed announcement is returned (and then published)."""
        with self._lock:
            self.state["seq"] += 1
            seq = self.state["seq"]
        payload = sign(seq)
        self.flush()
        return payload

    def flush(self) -> None:
        with self._lock:
            write_json(self.path, self.state)

    def close(self) -> None:
        self.flush()


class StoreLedger:
    """One line's bookkeeping in a fleet store. Statuses from the MQTT thread are queued and written in
    batches (``flush``: at each read of the devices, and from the MQTT thread once ``batch`` are queued);
    the rollout's row and the outcomes it has stored are kept here, so a save writes the changes only."""

    def __init__(self, store: FleetStore, fleet: str, model: str, batch: int = STATUS_BATCH,
                 lease_s: float | None = None) -> None:
        self.store, self.model, self.batch, self.lease_s = store, model, batch, lease_s
        self.holder = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        store.bind_fleet(fleet)
        self._queue: list[dict[str, Any]] = []
        self._queue_lock, self._flush_lock = threading.Lock(), threading.Lock()
        self._id: int | None = None
        self._record: dict[str, Any] | None = None
        #: rows the store returned to this ledger (tests count them: a step reads what changed)
        self.rows_read = 0
        self._forget_stage()
        self.reload()
        self._closed = threading.Event()
        self._flusher = threading.Thread(target=self._flush_now_and_then, name="ledger-flush", daemon=True)
        self._flusher.start()

    def _flush_now_and_then(self) -> None:
        while not self._closed.wait(FLUSH_EVERY_S):
            if self._queue:
                try:
                    self.flush()
                except FleetStoreError as exc:
                    log.warning("statuses kept queued (written at the next flush): %s", exc)

    def __str__(self) -> str:
        return f"the {self.store.backend} fleet store"

    def reload(self) -> None:
        """Read the line's rollout (record and outcomes) as the store has it now."""
        row = self.store.current_rollout(self.model)
        self._id = row.id if row else None
        self._record = {**row.record, "outcomes": dict(row.outcomes)} if row else None
        self._forget_stage()

    def _forget_stage(self) -> None:
        """The next step reads the whole line once (a new rollout, or another leader's)."""
        self._bundle: str | None = None
        self._seen = -1  # the last change number read (rows a schema-2 store had are numbered 0)
        self._below = 0  # the stage bound up to which every device's outcome was considered
        self._due: dict[str, tuple[int, bool, dict[str, Any]]] = {}  # changed rows, not yet considered

    def lead(self, timeout_s: float) -> bool:
        """Wait as a standby (at most ``timeout_s``) until this publisher holds the line's lease, then read
        the rollout as the last leader stored it; True when it leads. Needs ``lease_s``."""
        if self.lease_s is None:
            raise ValueError("a ledger without a lease time cannot lead")
        end = time.monotonic() + timeout_s
        while not self.store.take_lease(self.model, self.holder, self.lease_s):
            if time.monotonic() >= end:
                return False
            time.sleep(min(self.lease_s / 4, 1.0))
        self.reload()
        return True

    def renew(self) -> None:
        """Renew the lease (each step); ``StoreConflict`` when another publisher took it over."""
        if self.lease_s is not None and not self.store.take_lease(self.model, self.holder, self.lease_s):
            raise StoreConflict(f"another publisher leads {_line_name(self.model)} now (its lease ran out "
                                "here): this one stops")

    def add(self, status: dict[str, Any]) -> None:
        """Queue a status (the MQTT thread); a full batch is written at once. A store that cannot be
        reached keeps the statuses queued for the next flush."""
        with self._queue_lock:
            self._queue.append(status)
            full = len(self._queue) >= self.batch
        if full:
            try:
                self.flush()
            except FleetStoreError as exc:
                log.warning("statuses kept queued (written at the next step): %s", exc)

    def flush(self) -> None:
        """Write the queued statuses, one transaction per batch; on failure they stay queued."""
        with self._flush_lock:
            with self._queue_lock:
                batch, self._queue = self._queue, []
            if not batch:
                return
            try:
                self.store.apply_statuses(batch)
            except BaseException:
                with self._queue_lock:
                    self._queue[:0] = batch
                raise

    def _pages(self, query: Callable[[int, str | None], Page]) -> Iterator[DeviceRow]:
        """Every row of a paged query (``query(limit, after)``), counted in ``rows_read``."""
        after = None
        while True:
            page = query(self.store.config.max_page, after)
            self.rows_read += len(page.rows)
            yield from page.rows
            if (after := page.after) is None:
                return

    def _rows(self, filters: DeviceFilter) -> Iterator[DeviceRow]:
        """Every row matching ``filters``, after the queued statuses are written."""
        self.flush()
        return self._pages(lambda limit, after: self.store.query_devices(filters, limit, after))

    def _catch_up(self, rollout: Selection) -> None:
        """Read the line's rows written since the last read (the whole line, the first time for a bundle),
        and record each one's bucket and whether the release is for it in the store's bucket index."""
        self.flush()
        sha = rollout.bundle_sha256
        fresh = sha != self._bundle
        if fresh:
            self._forget_stage()
            self._bundle = sha
        placed, seen = [], self._seen
        for row in self._pages(lambda limit, after: self.store.query_changes(self.model, seen, limit, after)):
            view = line_status(row.status, self.model) or {}
            place = (bucket(sha, row.device), targets(rollout, view))
            placed.append((row.device, *place))
            self._due[row.device] = (*place, view)
            self._seen = row.changed  # rows come in change order
        if placed or fresh:
            self.store.place_buckets(self.model, sha, placed, fresh)

    def _stage_rows(self, rollout: Selection, low: int) -> dict[str, dict[str, Any]]:
        """The stage's devices with a bucket from ``low`` on, with their line status."""
        rows = self._pages(lambda limit, after: self.store.query_stage(
            self.model, rollout.bundle_sha256, low, rollout.select_below, limit, after))
        return {row.device: line_status(row.status, self.model) or {} for row in rows}

    def stage_members(self, rollout: Selection) -> dict[str, dict[str, Any]]:
        """Every device of the stage with its line status (a timeout, a halt: read once, not each step)."""
        self._catch_up(rollout)
        return self._stage_rows(rollout, 0)

    def stage(self, rollout: Selection) -> Stage:
        """The stage's size (counted in the store's index) and its devices to consider: those whose row
        changed since the last step, and every one new to the stage since then."""
        self._catch_up(rollout)
        below = rollout.select_below
        due = {d: view for d, (b, targeted, view) in self._due.items() if targeted and b < below}
        if below > self._below:
            due.update(self._stage_rows(rollout, self._below))
        self._due, self._below = {}, below
        return Stage(self.store.stage_size(self.model, rollout.bundle_sha256, below), due)

    def stage_size(self, rollout: Selection) -> int:
        self._catch_up(rollout)
        return self.store.stage_size(self.model, rollout.bundle_sha256, rollout.select_below)

    def bound(self, rollout: Selection, percent: float) -> int:
        """``select_below`` for a stage of ``percent``: counted and picked in the store's bucket index."""
        if percent >= 100:
            return BUCKETS
        self._catch_up(rollout)
        sha = rollout.bundle_sha256
        return stage_bound(percent, self.store.stage_size(self.model, sha, BUCKETS),
                           lambda n: self.store.nth_bucket(self.model, sha, n))

    def devices(self) -> dict[str, dict[str, Any]]:
        return {row.device: row.status for row in self._rows(DeviceFilter())}

    def line_devices(self) -> dict[str, dict[str, Any]]:
        views = ((row.device, line_status(row.status, self.model)) for row in
                 self._rows(DeviceFilter(line=self.model)))
        return {d: view for d, view in views if view is not None}

    def count(self) -> int:
        self.flush()
        return self.store.count_by("line", DeviceFilter(line=self.model)).get(self.model, 0)

    def rollout(self) -> dict[str, Any] | None:
        return copy_record(self._record) if self._record else None

    def new_rollout(self) -> None:
        """The next save starts a new rollout row (the line's current one stays, as history)."""
        self._id, self._record = None, None
        self._forget_stage()

    def save_rollout(self, record: dict[str, Any]) -> None:
        """Write the record and the outcomes that changed since the last save; nothing when nothing did."""
        if record == self._record and self._id is not None:
            return
        stored: Mapping[str, str] = (self._record or {}).get("outcomes", {})
        changed = {d: o for d, o in record["outcomes"].items() if stored.get(d) != o}
        self._id = self.store.save_rollout(self.model, record, changed, self._id)
        self._record = copy_record(record)

    def announce(self, sign: Sign) -> bytes:
        """The line's next number and ``sign(number)``, recorded in one transaction (never twice, whichever
        publishers share the store), only while this publisher holds the lease when it has one."""
        holder = self.holder if self.lease_s is not None else None
        return self.store.announce(self.model, self._id, sign, holder)[1]

    def close(self) -> None:
        """Write what is queued and hand the lease over at once (a crash leaves it to run out)."""
        self._closed.set()
        self._flusher.join(10.0)
        self.flush()
        if self.lease_s is not None:
            self.store.release_lease(self.model, self.holder)
