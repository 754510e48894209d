"""Shared pieces of the MQTT fleet tests and the fleet benchmark: a keyring, two compiled releases of a
tiny MatMul+Relu model, a device state with release 1 installed, agent configs, and a status watcher."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cuvil_agent.agent import Agent
from cuvil_agent.config import AgentConfig
from cuvil_agent.log import JsonLog
from cuvil_edge.signing import Keyring, build_bundle
from ota import Installer
from ota.config import BrokerSettings, TransferLimits
from ota.protocol import Topics
from ota.transport import MqttClient
from tests.support.install import compile_matmul

HW = "test-device"
#: fast retries for tests: a stalled chunk is asked for again within a second, many times
TEST_LIMITS = TransferLimits(chunk_timeout_s=0.3, max_retries=200, backoff_min_s=0.05, backoff_max_s=0.4,
                             deadline_s=120, min_rate_bytes_per_s=0, window_chunks=4)


class FleetWorld:
    """Keyring, releases 1 and 2 as bundles, and a template device state with release 1 active."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1,
                                 release_threshold=1)
        self.models = {n: compile_matmul(base / f"m{n}", seed=10 + n) for n in (1, 2)}
        self.bundles = {n: self.bundle(n) for n in (1, 2)}
        self.template = base / "template"
        Installer(self.template, HW, root=self.ring.root_envelope()).install(self.bundles[1])

    def bundle(self, release: int) -> Path:
        out = self.base / f"release{release}.cvb"
        build_bundle(self.models[release], out, self.ring.release_keys(), version=f"1.0.{release}",
                     release=release, hardware_ids=[HW])
        return out

    def device_state(self, where: Path) -> Path:
        return Path(shutil.copytree(self.template, where))

    def agent_config(self, workdir: Path, device: str, fleet: str, broker: BrokerSettings,
                     socket: bool = False, limits: TransferLimits = TEST_LIMITS) -> AgentConfig:
        state = self.device_state(workdir / device)
        return AgentConfig(device_id=device, fleet=fleet, state_dir=str(state), hardware_id=HW,
                           socket=str(state / "infer.sock") if socket else "",
                           log_file=str(workdir / f"{device}.log"), telemetry_interval_s=0,
                           broker=broker, limits=limits)


def write_toml(cfg: AgentConfig, path: Path) -> Path:
    """The TOML a device would be provisioned with (the password goes in a file, never argv)."""
    def table(obj: Any, skip: tuple[str, ...] = ()) -> str:
        return "".join(f"{k} = {json.dumps(v)}\n" for k, v in vars(obj).items()  # TOML has no null
                       if k not in skip and v is not None and not hasattr(v, "__dataclass_fields__"))

    broker = table(cfg.broker, ("password",))
    if cfg.broker.password:
        secret = path.with_suffix(".pass")
        secret.write_text(cfg.broker.password)
        broker += f"password_file = {json.dumps(str(secret))}\n"
    models = "".join(f"[[models]]\n{table(m)}" + (f"[models.policy]\n{table(m.policy)}" if m.policy else "")
                     for m in cfg.models)
    path.write_text(f"[agent]\n{table(cfg, ('models',))}\n[broker]\n{broker}\n[limits]\n{table(cfg.limits)}\n"
                    f"[admission]\n{table(cfg.admission)}\n{models}")
    return path


def log_events(path: Path, event: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["event"] == event]


class Watcher:
    """Every status message of a fleet, in arrival order, with bounded waits on them."""

    def __init__(self, broker: BrokerSettings, fleet: str) -> None:
        self.topics = Topics(broker.topic_prefix, fleet)
        self.messages: list[dict[str, Any]] = []
        self.announcements: list[bytes] = []
        self._cv = threading.Condition()
        self.mqtt = MqttClient(broker, f"watch-{fleet}-{time.monotonic_ns()}", self._on)
        self.mqtt.subscribe([self.topics.all_status, self.topics.release])
        self.mqtt.start(wait_s=10)

    def _on(self, topic: str, payload: bytes, _retained: bool) -> None:
        with self._cv:
            if topic == self.topics.release:
                self.announcements.append(payload)
            elif payload:
                self.messages.append(json.loads(payload))
            self._cv.notify_all()

    def latest(self, device: str) -> dict[str, Any]:
        with self._cv:
            return next((m for m in reversed(self.messages) if m["device"] == device), {})

    def wait(self, pred: Callable[[dict[str, Any]], bool], timeout_s: float = 30.0,
             what: str = "") -> dict[str, Any]:
        end = time.monotonic() + timeout_s
        with self._cv:
            while True:
                hit = next((m for m in self.messages if pred(m)), None)
                if hit:
                    return hit
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what or pred}; last: {self.messages[-3:]}")
                self._cv.wait(left)

    def wait_state(self, device: str, state: str, release: int | None = None, timeout_s: float = 30.0
                   ) -> None:
        self.wait(lambda m: m["device"] == device and m["state"] == state
                  and (release is None or m.get("release") == release), timeout_s,
                  f"{device} {state} {release}")

    def close(self) -> None:
        self.mqtt.close()


class AgentThreads:
    """Many lightweight agents in this process: each its own MQTT client and worker thread."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.agents: list[Agent] = []
        self._threads: list[threading.Thread] = []

    def add(self, cfg: AgentConfig, on_step: Callable[[str], None] | None = None,
            log_sink: JsonLog | None = None) -> Agent:
        agent = Agent(cfg, on_step=on_step, log_sink=log_sink or JsonLog(cfg.device_id, cfg.log_file))
        thread = threading.Thread(target=agent.run, args=(self.stop,), daemon=True)
        thread.start()
        self.agents.append(agent)
        self._threads.append(thread)
        return agent

    def close(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(15)


def with_limits(cfg: AgentConfig, **changes: Any) -> AgentConfig:
    return replace(cfg, limits=replace(cfg.limits, **changes))


def wait_until(pred: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    """Poll ``pred`` until it returns something true (returned) or ``timeout_s`` (a hang guard) passes."""
    end = time.monotonic() + timeout_s
    while not (got := pred()):
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return got
