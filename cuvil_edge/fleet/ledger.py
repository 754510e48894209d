"""Where a publisher keeps its line's bookkeeping: device statuses, the rollout record and the announcement
counter. ``FileLedger`` is the JSON state file (rewritten whole at each save: the default, unchanged);
``StoreLedger`` is a fleet store (``cuvil_edge.fleet.store``): statuses written in batches as they arrive,
the line's devices read back from the registry, only the outcomes that changed written per step, and
announcement numbers allocated in the transaction that records the announcement. Given a lease time, a
store ledger also makes its publisher the line's one leader (``lead``): the others wait as standbys and
take over, from the stored rollout, once the leader's lease runs out.

Both hold the rollout as a plain record (``dataclasses.asdict`` of the publisher's ``Rollout``, outcomes
included), so this module needs nothing from the publisher.
"""

from __future__ import annotations

import copy
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ota.store import read_json, write_json

from .lines import line_status
from .store import DeviceFilter, DeviceRow, FleetStore, FleetStoreError, StoreConflict

log = logging.getLogger(__name__)
#: statuses queued before the MQTT thread writes them without waiting for the next step (the store's
#: measured batch: docs/FLEET_STORE.md)
STATUS_BATCH = 500
Sign = Callable[[int], bytes]


def _line_name(model: str) -> str:
    return f"model line {model!r}" if model else "the fleet's single-model line"


class LedgerError(ValueError):
    """The bookkeeping belongs to another release line (the publisher turns it into a ``FleetError``)."""


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

    def rollout(self) -> dict[str, Any] | None:
        return self.state.get("rollout")

    def new_rollout(self) -> None:
        """Nothing to do: the file holds one rollout, replaced by the next save."""

    def renew(self) -> None:
        """Nothing to do: a state file has no lease (one publisher per file, by convention)."""

    def save_rollout(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.state["rollout"] = record
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
        self.reload()

    def __str__(self) -> str:
        return f"the {self.store.backend} fleet store"

    def reload(self) -> None:
        """Read the line's rollout (record and outcomes) as the store has it now."""
        row = self.store.current_rollout(self.model)
        self._id = row.id if row else None
        self._record = {**row.record, "outcomes": dict(row.outcomes)} if row else None

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

    def _rows(self, filters: DeviceFilter) -> Iterator[DeviceRow]:
        """Every row matching ``filters``, a page at a time, after the queued statuses are written."""
        self.flush()
        after = None
        while True:
            page = self.store.query_devices(filters, self.store.config.max_page, after)
            yield from page.rows
            if (after := page.after) is None:
                return

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
        return copy.deepcopy(self._record)

    def new_rollout(self) -> None:
        """The next save starts a new rollout row (the line's current one stays, as history)."""
        self._id, self._record = None, None

    def save_rollout(self, record: dict[str, Any]) -> None:
        """Write the record and the outcomes that changed since the last save; nothing when nothing did."""
        if record == self._record and self._id is not None:
            return
        stored: Mapping[str, str] = (self._record or {}).get("outcomes", {})
        changed = {d: o for d, o in record["outcomes"].items() if stored.get(d) != o}
        self._id = self.store.save_rollout(self.model, record, changed, self._id)
        self._record = copy.deepcopy(record)

    def announce(self, sign: Sign) -> bytes:
        """The line's next number and ``sign(number)``, recorded in one transaction (never twice, whichever
        publishers share the store), only while this publisher holds the lease when it has one."""
        holder = self.holder if self.lease_s is not None else None
        return self.store.announce(self.model, self._id, sign, holder)[1]

    def close(self) -> None:
        """Write what is queued and hand the lease over at once (a crash leaves it to run out)."""
        self.flush()
        if self.lease_s is not None:
            self.store.release_lease(self.model, self.holder)
