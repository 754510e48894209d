"""Serving hardening with the faults injected for real: a signed, installed model that passes its golden
vectors but loops forever on one input (served by a real ``cuvil-agent run`` process without ``[policy]``),
a corrupt or oversized active slot, hostile local clients on the inference socket (silent, trickling,
oversized, too many), and a broker that is gone for far longer than the old failure budget or refuses the
credentials. Every wait is bounded; nothing asserts a timing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from cuvil_agent.agent import Agent
from cuvil_agent.config import AgentConfig, ServeLimits, load_agent_config
from cuvil_agent.log import JsonLog
from cuvil_agent.serve import InferenceServer, ModelHost, infer
from cuvil_edge.testing.broker import LocalBroker
from ota import Installer
from ota.config import BrokerSettings, TransferLimits
from ota.errors import NoActiveModel, NoHealthyModel, NotAuthorized, OtaError
from ota.transport import MqttClient
from runtime_wasm import DeadlineExceeded, ModuleLoadError, RuntimePolicy, SpecError
from tests.support.fleet import log_events, write_toml
from tests.support.spin_model import SENTINEL, SpinWorld, X

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not shutil.which("mosquitto"), reason="mosquitto not installed")]
ROOT = Path(__file__).resolve().parents[2]
HW = "test-device"
FLEET = "lab"
#: fast retries: hundreds of connect failures within seconds
FAST = TransferLimits(backoff_min_s=0.01, backoff_max_s=0.05)
OLD_BUDGET = 30  # the shipped max_connect_failures before this fix


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> SpinWorld:
    return SpinWorld(tmp_path_factory.mktemp("spin"))


def eventually(check: Callable[[], bool], timeout_s: float = 30.0, what: str = "") -> None:
    end = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def answers(sock: Path, timeout_s: float = 30.0, retry_on: str = "DeadlineExceeded") -> None:
    """A normal request is answered correctly; retried on ``retry_on`` errors within ``timeout_s``. The
    first request after a worker restart may spend its deadline waiting for the new worker (the scheduler
    counts that time against the request)."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            release, out = infer(sock, {"x": X}, timeout_s=timeout_s)
            break
        except OtaError as exc:
            assert str(exc).startswith(retry_on) and time.monotonic() < end, exc
            time.sleep(0.05)
    assert release == 1
    np.testing.assert_array_equal(out["y"], 2 * X)


def agent_config(world: SpinWorld, tmp_path: Path, broker: BrokerSettings,
                 limits: TransferLimits = FAST) -> AgentConfig:
    """No ``[policy]``: the configuration that used to serve in-process."""
    state = world.state(tmp_path / "state")
    return AgentConfig(device_id="dev-a", fleet=FLEET, state_dir=str(state), hardware_id=HW,
                       socket=str(state / "infer.sock"), log_file=str(tmp_path / "agent.log"),
                       telemetry_interval_s=0, broker=broker, limits=limits)


# -- 1. a model that loops on one input ----------------------------------------------------------------
def test_looping_input_gets_a_deadline_error_and_the_agent_process_keeps_serving_and_stops(
        world, tmp_path):
    """Without ``[policy]`` the agent used to run the model in-process under a lock: the sentinel request
    hung, every later request queued behind it and SIGTERM hung in ``ModelHost.close``."""
    with LocalBroker(tmp_path / "broker") as broker:
        cfg = agent_config(world, tmp_path, broker.settings(), TransferLimits())
        toml = write_toml(cfg, tmp_path / "agent.toml")
        assert load_agent_config(toml).policy is None
        with open(tmp_path / "agent.err", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "cuvil_agent.cli", "run", "--config", str(toml)],
                                    cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=err)
        try:
            eventually(lambda: bool(log_events(Path(cfg.log_file), "start")), 60, "the agent to start")
            assert log_events(Path(cfg.log_file), "start")[0]["release"] == 1
            with pytest.raises(OtaError, match="DeadlineExceeded"):
                infer(cfg.socket, {"x": SENTINEL}, timeout_s=30)
            answers(Path(cfg.socket))
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert code == 0, (tmp_path / "agent.err").read_text()[-2000:]
    assert log_events(Path(cfg.log_file), "stop")


def _raised(fn: Callable[..., object], *args: object) -> BaseException | None:
    try:
        fn(*args)
    except BaseException as exc:
        return exc
    return None


def test_reload_does_not_wait_behind_a_looping_request(world, tmp_path):
    """A rollback reloads the host while a request spins: ``reload`` used to block on the in-process lock
    for ever. Now it swaps at once; the spinning request still ends with its deadline error."""
    host = ModelHost(Installer(world.state(tmp_path / "state"), HW))
    outcome: list[BaseException] = []
    spinning = threading.Thread(target=lambda: outcome.append(_raised(host.predict, {"x": SENTINEL})),
                                daemon=True)
    reload = threading.Thread(target=host.reload, daemon=True)
    try:
        spinning.start()
        eventually(lambda: host.metrics()["submitted"] == 1, what="the request to be queued")
        reload.start()
        reload.join(30)
        assert not reload.is_alive(), "reload blocked behind the looping request"
        spinning.join(30)
        assert not spinning.is_alive() and isinstance(outcome[0], DeadlineExceeded)
        release, out = host.predict({"x": X})
        assert release == 1 and host.load_error is None
        np.testing.assert_array_equal(out["y"], 2 * X)
    finally:
        host.close()


# -- 2. an active slot that cannot be loaded -----------------------------------------------------------
@pytest.mark.parametrize("fault", ["corrupt_module", "over_memory_cap", "no_model"])
def test_unloadable_active_slot_serves_a_typed_error_and_recovers(world, tmp_path, fault):
    """``ModelHost`` used to raise from its constructor (an agent that cannot start, restarted by systemd
    for ever); now it serves nothing with a typed error until a reload succeeds."""
    if fault == "no_model":
        inst = Installer(tmp_path / "empty", HW, root=world.ring.root_envelope())
    else:
        inst = Installer(world.state(tmp_path / "state"), HW)
    module = next(inst.active_dir().glob("*.wasm")) if fault == "corrupt_module" else None
    good = module.read_bytes() if module else b""
    if module:
        module.write_bytes(good[:-8] + bytes(8))
    policy = RuntimePolicy(memory_cap_bytes=1) if fault == "over_memory_cap" else None
    host = ModelHost(inst, policy)
    server = InferenceServer(tmp_path / "infer.sock", host)
    try:
        want_error, want_reply = {"corrupt_module": (SpecError, NoHealthyModel),
                                  "over_memory_cap": (ModuleLoadError, NoHealthyModel),
                                  "no_model": (NoActiveModel, NoActiveModel)}[fault]
        assert isinstance(host.load_error, want_error) and host.release is None and host.metrics() is None
        with pytest.raises(want_reply):
            host.predict({"x": X})
        with pytest.raises(OtaError, match=f"^{want_reply.__name__}: no (healthy )?model is"):
            infer(server.path, {"x": X}, timeout_s=30)
        with pytest.raises(want_error):
            host.reload()
        if module:  # repaired on disk: the next reload serves it
            module.write_bytes(good)
            host.reload()
            assert host.load_error is None
            answers(server.path)
    finally:
        server.close()
        host.close()


def test_failed_reload_keeps_the_previous_model_serving(world, tmp_path):
    inst = Installer(world.state(tmp_path / "state"), HW)
    host = ModelHost(inst)
    try:
        (inst.active_dir() / "model.json").write_text("{not json")
        with pytest.raises(SpecError):
            host.reload()
        assert isinstance(host.load_error, SpecError)
        release, out = host.predict({"x": X})
        assert release == 1
        np.testing.assert_array_equal(out["y"], 2 * X)
    finally:
        host.close()


# -- 3. limits on the local socket ---------------------------------------------------------------------
@pytest.fixture
def host(world, tmp_path):
    h = ModelHost(Installer(world.state(tmp_path / "state"), HW))
    yield h
    h.close()


def connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(path))
    return s


class _Watched(InferenceServer):
    """Records whether a socket was at its path when it started listening (a client finding it there
    before ``listen`` is refused)."""

    socket_at_listen: bool | None = None

    def server_activate(self) -> None:
        type(self).socket_at_listen = self.path.is_socket()
        super().server_activate()


def test_socket_path_appears_only_once_it_listens_and_replaces_a_stale_one(host, tmp_path):
    path = tmp_path / "infer.sock"
    path.write_text("stale")  # left by a crashed agent
    server = _Watched(path, host)
    try:
        assert _Watched.socket_at_listen is False  # it was bound elsewhere and moved here listening
        assert path.is_socket() and path.stat().st_mode & 0o777 == 0o660
        assert [p.name for p in tmp_path.iterdir() if p.is_socket()] == ["infer.sock"]  # none left elsewhere
        answers(server.path)
    finally:
        server.close()
    assert not path.exists()


def test_silent_and_trickling_clients_are_dropped_while_others_are_served(host, tmp_path):
    server = InferenceServer(tmp_path / "infer.sock", host, ServeLimits(read_timeout_s=1.0))
    silent, half = connect(server.path), connect(server.path)
    try:
        half.sendall(b'{"inputs": {"x": ')
        answers(server.path)  # served meanwhile
        for s in (silent, half):
            assert s.recv(1024) == b"", "the server did not drop the connection"  # EOF within 30 s
        trickle = connect(server.path)
        with pytest.raises((BrokenPipeError, ConnectionResetError)):  # one byte per 0.2 s: dropped too
            for _ in range(150):
                trickle.send(b" ")
                time.sleep(0.2)
        trickle.close()
        answers(server.path)
    finally:
        silent.close()
        half.close()
        server.close()


def test_oversize_request_gets_an_error_without_being_read_and_the_server_keeps_serving(host, tmp_path):
    server = InferenceServer(tmp_path / "infer.sock", host, ServeLimits(max_request_bytes=4096))
    try:
        with connect(server.path) as s:
            try:
                s.sendall(b"[" * (64 << 20))  # 64 MiB: the server stops reading after 4 KiB
            except (BrokenPipeError, ConnectionResetError):
                pass
            reply = json.loads(s.makefile("rb").readline())
        assert reply["type"] == "LengthMismatch" and "request too large" in reply["error"]
        with pytest.raises(OtaError, match="request too large"):  # the client reports the server's reason
            infer(server.path, {"x": np.zeros(4096, np.float32)}, timeout_s=30)
        answers(server.path)
    finally:
        server.close()


def test_connections_beyond_the_cap_are_refused_as_overloaded_then_service_resumes(host, tmp_path):
    server = InferenceServer(tmp_path / "infer.sock", host, ServeLimits(max_connections=2, read_timeout_s=60))
    idle = [connect(server.path) for _ in range(2)]  # accepted in order: they hold both slots
    try:
        with pytest.raises(OtaError, match="^Overloaded: 2 connections"):
            infer(server.path, {"x": X}, timeout_s=30)
    finally:
        for s in idle:
            s.close()
    try:
        answers(server.path, retry_on="Overloaded")  # the idle connections' threads see EOF, free their slots
    finally:
        server.close()


# -- 4. offline for long; credentials refused ------------------------------------------------------------
def test_agent_offline_far_past_the_old_budget_keeps_serving_and_reconnects(world, tmp_path):
    """Boots with the broker down, fails many times the old 30-failure budget (which ended ``run`` with
    exit 1 and local inference with it), serves locally throughout, connects once the broker is up, and
    again after the broker goes away and comes back on the same port."""
    broker = LocalBroker(tmp_path / "broker")
    cfg = agent_config(world, tmp_path, broker.settings())
    agent = Agent(cfg, log_sink=JsonLog(cfg.device_id, cfg.log_file))
    stop = threading.Event()
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(agent.run(stop)), daemon=True)
    runner.start()
    try:
        for round_ in (1, 2):
            start = agent.mqtt.connect_failures
            eventually(lambda s=start: agent.mqtt.connect_failures > s + 3 * OLD_BUDGET, 60,
                       "connect failures")
            assert agent.mqtt.alive and runner.is_alive() and agent.mqtt.fatal is None
            answers(Path(cfg.socket))
            broker.start()
            eventually(lambda r=round_: agent.mqtt.connects == r, 30, f"connection {round_}")
            eventually(lambda r=round_: len(log_events(Path(cfg.log_file), "connected")) == r, 30)
            broker.stop()
    finally:
        stop.set()
        runner.join(30)
        broker.stop()
    assert result == [0] and not log_events(Path(cfg.log_file), "broker_unreachable")


def test_refused_credentials_are_retried_when_the_budget_is_unlimited(tmp_path):
    """Retrying for ever: a refusal is retried every backoff_max_s (fixable on the broker, e.g. a rotated
    password file); a finite budget gives up at once; ``start(wait_s)`` fails fast either way."""
    broker = LocalBroker(tmp_path / "broker", users={"dev": "new-secret"}).start()
    settings = broker.settings("dev", "old-secret")
    with pytest.raises(NotAuthorized):
        MqttClient(settings, "fail-fast", lambda *a: None, FAST).start(wait_s=30)
    finite = MqttClient(settings, "finite", lambda *a: None, TransferLimits(max_connect_failures=5,
                                                                            backoff_max_s=0.05)).start()
    forever = MqttClient(settings, "forever", lambda *a: None, FAST).start()
    try:
        eventually(lambda: not finite.alive, 30, "the finite client to give up")
        assert isinstance(finite.fatal, NotAuthorized) and finite.connect_failures == 1
        eventually(lambda: forever.connect_failures >= 5, 30, "refusals")
        assert forever.alive and forever.fatal is None and isinstance(forever.last_error, NotAuthorized)
        broker.stop()  # the operator fixes the credentials on the broker side
        broker = LocalBroker(tmp_path / "broker", port=broker.port, users={"dev": "old-secret"}).start()
        forever.wait_connected(30)
        assert forever.last_error is None
    finally:
        forever.close()
        finite.close()
        broker.stop()


# -- 5. configuration ------------------------------------------------------------------------------------
def test_serve_limits_load_from_toml_and_reject_nonsense(tmp_path):
    toml = tmp_path / "agent.toml"
    base = '[agent]\ndevice_id = "d"\nfleet = "f"\nstate_dir = "s"\n'
    toml.write_text(base + "[serve]\nmax_connections = 4\nread_timeout_s = 2\n")
    cfg = load_agent_config(toml)
    assert cfg.serve == ServeLimits(max_connections=4, read_timeout_s=2.0) and cfg.policy is None
    assert load_agent_config(tmp_path / "agent.toml").limits.max_connect_failures == 0  # never give up
    for bad in ("max_connections = 0", "read_timeout_s = -1.0", "max_request_bytes = 1.5", "max_threads = 4"):
        toml.write_text(base + f"[serve]\n{bad}\n")
        with pytest.raises(ValueError):
            load_agent_config(toml)
    # retrying for ever: the exponential backoff settles at its ceiling instead of overflowing a float
    assert TransferLimits(backoff_max_s=30.0).backoff_s(100_000, 0.5) == 22.5
