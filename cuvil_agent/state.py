"""The agent's own state file (``agent.json``, a line's or the device's): announcement order, failed
releases and used command nonces, kept beside the installer's state; and what ``cuvil-agent status``
reads of it (``describe_state``)."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ota.chunks import read_progress
from ota.errors import FormatError, ReplayedCommand
from ota.metadata import parse_time, time_text
from ota.protocol import Command
from ota.store import read_json, write_json
from runtime_wasm import schema
from runtime_wasm.schema import Optional

log = logging.getLogger(__name__)
STORE_FILE = "agent.json"
TRANSFER_DIR = "transfer"

#: ``agent.json`` (a line's or the device's): every field optional, None standing for "not stored"
STORE_SCHEMA = schema.record({
    "announce_seq": Optional(schema.integer()), "announce_digest": Optional(schema.text(64)),
    "failed": Optional(schema.mapping(schema.text(64), schema.text(1 << 20), 1 << 16)),
    "nonces": Optional(schema.mapping(schema.text(64), time_text, 1 << 16)),
    "commands_after": Optional(time_text),
})


class AgentState:
    """A small JSON document the agent keeps in a state directory (``agent.json``), saved on every change.

    A damaged one (``STORE_SCHEMA``) is logged, dropped and rebuilt from ``default``, with ``rebuilt``
    set: what it held only narrows what the agent accepts (announcement order, failed releases, used
    nonces), and the signatures, the installer's release counter and ``commands_after`` (see
    ``unused_command``) keep their guarantees without it; a device must not stop updating for it."""

    def __init__(self, path: Path, default: dict[str, Any]) -> None:
        self.path = path
        try:
            stored = read_json(path, {}, STORE_SCHEMA)
            self.rebuilt = False
        except FormatError as exc:
            log.warning("state file unreadable, rebuilt: %s", exc)
            stored, self.rebuilt = {}, True
        self.data: dict[str, Any] = {**default, **{k: v for k, v in stored.items() if v is not None}}

    def save(self, **changes: Any) -> None:
        self.data.update(changes)
        write_json(self.path, self.data)


#: a line's defaults (the device store adds ``nonces``)
LINE_STORE = {"announce_seq": 0, "announce_digest": "", "failed": {}}


def unused_command(store: dict[str, Any], cmd: Command, now: datetime, grace: timedelta) -> dict[str, str]:
    """The used nonces of the device store (nonce -> the command's expiry, as ``STORE_SCHEMA`` checked it)
    still worth keeping, as long as ``verify_command`` would still accept their command (its expiry plus
    the grace); ``ReplayedCommand`` when ``cmd``'s nonce is one of them, or ``cmd`` was issued before
    ``commands_after`` (the store was rebuilt then: the nonces used before are unknown)."""
    nonces = {n: e for n, e in store["nonces"].items() if parse_time(e) + grace >= now}
    if cmd.nonce in nonces:
        raise ReplayedCommand(f"command nonce {cmd.nonce[:12]} was already used")
    after = store.get("commands_after")
    if after and parse_time(cmd.issued) < parse_time(after):
        raise ReplayedCommand(f"command {cmd.nonce[:12]} was issued before {after}, when this device's "
                              "record of used nonces was lost (a damaged state file)")
    return nonces


def describe_state(state_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``cuvil-agent status`` shows besides the active model: last announcement, failures, transfer
    (as the agent would read them: a damaged file as the agent would rebuild it)."""
    store = AgentState(Path(state_dir) / STORE_FILE, LINE_STORE).data
    return {"announce_seq": store["announce_seq"], "failed": store["failed"],
            "transfer": read_progress(Path(state_dir) / TRANSFER_DIR)}
