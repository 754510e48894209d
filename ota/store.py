"""Small durable JSON files (agent state, transfer progress, publisher state): written whole or not at all,
read back bounded and checked against the caller's schema (``runtime_wasm.schema``); and the lock that
keeps one writer per state directory (``StateLock``).

Written atomically, such a file is damaged only from outside (a bad disk, a person, a bug elsewhere), and
then it is a ``FormatError`` here; each reader says in its docstring whether that is fatal or the file is
dropped and rebuilt.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from runtime_wasm import schema

from .errors import FormatError, StateLocked

log = logging.getLogger(__name__)


@contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Write ``path`` through a temp file beside it: on success fsync + ``os.replace`` + fsync of the
    directory, so a crash leaves the old or the new file; on any error the temp file is removed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (a created, renamed or removed file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: what ``atomic_file``'s temp files look like: ``.<name>.`` + mkstemp's 8 random characters
_TEMP = re.compile(r"\..+\.[a-z0-9_]{8}")


def remove_temp_files(directory: str | os.PathLike[str]) -> None:
    """Drop temp files a crash left inside ``atomic_file`` (only at start, when nothing writes them)."""
    for p in Path(directory).iterdir():
        if _TEMP.fullmatch(p.name) and p.is_file():
            p.unlink(missing_ok=True)


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_file(path) as f:
        f.write(data)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write(path, json.dumps(obj, indent=1, sort_keys=True).encode())


#: the largest state file read back: they hold counters, hashes and bounded maps, far below this
MAX_STATE_BYTES = 16 << 20


def read_json(path: str | os.PathLike[str], default: Any, reader: schema.Reader | None = None,
              max_bytes: int = MAX_STATE_BYTES) -> Any:
    """The stored document read by ``reader`` (as it is without one), or ``default`` when the file does not
    exist yet. ``FormatError`` naming the file when it is longer than ``max_bytes``, not JSON, or breaks
    ``reader``: never a ``JSONDecodeError`` or, later, a ``TypeError`` from a value of the wrong type."""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        return default
    except OSError as exc:  # a directory in its place, no permission: the typed error, naming the file
        raise FormatError(f"{path} cannot be read: {exc.strerror}") from exc
    doc = schema.load(data, max_bytes, str(path), FormatError)
    return doc if reader is None else schema.read(doc, reader, str(path), FormatError)


class StateLock:
    """One writer per state directory, across processes and threads: an exclusive ``flock`` on
    ``<state>/lock`` (released by the kernel if the holder dies, so a crash never leaves it stuck) plus a
    thread lock; re-entrant for its holder. Waits at most ``timeout_s``, then ``StateLocked``."""

    def __init__(self, path: Path, timeout_s: float) -> None:
        self.path, self.timeout_s = path, timeout_s
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    @contextmanager
    def hold(self) -> Iterator[None]:
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            raise StateLocked(f"{self.path.parent} is busy in this process for over {self.timeout_s}s")
        try:
            if self._depth == 0:
                self._fd = self._acquire()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    os.close(self._fd)  # closing the descriptor releases the flock
                    self._fd = None
        finally:
            self._thread_lock.release()

    def _acquire(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        end = time.monotonic() + self.timeout_s
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if not waited:
                    waited = True
                    log.warning("waiting for %s: another install, rollback or root update holds it",
                                self.path)
                if time.monotonic() >= end:
                    os.close(fd)
                    raise StateLocked(f"another install, rollback or root update holds {self.path} for "
                                      f"over {self.timeout_s}s") from None
                time.sleep(0.05)
