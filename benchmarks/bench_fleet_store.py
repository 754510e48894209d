"""Fleet store write and query cost at 1k/10k/100k devices: what replacing the publisher's JSON state file
(re-encoded and fsynced whole on every poll) with ``cuvil_edge.fleet.store`` costs per change.

For each fleet size, on a fresh store: ``register`` applies every device's first status, in batches of
``--batch`` (one transaction each); ``update`` applies a new status for every device (a release change);
``page`` reads the whole line in pages of 1000 (keyset paging); ``count`` is one ``count_by('release')``.
Before ``page``, PostgreSQL's tables are analyzed, as autovacuum does on a running server (right after a
bulk load, without statistics, the planner may join every page from the table's start).
Each figure is the median of ``--runs`` runs, each on a new store. SQLite always (durable: synchronous=FULL,
one fsync per batch); PostgreSQL with ``--postgres URL`` (an empty database: its tables are dropped between
runs), or ``--postgres local`` for a throwaway server started here (fsync on).

    python benchmarks/bench_fleet_store.py
    python benchmarks/bench_fleet_store.py --sizes 1000,10000 --runs 5 --postgres local

``--step`` measures the publisher instead: one rollout step (``Publisher.step``, no broker) on a line where
1% of the devices reported a new status since the last step, with the JSON state file and with the store,
at each size; the median of ``--runs`` steps (each after its own 1% of statuses, which are not timed).

    python benchmarks/bench_fleet_store.py --step --sizes 1000,10000,50000 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cuvil_edge.fleet.publisher import Publisher, Rollout
from cuvil_edge.fleet.store import DeviceFilter, FleetStore, open_store
from cuvil_edge.fleet.store.schema import MIGRATIONS
from ota import BrokerSettings

WRITES = ("register", "update")  # the phases made of batches
TABLES = ("device_buckets", "store_counters", "line_leases", "announcements", "line_sequences",
          "rollout_outcomes", "rollouts", "device_lines", "devices",
          "fleet_meta", "schema_migrations")


def statuses(count: int, release: int) -> Iterator[dict[str, Any]]:
    """Statuses shaped like an agent's (``ota.protocol.status_payload``, as ``read_status`` keeps them)."""
    for i in range(count):
        yield {"device": f"dev-{i:06d}", "state": "active", "release": release, "target_release": release,
               "bundle": f"{release:064x}", "hardware_id": "bench-device",
               "profile": ("pi4", "jetson")[i % 2], "time": f"2026-03-01T10:{release:02d}:00Z"}


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def page_all(store: FleetStore) -> int:
    rows, after = 0, None
    while True:
        page = store.query_devices(DeviceFilter(line=""), 1000, after)
        rows += len(page.rows)
        if page.after is None:
            return rows
        after = page.after


def one_run(open_fresh: Callable[[], FleetStore], analyze: Callable[[], None], devices: int,
            batch: int) -> dict[str, float]:
    """Seconds per phase on a new store."""
    with open_fresh() as store:
        def apply_all(release: int) -> None:
            items = list(statuses(devices, release))
            for i in range(0, devices, batch):
                store.apply_statuses(items[i:i + batch])

        out = {"register": timed(lambda: apply_all(1)), "update": timed(lambda: apply_all(2))}
        analyze()
        out["page"] = timed(lambda: page_all(store))
        out["count"] = timed(lambda: store.count_by("release"))
    return out


def step_runs(work: Path, devices: int, runs: int, store: FleetStore | None) -> list[float]:
    """Seconds of each of ``runs`` steps of a rollout to 100% of ``devices``, each after 1% of them (not
    yet seen since the last step) reported the new release; the publisher's own bookkeeping only (its
    MQTT client never connects: ``publish`` calls are dropped)."""
    pub = Publisher(BrokerSettings(), "bench", [Ed25519PrivateKey.generate()], work / f"fleet-{devices}.json",
                    store=store)
    pub.mqtt.publish = lambda *_, **__: None  # type: ignore[method-assign]  # no broker: measure the bookkeeping
    for status in statuses(devices, 1):
        pub.ledger.add(status)
    rollout = Rollout("cd" * 32, "bench", 2, "2", 1024, ["00" * 32], 1024, [100.0], 50.0, False)
    pub.ledger.new_rollout()
    pub._announce(rollout)
    pub.step(3600)  # the first step reads the whole line once
    changed, out = max(devices // 100, 1), []
    fresh = list(statuses(devices, 2))
    for run in range(runs):
        for status in fresh[run * changed:(run + 1) * changed]:
            pub.ledger.add(status)
        if store is not None:
            pub.ledger.flush()  # ingestion writes these as they arrive, not the step
        out.append(timed(lambda: pub.step(3600)))
    pub.close()
    return out


def step_table(work: Path, sizes: list[int], runs: int, pg_url: str | None) -> None:
    print(f"one step, 1% of devices changed; median of {runs} steps (ms)")
    print(f"{'devices':>8s} {'JSON file':>10s} {'SQLite':>10s}" + (f" {'PostgreSQL':>10s}" if pg_url else ""))
    for n in sizes:
        cells = [step_runs(work, n, runs, None)]
        with open_store(work / f"step-{n}.db") as store:
            cells.append(step_runs(work, n, runs, store))
        if pg_url:
            pg_run(pg_url, *(f"DROP TABLE IF EXISTS {table} CASCADE" for table in TABLES))
            with open_store(pg_url) as store:
                cells.append(step_runs(work, n, runs, store))
        print(f"{n:8d} " + " ".join(f"{statistics.median(c) * 1e3:10.1f}" for c in cells), flush=True)


def pg_run(url: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000", help="fleet sizes, comma-separated")
    ap.add_argument("--batch", type=int, default=500, help="statuses per apply_statuses call")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--postgres", metavar="URL|local", help="also run on PostgreSQL")
    ap.add_argument("--step", action="store_true", help="time the publisher's rollout step instead")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-fleet-store-")))
        backends: dict[str, tuple[Callable[[], FleetStore], Callable[[], None]]] = {
            "sqlite": (lambda: open_store(work / f"fleet-{time.monotonic_ns()}.db"), lambda: None)}
        if args.postgres:
            url = args.postgres
            if url == "local":
                from cuvil_edge.testing.postgres import LocalPostgres

                url = stack.enter_context(LocalPostgres(durable=True)).url

            def fresh_pg(url: str = url) -> FleetStore:
                pg_run(url, *(f"DROP TABLE IF EXISTS {table} CASCADE" for table in TABLES))
                return open_store(url)

            backends["postgresql"] = (fresh_pg, lambda url=url: pg_run(url, "ANALYZE"))
        if args.step:
            step_table(work, sizes, args.runs, url if args.postgres else None)
            return
        print(f"schema v{MIGRATIONS[-1].version}; batch {args.batch} statuses; median of {args.runs} runs")
        print(f"{'backend':10s} {'devices':>8s} {'phase':9s} {'total s':>9s} {'ms/batch':>9s} "
              f"{'us/device':>10s}")
        for name, (open_fresh, analyze) in backends.items():
            for n in sizes:
                runs = [one_run(open_fresh, analyze, n, args.batch) for _ in range(args.runs)]
                batches = -(-n // args.batch)
                for phase in ("register", "update", "page", "count"):
                    median = statistics.median(r[phase] for r in runs)
                    per_batch = f"{median / batches * 1e3:9.2f}" if phase in WRITES else " " * 9
                    print(f"{name:10s} {n:8d} {phase:9s} {median:9.3f} {per_batch} {median / n * 1e6:10.1f}",
                          flush=True)


if __name__ == "__main__":
    main()
