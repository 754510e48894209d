"""Resumable chunked download of one announced bundle into ``<state>/transfer/``.

The part file always holds a contiguous prefix of chunks that matched their signed hashes, and
``progress.json`` (written atomically after the data is fsynced) says how many. On a restart the
prefix is hashed again against the announcement and the download resumes after the last good
chunk. Chunks that arrive ahead of the prefix wait in memory (at most one window). A progress file that
cannot be read (``PROGRESS_SCHEMA``) starts the transfer over: it only saves re-fetching chunks that
would be verified again anyway, so dropping it loses time, never trust.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime_wasm import schema

from .config import TransferLimits
from .errors import FormatError, HashMismatch, SlowRetrieval, TransferFailed
from .protocol import Announcement, sha256_hex
from .store import read_json, write_json

log = logging.getLogger(__name__)
PART_FILE = "bundle.part"
PROGRESS_FILE = "progress.json"
#: ``progress.json``: which bundle (and chunking) the part file holds, and how many verified chunks
PROGRESS_SCHEMA = schema.record({"bundle_sha256": schema.sha256(), "chunk_bytes": schema.integer(1),
                                 "have": schema.integer()})


def read_progress(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The transfer's progress in ``directory``; None when there is none or it is damaged or unreadable
    (logged): the transfer then starts over, as the module docstring says."""
    path = Path(directory) / PROGRESS_FILE
    try:
        return read_json(path, None, PROGRESS_SCHEMA)
    except (FormatError, OSError) as exc:
        log.warning("transfer progress unreadable, starting the transfer over: %s", exc)
        return None


class ChunkTransfer:
    """One bundle's download: which chunks to ask for, accepting verified ones, and when to give up."""

    def __init__(self, directory: str | os.PathLike[str], ann: Announcement, limits: TransferLimits,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dir, self.ann, self.limits, self._clock = Path(directory), ann, limits, clock
        self.total = len(ann.chunks)
        p = read_progress(self.dir)
        if p is not None and (p["bundle_sha256"], p["chunk_bytes"]) == (ann.bundle_sha256, ann.chunk_bytes):
            self.have = self._verified_prefix(p["have"])
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.have = 0
        self.dir.mkdir(parents=True, exist_ok=True)
        self.resumed_from = self.have  # where this run (or the latest reconnect) picked up
        self.fetched = 0  # chunks accepted since resumed_from
        self.retries = 0
        self._pending: dict[int, bytes] = {}
        now = clock()
        self._started = self._last = self._rate_t = now
        self._rate_bytes = self._bytes = 0
        self._retry_at: float | None = None

    @property
    def path(self) -> Path:
        return self.dir / PART_FILE

    @property
    def done(self) -> bool:
        return self.have == self.total

    @property
    def offset(self) -> int:
        """Bytes of the verified prefix: where a ranged download continues."""
        return self.have * self.ann.chunk_bytes

    def _verified_prefix(self, claimed: int) -> int:
        """Hash the chunks on disk again; keep the good prefix and cut the file there."""
        good = 0
        try:
            with open(self.dir / PART_FILE, "r+b") as f:
                for i in range(min(claimed, self.total)):
                    if sha256_hex(f.read(self.ann.chunk_bytes)) != self.ann.chunks[i]:
                        break
                    good += 1
                f.truncate(sum(self.chunk_size(i) for i in range(good)))
        except FileNotFoundError:
            return 0
        return good

    def chunk_size(self, index: int) -> int:
        return min(self.ann.chunk_bytes, self.ann.bundle_length - index * self.ann.chunk_bytes)

    def wanted(self) -> list[int]:
        """The window after the verified prefix, less what already waits in memory."""
        end = min(self.have + self.limits.window_chunks, self.total)
        return [i for i in range(self.have, end) if i not in self._pending]

    def accept(self, index: int, data: bytes) -> bool:
        """Store a chunk that matches its signed hash; False for a duplicate or one outside the window."""
        if not self.have <= index < min(self.have + self.limits.window_chunks, self.total) \
                or index in self._pending:
            return False
        if len(data) != self.chunk_size(index) or sha256_hex(data) != self.ann.chunks[index]:
            raise HashMismatch(f"chunk {index} of bundle {self.ann.bundle_sha256[:12]} does not match its "
                               "signed hash (corrupted or altered in transit)")
        self._pending[index] = data
        with open(self.path, "ab") as f:
            while self.have in self._pending:
                f.write(self._pending.pop(self.have))
                self.have += 1
                self.fetched += 1
            f.flush()
            os.fsync(f.fileno())
        write_json(self.dir / PROGRESS_FILE, {"bundle_sha256": self.ann.bundle_sha256,
                                              "chunk_bytes": self.ann.chunk_bytes, "have": self.have})
        self._bytes += len(data)
        self._last, self.retries, self._retry_at = self._clock(), 0, None
        return True

    def resume(self) -> None:
        """After a reconnect: count from here, and do not hold the time offline against the link."""
        self.resumed_from, self.fetched = self.have, 0
        self._last = self._clock()
        self._retry_at = None

    def retry_later(self, why: str) -> None:
        """Schedule a re-request after a jittered, doubling delay; ``TransferFailed`` when retries run out."""
        self.retries += 1
        if self.retries > self.limits.max_retries:
            raise TransferFailed(f"gave up after {self.limits.max_retries} retries: {why}")
        self._retry_at = self._clock() + self.limits.backoff_s(self.retries, random.random())

    def due(self) -> bool:
        """Called on every tick while connected: True when the window should be requested again.

        Raises ``SlowRetrieval`` past the total deadline or below the minimum rate, and schedules a
        retry when no chunk came for ``chunk_timeout_s``."""
        now = self._clock()
        if now - self._started > self.limits.deadline_s:
            raise SlowRetrieval(f"transfer exceeded its deadline of {self.limits.deadline_s}s "
                                f"({self.have}/{self.total} chunks)")
        if now - self._rate_t >= self.limits.rate_window_s:
            rate = (self._bytes - self._rate_bytes) / (now - self._rate_t)
            if rate < self.limits.min_rate_bytes_per_s:
                raise SlowRetrieval(f"{rate:.0f} B/s over {now - self._rate_t:.0f}s, below the minimum of "
                                    f"{self.limits.min_rate_bytes_per_s} B/s")
            self._rate_t, self._rate_bytes = now, self._bytes
        if self._retry_at is None:
            if now - self._last > self.limits.chunk_timeout_s:
                self.retry_later(f"no chunk for {self.limits.chunk_timeout_s}s")
            return False
        if now >= self._retry_at:
            self._retry_at = None
            self._last = now
            return True
        return False

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def file_sha256(path: Path, block: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(block):
            h.update(data)
    return h.hexdigest()
