"""Small durable JSON files (agent state, transfer progress, publisher state): written whole or not at all,
read back bounded and checked against the caller's schema (``runtime_wasm.schema``).

Written atomically, such a file is damaged only from outside (a bad disk, a person, a bug elsewhere), and
then it is a ``FormatError`` here; each reader says in its docstring whether that is fatal or the file is
dropped and rebuilt.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from runtime_wasm import schema

from .errors import FormatError


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
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


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
    doc = schema.load(data, max_bytes, str(path), FormatError)
    return doc if reader is None else schema.read(doc, reader, str(path), FormatError)
