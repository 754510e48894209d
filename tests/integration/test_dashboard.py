"""The fleet dashboard in a real headless browser (Debian's chromium): six real agents on a real Mosquitto
take a staged rollout that halts in its second stage; the page, after its script ran, shows the stages,
the halt and its reason, every device with its release and health, and latency per release from the
agents' telemetry summaries. Then multi-model devices: two model lines rolling out at once, one halted and
one in its second stage, both on the page, and every device's release and health per model line.
Screenshots are kept (tmp dir, and ``$CUVIL_ARTIFACTS`` when set). Last, one page kept open in chromium
(driven over the DevTools protocol on ``--remote-debugging-pipe``) follows a rollout without a reload.

Every wait is a bounded loop on a condition; the timeouts only guard against hangs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from cuvil_agent.config import load_agent_config
from cuvil_agent.serve import infer
from cuvil_edge.fleet.dashboard import Dashboard, DashboardError, FleetView
from cuvil_edge.fleet.publisher import Publisher
from ota import SelfTestFailed
from ota.golden import decode_vector
from ota.protocol import bucket
from tests.support.browser import CHROMIUM, HANG_S, chromium, page_text
from tests.support.fleet import AgentThreads, FleetWorld
from tests.support.model_lines import FLEET as LINES_FLEET
from tests.support.model_lines import A, B, LinesWorld

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not shutil.which("mosquitto"), reason="mosquitto not installed"),
    # CI installs chromium (.ci/run), so there a missing browser fails instead of skipping
    pytest.mark.skipif(not CHROMIUM and not os.environ.get("CI"), reason="chromium not installed"),
]
FLEET = "view"


class _Rows(HTMLParser):
    """The device table's rows of a DOM dump: (device, line) -> the line's cells, without the device's name
    and last-seen cells (they span a device's rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[tuple[str, str], list[str]] = {}
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and "data-device" in a:
            self._row = self.rows.setdefault((a["data-device"] or "", a.get("data-line") or ""), [])
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            if self._row is not None and len(self._row) == 9:  # the device's first row
                del self._row[0], self._row[-1]
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def device_rows(dom: str) -> dict[tuple[str, str], list[str]]:
    """(device, line) -> [line, state, release, variant, health, p95 ms, detail]."""
    parser = _Rows()
    parser.feed(dom)
    return parser.rows


def keep(shot: Path) -> None:
    """A screenshot is a test artifact: checked to be a real PNG, copied to ``$CUVIL_ARTIFACTS``."""
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    if os.environ.get("CUVIL_ARTIFACTS"):
        Path(os.environ["CUVIL_ARTIFACTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(os.environ["CUVIL_ARTIFACTS"]) / shot.name)


def wait_for(pred: Callable[[], Any], what: str) -> Any:
    end, tick = time.monotonic() + HANG_S, threading.Event()
    while not (hit := pred()):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        tick.wait(0.1)
    return hit


def state(dash: Dashboard) -> dict[str, Any]:
    with urllib.request.urlopen(dash.url + "api/state", timeout=10) as reply:
        return json.loads(reply.read())


class Page:
    """One page in headless chromium, kept open and read through the DevTools protocol over
    ``--remote-debugging-pipe``: chromium reads commands on its fd 3 and writes replies and events on its
    fd 4, each a JSON message ended by NUL. Every read has a deadline: a browser that stops answering
    fails the test instead of hanging it."""

    def __init__(self, url: str, profile: Path) -> None:
        assert CHROMIUM, "chromium is not installed (apt-get install -y chromium)"
        to_browser, self._commands = os.pipe()
        self._replies, from_browser = os.pipe()
        # copies numbered above 4, so placing them on the child's fds 3 and 4 overwrites neither
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser, from_browser)]

        def onto_3_and_4() -> None:
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        with open(profile.with_suffix(".log"), "wb") as log:
            self.proc = subprocess.Popen(
                [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=False, preexec_fn=onto_3_and_4)
        for fd in (to_browser, from_browser, *high):
            os.close(fd)
        self._buf, self._id = b"", 0
        try:
            pages = wait_for(lambda: [t for t in self.call("Target.getTargets")["targetInfos"]
                                      if t["type"] == "page"], "chromium's page")
            self._session = self.call("Target.attachToTarget", {"targetId": pages[0]["targetId"],
                                                                "flatten": True})["sessionId"]
            # answered once the navigation commits: from then on every evaluate reads the page's document
            self.call("Page.navigate", {"url": url}, self._session)
        except BaseException:
            self.close()
            raise

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        """One command's result (events in between are skipped)."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        os.write(self._commands, json.dumps({**msg, **({"sessionId": session} if session else {})}).encode()
                 + b"\0")
        end = time.monotonic() + HANG_S
        while True:
            while b"\0" not in self._buf:
                ready, _, _ = select.select([self._replies], [], [], max(0.0, end - time.monotonic()))
                assert ready, f"chromium did not answer {method} within {HANG_S} s"
                chunk = os.read(self._replies, 1 << 16)
                assert chunk, f"chromium closed its DevTools pipe (exit {self.proc.poll()})"
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply["result"]

    def evaluate(self, expression: str) -> Any:
        """``expression``'s value in the page."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                           self._session)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def dom(self) -> str:
        """The page's DOM now ("" while the document is still being created)."""
        return self.evaluate("document.documentElement ? document.documentElement.outerHTML : ''")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(HANG_S)
        os.close(self._commands)
        os.close(self._replies)

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Served = tuple[FleetWorld, Any, AgentThreads, Publisher, Dashboard]


@contextlib.contextmanager
def served_fleet(broker: Any, tmp_path: Path) -> Iterator[Served]:
    """A fleet world on ``broker``: its view served by a started dashboard, an agent pool and a publisher,
    all closed afterwards (the agents before the publisher)."""
    world = FleetWorld(tmp_path / "world")
    settings = broker.settings()
    agents = AgentThreads()
    view = FleetView(settings, FLEET)
    pub = Publisher(settings, FLEET, world.ring.release_keys(), tmp_path / "fleet.json")
    with Dashboard(view, port=0) as dash:
        try:
            view.start()
            dash.start()
            yield world, settings, agents, pub, dash
        finally:
            agents.close()
            pub.close()


def test_dashboard_shows_a_halted_rollout_in_a_browser(broker, tmp_path):
    devices = [f"cam{i}" for i in range(6)]

    def fail_selftest(step: str) -> None:
        if step == "precompiled":
            raise SelfTestFailed("injected: golden output differs on this device")

    with served_fleet(broker, tmp_path) as (world, settings, agents, pub, dash):
        sha = hashlib.sha256(world.bundles[2].read_bytes()).hexdigest()
        order = sorted(devices, key=lambda d: bucket(sha, d))  # canary (34%) = order[:3]; then all six
        failing = order[4]
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
        s = wait_for(lambda: (s := state(dash))["rollouts"].get("", {}).get("status") == "halted"
                     and {r["release"] for r in s["releases"] if r["requests"]} == {1, 2} and s,
                     "the view to hold the halt and both releases' latency")
        assert len(s["devices"]) == 6 and s["rollouts"][""]["failed"] == [failing]
        assert {d["device"]: d["health"] for d in s["devices"]}[failing] == "failed"

        dom = chromium(dash.url, tmp_path / "profile", "--dump-dom").stdout
        shot = tmp_path / "dashboard.png"
        chromium(dash.url, tmp_path / "profile", "--window-size=1280,1000", f"--screenshot={shot}")
    keep(shot)

    text = page_text(dom)
    # the script ran and polled more than once (virtual time: 5 s, one poll a second)
    assert int(re.search(r'id="updates" data-count="(\d+)"', dom).group(1)) >= 2, text
    assert "Fleet | view" in text and "connected" in text
    # stages with their state and progress, the halt and its reason
    assert "fleet line" in text and "34% | done" in text, text
    assert re.search(r"100% \| halted: \d/6 devices", text), text
    # the head and the publisher's reason count stages the same way: from 1, as people do
    assert "halted | · | stage 2 of 2" in text, text
    assert "halted: 1 of 6 devices failed in stage 2 of 2 (100%), over the 10% threshold" in text, text
    assert f"failed devices: {failing}" in text
    # every device, its release and health; the failing one named with its error
    assert "Devices ( | 6 | )" in text
    for d in devices:
        assert d in text
    # the failing device after its report: the re-sent status still names the release it failed and why
    rows = device_rows(dom)
    assert rows.keys() == {(d, "") for d in devices}
    line, state_, release, _variant, health, p95, detail = rows[failing, ""]
    assert (line, state_, release, health) == ("(fleet)", "failed", "1 → 2", "failed"), rows[failing, ""]
    assert float(p95) >= 0 and detail.startswith("SelfTestFailed: injected"), detail  # named once
    assert rows[order[0], ""][1:3] == ["active", "2"] and rows[order[0], ""][4] == "ok", rows[order[0], ""]
    # latency per release from the telemetry summaries: both releases served 5 requests
    row = r"\| (\w+) \| ([12]) \| 1\.0\.\2 \| ([\w-]+) \| 1 \| 5 \| [\d.]+ \| [\d.]+ \| [\d.]+"
    rows = re.findall(row, text)
    assert {r[1] for r in rows} == {"1", "2"}, text


def test_dashboard_shows_every_model_lines_rollout_in_a_browser(broker, tmp_path):
    """Three two-line devices: line A's release 2 halts (d2 fails its self-test) while line B's release 2
    is in its second stage; the page shows both rollouts, each with its own stages, progress and (A) halt
    reason, and every device's release and health per model line."""
    world = LinesWorld(tmp_path / "world")
    settings = broker.settings()
    devices, failing = ["d0", "d1", "d2"], "d2"
    agents = AgentThreads()
    by_name: dict[str, Any] = {}

    def fail_a2(step: str) -> None:  # d2's self-test of line A's release 2 fails; nothing else does
        line = by_name[failing].line(A)
        if step == "precompiled" and line.state == "self-test" and line.ann and line.ann.release == 2:
            raise SelfTestFailed("injected: golden output differs on this device")

    view = FleetView(settings, LINES_FLEET)
    pubs = {m: Publisher(settings, LINES_FLEET, world.ring.release_keys(), tmp_path / f"{m}.json", model=m)
            for m in (A, B)}
    with Dashboard(view, port=0) as dash:
        try:
            view.start()
            dash.start()
            for d in devices:
                cfg = load_agent_config(world.device(tmp_path, d, broker))
                by_name[d] = agents.add(cfg, on_step=fail_a2 if d == failing else None)
            for pub in pubs.values():
                pub.start()
                assert pub.wait_for_devices(3, HANG_S) == 3
            pubs[A].publish(world.bundles[A, 2], canary=100.0, halt_on=10.0)
            halted = pubs[A].watch(timeout_s=HANG_S * 3, stage_timeout_s=HANG_S * 2, settle_s=0)
            assert halted.status == "halted" and halted.outcomes[failing] == "failed", halted
            # a report from the failing device: every line's status re-sent (line B's last), A's error kept
            pubs[A].command(failing, "report")
            wait_for(lambda: view.statuses.get(failing, {}).get("event") == "report", "the report")
            # line B: its canary done and widened to the second stage, then watched no further (rolling)
            pubs[B].publish(world.bundles[B, 2], canary=34.0, halt_on=0.0, stages=[34.0, 100.0])
            rolling = wait_for(lambda: (r := pubs[B].step(HANG_S * 2)).stage == 1 and r, "B's second stage")
            canary = sorted(rolling.outcomes)  # the devices below B's 34% bucket bound (which: by hash)
            assert rolling.status == "rolling" and set(rolling.outcomes.values()) <= {"active"}, rolling
            s = wait_for(lambda: (s := state(dash))["rollouts"].keys() == {A, B}
                         and s["rollouts"][B]["stage"] == 1 and s, "both lines' rollouts on the view")
            assert s["rollouts"][A]["status"] == "halted" and s["rollouts"][A]["failed"] == [failing]
            lines = {d["device"]: {line["model"]: line for line in d["lines"]} for d in s["devices"]}
            assert lines.keys() == set(devices) and all(v.keys() == {A, B} for v in lines.values()), lines
            assert lines[failing][A]["health"] == "failed" and "SelfTestFailed" in lines[failing][A]["detail"]
            assert {d["device"]: d["health"] for d in s["devices"]}[failing] == "failed"  # its worst line

            dom = chromium(dash.url, tmp_path / "profile", "--dump-dom").stdout
            shot = tmp_path / "dashboard-model-lines.png"
            chromium(dash.url, tmp_path / "profile", "--window-size=1280,1000", f"--screenshot={shot}")
        finally:
            agents.close()
            for pub in pubs.values():
                pub.close()
    keep(shot)

    text = page_text(dom)
    assert int(re.search(r'id="updates" data-count="(\d+)"', dom).group(1)) >= 2, text
    # both rollouts, each in its own section, counted the same way in the head and the halt reason
    assert "fleet line" not in text and text.index(f"model line {A}") < text.index(f"model line {B}"), text
    line_a, line_b = text.split(f"model line {B}")
    assert "halted | · | stage 1 of 1" in line_a and re.search(r"100% \| halted: \d/3 devices", line_a), text
    assert "halted: 1 of 3 devices failed in stage 1 of 1 (100%), over the 10% threshold" in line_a, text
    assert f"failed devices: {failing}" in line_a and "failed devices" not in line_b
    assert "rolling | · | stage 2 of 2" in line_b and "34% | done" in line_b, text
    assert f"100% | running: {len(canary)}/3 devices" in line_b and "halted" not in line_b, text
    # per device, one row per model line with its release and health
    rows = device_rows(dom)
    assert rows.keys() == {(d, m) for d in devices for m in (A, B)}, rows
    line, state_, release, _variant, health, _p95, detail = rows[failing, A]
    assert (line, state_, release, health) == (A, "failed", "1 → 2", "failed"), rows[failing, A]
    assert detail.startswith("SelfTestFailed"), detail
    for d in canary:
        assert rows[d, B][1:3] == ["active", "2"] and rows[d, B][4] == "ok", rows[d, B]
    assert all(rows[d, A][0] == A and rows[d, B][0] == B for d in devices)


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


def test_an_open_page_follows_a_rollout_without_being_reloaded(broker, tmp_path):
    """The page is loaded once, showing two devices on release 1 and no rollout; release 2 is then rolled
    out while it stays open, and the same document (a mark set in it survives) comes to show the rollout
    done and both devices active on release 2: its polling updates it, no reload needed."""
    devices = ["cam0", "cam1"]
    with served_fleet(broker, tmp_path) as (world, settings, agents, pub, dash):
        for d in devices:
            agents.add(world.agent_config(tmp_path, d, FLEET, settings))
        pub.start()
        assert pub.wait_for_devices(2, HANG_S) == 2
        with Page(dash.url, tmp_path / "profile") as page:
            on_release_1 = {(d, ""): ["active", "1"] for d in devices}
            wait_for(lambda: {k: r[1:3] for k, r in device_rows(page.dom()).items()} == on_release_1,
                     "both devices active on release 1 on the page")
            assert "no rollout published yet" in page_text(page.dom())
            polls = page.evaluate("window.cuvilMark = 'loaded once'; "
                                  "Number(document.getElementById('updates').dataset.count)")

            pub.publish(world.bundles[2], canary=100.0, halt_on=10.0)
            rollout = pub.watch(timeout_s=HANG_S * 3, stage_timeout_s=HANG_S * 2, settle_s=0)
            assert rollout.status == "complete", rollout

            def updated() -> str | bool:
                dom = page.dom()
                rows, text = device_rows(dom), page_text(dom)
                return (all(r[1:3] == ["active", "2"] for r in rows.values()) and len(rows) == 2
                        and "complete | · | stage 1 of 1" in text and "100% | done" in text and dom)

            dom = wait_for(updated, "the open page to show release 2 rolled out")
            assert page.evaluate("window.cuvilMark") == "loaded once"  # the same document: no reload
            assert int(re.search(r'id="updates" data-count="(\d+)"', dom).group(1)) > polls
