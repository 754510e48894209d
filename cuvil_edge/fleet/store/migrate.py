"""``migrate_state``: a publisher's JSON state file (``cuvil_edge.fleet.publisher.Publisher``: fleet,
model line, announcement counter, every device's last status, the line's rollout) moved into a fleet store, as
``cuvil-edge fleet migrate-state`` does. Running it again changes nothing; a store that already belongs
to another fleet, or holds another rollout on the file's line, is refused before anything is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ota.errors import FormatError
from ota.protocol import read_status
from runtime_wasm import schema

from ._store import FleetStore
from .errors import StateFileError, StoreConflict

#: the largest state file read: 100k devices write about 17 MB (docs/FLEET_STORE.md)
MAX_STATE_FILE_BYTES = 1 << 30
_MANY = 1 << 40  # entries a state file's maps may hold: bounded by the file size, not by count
_NAME = schema.text(256)
_STATE = schema.record({
    "fleet": schema.text(64, min_len=1), "model": schema.Optional(schema.text(64), ""),
    "seq": schema.integer(), "devices": schema.mapping(_NAME, schema.record({}), _MANY),
    "rollout": schema.Optional(schema.nullable(schema.record({
        "bundle_sha256": schema.sha256(), "release": schema.integer(),
        "stages": schema.array(schema.number(0, 100), 64, 1), "stage": schema.integer(),
        "status": schema.one_of("rolling", "halted", "complete"), "reason": schema.text(1 << 16),
        "outcomes": schema.Optional(schema.mapping(_NAME, _NAME, _MANY), {}),
    }))),
})


@dataclass(frozen=True)
class MigrationReport:
    """What a migration found in the state file and wrote."""

    fleet: str
    line: str
    devices: int  # statuses in the file
    written: int  # device rows written (a status older than the stored one is not)
    rollout_id: int | None
    seq: int  # the line's last announcement number in the store afterwards


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The state file checked: its fields typed, every device status one a publisher would accept from
    the device (``read_status``) and filed under that device's id."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STATE_FILE_BYTES + 1)
    except OSError as exc:
        raise StateFileError(f"state file {path}: {exc.strerror or exc}") from None
    doc = schema.read(schema.load(data, MAX_STATE_FILE_BYTES, str(path), StateFileError), _STATE, str(path),
                      StateFileError)
    try:
        doc["devices"] = {d: read_status(json.dumps(s).encode()) for d, s in doc["devices"].items()}
    except FormatError as exc:
        raise StateFileError(f"state file {path}: a device status: {exc}") from None
    if wrong := [d for d, s in doc["devices"].items() if s["device"] != d]:
        raise StateFileError(f"state file {path}: statuses filed under another device's id: {wrong[:5]}")
    return doc


def migrate_state(path: str | os.PathLike[str], store: FleetStore,
                  state: Mapping[str, Any] | None = None) -> MigrationReport:
    """Move the state file at ``path`` into ``store`` (see the module docstring); ``state``: the file as
    ``read_state`` returned it already (read before a store is opened, so a bad file creates none)."""
    state = state or read_state(path)
    fleet, line, rollout = state["fleet"], state["model"], state["rollout"]
    if (owner := store.fleet) not in (None, fleet):
        raise StoreConflict(f"the store holds fleet {owner!r}; {path} is fleet {fleet!r}'s")
    current = store.current_rollout(line)
    if rollout and current and current.record["bundle_sha256"] != rollout["bundle_sha256"]:
        raise StoreConflict(f"the store holds another rollout on line {line!r} (release "
                            f"{current.record['release']}, {current.state}) than {path} (release "
                            f"{rollout['release']}): migrate into a new store")
    store.bind_fleet(fleet)
    written = store.apply_statuses(state["devices"].values())
    rollout_id = None
    if rollout:
        rollout_id = store.save_rollout(line, rollout, rollout["outcomes"], current.id if current else None)
    seq = store.raise_sequence(line, state["seq"])
    return MigrationReport(fleet, line, len(state["devices"]), written, rollout_id, seq)
