"""A throwaway MQTT broker on 127.0.0.1 for the demo, the tests and the benchmarks.

Mosquitto when it is installed, else the embedded amqtt (the ``host`` extra ships it so that the demo runs
with no setup). Never part of a deployment: a fleet's broker is the operator's.
"""

from __future__ import annotations

import getpass
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ota.config import BrokerSettings

from ..fleet.publisher import FleetError


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(tries: int = 200) -> int:
    """A loopback TCP port nothing listens on right now, below the kernel's ephemeral range.

    A port the OS hands out for ``bind(0)`` lies in the ephemeral range, so while a test's broker is
    down an outgoing connection (the agent retrying it, another test's client) can take it as its local
    port and the broker cannot come back on it ("Address already in use"). Ports below the range are
    never given to outgoing connections."""
    low, _ = _ephemeral_range()
    rng = random.Random()
    for _ in range(tries):
        port = rng.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise FleetError(f"no free loopback port below {low} after {tries} tries")


class LocalBroker:
    """A broker on 127.0.0.1 for tests and the demo. Mosquitto when it is installed (generated config:
    persistence, so retained chunks survive a restart; optional password file and ACL); otherwise the
    embedded default, amqtt (pure Python, MQTT 3.1.1, no users or ACL). ``stop`` is a clean shutdown."""

    def __init__(self, workdir: str | os.PathLike[str], port: int | None = None,
                 users: Mapping[str, str] | None = None, acl: Sequence[str] | None = None,
                 backend: str | None = None, queue_limit: int | None = 10_000) -> None:
        """``queue_limit``: Mosquitto's ``max_queued_messages`` per client (None: Mosquitto's default,
        1,000, as an operator's broker has unless told otherwise)."""
        self.backend = backend or ("mosquitto" if shutil.which("mosquitto") else "amqtt")
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        if self.backend == "amqtt":
            if users or acl:
                raise FleetError("the embedded broker has no users or ACL: install mosquitto for those")
            (self.dir / "amqtt.yaml").write_text(
                f"listeners:\n  default:\n    type: tcp\n    bind: 127.0.0.1:{self.port}\n"
                "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n    allow_anonymous: true\n")
            return
        if self.backend != "mosquitto" or not shutil.which("mosquitto"):
            raise FleetError("mosquitto is not on PATH (apt-get install mosquitto)")
        lines = [f"listener {self.port} 127.0.0.1", "persistence true",
                 f"persistence_location {self.dir}/", "autosave_interval 1", f"user {getpass.getuser()}",
                 "log_dest stderr", "log_type error", "log_type warning"]
        if queue_limit is not None:
            lines.append(f"max_queued_messages {queue_limit}")
        if users:
            passwd = self.dir / "passwd"
            passwd.write_text("".join(f"{u}:{p}\n" for u, p in users.items()))
            os.chmod(passwd, 0o600)
            subprocess.run(["mosquitto_passwd", "-U", str(passwd)], check=True, capture_output=True)
            lines += ["allow_anonymous false", f"password_file {passwd}"]
        else:
            lines.append("allow_anonymous true")
        if acl:
            (self.dir / "acl").write_text("\n".join(acl) + "\n")
            os.chmod(self.dir / "acl", 0o600)
            lines.append(f"acl_file {self.dir / 'acl'}")
        (self.dir / "mosquitto.conf").write_text("\n".join(lines) + "\n")

    def settings(self, username: str = "", password: str = "", **kw: Any) -> BrokerSettings:
        if self.backend == "amqtt":
            kw.setdefault("protocol", 4)
        return BrokerSettings(host="127.0.0.1", port=self.port, username=username, password=password, **kw)

    def start(self, timeout_s: float = 10.0) -> LocalBroker:
        log = open(self.dir / f"{self.backend}.log", "ab")
        cmd = ["mosquitto", "-c", str(self.dir / "mosquitto.conf")] if self.backend == "mosquitto" else [
            sys.executable, "-m", "amqtt.scripts.broker_script", "-c", str(self.dir / "amqtt.yaml")]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        log.close()
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise FleetError(f"{self.backend} exited: "
                                 f"{(self.dir / f'{self.backend}.log').read_text()[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise FleetError(f"{self.backend} did not listen on port {self.port} within {timeout_s}s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
