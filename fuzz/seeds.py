"""Seed corpora, made by the project's own code where it writes the format: the OIP request and response
bodies by ``cuvil_agent.oip`` (what ``cuvil_agent.http_client`` sends and the server answers), the HTTP
requests by ``cuvil_agent.http_client.InferenceClient`` itself (captured on a loopback socket), the download
server's answers as the HTTP/1.1 responses the download client must handle. ``python -m fuzz.seeds`` rewrites
``fuzz/corpus``; seeds are named by their content's sha256 (16 hex digits), and only such files are
replaced: an input kept in a corpus by name stays."""

from __future__ import annotations

import hashlib
import re
import socket
import threading
from collections.abc import Iterable

import numpy as np

from .engine import CORPUS
from .targets.http_download import LENGTH, OFFSET


def _write(name: str, seeds: Iterable[bytes]) -> int:
    out = CORPUS / name
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():  # the seeds made before; a file named by hand (a kept input) stays
        if re.fullmatch(r"[0-9a-f]{16}", old.name):
            old.unlink()
    n = 0
    for data in seeds:
        (out / hashlib.sha256(data).hexdigest()[:16]).write_bytes(data)
        n += 1
    return n


def _tensors() -> list[list[tuple[str, np.ndarray, bool]]]:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    ids, mask, u = np.array([1, 9], np.int64), np.array([True, False, True]), np.arange(4, dtype=np.uint8)
    texts = np.empty(2, dtype=object)
    texts[:] = [b"I love this movie!", b"\xff\xfe not utf-8"]
    calls = []
    for binary in (False, True):
        calls.append([("x", x, binary), ("ids", ids, binary), ("mask", mask, binary), ("u", u, binary)])
        calls.append([("text", texts, binary)])
    return calls


def oip_seeds() -> list[bytes]:
    from cuvil_agent import oip

    out = []
    for tensors in _tensors():
        items, blob = oip.encode_tensors(tensors)
        for params in ({}, {"captured_at": 1764979200.5, "binary_data_output": True}, {"hop_s": 0.5}):
            doc = {"id": "r1", "inputs": items, **({"parameters": params} if params else {})}
            body, header = oip.join_body(doc, blob)
            out.append(body if header is None else body[:header] + b"\0" + body[header:])
        request = oip.InferRequest("r1", {}, [(t[0], t[2]) for t in tensors], None)
        body, header = oip.encode_infer_response("m", "1", request, {t[0]: t[1] for t in tensors})
        out.append(body if header is None else body[:header] + b"\0" + body[header:])
    return out


def _captured(calls) -> list[bytes]:  # type: ignore[no-untyped-def]
    """What ``InferenceClient`` sends for each call, on a socket that answers every request with an
    empty 200 and records the bytes of each connection."""
    from cuvil_agent.http_client import InferenceClient

    listener = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                               if k.lower() == b"content-length"), 0)
                while len(body) < length:
                    body += conn.recv(65536)
                got.append(head + b"\r\n\r\n" + body)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")

    threading.Thread(target=serve, daemon=True).start()
    for call in calls:
        with InferenceClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=10) as client:
            try:
                call(client)
            except Exception:  # the canned reply is no model's answer: only the request matters here
                pass
    listener.close()
    return got


def http_api_seeds() -> list[bytes]:
    x, ids = np.arange(4, dtype=np.float32), np.array([1, 9], np.int64)
    requests = _captured([
        lambda c: c.live(), lambda c: c.ready(), lambda c: c.model_ready("m"), lambda c: c.metadata("m"),
        lambda c: c.infer("m", {"x": x, "ids": ids}),
        lambda c: c.infer("m", {"x": x, "ids": ids}, binary=False),
        lambda c: c.infer("m", {"x": x, "ids": ids}, outputs=["y"], captured_at=1764979200.0, request_id="a"),
    ])
    get = b"GET /metrics HTTP/1.1\r\nHost: d\r\n\r\n"
    chunked = (b"POST /v2/models/m/infer HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\n{\"inp\r\n0\r\n\r\n")
    return [*requests, get, requests[0] + requests[3], chunked]  # pipelined: two in one connection


def http_download_seeds() -> list[bytes]:
    body = bytes(range(LENGTH))
    return [
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % LENGTH + body,
        b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n\r\n"
        % (OFFSET, LENGTH - 1, LENGTH, LENGTH - OFFSET) + body[OFFSET:],
        b"HTTP/1.1 302 Found\r\nLocation: /bundle.cvb\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + body + b"\r\n0\r\n\r\n",
        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n",
    ]


def main() -> None:
    """Rewrite every target's corpus: the three remote ones from here, every other from its module's own
    ``seeds()`` (a harness that reads a format writes its seeds next to it)."""
    import importlib
    import pkgutil

    from . import targets

    makers = {"oip_request": oip_seeds, "http_api": http_api_seeds, "http_download": http_download_seeds}
    for m in pkgutil.iter_modules(targets.__path__):
        module = importlib.import_module(f"{targets.__name__}.{m.name}")
        if hasattr(module, "seeds"):
            makers[m.name] = module.seeds
    for name, make in makers.items():
        print(f"{name}: {_write(name, make())} seeds")


if __name__ == "__main__":
    main()
