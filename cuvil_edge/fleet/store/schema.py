"""The fleet store's tables, as numbered migrations applied in order and recorded in
``schema_migrations``: a store is upgraded when opened by newer code and refused (``SchemaMismatch``)
by older code. Statements are shared by both backends; ``{id}``, ``{blob}`` and ``{real}`` are the only
types that differ (``Dialect.types``).

JSON columns are TEXT in both backends, so rows read back the same everywhere; what queries filter on
is a column of its own (release, state, device class, group), never a JSON path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "fleet registry, rollouts, announcements", (
        # the fleet this store belongs to (key 'fleet'): one store, one fleet, any number of release lines
        "CREATE TABLE fleet_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        # one row per device: its last status (JSON) as sent, the fields queries filter on, and the last
        # telemetry summary; status_time is the status's own UTC time (an older status does not overwrite);
        # lines: the release lines it reports (JSON list), so a status that reports the same ones updates
        # their rows in place
        """CREATE TABLE devices (
            device TEXT PRIMARY KEY, hardware_id TEXT, device_class TEXT, grp TEXT NOT NULL DEFAULT '',
            status_time TEXT, received {real} NOT NULL, status TEXT NOT NULL, lines TEXT NOT NULL,
            telemetry TEXT, telemetry_time TEXT)""",
        "CREATE INDEX devices_class ON devices (device_class, device)",
        "CREATE INDEX devices_group ON devices (grp, device)",
        # one row per device and release line it follows ('' = the fleet's single-model line): what a
        # publisher of that line stages, counts and watches
        """CREATE TABLE device_lines (
            line TEXT NOT NULL, device TEXT NOT NULL REFERENCES devices (device), state TEXT,
            release BIGINT, target_release BIGINT, bundle TEXT, error TEXT, PRIMARY KEY (line, device))""",
        "CREATE INDEX device_lines_device ON device_lines (device, line)",
        "CREATE INDEX device_lines_release ON device_lines (line, release, device)",
        "CREATE INDEX device_lines_state ON device_lines (line, state, device)",
        # a release's way through a line; record is the publisher's whole Rollout but its outcomes
        """CREATE TABLE rollouts (
            id {id}, line TEXT NOT NULL, bundle_sha256 TEXT NOT NULL, release BIGINT NOT NULL,
            stages TEXT NOT NULL, stage INTEGER NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL,
            record TEXT NOT NULL, updated {real} NOT NULL)""",
        "CREATE INDEX rollouts_line ON rollouts (line, id)",
        """CREATE TABLE rollout_outcomes (
            rollout_id BIGINT NOT NULL REFERENCES rollouts (id), device TEXT NOT NULL,
            outcome TEXT NOT NULL, updated {real} NOT NULL, PRIMARY KEY (rollout_id, device))""",
        # the last announcement number per line; bumped in the transaction that records the announcement
        "CREATE TABLE line_sequences (line TEXT PRIMARY KEY, seq BIGINT NOT NULL)",
        """CREATE TABLE announcements (
            line TEXT NOT NULL, seq BIGINT NOT NULL, rollout_id BIGINT REFERENCES rollouts (id),
            payload {blob} NOT NULL, created {real} NOT NULL, PRIMARY KEY (line, seq))""",
    )),
    Migration(2, "one leading publisher per line", (
        # the publisher that may announce on a line, until expires (Unix time): renewed at each of its steps,
        # taken over by a standby once it has run out
        "CREATE TABLE line_leases (line TEXT PRIMARY KEY, holder TEXT NOT NULL, expires {real} NOT NULL)",
    )),
    Migration(3, "rollout steps that read only what changed", (
        # the batch of statuses that last wrote the row (store_counters 'changes', taken in that batch's
        # transaction and held to its commit): a step reads the rows past the last number it read
        "ALTER TABLE device_lines ADD COLUMN changed BIGINT NOT NULL DEFAULT 0",
        "CREATE INDEX device_lines_changed ON device_lines (line, changed, device)",
        "CREATE TABLE store_counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
        # each device's rollout bucket for a bundle (ota.protocol.bucket) and whether the bundle targets it
        # (1/0), written as the line's changed rows are read: a stage is a range of this index
        """CREATE TABLE device_buckets (
            line TEXT NOT NULL, bundle_sha256 TEXT NOT NULL, device TEXT NOT NULL, bucket BIGINT NOT NULL,
            targeted INTEGER NOT NULL, PRIMARY KEY (line, bundle_sha256, device))""",
        "CREATE INDEX device_buckets_stage ON device_buckets (line, bundle_sha256, targeted, bucket, device)",
    )),
    Migration(4, "gate evidence kept with the fleet", (
        # per line, device and release: the telemetry summaries a rollout's gates judge, summed
        # (fleet.gates.Window as JSON), and the stream and number of the last record counted in
        """CREATE TABLE gate_windows (
            line TEXT NOT NULL, device TEXT NOT NULL, release BIGINT NOT NULL, summed TEXT NOT NULL,
            stream TEXT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (line, device, release))""",
    )),
)
LATEST = MIGRATIONS[-1].version
MIGRATIONS_TABLE = ("CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied {real} NOT NULL)")


def render(statement: str, types: Mapping[str, str]) -> str:
    """A statement with a backend's types filled in."""
    return statement.format(**types)
