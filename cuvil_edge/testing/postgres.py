"""A throwaway PostgreSQL on 127.0.0.1 for the fleet store's tests and benchmark, as ``broker.py`` is
for Mosquitto: a fresh cluster (``initdb``) in a temporary directory, a free port, its unix socket in
that directory, one database, stopped and deleted on ``stop``. Never part of a deployment.

PostgreSQL refuses to run as root. Run by root (CI containers), the cluster belongs to the ``postgres``
system user that Debian's package creates (else ``nobody``): its temporary directory, made outside
pytest's root-only tmp dirs, is chowned to that user, and ``initdb``/``postgres`` run with their uid and
gid dropped by ``subprocess`` itself (no ``su``/``runuser`` session, so the server is our direct child
and ``stop`` reaches it). ``pg_ctl stop -m immediate`` stops it; a kill of the process group backs it up.
"""

from __future__ import annotations

import ctypes
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..fleet.publisher import FleetError
from .broker import free_port

#: the superuser initdb creates; trust authentication on loopback only (the cluster lives for one test run)
SUPERUSER = "cuvil"


def bin_dir() -> Path:
    """Where PostgreSQL's server programs are: the newest Debian ``/usr/lib/postgresql/N/bin``, else the
    directory of ``pg_ctl`` on PATH (followed through symlinks: Debian puts only wrappers on PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    if pg_ctl := shutil.which("pg_ctl"):
        return Path(os.path.realpath(pg_ctl)).parent
    raise FleetError("PostgreSQL's server is not installed (apt-get install postgresql): the fleet store's "
                     "PostgreSQL tests need initdb, pg_ctl and postgres")


def _server_user() -> pwd.struct_passwd | None:
    """The account the server runs as when we are root (None: as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise FleetError("running as root with neither a 'postgres' nor a 'nobody' user: PostgreSQL refuses root")


class LocalPostgres:
    """A PostgreSQL cluster for tests: ``start`` (initdb, server, database) then ``url``; ``stop`` ends the
    server and deletes the cluster. ``settings``: extra server settings (``-c name=value``); the default
    turns fsync off, as a test cluster is thrown away (the benchmark passes ``durable=True``)."""

    def __init__(self, database: str = "fleet", port: int | None = None, durable: bool = False,
                 settings: Mapping[str, str] | None = None) -> None:
        self.bin = bin_dir()
        self.database = database
        self.port = port or free_port()
        self.settings = {"fsync": "on" if durable else "off", "listen_addresses": "127.0.0.1",
                         "max_connections": "50", **(settings or {})}
        self.user = _server_user()
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL of ``database``, the one ``start`` creates."""
        return self.database_url(self.database)

    def database_url(self, name: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{name}"

    def create_database(self, name: str) -> str:
        """A new empty database on the running server (one per test keeps tests apart); its URL."""
        made = self._run(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER,
                         name)
        if made.returncode:
            raise FleetError(f"createdb {name} failed: {made.stderr[-1500:]}")
        return self.database_url(name)

    def _run(self, *cmd: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **self._as_user(), **kw)

    def _as_user(self) -> dict[str, Any]:
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": [],
                "env": {**os.environ, "HOME": str(self.dir), "USER": self.user.pw_name}}

    def _log_tail(self) -> str:
        log = self.dir / "server.log" if self.dir else None
        return log.read_text(errors="replace")[-1500:] if log and log.exists() else ""

    def start(self, timeout_s: float = 60.0) -> LocalPostgres:
        # under /tmp, not pytest's tmp_path: that one is root's alone, and the server user must enter it
        self.dir = Path(tempfile.mkdtemp(prefix="cuvil-pg-"))
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout_s: float) -> None:
        assert self.dir is not None
        if self.user is not None:
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        data = self.dir / "data"
        done = self._run(str(self.bin / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
                         "--no-locale", "--encoding=UTF8", "--no-sync")
        if done.returncode:
            raise FleetError(f"initdb failed ({done.returncode}): {(done.stderr or done.stdout)[-1500:]}")
        log = os.open(self.dir / "server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if self.user is not None:
            os.fchown(log, self.user.pw_uid, self.user.pw_gid)
        options = [f"-c{k}={v}" for k, v in self.settings.items()]
        self.proc = subprocess.Popen([str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port),
                                      "-k", str(self.dir), *options], stdout=log, stderr=log,
                                     start_new_session=True, preexec_fn=_die_with_parent, **self._as_user())
        os.close(log)
        end = time.monotonic() + timeout_s
        while True:  # bounded: pg_isready answers 0 once the server accepts connections
            if self.proc.poll() is not None:
                raise FleetError(f"postgres exited ({self.proc.returncode}): {self._log_tail()}")
            ready = self._run(str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port),
                              "-U", SUPERUSER, "-d", "postgres", "-t", "1")
            if ready.returncode == 0:
                break
            if time.monotonic() > end:
                raise FleetError(f"postgres did not accept connections on port {self.port} within "
                                 f"{timeout_s}s: {self._log_tail()}")
            time.sleep(0.1)
        self.create_database(self.database)

    def stop(self) -> None:
        """Stop the server (immediate shutdown: the cluster is deleted next) and delete the cluster;
        safe to call twice or after a failed start."""
        if self.proc is not None:
            if self.proc.poll() is None and self.dir is not None:
                self._run(str(self.bin / "pg_ctl"), "stop", "-D", str(self.dir / "data"), "-m", "immediate",
                          "-w", "-t", "20")
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the server and its workers
                self.proc.wait(10)
            self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the server's child before exec (after its user is set, which would clear it): SIGTERM when the
    test process dies, so a killed test run leaves no server behind (prctl PR_SET_PDEATHSIG, Linux)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
