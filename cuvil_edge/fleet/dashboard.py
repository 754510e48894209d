"""``cuvil-edge fleet dashboard``: a live web page of one fleet for operators, fed only by MQTT.

``FleetView`` subscribes (read-only) to the fleet's retained device statuses, the publisher's retained
rollout summaries (``publisher.rollout_topic``: the fleet's line and each model line's) and the devices'
telemetry (through ``TelemetryCollector``), and folds them into one JSON snapshot: devices with, per
release line (the fleet's, or each model line of a multi-model device), its state, release, variant and
health; every line's rollout with its stages, progress, quality gates and halt reason; and latency per
release from the latest summaries. ``Dashboard`` serves that snapshot at ``/api/state`` and a static page
(``dashboard.html`` beside it, plain DOM code, no framework) that polls it once a second.

Given a fleet store (``--store``), ``StoreView`` answers instead, with no broker: each request reads one page
of devices (``/api/state?after=CURSOR&limit=N``; ``after`` in the reply continues it) and counts the whole
fleet by state and release in the database, and the page loads further pages on demand, so a request
costs a page, not the fleet (issue 39).

Why the standard library's HTTP server: the page is for an operator's machine (127.0.0.1 by default),
answers two small GETs and holds no connection open, so it needs none of the request deadlines the
device API (``cuvil_agent.http_api``) has to put on untrusted clients. What devices say is untrusted text: the
page only ever sets it as ``textContent``, never as HTML.
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from ota.config import BrokerSettings, TransferLimits
from ota.crypto import parse_json
from ota.errors import OtaError
from ota.protocol import TelemetryRecord, Topics, format_time, read_status
from ota.transport import MqttClient

from ..errors import CuvilError
from .publisher import ROLLOUT_TYPE, Rollout, line_status, rollout_topic, tool_client_id
from .store import FleetStoreError
from .telemetry import TelemetryCollector

if TYPE_CHECKING:
    from .store import FleetStore

log = logging.getLogger(__name__)
UPDATING = frozenset({"downloading", "verifying", "installing", "self-test"})
#: health words from best to worst: a multi-model device is as healthy as its worst line
HEALTH = ("ok", "degraded", "updating", "failed", "offline")
#: devices per page of a store's state (``?limit=`` asks for another number, up to the store's max_page)
PAGE = 200


class DashboardError(CuvilError):
    """The dashboard cannot serve (port taken, broker unreachable)."""


def health(status: Mapping[str, Any], serving: Iterable[Mapping[str, Any]]) -> str:
    """One word per release line: offline, failed (last update or the served model), updating, degraded
    (thermal, deadline kills or worker restarts in the latest summary of what it serves) or ok."""
    state = status.get("state", "")
    if state == "offline":
        return "offline"
    if state == "failed" or status.get("error"):
        return "failed"
    if state in UPDATING:
        return "updating"
    for model in serving:
        if model.get("thermal", {}).get("degraded") or model.get("deadline_kills") \
                or model.get("worker_restarts"):
            return "degraded"
    return "ok"


def _why(status: Mapping[str, Any]) -> str:
    """A status's error and its detail (or reason) as one text, the error named once."""
    error, detail = str(status.get("error") or ""), str(status.get("detail") or status.get("reason") or "")
    return detail if detail.startswith(error) else ": ".join(filter(None, (error, detail)))


def device_lines(status: Mapping[str, Any], summary: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """A device's release lines as the page shows them: the fleet's line ("") of a single-model device, or
    each model line of a multi-model one (``fleet.line_status``: the line its status is about in full, the
    others from the state, release, bundle and error every status carries), each with its health and what
    it serves (variant, p95) from the device's latest summary."""
    told = status.get("models") if isinstance(status.get("models"), Mapping) else (summary or {}).get("lines")
    names = sorted(told) if isinstance(told, Mapping) else [""]
    served = (summary or {}).get("models", {})
    offline = status.get("state") == "offline"  # its lines' last words are older than its will
    rows = []
    for name in names:
        line = line_status(status, name)
        if line is None:  # known from telemetry only
            line = dict(told[name]) if isinstance(told[name], Mapping) else {}
        serving = list(served.values()) if not name else [served[name]] if name in served else []
        rows.append({
            "model": name, "state": "offline" if offline else line.get("state", "unknown"),
            "release": line.get("release"), "target_release": line.get("target_release"),
            "have": line.get("have"), "total": line.get("total"),
            "health": "offline" if offline else health(line, serving), "detail": _why(line),
            "variants": sorted({m.get("variant") for m in serving if m.get("variant")}),
            "p95_ms": max((m.get("latency_ms", {}).get("p95") for m in serving
                           if m.get("latency_ms", {}).get("p95") is not None), default=None)})
    return rows


def device_entry(device: str, status: Mapping[str, Any], summary: Mapping[str, Any] | None,
                 heard: str | None = None) -> dict[str, Any]:
    """A device as the page lists it: its lines and, over them, its worst health; ``heard``: the time of its
    latest telemetry record."""
    lines = device_lines(status, summary)
    return {"device": device, "state": status.get("state", "unknown"), "lines": lines,
            "health": max((line["health"] for line in lines), key=HEALTH.index),
            "seen": max(filter(None, (status.get("time"), heard)), default=None)}


def release_latency(summaries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, release): devices reporting, requests in their latest summary interval, the median
    device's p50 and the worst device's p95/p99 (quantiles of different devices cannot be merged
    exactly; the worst p95 is what an SLO cares about)."""
    rows: dict[tuple[str, Any], dict[str, Any]] = {}
    for summary in summaries.values():
        for name, model in summary.get("models", {}).items():
            row = rows.setdefault((name, model.get("release")), {
                "model": name, "release": model.get("release"), "version": model.get("version"),
                "devices": 0, "requests": 0, "p50": [], "p95": [], "p99": [], "variants": set()})
            row["devices"] += 1
            row["variants"].add(model.get("variant") or "")
            for v in model.get("variants", {}).values():
                row["requests"] += v.get("requests") or 0
                for q in ("p50", "p95", "p99"):
                    if v.get(f"{q}_ms") is not None:
                        row[q].append(v[f"{q}_ms"])
    return [{**{k: row[k] for k in ("model", "release", "version", "devices", "requests")},
             "variants": sorted(v for v in row["variants"] if v),
             "p50_ms": statistics.median(row["p50"]) if row["p50"] else None,
             "p95_ms": max(row["p95"], default=None), "p99_ms": max(row["p99"], default=None)}
            for _, row in sorted(rows.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))]


class FleetView:
    """What the broker says about one fleet, kept up to date by two read-only MQTT clients."""

    def __init__(self, broker: BrokerSettings, fleet: str, limits: TransferLimits | None = None) -> None:
        self.topics = Topics(broker.topic_prefix, fleet)
        self._rollout_topic = rollout_topic(self.topics)
        self._line_rollouts = f"{self._rollout_topic}/"  # + <model>: one rollout per model line
        self._lock = threading.Lock()
        self.statuses: dict[str, dict[str, Any]] = {}
        self.summaries: dict[str, dict[str, Any]] = {}  # device -> data of its latest summary
        self.heard: dict[str, str] = {}  # device -> time of its latest telemetry record
        self.rollouts: dict[str, dict[str, Any]] = {}  # release line ("": the fleet's) -> its rollout
        name = tool_client_id("dashboard", fleet)  # clean sessions: nothing queued for a closed page
        self.mqtt = MqttClient(broker, name, self._on, limits, persistent=False)
        self.mqtt.subscribe([self.topics.all_status, self._rollout_topic, f"{self._line_rollouts}+"])
        self.telemetry = TelemetryCollector(broker, fleet, f"{name}-telemetry", limits, keep=16,
                                            on_record=self._on_record, persistent=False)
        self._closed = False

    def start(self, timeout_s: float = 15.0) -> FleetView:
        self.mqtt.start(wait_s=timeout_s)
        self.telemetry.start(timeout_s)
        return self

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.telemetry.close()
            self.mqtt.close()

    def _on(self, topic: str, payload: bytes, _retained: bool) -> None:
        """A rollout state (strict JSON) or a device status (``read_status``: its schema, as the publisher
        reads it); anything else is logged and dropped, never raised on the network thread."""
        rollout = topic == self._rollout_topic or topic.startswith(self._line_rollouts)
        try:
            msg = None if not payload else parse_json(payload, "rollout") if rollout else read_status(payload)
        except OtaError as exc:
            log.warning("dashboard: unreadable message on %s dropped: %s", topic, exc)
            return
        with self._lock:
            if rollout:
                line = topic[len(self._line_rollouts):] if topic != self._rollout_topic else ""
                if isinstance(msg, dict) and msg.get("type") == ROLLOUT_TYPE:
                    self.rollouts[line] = msg
                else:
                    self.rollouts.pop(line, None)
                return
            device = topic.rpartition("/")[2]
            if isinstance(msg, dict) and msg.get("device") == device:
                self.statuses[device] = msg
            elif msg is None:
                self.statuses.pop(device, None)  # retained status cleared: the device was retired

    def _on_record(self, record: TelemetryRecord) -> None:
        """Each new telemetry record once, in order (the collector drops repeats)."""
        with self._lock:
            self.heard[record.device] = record.time
            if record.event == "summary":
                self.summaries[record.device] = dict(record.data)

    def snapshot(self) -> dict[str, Any]:
        """Everything the page shows, as JSON-ready data: ``rollouts`` by release line ("": the fleet's),
        ``devices`` each with its ``lines`` and, over them, its worst health."""
        with self._lock:
            statuses = {d: dict(s) for d, s in self.statuses.items()}
            rollouts = {line: dict(r) for line, r in sorted(self.rollouts.items())}
            summaries, seen = dict(self.summaries), dict(self.heard)
        devices = [device_entry(d, statuses.get(d, {}), summaries.get(d), seen.get(d))
                   for d in sorted(statuses.keys() | summaries.keys())]
        return {"fleet": self.topics.fleet, "time": format_time(datetime.now(timezone.utc)),
                "connected": self.mqtt.connected, "devices": devices, "rollouts": rollouts,
                "releases": release_latency(summaries)}


class StoreView:
    """The fleet as its store has it (``--store``; no broker): ``snapshot`` reads one page of devices and
    counts the whole fleet in the database; each line's rollout with its outcomes counted there too. Latency
    per release is over the page's devices (their last summaries). It owns (and closes) the store."""

    def __init__(self, store: FleetStore, fleet: str, page: int = PAGE) -> None:
        self.store, self.fleet, self.page = store, fleet, page  # page: devices when a request names no limit

    def start(self, timeout_s: float = 15.0) -> StoreView:
        return self

    def close(self) -> None:
        self.store.close()

    def _rollout(self, line: str) -> dict[str, Any] | None:
        """The line's rollout as the publisher tells it (``Rollout.summary``), from counts, not rows."""
        row = self.store.current_rollout(line, outcomes=False)
        if row is None:
            return None
        rollout = Rollout(**{**row.record, "outcomes": {}})
        counts, failed = self.store.outcome_counts(row.id)
        size = self.store.stage_size(line, rollout.bundle_sha256, rollout.select_below)
        return {**rollout.summary(self.fleet, size), "outcomes": counts, "failed": failed}

    def snapshot(self, after: str | None = None, limit: int | None = None) -> dict[str, Any]:
        """One page of devices (``after``: the last page's ``after``; None in the reply: no more), the
        fleet's ``total`` of devices, its counts by state and release (per release line a device follows),
        and every line's rollout."""
        page = self.store.query_fleet(limit or self.page, after)
        counts = {f: {"unknown" if k is None else str(k): n for k, n in self.store.count_by(f).items()}
                  for f in ("state", "release")}
        rollouts = {line: r for line in sorted(self.store.count_by("line")) if (r := self._rollout(line))}
        return {"fleet": self.fleet, "time": format_time(datetime.now(timezone.utc)), "connected": True,
                "devices": [device_entry(r.device, r.status, r.telemetry) for r in page.rows],
                "after": page.after, "counts": counts, "total": self.store.device_count(),
                "rollouts": rollouts,
                "releases": release_latency({r.device: r.telemetry for r in page.rows if r.telemetry})}


def page() -> bytes:
    return resources.files(__package__).joinpath("dashboard.html").read_bytes()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        url = urlsplit(self.path)
        if url.path == "/":
            self._reply(HTTPStatus.OK, self.server.page, "text/html; charset=utf-8")
        elif url.path == "/api/state":
            self._state(parse_qs(url.query))
        else:
            self._reply(HTTPStatus.NOT_FOUND, b'{"error": "not found"}', "application/json")

    def _state(self, query: dict[str, list[str]]) -> None:
        """The snapshot; a store's paged by ``after`` and ``limit`` (a bad one: 400; the store down: 503)."""
        view = self.server.view
        try:
            if isinstance(view, StoreView):
                limit = query.get("limit", [str(view.page)])[-1]
                state = view.snapshot(query.get("after", [None])[-1], int(limit) if limit.isdigit() else -1)
            else:
                state = view.snapshot()
        except ValueError as exc:
            return self._reply(HTTPStatus.BAD_REQUEST, json.dumps({"error": str(exc)}).encode(),
                               "application/json")
        except FleetStoreError as exc:
            return self._reply(HTTPStatus.SERVICE_UNAVAILABLE, json.dumps({"error": str(exc)}).encode(),
                               "application/json")
        self._reply(HTTPStatus.OK, json.dumps(state, sort_keys=True).encode(), "application/json")

    def _reply(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; "
                                                    "style-src 'unsafe-inline'")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("dashboard: " + fmt, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], view: FleetView | StoreView) -> None:
        super().__init__(address, _Handler)
        self.view, self.page = view, page()


class Dashboard:
    """The page and its JSON on ``host:port`` (port 0: any free one), fed by a ``FleetView`` (the broker)
    or a ``StoreView`` (a fleet store, paged)."""

    def __init__(self, view: FleetView | StoreView, host: str = "127.0.0.1", port: int = 8088) -> None:
        self.view = view
        try:
            self._server = _Server((host, port), view)
        except OSError as exc:
            view.close()  # the dashboard owns its view, also when it cannot start
            raise DashboardError(f"cannot serve the dashboard on {host}:{port}: {exc}") from exc
        self._thread = threading.Thread(target=self._server.serve_forever, name="dashboard", daemon=True)
        self._closed = False

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> Dashboard:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the view; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self.view.close()

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
