"""Small durable JSON files (agent state, transfer progress, publisher state): written whole or not at all."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Temp file + fsync + ``os.replace`` + fsync of the directory: a crash leaves the old or the new file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write(path, json.dumps(obj, indent=1, sort_keys=True).encode())


def read_json(path: str | os.PathLike[str], default: Any) -> Any:
    """The stored object, or ``default`` when the file does not exist yet."""
    try:
        return json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        return default
