"""The agent's other state files as a restarted agent reads them: the store (``agent.json``: announcement
order, failed releases, used command nonces; ``cuvil_agent.state.AgentState``, and ``describe_state`` for
``cuvil-agent status``) and the telemetry queue's ``cursor.json`` (``cuvil_agent.telemetry.TelemetryQueue``).

Input: one file's bytes, written as both (a store that is a cursor, or the other way round, is damage
too). The contract: a damaged store is rebuilt (``AgentState.rebuilt``) and a damaged cursor starts a new
stream, so opening raises nothing; the harness then uses what was read the way the agent does (every
stored nonce's expiry compared with the clock, a telemetry record appended and read back) and reports a
store read back with a field of the wrong type (``Finding``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from ..engine import Finding, Target
from ..mutators import json_mutator
from .mqtt_messages import NOW, command, scratch

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("cuvil_agent.state", "cuvil_agent.telemetry", "ota.store", "ota.chunks", "runtime_wasm.schema")
#: the queue's bounds in the harness: small, so a cursor's counts meet them
MAX_EVENTS, MAX_BYTES = 4, 4096
#: the device store's defaults, as ``cuvil_agent.agent.Agent`` gives them
DEFAULT = {"announce_seq": 0, "announce_digest": "", "failed": {}, "nonces": {}}


def setup() -> Callable[[bytes], None]:
    from cuvil_agent.state import STORE_FILE, AgentState, describe_state, unused_command
    from cuvil_agent.telemetry import CURSOR_FILE, TelemetryQueue
    from ota.errors import ReplayedCommand

    cmd = command()
    state = scratch("fuzz-agent-state-")
    telemetry = state / "telemetry"
    grace = timedelta(seconds=30)

    def one(data: bytes) -> None:
        shutil.rmtree(telemetry, ignore_errors=True)
        telemetry.mkdir()
        (state / STORE_FILE).write_bytes(data)
        (telemetry / CURSOR_FILE).write_bytes(data)
        store = AgentState(state / STORE_FILE, DEFAULT)
        d = store.data
        if not (isinstance(d["announce_seq"], int) and isinstance(d["failed"], dict)
                and isinstance(d["nonces"], dict)):
            raise Finding(f"store read back with mistyped fields: {str(d)[:200]}")
        try:
            if not unused_command(d, cmd, NOW, grace).keys() <= d["nonces"].keys():
                raise Finding("pruning the stored nonces made up new ones")
        except ReplayedCommand:  # the store names the command's nonce, or was rebuilt after it was issued
            pass
        describe_state(state)
        with TelemetryQueue(telemetry, MAX_EVENTS, MAX_BYTES) as queue:
            seq = queue.append(lambda s: b'{"seq": %d}' % s)
            if [s for s, _ in queue.pending(MAX_EVENTS)][-1:] != [seq]:
                raise Finding(f"record {seq} appended after the cursor {queue.stats()} is not pending")
            queue.ack(seq)

    return one


def seeds() -> list[bytes]:
    """A store and a cursor as the agent writes them, fresh and after some use."""
    from cuvil_agent.state import STORE_FILE, AgentState
    from cuvil_agent.telemetry import CURSOR_FILE, TelemetryQueue
    from ota.protocol import format_time

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        store = AgentState(Path(tmp) / STORE_FILE, DEFAULT)
        store.save()
        out.append(store.path.read_bytes())
        store.save(announce_seq=7, announce_digest="ab" * 32, failed={"cd" * 32: "HashMismatch: chunk 2"},
                   nonces={"0123456789abcdef": format_time(NOW)}, commands_after=format_time(NOW))
        out.append(store.path.read_bytes())
        with TelemetryQueue(Path(tmp) / "telemetry", 2, MAX_BYTES) as queue:
            out.append((queue.dir / CURSOR_FILE).read_bytes())
            for _ in range(4):
                queue.append(lambda s: b"x" * 10)
            queue.ack(queue.pending(1)[0][0])
            out.append((queue.dir / CURSOR_FILE).read_bytes())
    return out


def target() -> Target:
    from ota.errors import TelemetryError

    return Target("agent_state", "device", setup, (TelemetryError,), INSTRUMENT, json_mutator)
