"""Bundles fetched over HTTP with Range requests (issue 15, must-show 5): a real ``http.server`` on 127.0.0.1
that can cut the connection half way, lie about the length, serve other bytes, ignore Range or redirect;
a real Mosquitto carrying the signed announcement (and the MQTT chunks the agent falls back to); real
Ed25519 signatures and real installs. Every wait is bounded; nothing asserts a timing.
"""

from __future__ import annotations

import ipaddress
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cuvil_agent.config import AgentConfig
from cuvil_agent.serve import infer
from cuvil_edge.fleet.publisher import FleetError, Publisher
from cuvil_edge.testing.broker import LocalBroker, free_port
from ota.config import HttpDownloadLimits
from ota.golden import decode_vector
from ota.installer import Installer
from tests.support.fleet import AgentThreads, FleetWorld, Watcher, log_events, with_limits

pytestmark = pytest.mark.integration
FLEET = "lab"
CHUNK = 256  # dozens of chunks for a small bundle, so "half way" falls mid-bundle
#: fast retries for tests; the timeouts only guard against hangs
FAST = HttpDownloadLimits(connect_timeout_s=5, read_timeout_s=10, max_retries=3, backoff_min_s=0.05,
                          backoff_max_s=0.2)


class BundleServer:
    """Serves one bundle at ``/bundle.cvb`` with ``Range: bytes=N-`` support; ``mode`` injects a fault:

    ``cut_half`` first answer stops after half the bytes and closes the connection; ``stall_after_cut``
    like it, then 503 until ``mode`` changes; ``ignore_range`` always 200 with everything (after a cut
    half way); ``trickle`` sends half quickly, then (and on every later request) one byte every 0.2 s;
    ``lie_length`` says the bundle is half as long; ``oversize`` declares and sends more bytes than the
    bundle; ``other_bytes`` flips one byte three quarters in; ``huge_length`` declares a Content-Length of
    4,000 digits, ``huge_range`` a 206 whose Content-Range total has 5,000. ``/moved`` redirects to the
    bundle, ``/to-file`` to a ``file:`` URL, ``/loop`` to itself, ``/bad-location`` and ``/bad-relative``
    to URLs ``urlsplit`` refuses (``redirects`` takes more). With ``tls``
    (certificate, key) it speaks HTTPS."""

    def __init__(self, data: bytes, mode: str = "ok", tls: tuple[Path, Path] | None = None) -> None:
        self.data, self.mode = data, mode
        self.requests: list[dict[str, Any]] = []  # path, range, status of every request
        self.sent = 0  # body bytes written, all requests together
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.scheme = "https" if tls else "http"
        self.redirects = {"/moved": "/bundle.cvb", "/to-file": "file:///etc/passwd", "/loop": "/loop",
                          "/bad-location": "http://[", "/bad-relative": "//[x"}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.handle(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/bundle.cvb") -> str:
        return f"{self.scheme}://127.0.0.1:{self.httpd.server_address[1]}{path}"

    @property
    def ranges(self) -> list[str | None]:
        with self._lock:
            return [r["range"] for r in self.requests]

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        with self._lock:
            first = not self.requests
            self.requests.append({"path": h.path, "range": h.headers.get("Range"), "status": None})
            record = self.requests[-1]
        if h.path in self.redirects:
            return self._answer(h, record, 307 if h.path == "/moved" else 302,
                                {"Location": self.redirects[h.path]}, b"")
        data, mode, length = self.data, self.mode, len(self.data)
        if mode == "stall_after_cut" and not first:
            return self._answer(h, record, 503, {}, b"")
        start = 0
        rng = h.headers.get("Range")
        if rng and mode != "ignore_range":
            start = int(rng.removeprefix("bytes=").rstrip("-"))
        if mode == "other_bytes":
            i = length * 3 // 4
            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
        body = data[start:]
        headers = {"Content-Length": str(len(body))}
        if start:
            headers["Content-Range"] = f"bytes {start}-{length - 1}/{length}"
        if mode == "lie_length":
            headers = {"Content-Length": str(length // 2)}
            body = body[:length // 2]
        elif mode == "huge_length":
            headers["Content-Length"] = "9" * 4000
        elif mode == "huge_range":
            headers["Content-Range"] = f"bytes {start}-{length - 1}/{'6' * 5000}"
            return self._answer(h, record, 206, headers, body)
        elif mode == "oversize":
            body += bytes(4096)
            headers["Content-Length"] = str(len(body))
        elif mode in ("cut_half", "stall_after_cut", "ignore_range") and first:
            body = body[:length // 2]  # Content-Length still says everything: the link breaks here
        elif mode == "trickle":
            fast = length // 2 if first else 0
            return self._answer(h, record, 206 if start else 200, headers, body[:fast], trickle=body[fast:])
        self._answer(h, record, 206 if start else 200, headers, body)

    def _answer(self, h: BaseHTTPRequestHandler, record: dict[str, Any], status: int, headers: dict[str, str],
                body: bytes, trickle: bytes = b"") -> None:
        record["status"] = status
        try:
            h.send_response(status)
            for k, v in {"Content-Length": str(len(body) + len(trickle)), **headers}.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(body)
            with self._lock:
                self.sent += len(body)
            for i in range(len(trickle)):
                if self._closing.wait(0.2):
                    break
                h.wfile.write(trickle[i:i + 1])
                h.wfile.flush()
        except OSError:  # the agent hung up first (it refused what it was told, or gave up waiting)
            pass
        h.close_connection = True

    def close(self) -> None:
        self._closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> FleetWorld:
    return FleetWorld(tmp_path_factory.mktemp("http"))


@pytest.fixture
def bundle2(world) -> bytes:
    return world.bundles[2].read_bytes()


def device(world: FleetWorld, tmp_path: Path, broker: LocalBroker, name: str = "dev0", fleet: str = FLEET,
           **limits: Any) -> AgentConfig:
    cfg = world.agent_config(tmp_path, name, fleet, broker.settings(), socket=True)
    return replace(with_limits(cfg, **limits) if limits else cfg, download=FAST)


def publish(world: FleetWorld, broker: LocalBroker, tmp_path: Path, url: str = "", fleet: str = FLEET,
            mqtt_chunks: bool = True) -> None:
    """Announce release 2 (signed, with ``url``); without ``mqtt_chunks`` the fallback finds nothing."""
    pub = Publisher(broker.settings(), fleet, world.ring.release_keys(), tmp_path / f"{fleet}.json").start()
    try:
        rollout = pub.publish(world.bundles[2], canary=100.0, halt_on=0.0, chunk_bytes=CHUNK, http_url=url)
        if not mqtt_chunks:
            for i in range(len(rollout.chunks)):
                pub.mqtt.publish(pub.topics.chunk(rollout.bundle_sha256, i), b"", retain=True)
    finally:
        pub.close()


def serves(cfg: AgentConfig, release: int) -> None:
    """The agent's socket answers with ``release`` and that release's golden output."""
    inputs, want = decode_vector(Installer(cfg.state_dir, "test-device", read_only=True).active_manifest()
                                 .golden[0])
    got_release, got = infer(cfg.socket, inputs)
    assert got_release == release
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)


def wait_until(pred: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def reach_release_2(broker: LocalBroker, cfg: AgentConfig, *servers: BundleServer,
                    refused: str = "") -> dict[str, Any] | None:
    """Run the agent until it serves release 2 (with ``refused``: after its HTTP source was refused with
    that error; returns that report), then stop it and close ``servers``."""
    watcher = Watcher(broker.settings(), FLEET)
    agents = AgentThreads()
    hit = None
    try:
        agents.add(cfg)
        if refused:
            hit = watcher.wait(lambda m: m.get("event") == "refused", 30, "the HTTP source refused")
            assert (hit["error"], hit["what"]) == (refused, "http download"), hit
        watcher.wait_state("dev0", "active", 2, timeout_s=60)
        serves(cfg, 2)
    finally:
        agents.close()
        watcher.close()
        for server in servers:
            server.close()
    return hit


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file()}


# -- 1. cut at 50%, resumed with a Range request (after a dropped connection, an agent restart, or from a
#       server that ignores Range) and installed ---------------------------------------------------------
@pytest.mark.parametrize("case", ["dropped", "agent_restart", "ignore_range"])
def test_interrupted_at_half_resumes_and_installs(world, broker, bundle2, tmp_path, case):
    mode = {"dropped": "cut_half", "agent_restart": "stall_after_cut", "ignore_range": "ignore_range"}[case]
    server = BundleServer(bundle2, mode)
    # MQTT chunks are not there: whatever installs came over HTTP
    publish(world, broker, tmp_path, server.url(), mqtt_chunks=False)
    cfg = device(world, tmp_path, broker)
    if case == "agent_restart":  # keep retrying the 503s until the agent is stopped
        cfg = replace(cfg, download=replace(FAST, max_retries=1000))
    progress = Path(cfg.state_dir) / "transfer" / "progress.json"
    watcher = Watcher(broker.settings(), FLEET)
    agents = AgentThreads()
    try:
        agents.add(cfg)
        if case == "agent_restart":
            wait_until(lambda: len(server.requests) >= 2, "a retry after the cut")
            agents.close()
            have = json.loads(progress.read_text())["have"]
            assert 0 < have <= len(bundle2) // 2 // CHUNK
            server.mode = "ok"
            agents = AgentThreads()
            agents.add(cfg)
        watcher.wait_state("dev0", "active", 2, timeout_s=60)
        serves(cfg, 2)
    finally:
        agents.close()
        watcher.close()
        server.close()
    resumed = [r for r in server.ranges if r]
    assert resumed, "the resumed request carried no Range header"
    offset = int(resumed[-1].removeprefix("bytes=").rstrip("-"))
    assert 0 < offset <= len(bundle2) // 2 and offset % CHUNK == 0  # after the last verified chunk
    if case == "ignore_range":
        assert server.requests[-1]["status"] == 200 and server.sent < 2 * len(bundle2)
    else:
        assert server.requests[-1]["status"] == 206 and server.sent < 1.5 * len(bundle2)
    done = log_events(Path(cfg.log_file), "transfer_done")[-1]
    assert done["source"] == "http" and done["resumed_from"] == (offset // CHUNK if case == "agent_restart"
                                                                 else 0)
    assert Installer(cfg.state_dir, "test-device").verify_active().release == 2
    assert not (Path(cfg.state_dir) / "transfer").exists()


# -- 2. a lying server is refused (named error), the previous model keeps serving, nothing partial is left --
@pytest.mark.parametrize(("mode", "path", "error"), [
    ("lie_length", "/bundle.cvb", "LengthMismatch"),
    ("oversize", "/bundle.cvb", "LengthMismatch"),
    ("other_bytes", "/bundle.cvb", "HashMismatch"),
    ("ok", "/to-file", "RedirectRefused"),
    ("ok", "/loop", "RedirectRefused"),
])
def test_lying_server_is_refused_and_old_model_serves(world, broker, bundle2, tmp_path, mode, path, error):
    server = BundleServer(bundle2, mode)
    publish(world, broker, tmp_path, server.url(path), mqtt_chunks=False)  # the fallback finds nothing either
    cfg = device(world, tmp_path, broker, max_retries=2)
    watcher = Watcher(broker.settings(), FLEET)
    agents = AgentThreads()
    try:
        agent = agents.add(cfg)
        hit = watcher.wait(lambda m: m.get("event") == "refused", 30, "the HTTP source refused")
        assert (hit["error"], hit["what"]) == (error, "http download"), hit
        serves(cfg, 1)
        failed = watcher.wait(lambda m: m["state"] == "failed", 30, "the release failed")
        assert failed["error"] == "TransferFailed" and failed["release"] == 1
        serves(cfg, 1)
        assert agent.host.release == 1
    finally:
        agents.close()
        watcher.close()
        server.close()
    fallback = log_events(Path(cfg.log_file), "http_fallback")
    assert [e["error"] for e in fallback] == [error]
    if mode == "other_bytes":  # the chunks before the altered one were verified and kept, none after it
        assert fallback[0]["from_chunk"] == len(bundle2) * 3 // 4 // CHUNK
    state = Path(cfg.state_dir)
    installer = Installer(state, "test-device")
    assert installer.verify_active().release == 1
    assert not (state / "transfer").exists()  # no partial download kept
    assert [p.name for p in (state / "slots").iterdir()] == [installer.active_dir().name]  # nothing staged


# -- 2b. a hostile server (malformed redirects, numbers of thousands of digits): the named refusal, then the
#        MQTT chunks as docs/PROTOCOL.md promises, and the release installs ----------------------------------
@pytest.mark.parametrize(("mode", "path", "error"), [
    ("ok", "/bad-location", "RedirectRefused"),
    ("ok", "/bad-relative", "RedirectRefused"),
    ("huge_length", "/bundle.cvb", "LengthMismatch"),
    ("huge_range", "/bundle.cvb", "LengthMismatch"),
])
def test_hostile_server_is_refused_and_the_release_arrives_over_mqtt(world, broker, bundle2, tmp_path, mode,
                                                                       path, error):
    server = BundleServer(bundle2, mode)
    publish(world, broker, tmp_path, server.url(path))
    cfg = device(world, tmp_path, broker)
    reach_release_2(broker, cfg, server, refused=error)
    log = Path(cfg.log_file)
    assert [e["error"] for e in log_events(log, "http_fallback")] == [error]
    assert log_events(log, "transfer_done")[-1]["source"] == "mqtt"
    assert not log_events(log, "failed")


# -- 3. the HTTP server cannot be reached: the agent falls back to the MQTT chunks and installs -------------
def test_unreachable_url_falls_back_to_mqtt(world, broker, tmp_path):
    publish(world, broker, tmp_path, f"http://127.0.0.1:{free_port()}/bundle.cvb")  # nothing listens there
    cfg = device(world, tmp_path, broker)
    reach_release_2(broker, cfg)
    log = Path(cfg.log_file)
    assert [e["error"] for e in log_events(log, "http_fallback")] == ["TransferFailed"]
    assert len(log_events(log, "http_retry")) == FAST.max_retries
    assert log_events(log, "transfer_done")[-1]["source"] == "mqtt"


# -- 4. the model installed over HTTP (through a redirect) is byte for byte the one delivered over MQTT ------
def test_http_install_equals_mqtt_install(world, broker, bundle2, tmp_path, host_cli):
    server = BundleServer(bundle2)
    out = host_cli("publish", str(world.bundles[2]), "--fleet", "lab-http",
                   "--broker", f"127.0.0.1:{broker.port}", "--state", str(tmp_path / "lab-http.json"),
                   "--keyring", str(world.ring.directory),
                   "--canary", "100%", "--halt-on", "0%", "--discover-s", "0", "--no-wait",
                   "--http-url", server.url("/moved"))
    assert "published" in out
    assert json.loads((tmp_path / "lab-http.json").read_text())["rollout"]["http_url"] == server.url("/moved")
    publish(world, broker, tmp_path, fleet="lab-mqtt")
    cfgs = {"http": device(world, tmp_path, broker, "dev-http", "lab-http"),
            "mqtt": device(world, tmp_path, broker, "dev-mqtt", "lab-mqtt")}
    watchers = {k: Watcher(broker.settings(), c.fleet) for k, c in cfgs.items()}
    agents = AgentThreads()
    try:
        for c in cfgs.values():
            agents.add(c)
        for k, c in cfgs.items():
            watchers[k].wait_state(c.device_id, "active", 2, timeout_s=60)
    finally:
        agents.close()
        for w in watchers.values():
            w.close()
        server.close()
    assert [r["path"] for r in server.requests] == ["/moved", "/bundle.cvb"]
    for source, c in cfgs.items():
        assert log_events(Path(c.log_file), "transfer_done")[-1]["source"] == source
    slots = {k: Installer(c.state_dir, "test-device").active_dir() for k, c in cfgs.items()}
    http_files, mqtt_files = tree(slots["http"]), tree(slots["mqtt"])
    assert http_files and http_files == mqtt_files


def test_publisher_refuses_non_http_url(world, broker, tmp_path):
    with pytest.raises(FleetError, match="only http and https"):
        publish(world, broker, tmp_path, "file:///srv/bundle.cvb")


# -- 5. a trickling server (docs/THREATS.md: 9) is dropped per chunk and, when it never gets faster, left
#       for MQTT -----------------------------------------------------------------------------------------
def test_trickling_server_falls_back_to_mqtt(world, broker, bundle2, tmp_path):
    server = BundleServer(bundle2, "trickle")
    publish(world, broker, tmp_path, server.url())
    cfg = replace(device(world, tmp_path, broker), download=replace(FAST, read_timeout_s=2.0))
    watcher = Watcher(broker.settings(), FLEET)
    agents = AgentThreads()
    try:
        agents.add(cfg)
        watcher.wait_state("dev0", "active", 2, timeout_s=60)
    finally:
        agents.close()
        watcher.close()
        server.close()
    log = Path(cfg.log_file)
    fallback = log_events(log, "http_fallback")
    assert [e["error"] for e in fallback] == ["TransferFailed"] and "trickling" in fallback[0]["detail"]
    assert fallback[0]["from_chunk"] == len(bundle2) // 2 // CHUNK  # the quick half was kept
    done = log_events(log, "transfer_done")[-1]
    assert done["source"] == "mqtt" and done["fetched"] == done["total"] - fallback[0]["from_chunk"]
    assert len(server.requests) == FAST.max_retries + 1


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    from datetime import datetime, timedelta, timezone

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


# -- 6. HTTPS: the server certificate is checked (a private CA via tls_ca); an untrusted one is not used --
@pytest.mark.parametrize("trusted", [True, False])
def test_https_verifies_the_server_certificate(world, broker, bundle2, tmp_path, trusted):
    cert, key = self_signed(tmp_path)
    server = BundleServer(bundle2, tls=(cert, key))
    publish(world, broker, tmp_path, server.url())
    cfg = device(world, tmp_path, broker)
    if trusted:
        cfg = replace(cfg, download=replace(FAST, tls_ca=str(cert)))
    reach_release_2(broker, cfg, server)
    log = Path(cfg.log_file)
    assert log_events(log, "transfer_done")[-1]["source"] == ("http" if trusted else "mqtt")
    fallback = log_events(log, "http_fallback")
    if trusted:
        assert not fallback and server.sent == len(bundle2)
    else:
        assert "CERTIFICATE_VERIFY_FAILED" in fallback[0]["detail"] and server.sent == 0


def test_https_redirect_down_to_http_is_refused(world, broker, bundle2, tmp_path):
    cert, key = self_signed(tmp_path)
    plain, server = BundleServer(bundle2), BundleServer(bundle2, tls=(cert, key))
    server.redirects["/to-http"] = plain.url()
    publish(world, broker, tmp_path, server.url("/to-http"))
    cfg = replace(device(world, tmp_path, broker), download=replace(FAST, tls_ca=str(cert)))
    hit = reach_release_2(broker, cfg, server, plain, refused="RedirectRefused")
    assert hit is not None and "down to" in hit["detail"]
    assert not plain.requests and log_events(Path(cfg.log_file), "transfer_done")[-1]["source"] == "mqtt"
