"""The ``cuvil-agent`` daemon: follows its fleet's release topic, downloads announced bundles in verified
chunks (over MQTT, or from the announcement's signed HTTP(S) URL with MQTT as the fallback), installs them
through ``Installer``, obeys signed commands, reports every state transition and keeps serving the
active model to local apps throughout. A multi-model device (``[[models]]``) does all of that per model
line (``ModelLine``: its own release topic, state directory, slots and release counter), and serves the
lines together under one core budget, one admission controller (``runtime_wasm.admission``) and one
root of trust (``ota.roots``).

Threads: paho's network thread only queues messages; one worker thread handles them in order (so all
agent state has one owner); the inference servers (the Unix-socket JSON one and, with ``[http]``, the HTTP
API with its metrics) answer from their own threads through ``ModelHost``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ota.chunks import ChunkTransfer
from ota.crypto import parse_json
from ota.errors import TransportError, UnauthorizedMessage, UnknownModel, VerificationError
from ota.installer import TRUST_FILE, Installer
from ota.protocol import Command, Topics, format_time, registration_payload, status_payload, verify_command
from ota.roots import align_roots, line_dirs, trusted_root
from ota.transport import MqttClient
from runtime_wasm import DeviceAdmission

from .config import AgentConfig, default_hardware_id, model_policies, serving_policy
from .http_api import HttpApiServer
from .lines import ModelLine
from .log import JsonLog
from .metrics import LineUpdate, UpdateCollector
from .serve import InferenceServer, ModelHost, ModelRegistry
from .shadow import shadow_sampler
from .state import LINE_STORE, STORE_FILE, AgentState, unused_command
from .telemetry import ServingWatch, Telemetry, TelemetryMetrics


class _Steps:
    """An installer's step callback, bound to its line once the line exists (the installer comes first)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.line: ModelLine | None = None

    def __call__(self, name: str) -> None:
        self.agent._step(self.line, name)


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
        if not all((d / TRUST_FILE).exists() for d in self._line_dirs(state)):
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
        self._device_store = AgentState(state / STORE_FILE, {**LINE_STORE, "nonces": {}})
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
                              root=self._root, config=cfg.ota, on_step=steps, policy=policy, keep_warm=True)
        host = ModelHost(installer, policy, cfg.http.model_name if cfg.http else "",
                         shadow=shadow_sampler(cfg.telemetry))
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
                                                     on_step=steps, policy=policy, model=m.name,
                                                     keep_warm=True)))
        align_roots([installer for *_, installer in made])
        for m, policy, steps, installer in made:
            host = ModelHost(installer, policy, m.name, self.admission.gate(m.priority),
                             shadow_sampler(cfg.telemetry))
            self.models.add(host, m.priority)
            steps.line = ModelLine(self, m.name, installer, host, self.topics.model_release(m.name),
                                   AgentState(installer.state_dir / STORE_FILE, LINE_STORE))
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
            line.installer.close()

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
        self._register()
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
            self.lines[0].report(self.lines[0].state, event="command_failed", error=type(exc).__name__,
                                 detail=str(exc))
            return None
        if len(self.lines) == 1:
            return self.lines[0]
        announced = [line for line in self.lines if line.ann and line.ann.bundle_sha256 == cmd.bundle_sha256]
        if cmd.action == "install" and announced:
            return announced[0]
        self.lines[0].report(self.lines[0].state, event="command_failed",
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

    def _register(self) -> None:
        """Publish the device's registration (retained, at every connect): how a controller finds every
        device whatever its broker's queue limits (``cuvil_edge.fleet.discovery``)."""
        installer = self.lines[0].installer
        try:
            self.mqtt.publish(self.topics.registry(self.device), registration_payload(
                self.device, hardware_id=installer.hardware_id, profile=installer.profile or ""), retain=True)
        except TransportError as exc:
            self.log("publish_failed", error=str(exc))

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
        self.lines[0].refuse(exc, what, **fields)

    def _telemetry(self) -> None:
        """A summary: state, transfer, serving per model (``ServingWatch``) and the queue's own counts, so
        the receiver learns how many records the bound dropped."""
        t = self.transfer
        self.telemetry.emit("summary", state=self.state, release=self.host.release,
                            transfer={"have": t.have, "total": t.total} if t else None,
                            models=self._serving.summary(), telemetry=self.telemetry.stats(),
                            **({"lines": self._summaries()} if self.cfg.models else {}))


def _now() -> datetime:
    return datetime.now(timezone.utc)
