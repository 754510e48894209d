"""The ``cuvil-agent`` daemon: follows its fleet's release topic, downloads announced bundles in verified
chunks (over MQTT, or from the announcement's signed HTTP(S) URL with MQTT as the fallback), installs them
through ``Installer``, obeys signed commands, reports every state transition and keeps serving the
active model to local apps throughout.

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

from .bundle import read_header
from .chunks import PART_FILE, ChunkTransfer, file_sha256
from .config import AgentConfig, default_hardware_id, serving_policy
from .crypto import parse_json
from .errors import (
    HashMismatch,
    InstallError,
    NoActiveModel,
    OtaError,
    ReplayedCommand,
    RollbackError,
    TransferFailed,
    TransportError,
    UnauthorizedMessage,
    VerificationError,
    WrongTarget,
)
from .http_api import HttpApiServer
from .http_download import HttpDownload
from .installer import ENVELOPE_FILE, Installer
from .metadata import parse_time
from .protocol import (
    Announcement,
    Command,
    Topics,
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


class Agent:
    """One device's update and serving loop; ``run(stop)`` blocks until ``stop`` is set."""

    def __init__(self, config: AgentConfig, on_step: Callable[[str], None] | None = None,
                 log_sink: JsonLog | None = None) -> None:
        self.cfg, self.device = config, config.device_id
        self.topics = Topics(config.broker.topic_prefix, config.fleet)
        self.topics.status(self.device)  # validates the device id as one topic level
        self.log = log_sink or JsonLog(self.device, config.log_file)
        state = Path(config.state_dir)
        root = None
        if not (state / "trust.json").exists() and config.trust_root:
            root = parse_json(Path(config.trust_root).read_bytes(), f"trust root {config.trust_root}")
        self._user_step = on_step
        policy = serving_policy(config)  # always served supervised, under a deadline
        self.installer = Installer(state, config.hardware_id or default_hardware_id(), config.profile or None,
                                   root=root, config=config.ota, on_step=self._step, policy=policy)
        self.telemetry = Telemetry(self.device, config.telemetry.directory or state / "telemetry",
                                   config.telemetry, self.log)
        self._update_state: str | None = None  # the last state sent as an ``update_state`` event
        self._drop_installed_transfer()
        self.host = ModelHost(self.installer, policy, config.http.model_name if config.http else "")
        self.models = ModelRegistry()  # by name, for the HTTP API and its metrics
        self.models.add(self.host)
        self._serving = ServingWatch(self.models)
        self._health: dict[str, Any] = {}  # why the model on disk is not served (sent with every status)
        self._served = self._disk_key()
        self.state = "active" if self.host.release is not None else "idle"
        if self.host.load_error is not None and not isinstance(self.host.load_error, NoActiveModel):
            self.state = self._fall_back(self.host.load_error, "at start")
        self._last_disk_check = 0.0
        self._store_path = state / STORE_FILE
        self._store: dict[str, Any] = read_json(self._store_path, {"announce_seq": 0, "announce_digest": "",
                                                                   "failed": {}, "nonces": {}})
        self.ann: Announcement | None = None
        self.transfer: ChunkTransfer | None = None
        self._http: HttpDownload | None = None  # the transfer's HTTP source, while it is the one used
        self._chunk_subs: set[str] = set()
        self._events: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self._last_progress = self._last_telemetry = 0.0
        self.server: InferenceServer | None = None
        self.http: HttpApiServer | None = None
        self.mqtt = MqttClient(config.broker, f"cuvil-{config.fleet}-{self.device}", self._enqueue,
                               config.limits, will=(self.topics.status(self.device), self._status("offline")),
                               on_connect=lambda: self._events.put(("", b"connected")))

    # -- lifecycle ----------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> int:
        """Serve until ``stop`` (SIGTERM) is set; 1 when the broker stays unreachable beyond its retries."""
        if self.cfg.socket:
            self.server = InferenceServer(self.cfg.socket, self.host, self.cfg.serve)
        if self.cfg.http:
            self.http = HttpApiServer(self.models, self.cfg.http)
            self.http.metrics.registry.register(TelemetryMetrics(self.telemetry))  # type: ignore[arg-type]
        self.log("start", state=self.state, release=self.host.release, fleet=self.cfg.fleet,
                 http=self.http.address if self.http else None)
        self.mqtt.subscribe([self.topics.release, self.topics.command(self.device)])
        self.telemetry.start(self.mqtt, self.topics.telemetry(self.device))
        self.mqtt.start()
        code = 0
        try:
            while not stop.is_set():
                try:
                    busy = self._http is not None and not self._http.waiting
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
        if self.server:
            self.server.close()
        if self.http:
            self.http.close()
        self.host.close()

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
        elif not payload:
            return  # a cleared retained message
        elif topic == self.topics.release:
            self._on_announcement(payload)
        elif topic == self.topics.command(self.device):
            self._on_command(payload)
        elif (chunk := self.topics.parse_chunk(topic)) is not None:
            self._on_chunk(*chunk, payload)
        else:
            self._refuse(UnauthorizedMessage(f"message on topic {topic!r}, which this agent does not accept"),
                         "message")

    def _on_connected(self) -> None:
        self.log("connected", broker=f"{self.cfg.broker.host}:{self.cfg.broker.port}", n=self.mqtt.connects)
        self.telemetry.wake()  # send what piled up while offline
        if self.transfer:
            self.transfer.resume()
            self.log("transfer_resume", bundle=self.transfer.ann.bundle_sha256, from_chunk=self.transfer.have,
                     total=self.transfer.total)
        self._report(self.state)

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._last_disk_check >= 1.0:
            self._last_disk_check = now
            self._follow_disk()
            for event, data in self._serving.events():
                self.telemetry.emit(event, **data)
        if self.transfer and self._http:
            self._http_step(self.transfer, self._http)
        elif self.transfer and self.mqtt.connected:
            try:
                if self.transfer.due():
                    self.log("transfer_retry", chunks=self.transfer.wanted(), retry=self.transfer.retries)
                    self.mqtt.subscribe(self._chunk_topics(self.transfer.wanted()))
            except TransferFailed as exc:
                self._fail(self.transfer.ann, exc)
        if self.cfg.telemetry_interval_s and now - self._last_telemetry >= self.cfg.telemetry_interval_s:
            self._last_telemetry = now
            self._telemetry()

    # -- announcements ------------------------------------------------------------------------
    def _on_announcement(self, payload: bytes) -> None:
        try:
            ann = verify_announcement(payload, self.installer.trust, self.cfg.fleet, _now(), self.cfg.limits)
            digest = sha256_hex(payload)
            last = self._store["announce_seq"]
            if ann.seq < last or (ann.seq == last and digest != self._store["announce_digest"]):
                raise RollbackError(f"announcement seq {ann.seq} is not newer than seq {last} (replayed)")
        except VerificationError as exc:
            self._refuse(exc, "announcement")
            return
        if ann.seq > last:
            self._save(announce_seq=ann.seq, announce_digest=digest)
            self.log("announcement", seq=ann.seq, release=ann.release, bundle=ann.bundle_sha256,
                     selected=ann.selects(self.device), halted=ann.halted)
        self.ann = ann
        self._consider(ann, forced=False)

    def _consider(self, ann: Announcement, forced: bool) -> None:
        """Start, continue or abandon a download as the current announcement says."""
        if self.transfer and self.transfer.ann.bundle_sha256 != ann.bundle_sha256:
            self._abandon("superseded by another release")
        wanted = forced or ann.selects(self.device)
        if not wanted or ann.halted:
            if self.transfer:
                self._abandon("rollout halted" if ann.halted else "device no longer selected")
            return
        if ann.release <= self.installer.trust.release_counter or self.transfer:
            return
        if ann.bundle_sha256 in self._store["failed"] and not forced:
            return  # failed here before: only an explicit install command retries it
        try:
            ann.check_target(self.installer.hardware_id, self.installer.profile)
        except WrongTarget as exc:  # recorded like a failed release: a retained announcement is not retried
            self._save(failed={**self._store["failed"], ann.bundle_sha256: f"{type(exc).__name__}: {exc}"})
            self._refuse(exc, "announcement", bundle=ann.bundle_sha256, target_release=ann.release)
            return
        self.transfer = ChunkTransfer(Path(self.cfg.state_dir) / TRANSFER_DIR, ann, self.cfg.limits)
        if ann.url:  # the signed URL first; MQTT chunks when it fails
            self._http = HttpDownload(self.transfer, ann.url, self.cfg.download, log=self.log)
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
        return [self.topics.chunk(self.transfer.ann.bundle_sha256, i) for i in indices]

    def _request_window(self) -> None:
        """Subscribe to the chunks of the current window only; drop subscriptions no longer needed."""
        want = set(self._chunk_topics(self.transfer.wanted())) if self.transfer and not self._http else set()
        self.mqtt.unsubscribe(self._chunk_subs - want)
        self.mqtt.subscribe(want - self._chunk_subs)
        self._chunk_subs = want

    def _on_chunk(self, bundle_sha: str, index: int, data: bytes) -> None:
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
            self._install(t)
        elif now - self._last_progress >= 1.0:
            self._last_progress = now
            self._report("downloading", bundle=t.ann.bundle_sha256, target_release=t.ann.release, have=t.have,
                         total=t.total)

    def _install(self, t: ChunkTransfer) -> None:
        ann = t.ann
        self._report("verifying", bundle=ann.bundle_sha256, target_release=ann.release)
        self.telemetry.emit("install_started", bundle=ann.bundle_sha256, target_release=ann.release)
        try:
            if file_sha256(t.path, self.cfg.ota.chunk_bytes) != ann.bundle_sha256:
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
        self.telemetry.emit("install_finished", bundle=ann.bundle_sha256, release=manifest.release,
                            version=manifest.version)
        self._report("active", bundle=ann.bundle_sha256, version=manifest.version)

    def _step(self, name: str) -> None:
        if name in _STEP_STATES and self.ann is not None:
            self._report(_STEP_STATES[name], bundle=self.ann.bundle_sha256, target_release=self.ann.release)
        if self._user_step:
            self._user_step(name)

    def _fail(self, ann: Announcement, exc: Exception) -> None:
        """A release that failed here: reported with its reason and not retried unless commanded."""
        if self.transfer:
            self._close_http()
            self.transfer.discard()
            self.transfer = None
            self._request_window()
        reason = f"{type(exc).__name__}: {exc}"
        self._save(failed={**self._store["failed"], ann.bundle_sha256: reason})
        self.log("failed", bundle=ann.bundle_sha256, release=ann.release, reason=reason)
        self.telemetry.emit("install_failed", bundle=ann.bundle_sha256, target_release=ann.release,
                            error=type(exc).__name__, reason=reason)
        self._report("failed", bundle=ann.bundle_sha256, target_release=ann.release, error=type(exc).__name__,
                     reason=reason)

    # -- commands -----------------------------------------------------------------------------
    def _on_command(self, payload: bytes) -> None:
        now = _now()
        grace = timedelta(seconds=self.installer.trust.config.expiry_grace_seconds)
        try:
            cmd = verify_command(payload, self.installer.trust, self.cfg.fleet, self.device, now,
                                 self.cfg.limits)
            # kept as long as verify_command would still accept the command: expiry plus the grace
            nonces = {n: e for n, e in self._store["nonces"].items() if parse_time(e) + grace >= now}
            if cmd.nonce in nonces:
                raise ReplayedCommand(f"command nonce {cmd.nonce[:12]} was already used")
        except VerificationError as exc:
            self._refuse(exc, "command")
            return
        self._save(nonces={**nonces, cmd.nonce: cmd.expires})  # before acting: a crash cannot re-enable it
        self.log("command", action=cmd.action, nonce=cmd.nonce)
        getattr(self, f"_cmd_{cmd.action}")(cmd)

    def _cmd_install(self, cmd: Command) -> None:
        if self.ann is None or self.ann.bundle_sha256 != cmd.bundle_sha256:
            self._report(self.state, event="command_failed", detail="that bundle is not announced here")
            return
        self._save(failed={k: v for k, v in self._store["failed"].items() if k != cmd.bundle_sha256})
        self._consider(self.ann, forced=True)

    def _cmd_rollback(self, cmd: Command) -> None:
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
        self.telemetry.emit("rolled_back", release=manifest.release, reason="rollback command")
        self._report("rolled_back", version=manifest.version)

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
        self.telemetry.emit("rolled_back", release=manifest.release, reason=self._health["detail"],
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
        part = Path(self.cfg.state_dir) / TRANSFER_DIR / PART_FILE
        try:
            with open(part, "rb") as f:
                release = read_header(f, self.cfg.ota)["signed"]["release"]
        except (OSError, OtaError, KeyError, TypeError):
            return
        if isinstance(release, int) and release <= self.installer.trust.release_counter:
            shutil.rmtree(part.parent, ignore_errors=True)

    def _cmd_report(self, cmd: Command) -> None:
        self._report(self.state, event="report")
        self._telemetry()

    # -- reporting ----------------------------------------------------------------------------
    def _status(self, state: str, **fields: Any) -> bytes:
        """Every status names the device's targets, so a publisher stages only devices a release is for."""
        return status_payload(self.device, state, release=self.host.release,
                              hardware_id=self.installer.hardware_id, profile=self.installer.profile or "",
                              **{**self._health, **fields})

    def _report(self, state: str, **fields: Any) -> None:
        """Retained status (the last word on this device); dropped when offline and re-sent on connect."""
        self.state = state
        if state != self._update_state:
            self._update_state = state
            self.telemetry.emit("update_state", **{"release": self.host.release, **fields, "state": state})
        self.log("status", state=state, release=self.host.release, detail=fields)
        if not self.mqtt.connected:
            return
        try:
            self.mqtt.publish(self.topics.status(self.device), self._status(state, **fields), retain=True)
        except TransportError as exc:
            self.log("publish_failed", error=str(exc))

    def _refuse(self, exc: Exception, what: str, **fields: Any) -> None:
        """An input refused: logged and reported; the state (and the model served) do not change."""
        self.log("refused", what=what, error=type(exc).__name__, detail=str(exc), **fields)
        self._report(self.state, event="refused", what=what, error=type(exc).__name__, detail=str(exc),
                     **fields)

    def _telemetry(self) -> None:
        """A summary: state, transfer, serving per model (``ServingWatch``) and the queue's own counts, so
        the receiver learns how many records the bound dropped."""
        t = self.transfer
        self.telemetry.emit("summary", state=self.state, release=self.host.release,
                            transfer={"have": t.have, "total": t.total} if t else None,
                            models=self._serving.summary(), telemetry=self.telemetry.stats())

    def _save(self, **changes: Any) -> None:
        self._store.update(changes)
        write_json(self._store_path, self._store)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def describe_state(state_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``cuvil-agent status`` shows besides the active model: last announcement, failures, transfer."""
    store = read_json(Path(state_dir) / STORE_FILE, {})
    progress = read_json(Path(state_dir) / TRANSFER_DIR / "progress.json", None)
    return {"announce_seq": store.get("announce_seq", 0), "failed": store.get("failed", {}),
            "transfer": progress}
