"""Fleet state in a database: the device registry (a row per device and release line: last status,
release, state, device class, group, telemetry summary), rollouts with an outcome row per device, and
announcement numbers allocated in the transaction that records the announcement.

``open_store(url)`` picks the backend from the URL: a plain path or ``sqlite:///fleet.db`` (relative),
``sqlite:////var/lib/cuvil/fleet.db`` (absolute) is the embedded default, SQLite; ``postgresql://...``
is PostgreSQL, for several controllers sharing one fleet (the ``fleet-postgres`` extra). Both run the
same SQL (``FleetStore``) and the same tests. ``migrate_state`` moves a publisher's JSON state file in.
"""

from __future__ import annotations

import os

from ._line_state import GateWindow
from ._store import DeviceFilter, DeviceRow, FleetStore, Page, RolloutRow, StoreConfig
from .errors import FleetStoreError, SchemaMismatch, StateFileError, StoreConflict, StoreUnavailable
from .migrate import MigrationReport, migrate_state, read_state
from .sqlite import SqliteBackend

__all__ = ["DeviceFilter", "DeviceRow", "FleetStore", "FleetStoreError", "GateWindow", "MigrationReport",
           "Page", "RolloutRow", "SchemaMismatch", "StateFileError", "StoreConfig", "StoreConflict",
           "StoreUnavailable", "migrate_state", "open_store", "read_state"]


def open_store(url: str | os.PathLike[str], config: StoreConfig | None = None) -> FleetStore:
    """The fleet store at ``url``, its schema created or upgraded (``SchemaMismatch`` for one newer than
    this code); ``StoreUnavailable`` when it cannot be opened or reached."""
    config = config or StoreConfig()
    text = os.fspath(url)
    scheme, sep, rest = text.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        from .postgres import PostgresBackend  # only here: psycopg is an optional extra

        return FleetStore(PostgresBackend(text, config), config)
    if sep and scheme != "sqlite":
        raise FleetStoreError(f"fleet store URL scheme {scheme!r} is not one of sqlite, postgresql")
    if sep and (not rest.startswith("/") or rest == "/"):
        raise FleetStoreError(f"{text!r}: a SQLite store URL is sqlite:///relative/path.db or "
                              "sqlite:////absolute/path.db")
    return FleetStore(SqliteBackend(rest[1:] if sep else text, config), config)
