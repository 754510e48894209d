"""The agent's structured log: one JSON object per line, never fatal."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO


class JsonLog:
    """Structured logs: one JSON object per line (time, device, event, fields).

    Logging is never fatal: a log file that cannot be opened or written (disk full, ``/dev/full``, a
    removed mount) falls back to stderr, and lines that cannot be written anywhere are counted in
    ``dropped``; the agent keeps serving and updating either way."""

    def __init__(self, device: str, path: str = "") -> None:
        self.device = device
        self.dropped = 0
        self._lock = threading.Lock()
        self._out: TextIO = sys.stderr
        if path:
            try:
                self._out = open(path, "a", buffering=1)
            except OSError as exc:
                self._fallback(f"cannot open log file {path}: {exc}")

    def __call__(self, event: str, /, **fields: Any) -> None:
        line = json.dumps({**fields, "ts": round(time.time(), 3), "device": self.device, "event": event},
                          default=str)
        with self._lock:
            try:
                self._out.write(line + "\n")
                self._out.flush()
            except (OSError, ValueError) as exc:  # ValueError: a closed file
                self.dropped += 1
                self._fallback(f"log write failed: {exc}")

    def _fallback(self, why: str) -> None:
        if self._out is not sys.stderr:
            try:
                self._out.close()
            except OSError:
                pass
            self._out = sys.stderr
        try:
            sys.stderr.write(json.dumps({"device": self.device, "event": "log_failed", "detail": why}) + "\n")
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        if self._out is not sys.stderr:
            try:
                self._out.close()
            except OSError:
                pass
