"""The embedded default backend: one SQLite file in WAL mode (readers never block the writer, no server
to run), Python's own ``sqlite3``. Several processes on one machine may share the file; a write
transaction takes the database's write lock at once (``BEGIN IMMEDIATE``), so it never fails halfway
on a lock another writer holds, and waits up to ``StoreConfig.busy_timeout_s`` for it."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from ._store import Cursor, StoreConfig
from .errors import FleetStoreError, StoreUnavailable


def _error(exc: sqlite3.Error, path: str) -> FleetStoreError:
    """A driver error as the store's: locked past the timeout, unopenable or I/O failing is
    ``StoreUnavailable``; the rest (not a database, a constraint) ``FleetStoreError``."""
    kind = StoreUnavailable if isinstance(exc, sqlite3.OperationalError) else FleetStoreError
    return kind(f"fleet store {path}: {exc}")


class SqliteBackend:
    name = "sqlite"
    types = {"id": "INTEGER PRIMARY KEY", "blob": "BLOB", "real": "REAL"}
    lock_rows = ""  # BEGIN IMMEDIATE already holds the whole database's write lock

    def __init__(self, path: str | os.PathLike[str], config: StoreConfig) -> None:
        self.path = os.fspath(path)
        try:
            # isolation_level None: the store issues BEGIN/COMMIT itself (the module's implicit
            # transactions would begin a write deferred, and fail on a lock instead of waiting for it)
            self.conn = sqlite3.connect(self.path, timeout=config.busy_timeout_s, isolation_level=None,
                                        check_same_thread=False)  # FleetStore serializes its threads
        except sqlite3.Error as exc:
            raise _error(exc, self.path) from exc
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute(f"PRAGMA synchronous={'FULL' if config.durable else 'NORMAL'}")
            self.conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            self.conn.close()
            raise _error(exc, self.path) from exc

    @contextmanager
    def transaction(self, write: bool) -> Iterator[Cursor]:
        try:
            cur = self.conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield cur
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise _error(exc, self.path) from exc

    def lock_schema(self, cur: Cursor) -> None:
        """Nothing to do: the migration's write transaction holds the database's write lock."""

    def has_table(self, cur: Cursor, name: str) -> bool:
        cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return cur.fetchone() is not None

    def close(self) -> None:
        self.conn.close()
