"""What the fleet store keeps per release line for its controllers, beside the registry: the leader's lease
and the quality gates' evidence. A part of ``FleetStore`` (a base class using its ``_tx``), in a module of its
own so that neither passes 600 lines."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._store import Cursor


@dataclass(frozen=True)
class GateWindow:
    """One device's summed summaries of one release on a line (``fleet.gates.Window`` as a record), with
    the stream and number of the last telemetry record counted in, so a restarted controller neither loses
    the evidence its gates judge nor counts a record twice."""

    device: str
    release: int
    window: dict[str, Any]
    stream: str
    seq: int


class LineState:
    """The lease and gate-evidence tables of a ``FleetStore``."""

    _tx: Callable[[bool], AbstractContextManager[Cursor]]  # FleetStore's transaction

    def take_lease(self, line: str, holder: str, ttl_s: float) -> bool:
        """Take or renew the line's lease for ``ttl_s`` seconds: True when ``holder`` has it now (it held
        it, nobody did, or the last holder's ran out), False while another holder's lease runs. Holders'
        clocks are assumed to agree to well within ``ttl_s``."""
        now = time.time()
        with self._tx(write=True) as cur:
            cur.execute("INSERT INTO line_leases (line, holder, expires) VALUES (?, ?, ?) ON CONFLICT (line) "
                        "DO UPDATE SET holder = excluded.holder, expires = excluded.expires WHERE "
                        "line_leases.holder = excluded.holder OR line_leases.expires < ? RETURNING holder",
                        (line, holder, now + ttl_s, now))
            return cur.fetchone() is not None

    def release_lease(self, line: str, holder: str) -> None:
        """Give the line's lease up at once (a standby need not wait for it to run out)."""
        with self._tx(write=True) as cur:
            cur.execute("DELETE FROM line_leases WHERE line = ? AND holder = ?", (line, holder))

    def save_gate_windows(self, line: str, windows: Iterable[GateWindow]) -> None:
        """Write windows (one transaction): each replaces the stored one of its device and release."""
        rows = [(line, w.device, w.release, json.dumps(w.window, sort_keys=True), w.stream, w.seq)
                for w in windows]
        if not rows:
            return
        with self._tx(write=True) as cur:
            cur.executemany("INSERT INTO gate_windows (line, device, release, summed, stream, seq) VALUES "
                            "(?, ?, ?, ?, ?, ?) ON CONFLICT (line, device, release) DO UPDATE SET "
                            "summed = excluded.summed, stream = excluded.stream, seq = excluded.seq", rows)

    def gate_windows(self, line: str) -> Iterator[GateWindow]:
        """Every stored window of the line (read once, when a controller starts)."""
        with self._tx(write=False) as cur:
            cur.execute("SELECT device, release, summed, stream, seq FROM gate_windows WHERE line = ? "
                        "ORDER BY device, release", (line,))
            found = cur.fetchall()
        for device, release, window, stream, seq in found:
            yield GateWindow(device, int(release), json.loads(window), stream, int(seq))
