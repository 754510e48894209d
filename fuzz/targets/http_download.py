"""The HTTP bundle download client (``ota.http_download``) against a hostile server on loopback: its
status line, headers (Content-Length, Content-Range, Location, Transfer-Encoding) and body are the input.

Input: the bytes the server sends on every connection (so a redirect is followed back to the same
answer until ``max_redirects``). The client asks from byte 32 when the answer's status line says 206,
else from 0, for a bundle whose signed length is ``LENGTH``. The contract: the download's documented
errors only (``VerificationError``: the server lied or redirected where it must not; ``HttpUnavailable``:
it broke the connection or answered an error; ``TransferFailed``), which the agent turns into the
fallback to MQTT chunks. Host names other than loopback's fail to resolve: the fuzzer never leaves
this machine."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from ..engine import Target
from ..mutators import http_mutator

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("ota.http_download", "ota.parse", "http.client")

LENGTH = 64
OFFSET = 32
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class HostileServer:
    """Answers each connection with ``self.answer`` once its request head arrived, then closes."""

    def __init__(self) -> None:
        self.answer = b""
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, name="hostile-server", daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(2.0)
                try:
                    head = b""
                    while b"\r\n\r\n" not in head and len(head) < 65536:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        head += chunk
                    conn.sendall(self.answer)
                    conn.shutdown(socket.SHUT_WR)
                except OSError:
                    pass


def _loopback_only() -> None:
    """Names other than loopback's do not resolve in this process (a redirect to any host is followed
    by ``http.client``: the fuzzer must not reach out)."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        name = host.decode() if isinstance(host, bytes) else host
        if name not in _LOOPBACK:
            raise socket.gaierror(socket.EAI_NONAME, f"{name!r} is not loopback (fuzzing)")
        return real(host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo


def setup() -> Callable[[bytes], None]:
    from ota.config import HttpDownloadLimits
    from ota.http_download import open_body

    _loopback_only()
    server = HostileServer()
    limits = HttpDownloadLimits(connect_timeout_s=1.0, read_timeout_s=1.0, max_redirects=2)
    url = f"http://127.0.0.1:{server.port}/bundle.cvb"

    def one(data: bytes) -> None:
        server.answer = data
        offset = OFFSET if b" 206 " in data.split(b"\r\n", 1)[0] else 0
        with open_body(url, offset, LENGTH, limits) as body:
            body.discard(body.skip, 1.0)
            body.read_exact(LENGTH - offset, 1.0)

    return one


def target() -> Target:
    from ota.errors import HttpUnavailable, TransferFailed, VerificationError

    return Target("http_download", "device", setup, (VerificationError, HttpUnavailable, TransferFailed),
                  INSTRUMENT, http_mutator, time_limit_s=10.0)
