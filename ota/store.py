"""Small durable JSON files (agent state, transfer progress, publisher state): written whole or not at all."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO


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


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_file(path) as f:
        f.write(data)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write(path, json.dumps(obj, indent=1, sort_keys=True).encode())


def read_json(path: str | os.PathLike[str], default: Any) -> Any:
    """The stored object, or ``default`` when the file does not exist yet."""
    try:
        return json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        return default
