"""The fleet dashboard in a real headless browser (Debian's chromium): six real agents on a real Mosquitto
take a staged rollout that halts in its second stage; the page, after its script ran, shows the stages,
the halt and its reason, every device with its release and health, and latency per release from the
agents' telemetry summaries. A screenshot is kept (tmp dir, and ``$CUVIL_ARTIFACTS`` when set).

Every wait is a bounded loop on a condition; the timeouts only guard against hangs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fleetkit import AgentThreads, FleetWorld

from cuvil_edge.dashboard import Dashboard, DashboardError, FleetView
from cuvil_edge.fleet import Publisher
from cuvil_edge.testing.broker import LocalBroker
from ota import SelfTestFailed
from ota.golden import decode_vector
from ota.protocol import bucket
from ota.serve import infer

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not shutil.which("mosquitto"), reason="mosquitto not installed"),
    # CI installs chromium (.ci/run), so there a missing browser fails instead of skipping
    pytest.mark.skipif(not CHROMIUM and not os.environ.get("CI"), reason="chromium not installed"),
]
FLEET = "view"
HANG_S = 120.0


class _Text(HTMLParser):
    """The visible text of a DOM dump (scripts and styles left out), one string."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style")

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.parts.append(data.strip())


def chromium(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless chromium on ``url`` with 5 s of virtual time for the page's script (polls included)."""
    assert CHROMIUM, "chromium is not installed (apt-get install -y chromium)"
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args, url],
                          capture_output=True, text=True, timeout=HANG_S, check=True)


def wait_for(pred: Callable[[], Any], what: str) -> Any:
    end, tick = time.monotonic() + HANG_S, threading.Event()
    while not (hit := pred()):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        tick.wait(0.1)
    return hit


def state(dash: Dashboard) -> dict[str, Any]:
    with urllib.request.urlopen(dash.url + "api/state", timeout=10) as reply:
        return json.loads(reply.read())


@pytest.fixture
def broker(tmp_path):
    with LocalBroker(tmp_path / "broker") as b:
        yield b


def test_dashboard_shows_a_halted_rollout_in_a_browser(broker, tmp_path):
    world = FleetWorld(tmp_path / "world")
    settings = broker.settings()
    devices = [f"cam{i}" for i in range(6)]
    sha = hashlib.sha256(world.bundles[2].read_bytes()).hexdigest()
    order = sorted(devices, key=lambda d: bucket(sha, d))  # canary (34%) = order[:3]; then all six
    failing = order[4]

    def fail_selftest(step: str) -> None:
        if step == "precompiled":
            raise SelfTestFailed("injected: golden output differs on this device")

    agents = AgentThreads()
    view = FleetView(settings, FLEET)
    pub = Publisher(settings, FLEET, world.ring.release_keys(), tmp_path / "fleet.json")
    with Dashboard(view, port=0) as dash:
        try:
            view.start()
            dash.start()
            cfgs = {d: world.agent_config(tmp_path, d, FLEET, settings, socket=True) for d in devices}
            by_name = {d: agents.add(c, on_step=fail_selftest if d == failing else None)
                       for d, c in cfgs.items()}
            pub.start()
            assert pub.wait_for_devices(6, HANG_S) == 6
            pub.publish(world.bundles[2], canary=34.0, halt_on=10.0, stages=[34.0, 100.0])
            rollout = pub.watch(timeout_s=900, stage_timeout_s=600, settle_s=0)
            assert rollout.status == "halted" and rollout.stage == 1, rollout
            # traffic on a device of each release, then a signed report: summaries with latency
            for d in (order[0], failing):
                inputs, _ = decode_vector(by_name[d].installer.active_manifest().golden[0])
                for _ in range(5):
                    infer(cfgs[d].socket, inputs)
                pub.command(d, "report")
            s = wait_for(lambda: (s := state(dash))["rollout"] and s["rollout"]["status"] == "halted"
                         and {r["release"] for r in s["releases"] if r["requests"]} == {1, 2} and s,
                         "the view to hold the halt and both releases' latency")
            assert len(s["devices"]) == 6 and s["rollout"]["failed"] == [failing]
            assert {d["device"]: d["health"] for d in s["devices"]}[failing] == "failed"

            dom = chromium(dash.url, tmp_path / "profile", "--dump-dom").stdout
            shot = tmp_path / "dashboard.png"
            chromium(dash.url, tmp_path / "profile", "--window-size=1280,1000", f"--screenshot={shot}")
        finally:
            agents.close()
            pub.close()
    if os.environ.get("CUVIL_ARTIFACTS"):
        Path(os.environ["CUVIL_ARTIFACTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(os.environ["CUVIL_ARTIFACTS"]) / "dashboard.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000

    parser = _Text()
    parser.feed(dom)
    text = " | ".join(parser.parts)
    # the script ran and polled more than once (virtual time: 5 s, one poll a second)
    assert int(re.search(r'id="updates" data-count="(\d+)"', dom).group(1)) >= 2, text
    assert "Fleet | view" in text and "connected" in text
    # stages with their state and progress, the halt and its reason
    assert "34% | done" in text, text
    assert re.search(r"100% \| halted: \d/6 devices", text), text
    assert "halted: 1 of 6 devices failed in stage 1 (100.0%), over the 10.0% threshold" in text, text
    assert f"failed devices: {failing}" in text
    # every device, its release and health; the failing one named with its error
    assert "Devices ( | 6 | )" in text
    for d in devices:
        assert d in text
    failed_row = rf"{failing} \| failed \| 1 \|.*?\| failed \| [\d.]+ \| SelfTestFailed: injected"
    assert re.search(failed_row, text), text
    assert re.search(rf"{order[0]} \| active \| 2 \|.*?\| ok \|", text), text
    # latency per release from the telemetry summaries: both releases served 5 requests
    row = r"\| (\w+) \| ([12]) \| 1\.0\.\2 \| ([\w-]+) \| 1 \| 5 \| [\d.]+ \| [\d.]+ \| [\d.]+"
    rows = re.findall(row, text)
    assert {r[1] for r in rows} == {"1", "2"}, text


def test_cli_serves_until_its_duration_and_refuses_a_taken_port(broker, capsys):
    from cuvil_edge.cli import main

    argv = ["fleet", "dashboard", "--fleet", FLEET, "--broker", f"127.0.0.1:{broker.port}"]
    assert main([*argv, "--port", "0", "--duration-s", "0.1"]) == 0
    assert re.search(r"dashboard on http://127\.0\.0\.1:\d+/", capsys.readouterr().out)
    view = FleetView(broker.settings(), FLEET)
    with Dashboard(view, port=0) as taken:
        port = taken.url.rsplit(":", 1)[1].rstrip("/")
        with pytest.raises(DashboardError, match=f"cannot serve the dashboard on 127.0.0.1:{port}"):
            Dashboard(FleetView(broker.settings(), FLEET), port=int(port))
        assert main([*argv, "--port", port]) == 2  # the CLI's typed-error exit
    taken.close()  # twice: a no-op
