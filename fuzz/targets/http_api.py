"""The device's HTTP API (``cuvil_agent.http_api``: h11, routing, the OIP request layer, a model in supervised
workers) over a real loopback socket, as a remote client reaches it before any authentication.

Input: the bytes a client sends on one connection (one request, or several pipelined), after which it
closes its side. The contract: a connection that carried anything but blank lines gets an HTTP/1.1
answer (never a dropped connection), no answer is a 500 (the served model cannot trap here), the
server's error boundary logs no unexpected error, and the server still answers ``/v2/health/live``."""

from __future__ import annotations

import atexit
import hashlib
import logging
import re
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from ..engine import Finding, Target
from ..mutators import http_mutator

#: the modules atheris instruments for coverage (imported inside its instrumentation)
INSTRUMENT = ("cuvil_agent.http_api", "cuvil_agent.oip", "ota.parse", "cuvil_agent.serve", "h11")

#: the served model: y = x (f32[4]) and z = ids (i64[2], ids into a table of 10 rows)
COPY_RUN = """(func (export "run")
  (v128.store (i32.const 2080) (v128.load (i32.const 2048)))
  (v128.store (i32.const 2096) (v128.load (i32.const 2064))))"""
STATUS = re.compile(rb"HTTP/1\.1 ([0-9]{3}) ")
GUARD_S = 10.0  # hang guard for one exchange; the time limit of the input is what reports a hang


class _Unexpected(logging.Handler):
    """Records what the server logs at ERROR (its error boundary's "unexpected error")."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


def model_dir(out: Path) -> Path:
    """A hand-written model directory the loader takes (no compiler on the fuzzing path)."""
    import wasmtime

    from runtime_wasm.spec import ModelSpec, TensorSpec, VariantSpec

    wasm = wasmtime.wat2wasm(f"""(module (memory (export "memory") 1) {COPY_RUN}
        (func (export "cuvil_weights") (result i32) i32.const 1024)
        (func (export "cuvil_arena") (result i32) i32.const 2048))""")
    variant = VariantSpec("f32-wasmsimd-x86", "simd128", "x86", "m.wasm", hashlib.sha256(wasm).hexdigest(),
                          len(wasm))
    spec = ModelSpec("fuzz", (TensorSpec("x", "float32", (4,), 0), TensorSpec("ids", "int64", (2,), 16, 10)),
                     (TensorSpec("y", "float32", (4,), 32), TensorSpec("z", "int64", (2,), 48)),
                     weights_size=0, arena_size=64, variants=(variant,),
                     weights_sha256=hashlib.sha256().hexdigest())
    out.mkdir(parents=True)
    (out / "model.json").write_text(spec.to_json())
    (out / "weights.bin").write_bytes(b"")
    (out / "m.wasm").write_bytes(wasm)
    return out


def exchange(address: tuple[str, int], data: bytes) -> bytes:
    """Send ``data`` on a new connection, close our side, read the whole answer."""
    with socket.create_connection(address, timeout=GUARD_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server answered and closed before reading all (a 413, a 431): read that
            pass
        reply = bytearray()
        try:
            while chunk := sock.recv(1 << 16):
                reply += chunk
        except ConnectionResetError:
            pass
    return bytes(reply)


def serve(base: Path):
    """A signed, installed model behind an ``HttpApiServer`` on an ephemeral loopback port, with short
    phase timeouts: (server, the host, the handler that records unexpected errors)."""
    from cuvil_agent.config import HttpSettings
    from cuvil_agent.http_api import HttpApiServer
    from cuvil_agent.serve import ModelHost, ModelRegistry
    from cuvil_edge.signing import Keyring, build_bundle
    from ota import Installer
    from runtime_wasm import RuntimePolicy

    ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1, release_threshold=1)
    build_bundle(model_dir(base / "model"), base / "m.cvb", ring.release_keys(), version="1.0.0", release=1,
                 hardware_ids=["fuzz"])
    installer = Installer(base / "state", "fuzz", root=ring.root_envelope())
    installer.install(base / "m.cvb")
    host = ModelHost(installer, RuntimePolicy(deadline_ms=5000), name="m")
    models = ModelRegistry()
    models.add(host)
    settings = HttpSettings(port=0, max_connections=8, header_timeout_s=1.0, body_timeout_s=1.0,
                            max_header_bytes=4096, max_body_bytes=64 << 10)
    unexpected = _Unexpected()
    logging.getLogger("cuvil_agent.http_api").addHandler(unexpected)
    return HttpApiServer(models, settings), host, unexpected


def setup() -> Callable[[bytes], None]:
    base = Path(tempfile.mkdtemp(prefix="fuzz-http-api-"))
    server, host, unexpected = serve(base)
    atexit.register(host.close)  # its worker processes
    atexit.register(server.close)
    address = server.address
    assert isinstance(address, tuple)
    lock = threading.Lock()

    def one(data: bytes) -> None:
        with lock:
            unexpected.records.clear()
            reply = exchange(address, data)
            if data.strip(b"\r\n") and not reply.startswith(b"HTTP/1.1 "):
                raise Finding(f"no HTTP answer: {reply[:100]!r}")
            statuses = [int(m[1]) for m in STATUS.finditer(reply)]
            if 500 in statuses:
                raise Finding(f"a 500: {reply[:400]!r}")
            if unexpected.records:
                raise Finding(f"unexpected error logged: {unexpected.records[0][:300]}")
            if not exchange(address, b"GET /v2/health/live HTTP/1.1\r\nHost: f\r\n\r\n").startswith(
                    b"HTTP/1.1 200 "):
                raise Finding("the server stopped answering /v2/health/live")

    return one


def target() -> Target:
    return Target("http_api", "device", setup, (),
                  INSTRUMENT, http_mutator, time_limit_s=15.0)
