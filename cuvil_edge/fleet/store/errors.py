"""The fleet store's one error hierarchy: a backend lets only these escape, never a ``sqlite3`` or
``psycopg`` exception, so a controller handles a lost database the same way whichever backend it runs on.

Misuse by the calling code (a closed store, an unknown query field) is ``RuntimeError``/``ValueError``.
"""

from __future__ import annotations

from ...errors import CuvilError


class FleetStoreError(CuvilError):
    """The fleet store refused or failed a request; the driver's exception is the ``__cause__``."""


class StoreUnavailable(FleetStoreError):
    """The database cannot be opened or reached, or stayed locked/busy past ``StoreConfig``'s timeouts:
    the request may succeed when retried."""


class SchemaMismatch(FleetStoreError):
    """The store's schema is not one this code knows (written by a newer cuvil-edge, or not a fleet store):
    it is neither read nor changed."""

    def __init__(self, found: object, expected: int) -> None:
        self.found, self.expected = found, expected
        super().__init__(f"fleet store schema version {found}, this cuvil-edge reads up to {expected}: "
                         "upgrade cuvil-edge, or point it at another store")


class StoreConflict(FleetStoreError):
    """The store already holds other state than the request assumes (another fleet; another rollout on
    the line a state file is migrated into)."""


class StateFileError(FleetStoreError):
    """A publisher state file to migrate is not one (unreadable, not JSON, fields of the wrong type)."""
