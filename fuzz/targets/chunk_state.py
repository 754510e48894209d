"""The chunk transfer's state on disk (``<state>/transfer/``) as a restarted agent resumes from it: a
damaged ``progress.json`` and part file must start the transfer over or resume from a prefix that really
matches the announcement, never crash the agent.

Input: ``progress.json``'s bytes; after a NUL, the part file's (no NUL: no part file). The transfer is
``mqtt_messages.BUNDLE``'s. The contract: no exception at all (``ota.chunks`` documents none for a damaged
state); the harness itself reports a resumed prefix that is not the bundle's (``Finding``) and then
checks that the next chunk is accepted where the prefix ends."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..engine import Finding, Target
from ..mutators import json_mutator
from .mqtt_messages import BUNDLE, announcement, scratch

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("ota.chunks", "ota.store", "runtime_wasm.schema")


def setup() -> Callable[[bytes], None]:
    from ota.chunks import PART_FILE, PROGRESS_FILE, ChunkTransfer
    from ota.config import TransferLimits
    from ota.protocol import split_chunks

    ann = announcement()
    chunks = split_chunks(BUNDLE, ann.chunk_bytes)
    limits = TransferLimits(window_chunks=2)
    transfer_dir = scratch("fuzz-chunk-state-") / "transfer"

    def one(data: bytes) -> None:
        progress, sep, part = data.partition(b"\0")
        shutil.rmtree(transfer_dir, ignore_errors=True)
        transfer_dir.mkdir(parents=True)
        (transfer_dir / PROGRESS_FILE).write_bytes(progress)
        if sep:
            (transfer_dir / PART_FILE).write_bytes(part)
        t = ChunkTransfer(transfer_dir, ann, limits)
        kept = t.path.read_bytes() if t.path.exists() else b""
        if kept != BUNDLE[:t.offset] or not 0 <= t.have <= t.total:
            raise Finding(f"resumed at chunk {t.have} of {t.total} over {len(kept)} bytes that are not the "
                          "bundle's prefix")
        if not t.done and not t.accept(t.have, chunks[t.have]):
            raise Finding(f"chunk {t.have}, the next after the resumed prefix, was not accepted")

    return one


def seeds() -> list[bytes]:
    """The state a real transfer leaves after each accepted chunk (and before any), and one left by
    another bundle's transfer."""
    from ota.chunks import PART_FILE, PROGRESS_FILE, ChunkTransfer
    from ota.config import TransferLimits
    from ota.protocol import split_chunks

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for ann in (announcement(), announcement(bundle_sha256="ab" * 32)):
            t = ChunkTransfer(Path(tmp) / ann.bundle_sha256, ann, TransferLimits(window_chunks=4))
            for i, chunk in enumerate(split_chunks(BUNDLE, ann.chunk_bytes)):
                t.accept(i, chunk)
                out.append((t.dir / PROGRESS_FILE).read_bytes() + b"\0" + (t.dir / PART_FILE).read_bytes())
                if ann.bundle_sha256 == "ab" * 32:
                    break
    return [out[0].partition(b"\0")[0], *out]


def target() -> Target:
    return Target("chunk_state", "device", setup, (), INSTRUMENT, json_mutator)
