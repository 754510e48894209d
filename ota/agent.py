"""The ``cuvil-agent`` daemon: follows its fleet's release topic, downloads announced bundles in verified
chunks (over MQTT, or from the announcement's signed HTTP(S) URL with MQTT as the fallback), installs them
through ``Installer``, obeys signed commands, reports every state transition and keeps serving the
active model to local apps throughout. A multi-model device (``[[models]]``) does all of that per model
line (``ModelLine``: its own release topic, state directory, slots and release counter), and serves the
lines together under one core budget, one admission controller (``runtime_wasm.admission``) and one
root of trust (``installer.update_roots``).

Threads: paho's network thread only queues messages; one worker thread handles them in order (so all
agent state has one owner); the inference servers (the Unix-socket JSON one and, with ``[http]``, the HTTP
API with its metrics) answer from their own threads through ``ModelHost``.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TextIO

from runtime_wasm import DeviceAdmission, schema
from runtime_wasm.schema import Optional

from .bundle import read_header
from .chunks import PART_FILE, ChunkTransfer, file_sha256, read_progress
from .config import AgentConfig, default_hardware_id, model_policies, serving_policy
from .crypto import parse_json
from .errors import (
    FormatError,
    HashMismatch,
    InstallError,
    NoActiveModel,
    OtaError,
    ReplayedCommand,
    RollbackError,
    TransferFailed,
    TransportError,
    UnauthorizedMessage,
    UnknownModel,
    VerificationError,
    WrongModel,
    WrongTarget,
)
from .http_api import HttpApiServer
from .http_download import HttpDownload
from .installer import ENVELOPE_FILE, Installer, align_roots, line_dirs, trusted_root
from .metadata import parse_time, time_text
from .metrics import LineUpdate, UpdateCollector
from .protocol import (
    Announcement,
    Command,
    Topics,
    format_time,
    sha256_hex,
    status_payload,
    verify_announcement,
    verify_command,
)
from .serve import InferenceServer, ModelHost, ModelRegistry
from .store import read_json, write_json
from .telemetry import ServingWatch, Telemetry, TelemetryMetrics
from .transport import MqttClient

log = logging.getLogger(__name__)
STORE_FILE = "agent.json"
TRANSFER_DIR = "transfer"
#: installer steps that start a reported state
_STEP_STATES = {"verified": "installing", "reverified": "self-test"}


class JsonLog:
    """Structured logs: one JSON object per line (time, device, event, fields).

    Logging is never fatal: a log file that cannot be opened or written (disk full, ``/dev/full``, a
    removed mount) falls back to stderr, and lines that cannot be written anywhere are counted in
    ``dropped``; the agent keeps serving and updating either way."""

    def __init__(self, device: str, path: str = "") -> None:
        self.device = device
        self.dropped = 0
        self._lock = threading.Lock()
        self._out: TextIO = sys.stderr
        if path:
            try:
                self._out = open(path, "a", buffering=1)
            except OSError as exc:
                self._fallback(f"cannot open log file {path}: {exc}")

    def __call__(self, event: str, /, **fields: Any) -> None:
        line = json.dumps({**fields, "ts": round(time.time(), 3), "device": self.device, "event": event},
                          default=str)
        with self._lock:
            try:
                self._out.write(line + "\n")
                self._out.flush()
            except (OSError, ValueError) as exc:  # ValueError: a closed file
                self.dropped += 1
                self._fallback(f"log write failed: {exc}")

    def _fallback(self, why: str) -> None:
        if self._out is not sys.stderr:
            try:
                self._out.close()
            except OSError:
                pass
            self._out = sys.stderr
        try:
            sys.stderr.write(json.dumps({"device": self.device, "event": "log_failed", "detail": why}) + "\n")
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        if self._out is not sys.stderr:
            try:
                self._out.close()
            except OSError:
                pass


class _Steps:
    """An installer's step callback, bound to its line once the line exists (the installer comes first)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.line: ModelLine | None = None

    def __call__(self, name: str) -> None:
        self.agent._step(self.line, name)


#: ``agent.json`` (a line's or the device's): every field optional, None standing for "not stored"
STORE_SCHEMA = schema.record({
    "announce_seq": Optional(schema.integer()), "announce_digest": Optional(schema.text(64)),
    "failed": Optional(schema.mapping(schema.text(64), schema.text(1 << 20), 1 << 16)),
    "nonces": Optional(schema.mapping(schema.text(64), time_text, 1 << 16)),
    "commands_after": Optional(time_text),
})


class Store:
    """A small JSON document the agent keeps in a state directory (``agent.json``), saved on every change.

    A damaged one (``STORE_SCHEMA``) is logged, dropped and rebuilt from ``default``, with ``rebuilt``
    set: what it held only narrows what the agent accepts (announcement order, failed releases, used
    nonces), and the signatures, the installer's release counter and ``commands_after`` (see
    ``unused_command``) keep their guarantees without it; a device must not stop updating for it."""

    def __init__(self, path: Path, default: dict[str, Any]) -> None:
        self.path = path
        try:
            stored = read_json(path, {}, STORE_SCHEMA)
            self.rebuilt = False
        except FormatError as exc:
            log.warning("state file unreadable, rebuilt: %s", exc)
            stored, self.rebuilt = {}, True
        self.data: dict[str, Any] = {**default, **{k: v for k, v in stored.items() if v is not None}}

    def save(self, **changes: Any) -> None:
        self.data.update(changes)
        write_json(self.path, self.data)


_LINE_STORE = {"announce_seq": 0, "announce_digest": "", "failed": {}}
#: what a line's summary repeats from its last status (``ModelLine.summary``)
_SUMMARY_FIELDS = ("bundle", "target_release", "error")


class ModelLine:
    """One model's signed release line on the device: its announcements, transfer, installer (slots,
    release counter), the host serving it and the state it reports. A single-model agent has one line
    (``name`` empty) in ``state_dir`` on the fleet's release topic, exactly as before lines existed; each
    ``[[models]]`` entry is a line named after its model, in ``<state_dir>/models/<name>``, on the topic
    ``<fleet>/release/<name>``, installing only bundles signed for that name."""

    def __init__(self, agent: Agent, name: str, installer: Installer, host: ModelHost, topic: str,
                 store: Store) -> None:
        self.agent, self.name, self.installer, self.host, self.topic = agent, name, installer, host, topic
        self.store = store
        self._drop_installed_transfer()
        self._health: dict[str, Any] = {}  # why the model on disk is not served (sent with every status)
        self._served = self._disk_key()
        self.state = "active" if host.release is not None else "idle"
        if host.load_error is not None and not isinstance(host.load_error, NoActiveModel):
            self.state = self._fall_back(host.load_error, "at start")
        self.ann: Announcement | None = None
        self.transfer: ChunkTransfer | None = None
        self._http: HttpDownload | None = None  # the transfer's HTTP source, while it is the one used
        self._chunk_subs: set[str] = set()
        self._last_progress = 0.0
        self._update_state: str | None = None  # the last state sent as an ``update_state`` event
        self._reported: dict[str, Any] = {}  # the release fields of this line's last status (see summary)
        self._last: dict[str, Any] = {}  # every field of this line's last status but its event (see resend)

    @property
    def _state_dir(self) -> Path:
        return self.installer.state_dir

    def log(self, event: str, /, **fields: Any) -> None:
        self.agent.log(event, **({"model": self.name} if self.name else {}), **fields)

    def emit(self, event: str, /, **data: Any) -> None:
        self.agent.telemetry.emit(event, **({"model": self.name} if self.name else {}), **data)

    @property
    def busy(self) -> bool:
        """Downloading over HTTP with data ready: the agent's loop should not sleep."""
        return self._http is not None and not self._http.waiting

    def tick(self, check_disk: bool) -> None:
        if check_disk:
            self._follow_disk()
        if self.transfer and self._http:
            self._http_step(self.transfer, self._http)
        elif self.transfer and self.agent.mqtt.connected:
            try:
                if self.transfer.due():
                    self.log("transfer_retry", chunks=self.transfer.wanted(), retry=self.transfer.retries)
                    self.agent.mqtt.subscribe(self._chunk_topics(self.transfer.wanted()))
            except TransferFailed as exc:
                self._fail(self.transfer.ann, exc)

    def on_connected(self) -> None:
        if self.transfer:
            self.transfer.resume()
            self.log("transfer_resume", bundle=self.transfer.ann.bundle_sha256, from_chunk=self.transfer.have,
                     total=self.transfer.total)
        self.resend()

    # -- announcements ------------------------------------------------------------------------
    def on_announcement(self, payload: bytes) -> None:
        store = self.store.data
        try:
            ann = verify_announcement(payload, self.installer.trust, self.agent.cfg.fleet, _now(),
                                      self.agent.cfg.limits)
            if self.name and ann.name != self.name:  # signed: a line never takes another model's release
                raise WrongModel(f"announcement {ann.seq} offers model {ann.name!r} on model {self.name!r}'s "
                                 "release topic")
            digest = sha256_hex(payload)
            last = store["announce_seq"]
            if ann.seq < last or (ann.seq == last and digest != store["announce_digest"]):
                raise RollbackError(f"announcement seq {ann.seq} is not newer than seq {last} (replayed)")
        except VerificationError as exc:
            self._refuse(exc, "announcement")
            return
        if ann.seq > last:
            self.store.save(announce_seq=ann.seq, announce_digest=digest)
            self.log("announcement", seq=ann.seq, release=ann.release, bundle=ann.bundle_sha256,
                     selected=ann.selects(self.agent.device), halted=ann.halted)
        self.ann = ann
        self._consider(ann, forced=False)

    def _consider(self, ann: Announcement, forced: bool) -> None:
        """Start, continue or abandon a download as the current announcement says."""
        if self.transfer and self.transfer.ann.bundle_sha256 != ann.bundle_sha256:
            self._abandon("superseded by another release")
        wanted = forced or ann.selects(self.agent.device)
        if not wanted or ann.halted:
            if self.transfer:
                self._abandon("rollout halted" if ann.halted else "device no longer selected")
            return
        if ann.release <= self.installer.trust.release_counter or self.transfer:
            return
        failed = self.store.data["failed"]
        if ann.bundle_sha256 in failed and not forced:
            return  # failed here before: only an explicit install command retries it
        try:
            ann.check_target(self.installer.hardware_id, self.installer.profile)
        except WrongTarget as exc:  # recorded like a failed release: a retained announcement is not retried
            self.store.save(failed={**failed, ann.bundle_sha256: f"{type(exc).__name__}: {exc}"})
            self._refuse(exc, "announcement", bundle=ann.bundle_sha256, target_release=ann.release)
            return
        self.transfer = ChunkTransfer(self._state_dir / TRANSFER_DIR, ann, self.agent.cfg.limits)
        if ann.url:  # the signed URL first; MQTT chunks when it fails
            self._http = HttpDownload(self.transfer, ann.url, self.agent.cfg.download, log=self.log)
        self.log("transfer_start", bundle=ann.bundle_sha256, release=ann.release, total=self.transfer.total,
                 from_chunk=self.transfer.have, source="http" if self._http else "mqtt")
        self._report("downloading", bundle=ann.bundle_sha256, target_release=ann.release,
                     have=self.transfer.have, total=self.transfer.total)
        self._request_window()

    def _abandon(self, why: str) -> None:
        assert self.transfer is not None
        bundle = self.transfer.ann.bundle_sha256
        self.log("transfer_abandoned", bundle=bundle, reason=why)
        self._close_http()
        self.transfer.discard()
        self.transfer = None
        self._request_window()
        self._report("active" if self.host.release is not None else "idle", event="withdrawn", detail=why,
                     bundle=bundle)

    def _close_http(self) -> None:
        if self._http:
            self._http.close()
            self._http = None

    # -- chunks -------------------------------------------------------------------------------
    def _chunk_topics(self, indices: list[int]) -> list[str]:
        assert self.transfer is not None
        return [self.agent.topics.chunk(self.transfer.ann.bundle_sha256, i) for i in indices]

    def _request_window(self) -> None:
        """Subscribe to the chunks of the current window only; drop subscriptions no longer needed."""
        want = set(self._chunk_topics(self.transfer.wanted())) if self.transfer and not self._http else set()
        self.agent.mqtt.unsubscribe(self._chunk_subs - want)
        self.agent.mqtt.subscribe(want - self._chunk_subs)
        self._chunk_subs = want

    def wants_chunk(self, bundle_sha: str) -> bool:
        return self.transfer is not None and self.transfer.ann.bundle_sha256 == bundle_sha

    def on_chunk(self, bundle_sha: str, index: int, data: bytes) -> None:
        t = self.transfer
        if t is None or bundle_sha != t.ann.bundle_sha256 or self._http:
            return  # left over from an earlier subscription of the persistent session
        try:
            if not t.accept(index, data):
                return
        except HashMismatch as exc:
            self._refuse(exc, "chunk", chunk=index)
            try:
                t.retry_later(str(exc))
            except TransferFailed as failed:
                self._fail(t.ann, failed)
            return
        self._request_window()
        self._progressed(t, source="mqtt")

    def _http_step(self, t: ChunkTransfer, h: HttpDownload) -> None:
        """Read a bounded piece over HTTP; when the server lies or retries run out, refuse it (a lie is
        reported like any refused input) and continue from the verified prefix over MQTT."""
        try:
            done = h.step()
        except (VerificationError, TransferFailed) as exc:
            if isinstance(exc, VerificationError):
                self._refuse(exc, "http download", bundle=t.ann.bundle_sha256, url=h.url)
            self.log("http_fallback", bundle=t.ann.bundle_sha256, error=type(exc).__name__, detail=str(exc),
                     from_chunk=t.have)
            self._close_http()
            t.resume()
            self._request_window()
            return
        except Exception as exc:  # the download area itself failed (disk full): as a failed MQTT transfer
            self._fail(t.ann, exc)
            return
        if done or not h.waiting:
            self._progressed(t, source="http", http_requests=h.requests, http_bytes=h.received)

    def _progressed(self, t: ChunkTransfer, **source: Any) -> None:
        """After verified chunks were stored: install when complete, else report progress (at most 1/s)."""
        now = time.monotonic()
        if t.done:
            self.log("transfer_done", bundle=t.ann.bundle_sha256, total=t.total, resumed_from=t.resumed_from,
                     fetched=t.fetched, **source)
            self.install(t)
        elif now - self._last_progress >= 1.0:
            self._last_progress = now
            self._report("downloading", bundle=t.ann.bundle_sha256, target_release=t.ann.release, have=t.have,
                         total=t.total)

    def install(self, t: ChunkTransfer) -> None:
        ann = t.ann
        self._report("verifying", bundle=ann.bundle_sha256, target_release=ann.release)
        self.emit("install_started", bundle=ann.bundle_sha256, target_release=ann.release)
        try:
            if file_sha256(t.path, self.agent.cfg.ota.chunk_bytes) != ann.bundle_sha256:
                raise HashMismatch("reassembled bundle does not match the announced sha256")
            manifest = self.installer.install(t.path, report=lambda msg: self.log("check", detail=msg))
        except Exception as exc:  # any failure is recorded: a retained announcement must not retry it forever
            self._fail(ann, exc)
            return
        self._close_http()
        self.transfer = None
        t.discard()
        self._served = self._disk_key()
        try:
            self.host.reload()
        except Exception as exc:  # committed, yet it cannot be served here: never a silent old model
            state = self._fall_back(exc, f"after installing release {manifest.release}")
            self._fail(ann, InstallError(f"release {manifest.release} was installed but cannot be served "
                                         f"({type(exc).__name__}: {exc}); now {state}"))
            return
        self._health = {}
        self.log("installed", release=manifest.release, version=manifest.version)
        self.emit("install_finished", bundle=ann.bundle_sha256, release=manifest.release,
                  version=manifest.version)
        self._report("active", bundle=ann.bundle_sha256, version=manifest.version)

    def step(self, name: str) -> None:
        """An installer step of this line: reported as the state it starts."""
        if name in _STEP_STATES and self.ann is not None:
            self._report(_STEP_STATES[name], bundle=self.ann.bundle_sha256, target_release=self.ann.release)

    def _fail(self, ann: Announcement, exc: Exception) -> None:
        """A release that failed here: reported with its reason and not retried unless commanded."""
        if self.transfer:
            self._close_http()
            self.transfer.discard()
            self.transfer = None
            self._request_window()
        reason = f"{type(exc).__name__}: {exc}"
        self.store.save(failed={**self.store.data["failed"], ann.bundle_sha256: reason})
        self.log("failed", bundle=ann.bundle_sha256, release=ann.release, reason=reason)
        self.emit("install_failed", bundle=ann.bundle_sha256, target_release=ann.release,
                  error=type(exc).__name__, reason=reason)
        self._report("failed", bundle=ann.bundle_sha256, target_release=ann.release, error=type(exc).__name__,
                     reason=reason)

    # -- commands -----------------------------------------------------------------------------
    def cmd_install(self, cmd: Command) -> None:
        if self.ann is None or self.ann.bundle_sha256 != cmd.bundle_sha256:
            self._report(self.state, event="command_failed", detail="that bundle is not announced here")
            return
        self.store.save(failed={k: v for k, v in self.store.data["failed"].items() if k != cmd.bundle_sha256})
        self._consider(self.ann, forced=True)

    def cmd_rollback(self, cmd: Command) -> None:
        try:
            manifest = self.installer.rollback()
        except (OtaError, OSError) as exc:
            self._report(self.state, event="command_failed", error=type(exc).__name__, detail=str(exc))
            return
        self._served = self._disk_key()
        try:
            self.host.reload()
        except Exception as exc:
            self._report(self._unhealthy(exc, "after the rollback command"))
            return
        self._health = {}
        self.log("rolled_back", release=manifest.release)
        self.emit("rolled_back", release=manifest.release, reason="rollback command")
        self._report("rolled_back", version=manifest.version)

    def cmd_report(self, cmd: Command) -> None:
        self.resend(event="report")

    # -- serving what the state directory says ------------------------------------------------
    def _disk_key(self) -> tuple[str, int, int] | None:
        """Which slot is active and which file its signed manifest is (an install writes a new one), from
        ``stat`` alone (checked every second); None when there is none or it is unreadable."""
        try:
            slot = self.installer.active_dir()
            st = (slot / ENVELOPE_FILE).stat()
        except (OtaError, OSError):
            return None
        return slot.name, st.st_ino, st.st_mtime_ns

    def _follow_disk(self) -> None:
        """An operator may install or roll back with ``cuvil-agent`` while the agent runs: serve what the
        state directory says (the trust state is re-read from disk at every use anyway)."""
        key = self._disk_key()
        if key == self._served:
            return
        self._served = key
        self.log("state_changed", active=key)
        try:
            self.host.reload()
        except Exception as exc:
            self._report(self._fall_back(exc, "after a change on disk"))
            return
        self._health = {}
        self._report("active" if self.host.release is not None else "idle", event="state_changed")

    def _fall_back(self, exc: BaseException, when: str) -> str:
        """The active model cannot be served (corrupt slot, does not load under the policy): go back to the
        other slot after re-verifying it under the current root; when that fails too, keep running, report
        ``unhealthy`` and wait for a rollback or install command. Returns the state to report."""
        self.log("load_failed", when=when, error=type(exc).__name__, detail=str(exc))
        try:
            manifest = self.installer.rollback()
            self._served = self._disk_key()
            self.host.reload()
        except Exception as again:
            return self._unhealthy(again, f"{when}: {type(exc).__name__}: {exc}")
        self._health = {"error": type(exc).__name__, "detail": f"{when}: {exc}; rolled back"}
        self.log("rolled_back", release=manifest.release, reason=str(exc))
        self.emit("rolled_back", release=manifest.release, reason=self._health["detail"],
                  error=type(exc).__name__)
        return "rolled_back"

    def _unhealthy(self, exc: BaseException, why: str) -> str:
        self._health = {"error": type(exc).__name__, "detail": f"no healthy model ({why}): {exc}"}
        self.log("unhealthy", **self._health)
        self.state = "unhealthy"
        return "unhealthy"

    def _drop_installed_transfer(self) -> None:
        """A crash between the install and removing its download leaves the whole bundle in ``transfer/``:
        drop it at start when its release is already installed (status would show it as in progress)."""
        part = self._state_dir / TRANSFER_DIR / PART_FILE
        try:
            with open(part, "rb") as f:
                release = read_header(f, self.agent.cfg.ota)["signed"]["release"]
        except (OSError, OtaError, KeyError, TypeError):
            return
        if isinstance(release, int) and release <= self.installer.trust.release_counter:
            shutil.rmtree(part.parent, ignore_errors=True)

    # -- reporting ----------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """This line in every status and telemetry summary of a multi-model device: its state and release,
        and the bundle (and error) its last status named, so a publisher following this line reads its
        outcome from whichever line's status arrives last."""
        return {"state": self.state, "release": self.host.release, **self._reported}

    def status_fields(self) -> dict[str, Any]:
        """What a status says about this line: its release (and model), and why it is unhealthy."""
        return {"release": self.host.release, **({"model": self.name} if self.name else {}), **self._health}

    def _report(self, state: str, **fields: Any) -> None:
        """Retained status (the last word on this device); dropped when offline and re-sent on connect."""
        self.state = state
        self._reported = {k: fields[k] for k in _SUMMARY_FIELDS if k in fields}
        self._last = {k: v for k, v in fields.items() if k != "event"}
        if state != self._update_state:
            self._update_state = state
            self.emit("update_state", **{"release": self.host.release, **fields, "state": state})
        self.log("status", state=state, release=self.host.release, detail=fields)
        self.agent.publish_status(state, self, **fields)

    def resend(self, **event: Any) -> None:
        """The last status again (on connect: one sent offline was dropped; on a ``report`` command), with
        its bundle, error and reason: a re-sent status says what the one it repeats said, so a failed
        device still names why and a publisher still reads the outcome."""
        self._report(self.state, **self._last, **event)

    def _refuse(self, exc: Exception, what: str, **fields: Any) -> None:
        """An input refused: logged and reported; the state (and the model served) do not change."""
        self.log("refused", what=what, error=type(exc).__name__, detail=str(exc), **fields)
        self._report(self.state, event="refused", what=what, error=type(exc).__name__, detail=str(exc),
                     **fields)


class Agent:
    """One device's update and serving loop; ``run(stop)`` blocks until ``stop`` is set."""

    def __init__(self, config: AgentConfig, on_step: Callable[[str], None] | None = None,
                 log_sink: JsonLog | None = None) -> None:
        self.cfg, self.device = config, config.device_id
        self.topics = Topics(config.broker.topic_prefix, config.fleet)
        self.topics.status(self.device)  # validates the device id as one topic level
        self.log = log_sink or JsonLog(self.device, config.log_file)
        state = Path(config.state_dir)
        self._root = None  # provisions a line without trust state: the device's own root first
        if not all((d / "trust.json").exists() for d in self._line_dirs(state)):
            self._root = trusted_root(self._line_dirs(state))
            if self._root is None and config.trust_root:
                self._root = parse_json(Path(config.trust_root).read_bytes(),
                                        f"trust root {config.trust_root}")
        self._user_step = on_step
        self.telemetry = Telemetry(self.device, config.telemetry.directory or state / "telemetry",
                                   config.telemetry, self.log)
        self.models = ModelRegistry()  # by name, for the HTTP API and its metrics
        self.admission: DeviceAdmission | None = None  # shared by the lines of a multi-model device
        #: device-wide: command nonces (and, single-model, the line's announcement state too)
        self._device_store = Store(state / STORE_FILE, {**_LINE_STORE, "nonces": {}})
        if self._device_store.rebuilt:  # the used nonces are gone: no command signed before now is taken
            self._device_store.save(commands_after=format_time(_now()))
        self.lines = self._multi_lines(state) if config.models else [self._single_line()]
        self._serving = ServingWatch(self.models)
        self._last_disk_check = self._last_telemetry = 0.0
        self._events: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.server: InferenceServer | None = None
        self.servers: list[InferenceServer] = []
        self.http: HttpApiServer | None = None
        self.mqtt = MqttClient(config.broker, f"cuvil-{config.fleet}-{self.device}", self._enqueue,
                               config.limits, will=(self.topics.status(self.device), self._status("offline")),
                               on_connect=lambda: self._events.put(("", b"connected")))

    def _line_dirs(self, state: Path) -> list[Path]:
        return list(line_dirs(state, [m.name for m in self.cfg.models]).values()) or [state]

    def _single_line(self) -> ModelLine:
        """Today's device: one model in ``state_dir``, served under ``serving_policy``."""
        cfg = self.cfg
        policy = serving_policy(cfg)  # always served supervised, under a deadline
        steps = _Steps(self)
        installer = Installer(cfg.state_dir, cfg.hardware_id or default_hardware_id(), cfg.profile or None,
                              root=self._root, config=cfg.ota, on_step=steps, policy=policy)
        host = ModelHost(installer, policy, cfg.http.model_name if cfg.http else "")
        self.models.add(host)
        steps.line = ModelLine(self, "", installer, host, self.topics.release, self._device_store)
        return steps.line

    def _multi_lines(self, state: Path) -> list[ModelLine]:
        """One line per ``[[models]]`` entry: threads from one core budget, one admission controller, one
        root of trust (brought level across the lines before any model is served: ``align_roots``)."""
        cfg = self.cfg
        self.admission = DeviceAdmission(cfg.admission.max_pending, cfg.admission.reserve_per_level)
        lines, made = [], []
        for m, policy, where in zip(cfg.models, model_policies(cfg), self._line_dirs(state)):
            steps = _Steps(self)
            made.append((m, policy, steps, Installer(where, cfg.hardware_id or default_hardware_id(),
                                                     cfg.profile or None, root=self._root, config=cfg.ota,
                                                     on_step=steps, policy=policy, model=m.name)))
        align_roots([installer for *_, installer in made])
        for m, policy, steps, installer in made:
            host = ModelHost(installer, policy, m.name, self.admission.gate(m.priority))
            self.models.add(host, m.priority)
            steps.line = ModelLine(self, m.name, installer, host, self.topics.model_release(m.name),
                                   Store(installer.state_dir / STORE_FILE, _LINE_STORE))
            lines.append(steps.line)
        return lines

    # -- the single model's line, as before lines existed --------------------------------------
    @property
    def host(self) -> ModelHost:
        return self.lines[0].host

    @property
    def installer(self) -> Installer:
        return self.lines[0].installer

    @property
    def transfer(self) -> ChunkTransfer | None:
        return self.lines[0].transfer

    @property
    def state(self) -> str:
        return self.lines[0].state

    @property
    def _store(self) -> dict[str, Any]:
        return self.lines[0].store.data

    def _install(self, t: ChunkTransfer) -> None:
        self.lines[0].install(t)

    def line(self, model: str) -> ModelLine:
        """The line of ``model``; ``UnknownModel`` when this device has none."""
        for line in self.lines:
            if line.name == model:
                return line
        raise UnknownModel(f"no model line {model!r} on this device")

    # -- lifecycle ----------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> int:
        """Serve until ``stop`` (SIGTERM) is set; 1 when the broker stays unreachable beyond its retries."""
        if self.cfg.socket:
            self.server = InferenceServer(self.cfg.socket, self.host, self.cfg.serve)
            self.servers.append(self.server)
        for m in self.cfg.models:
            if m.socket:
                self.servers.append(InferenceServer(m.socket, self.line(m.name).host, self.cfg.serve))
        if self.cfg.http:
            self.http = HttpApiServer(self.models, self.cfg.http)
            self.http.metrics.registry.register(TelemetryMetrics(self.telemetry))  # type: ignore[arg-type]
            self.http.metrics.registry.register(UpdateCollector(self._updates))  # type: ignore[arg-type]
        self.log("start", state=self.state, release=self.host.release, fleet=self.cfg.fleet,
                 http=self.http.address if self.http else None,
                 **({"models": self._summaries()} if self.cfg.models else {}))
        self.mqtt.subscribe([*(line.topic for line in self.lines), self.topics.command(self.device)])
        self.telemetry.start(self.mqtt, self.topics.telemetry(self.device))
        self.mqtt.start()
        code = 0
        try:
            while not stop.is_set():
                try:
                    busy = any(line.busy for line in self.lines)
                    topic, payload = self._events.get(timeout=0 if busy else 0.1)
                    self._dispatch(topic, payload)
                except queue.Empty:
                    pass
                self._tick()
                if not self.mqtt.alive:
                    self.log("broker_unreachable", error=str(self.mqtt.fatal))
                    code = 1
                    break
        finally:
            self.close()
        return code

    def close(self) -> None:
        """Graceful stop: last retained status says offline (with the release still served)."""
        self.log("stop", state=self.state, release=self.host.release)
        self.telemetry.close()  # what is not sent yet stays queued on disk
        self.mqtt.close(final=(self.topics.status(self.device), self._status("offline")))
        for server in self.servers:
            server.close()
        self.servers = []
        if self.http:
            self.http.close()
        for line in self.lines:
            line.host.close()

    def _enqueue(self, topic: str, payload: bytes, _retained: bool) -> None:
        self._events.put((topic, payload))

    # -- dispatch (worker thread) -------------------------------------------------------------
    def _dispatch(self, topic: str, payload: bytes) -> None:
        """Handle one message; whatever it raises is refused and reported, so no single message (spoofed,
        malformed, or hitting a bug) can end ``run()`` and, re-delivered after a restart, do so again."""
        try:
            self._handle(topic, payload)
        except Exception as exc:
            self._refuse(exc, "message", topic=topic)

    def _handle(self, topic: str, payload: bytes) -> None:
        if topic == "":
            self._on_connected()
            return
        if not payload:
            return  # a cleared retained message
        if topic == self.topics.command(self.device):
            self._on_command(payload)
            return
        for line in self.lines:
            if topic == line.topic:
                line.on_announcement(payload)
                return
        if (chunk := self.topics.parse_chunk(topic)) is not None:
            for line in self.lines:
                if line.wants_chunk(chunk[0]):
                    line.on_chunk(*chunk, payload)
            return  # else left over from an earlier subscription of the persistent session
        self._refuse(UnauthorizedMessage(f"message on topic {topic!r}, which this agent does not accept"),
                     "message")

    def _on_connected(self) -> None:
        self.log("connected", broker=f"{self.cfg.broker.host}:{self.cfg.broker.port}", n=self.mqtt.connects)
        self.telemetry.wake()  # send what piled up while offline
        for line in self.lines:
            line.on_connected()

    def _tick(self) -> None:
        now = time.monotonic()
        check_disk = now - self._last_disk_check >= 1.0
        if check_disk:
            self._last_disk_check = now
        for line in self.lines:
            line.tick(check_disk)
        if check_disk:
            for event, data in self._serving.events():
                self.telemetry.emit(event, **data)
        if self.cfg.telemetry_interval_s and now - self._last_telemetry >= self.cfg.telemetry_interval_s:
            self._last_telemetry = now
            self._telemetry()

    def _step(self, line: ModelLine | None, name: str) -> None:
        if line is not None:  # None: an install during construction (none happens there)
            line.step(name)
        if self._user_step:
            self._user_step(name)

    # -- commands -----------------------------------------------------------------------------
    def _on_command(self, payload: bytes) -> None:
        now = _now()
        trust = self.lines[0].installer.trust  # one trust root per device: every line is provisioned with it
        grace = timedelta(seconds=trust.config.expiry_grace_seconds)
        try:
            cmd = verify_command(payload, trust, self.cfg.fleet, self.device, now, self.cfg.limits)
            nonces = unused_command(self._device_store.data, cmd, now, grace)
        except VerificationError as exc:
            self._refuse(exc, "command")
            return
        self._device_store.save(nonces={**nonces, cmd.nonce: cmd.expires})  # before acting: no re-enabling
        self.log("command", action=cmd.action, nonce=cmd.nonce, **({"model": cmd.model} if cmd.model else {}))
        getattr(self, f"_cmd_{cmd.action}")(cmd)

    def _cmd_report(self, cmd: Command) -> None:
        for line in self.lines:
            line.cmd_report(cmd)
        self._telemetry()

    def _cmd_install(self, cmd: Command) -> None:
        if line := self._command_line(cmd):
            line.cmd_install(cmd)

    def _cmd_rollback(self, cmd: Command) -> None:
        if line := self._command_line(cmd):
            line.cmd_rollback(cmd)

    def _command_line(self, cmd: Command) -> ModelLine | None:
        """The line a command is for: the one it names; else the only one, or for ``install`` the line
        that announced its bundle. None (and ``command_failed`` reported) when there is no such line."""
        try:
            if cmd.model:
                return self.line(cmd.model)
        except UnknownModel as exc:
            self.lines[0]._report(self.lines[0].state, event="command_failed", error=type(exc).__name__,
                                  detail=str(exc))
            return None
        if len(self.lines) == 1:
            return self.lines[0]
        announced = [line for line in self.lines if line.ann and line.ann.bundle_sha256 == cmd.bundle_sha256]
        if cmd.action == "install" and announced:
            return announced[0]
        self.lines[0]._report(self.lines[0].state, event="command_failed",
                              detail=f"a {cmd.action} command to a multi-model device must name its model")
        return None

    # -- reporting ----------------------------------------------------------------------------
    def _updates(self) -> list[LineUpdate]:
        """Every line's update state and download progress, for ``/metrics``."""
        return [(line.host.name or line.name, line.state, (t.have, t.total) if (t := line.transfer) else None)
                for line in self.lines]

    def _summaries(self) -> dict[str, dict[str, Any]]:
        return {line.name: line.summary() for line in self.lines}

    def _status(self, state: str, line: ModelLine | None = None, **fields: Any) -> bytes:
        """Every status names the device's targets, so a publisher stages only devices a release is for;
        on a multi-model device it also names the line it is about and carries every line's state."""
        line = line or self.lines[0]
        extra = {"models": self._summaries()} if self.cfg.models else {}
        return status_payload(self.device, state, hardware_id=line.installer.hardware_id,
                              profile=line.installer.profile or "", **extra,
                              **{**line.status_fields(), **fields})

    def publish_status(self, state: str, line: ModelLine, **fields: Any) -> None:
        if not self.mqtt.connected:
            return
        try:
            self.mqtt.publish(self.topics.status(self.device), self._status(state, line, **fields),
                              retain=True)
        except TransportError as exc:
            self.log("publish_failed", error=str(exc))

    def _refuse(self, exc: Exception, what: str, **fields: Any) -> None:
        """A device-wide input refused (a command, a stray message): reported on the first line."""
        self.lines[0]._refuse(exc, what, **fields)

    def _telemetry(self) -> None:
        """A summary: state, transfer, serving per model (``ServingWatch``) and the queue's own counts, so
        the receiver learns how many records the bound dropped."""
        t = self.transfer
        self.telemetry.emit("summary", state=self.state, release=self.host.release,
                            transfer={"have": t.have, "total": t.total} if t else None,
                            models=self._serving.summary(), telemetry=self.telemetry.stats(),
                            **({"lines": self._summaries()} if self.cfg.models else {}))


def unused_command(store: dict[str, Any], cmd: Command, now: datetime, grace: timedelta) -> dict[str, str]:
    """The used nonces of the device store (nonce -> the command's expiry, as ``STORE_SCHEMA`` checked it)
    still worth keeping, as long as ``verify_command`` would still accept their command (its expiry plus
    the grace); ``ReplayedCommand`` when ``cmd``'s nonce is one of them, or ``cmd`` was issued before
    ``commands_after`` (the store was rebuilt then: the nonces used before are unknown)."""
    nonces = {n: e for n, e in store["nonces"].items() if parse_time(e) + grace >= now}
    if cmd.nonce in nonces:
        raise ReplayedCommand(f"command nonce {cmd.nonce[:12]} was already used")
    after = store.get("commands_after")
    if after and parse_time(cmd.issued) < parse_time(after):
        raise ReplayedCommand(f"command {cmd.nonce[:12]} was issued before {after}, when this device's "
                              "record of used nonces was lost (a damaged state file)")
    return nonces


def _now() -> datetime:
    return datetime.now(timezone.utc)


def describe_state(state_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``cuvil-agent status`` shows besides the active model: last announcement, failures, transfer
    (as the agent would read them: a damaged file as the agent would rebuild it)."""
    store = Store(Path(state_dir) / STORE_FILE, _LINE_STORE).data
    return {"announce_seq": store["announce_seq"], "failed": store["failed"],
            "transfer": read_progress(Path(state_dir) / TRANSFER_DIR)}
