"""Rollout steps that cost what changed, and the dashboard paged from the store (issue 39), every test on
SQLite and on a real PostgreSQL (``cuvil_edge.testing.postgres``, as test_fleet_store.py): a publisher on a
real Mosquitto with a real signed bundle, device statuses written to the store as its ingestion writes them.
What a step reads is counted in rows the store returned (``StoreLedger.rows_read``), never timed.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import sqlite3
import subprocess
import urllib.error
import urllib.request
from typing import Any

import psycopg
import pytest

from cuvil_edge.cli import main as cli_main
from cuvil_edge.fleet.dashboard import Dashboard, StoreView
from cuvil_edge.fleet.ledger import StoreLedger
from cuvil_edge.fleet.publisher import Publisher
from cuvil_edge.fleet.store import DeviceFilter, open_store
from ota.protocol import bucket
from tests.support.fleet import HW

pytestmark = pytest.mark.integration
FLEET = "scale"


def status(device: str, release: int = 1, state: str = "active", hardware_id: str = HW, minute: int = 0,
           **extra: Any) -> dict[str, Any]:
    return {"device": device, "state": state, "release": release, "hardware_id": hardware_id,
            "profile": "pi4", "time": f"2026-03-01T10:{minute:02d}:00Z", **extra}


def python_stage(statuses: dict[str, dict[str, Any]], sha: str, percent: float) -> set[str]:
    """The stage by the publisher's rule, done here in Python: the targeted devices (this hardware id)
    whose bucket is under the bound that takes ``percent`` of them."""
    targeted = sorted((bucket(sha, d), d) for d, s in statuses.items() if s["hardware_id"] == HW)
    below = targeted[max(1, math.ceil(percent / 100 * len(targeted))) - 1][0] + 1
    return {d for b, d in targeted if b < below}


def test_a_step_reads_only_the_rows_that_changed(fleet_world, broker, store_url):
    """300 devices, 20 of another hardware: the canary and the next stage are exactly the Python rule's
    devices; a step reads back the rows that changed since the last one (none: no row), and a widened
    stage reads its new devices once; the rollout completes with every targeted device active."""
    rng = random.Random(39)
    statuses = {f"d{i:04d}": status(f"d{i:04d}", hardware_id=HW if i % 15 else "other-board")
                for i in rng.sample(range(10_000), 300)}
    with open_store(store_url) as store:
        store.apply_statuses(statuses.values())
        pub = Publisher(broker.settings(), FLEET, fleet_world.ring.release_keys(), None, store=store).start()
        try:
            ledger = pub.ledger
            assert isinstance(ledger, StoreLedger)
            rollout = pub.publish(fleet_world.bundles[2], canary=10.0, halt_on=50.0,
                                  stages=[10.0, 40.0, 100.0])
            sha = rollout.bundle_sha256
            canary = python_stage(statuses, sha, 10.0)
            assert set(pub.stage_devices(rollout)) == canary and len(canary) == 28  # ceil(10% of 280)
            pub.step(600)
            read = ledger.rows_read
            assert pub.step(600).stage == 0 and ledger.rows_read == read  # nothing changed: nothing read

            moved = sorted(canary)[:5] + sorted(set(statuses) - canary)[:3]  # 3 outside the stage
            store.apply_statuses([status(d, release=2, minute=1) for d in moved])
            rollout = pub.step(600)
            assert ledger.rows_read - read == len(moved)
            assert rollout.outcomes == dict.fromkeys(sorted(canary)[:5], "active")

            read = ledger.rows_read
            store.apply_statuses([status(d, release=2, minute=1) for d in sorted(canary)[5:]])
            rollout = pub.step(600)  # the canary is done: the stage widens to 40%
            assert rollout.stage == 1 and ledger.rows_read - read == len(canary) - 5
            wider = python_stage(statuses, sha, 40.0)
            assert set(pub.stage_devices(rollout)) == wider and canary < wider

            read = ledger.rows_read
            rollout = pub.step(600)  # its new devices read once (the 3 moved ones among them, if they are)
            assert ledger.rows_read - read == len(wider - canary)
            assert set(rollout.outcomes) == canary | {d for d in moved if d in wider}
            everyone = [d for d, s in statuses.items() if s["hardware_id"] == HW]
            store.apply_statuses([status(d, release=2, minute=2) for d in everyone])
            while rollout.status == "rolling":
                rollout = pub.step(600)
            assert rollout.status == "complete" and rollout.outcomes == dict.fromkeys(everyone, "active")
        finally:
            pub.close()


def raw_execute(url: str, sql: str) -> None:
    """One statement with the backend's own driver, behind the store's back."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql)
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)


def test_a_restarted_publisher_reads_the_line_once_then_what_changed(fleet_world, broker, store_url):
    """A second publisher on the store carries the rollout on: its first step reads the line once (also
    rows that a schema-2 store had, which migration 3 numbers 0) and the stage once, the next ones only
    changed rows, and it agrees with the first on the stage."""
    statuses = {f"r{i:03d}": status(f"r{i:03d}") for i in range(120)}
    keys = fleet_world.ring.release_keys()
    with open_store(store_url) as store:
        store.apply_statuses(statuses.values())
        first = Publisher(broker.settings(), FLEET, keys, None, store=store).start()
        try:
            rollout = first.publish(fleet_world.bundles[2], canary=25.0, halt_on=50.0)
            stage = set(first.stage_devices(rollout))
        finally:
            first.close()
        raw_execute(store_url, "UPDATE device_lines SET changed = 0")  # as migration 3 leaves old rows
        again = Publisher(broker.settings(), FLEET, keys, None, store=store).start()
        try:
            ledger = again.ledger
            assert isinstance(ledger, StoreLedger)
            again.step(600)
            assert ledger.rows_read == len(statuses) + len(stage)  # the line once, then the stage once
            store.apply_statuses([status(d, release=2, minute=1) for d in sorted(stage)[:4]])
            read = ledger.rows_read
            assert len(again.step(600).outcomes) == 4 and ledger.rows_read - read == 4
            assert set(again.stage_devices(again.rollout)) == stage
            assert stage == python_stage(statuses, rollout.bundle_sha256, 25.0)
        finally:
            again.close()


def get_json(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_dashboard_pages_every_device_exactly_once(store_url):
    """``/api/state`` from the store: pages of 7 cover every device once (multi-model devices too, with all
    their lines on one page), with the whole fleet's counts on each page; a bad cursor or limit is a 400."""
    single = [status(f"s{i:03d}", release=1 + i % 3, state=("active", "failed")[i % 5 == 0])
              for i in range(40)]
    multi = [status(f"m{i:02d}", release=4, model="kws", models={
        "kws": {"state": "active", "release": 4}, "vad": {"state": "idle", "release": 1}}) for i in range(9)]
    with open_store(store_url) as store:
        store.apply_statuses(single + multi)
        with Dashboard(StoreView(open_store(store_url), FLEET), port=0) as dash:
            dash.start()
            seen: list[str] = []
            after, pages = None, 0
            while True:
                query = "?limit=7" + (f"&after={urllib.request.quote(after)}" if after else "")
                code, state = get_json(f"{dash.url}api/state{query}")
                assert code == 200 and len(state["devices"]) <= 7
                # counted per release line a device follows: the multi-model devices' two lines each
                assert state["total"] == 49 and state["counts"]["state"] == {"active": 9 + 32, "failed": 8,
                                                                             "idle": 9}
                assert state["counts"]["release"] == {"1": 14 + 9, "2": 13, "3": 13, "4": 9}
                seen += [d["device"] for d in state["devices"]]
                for d in state["devices"]:
                    assert [line["model"] for line in d["lines"]] == (["kws", "vad"] if d["device"][0] == "m"
                                                                      else [""])
                pages += 1
                if (after := state["after"]) is None:
                    break
            assert sorted(seen) == seen == sorted(s["device"] for s in single + multi)
            assert pages == 8  # 49 devices: 7 full pages, then an empty one ends it
            assert get_json(f"{dash.url}api/state?after=nonsense")[0] == 400
            assert get_json(f"{dash.url}api/state?limit=100000")[0] == 400
            assert "failed" in get_json(f"{dash.url}api/state")[1]["counts"]["state"]
        assert store.count_by("line", DeviceFilter()) == {"": 40, "kws": 9, "vad": 9}


@pytest.mark.skipif(not shutil.which("chromium"), reason="chromium not installed (CI installs it)")
def test_the_page_shows_the_first_page_and_offers_the_next(store_url, tmp_path):
    """In headless chromium, the page from a store of 49 devices in pages of 20: 20 of 49 listed, the
    counts shown, and the "more devices" button offered."""
    with open_store(store_url) as store:
        store.apply_statuses(status(f"p{i:02d}", state=("active", "failed")[i % 7 == 0]) for i in range(49))
    with Dashboard(StoreView(open_store(store_url), FLEET, page=20), port=0) as dash:
        dash.start()
        dom = subprocess.run([shutil.which("chromium") or "chromium", "--headless", "--no-sandbox",
                              "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
                              "--virtual-time-budget=3000", "--dump-dom", dash.url],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    assert '<span id="device-count">20 of 49</span>' in dom
    assert dom.count('<tr data-device="p') == 20 and "by state: active 42, failed 7" in dom
    assert '<button id="more">more devices</button>' in dom  # not hidden: a next page exists


def test_the_dashboard_refuses_another_fleets_store(store_url, capsys):
    with open_store(store_url) as store:
        store.bind_fleet("elsewhere")
    assert cli_main(["fleet", "dashboard", "--fleet", FLEET, "--store", store_url, "--port", "0",
                     "--duration-s", "0.1"]) == 2
    assert "is fleet 'elsewhere'" in capsys.readouterr().err
