"""Small durable JSON files (agent state, transfer progress, publisher state): written whole or not at all."""

from __future__ import annotations

import json
import os
import re
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


def read_json(path: str | os.PathLike[str], default: Any) -> Any:
    """The stored object, or ``default`` when the file does not exist yet."""
    try:
        return json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        return default
