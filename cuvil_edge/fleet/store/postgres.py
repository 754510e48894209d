"""PostgreSQL, for several controller processes (on several machines) sharing one fleet: writers lock
the rows they change (``SELECT ... FOR UPDATE``, the announcement counter's ``UPDATE``), so they wait for
each other per row instead of per database. Needs the ``fleet-postgres`` extra (psycopg 3), which only
the host installs: no device package imports this module."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ._store import Cursor, StoreConfig
from .errors import FleetStoreError, StoreUnavailable

try:
    import psycopg
except ImportError:  # the extra is not installed: open_store says which one to install
    psycopg = None

#: pg_advisory_xact_lock key serializing schema migrations of controllers opening the store at once
_SCHEMA_LOCK = 0x6375_7669_6C66_6C74  # "cuvilflt"


def _error(exc: Exception) -> FleetStoreError:
    """A driver error as the store's: connection lost or refused, lock or statement timeout is
    ``StoreUnavailable`` (psycopg's ``OperationalError``); the rest ``FleetStoreError``."""
    assert psycopg is not None
    kind = StoreUnavailable if isinstance(exc, psycopg.OperationalError) else FleetStoreError
    return kind(f"fleet store (PostgreSQL): {str(exc).strip()}")


class _Cursor:
    """A psycopg cursor taking the store's ``?`` placeholders (its own are ``%s``; the store's SQL has no
    literal ``?`` or ``%``)."""

    def __init__(self, cur: Any) -> None:
        self.cur = cur

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.cur.execute(sql.replace("?", "%s"), params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:  # psycopg refuses an empty executemany
            self.cur.executemany(sql.replace("?", "%s"), rows)

    def fetchone(self) -> Any:
        return self.cur.fetchone()

    def fetchall(self) -> list[Any]:
        return self.cur.fetchall()


class PostgresBackend:
    name = "postgresql"
    types = {"id": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "blob": "BYTEA",
             "real": "DOUBLE PRECISION"}
    lock_rows = " FOR UPDATE"

    def __init__(self, url: str, config: StoreConfig) -> None:
        if psycopg is None:
            raise StoreUnavailable("a postgresql:// fleet store needs psycopg: "
                                   "pip install 'cuvil-edge[fleet-postgres]'")
        try:
            self.conn = psycopg.connect(url, autocommit=True,
                                        connect_timeout=max(1, round(config.connect_timeout_s)))
        except psycopg.Error as exc:
            raise _error(exc) from exc
        try:
            for setting, seconds in (("lock_timeout", config.busy_timeout_s),
                                     ("statement_timeout", config.statement_timeout_s)):
                self.conn.execute("SELECT set_config(%s, %s, false)", (setting, f"{round(seconds * 1000)}ms"))
        except psycopg.Error as exc:
            self.conn.close()
            raise _error(exc) from exc

    @contextmanager
    def transaction(self, write: bool) -> Iterator[Cursor]:
        """READ COMMITTED; ``write`` changes nothing here: writers lock rows as they go."""
        try:
            with self.conn.transaction(), self.conn.cursor() as cur:
                yield _Cursor(cur)
        except psycopg.Error as exc:
            raise _error(exc) from exc

    def lock_schema(self, cur: Cursor) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))

    def has_table(self, cur: Cursor, name: str) -> bool:
        cur.execute("SELECT to_regclass(?) IS NOT NULL", (name,))
        return bool(cur.fetchone()[0])

    def close(self) -> None:
        self.conn.close()
