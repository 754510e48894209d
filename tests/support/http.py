"""Raw HTTP to a device's serving API (``http.client`` and sockets, not our own client), for the tests that
speak the Open Inference Protocol: one request per connection, the BYTES forms in JSON and in the binary
extension, and one JSON request on the Unix socket. Every wait is bounded by ``GUARD_S``."""

from __future__ import annotations

import http.client
import json
import socket
import struct
from pathlib import Path
from typing import Any, Protocol

import numpy as np

GUARD_S = 60.0  # hang guard for every socket wait: never expected to be reached


class Endpoint(Protocol):
    """Whatever serves the HTTP API on loopback: a test's world or server."""

    host: str
    port: int


def call(served: Endpoint, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection to whatever serves at ``served.host``/``.port``."""
    conn = http.client.HTTPConnection(served.host, served.port, timeout=GUARD_S)
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def post_json(world: Endpoint, model: str, doc: Any) -> tuple[int, Any]:
    status, _, body = call(world, "POST", f"/v2/models/{model}/infer", json.dumps(doc).encode(),
                           {"Content-Type": "application/json"})
    return status, json.loads(body)


def post_binary(world: Endpoint, model: str, name: str, elements: list[bytes]
                ) -> tuple[int, dict[str, str], bytes]:
    """One BYTES input in the binary extension (each element: 4-byte little-endian length, then its
    bytes), every output asked for as binary too."""
    blob = b"".join(struct.pack("<I", len(e)) + e for e in elements)
    head = json.dumps({"inputs": [{"name": name, "datatype": "BYTES", "shape": [len(elements)],
                                   "parameters": {"binary_data_size": len(blob)}}],
                       "parameters": {"binary_data_output": True}}).encode()
    headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))}
    return call(world, "POST", f"/v2/models/{model}/infer", head + blob, headers)


def read_binary(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """A binary reply: BYTES outputs as lists of bytes, numeric ones as arrays."""
    n = int(headers["inference-header-content-length"])
    doc, at, out = json.loads(body[:n]), n, {}
    for item in doc["outputs"]:
        blob = body[at:at + item["parameters"]["binary_data_size"]]
        at += len(blob)
        if item["datatype"] == "BYTES":
            values, pos = [], 0
            while pos < len(blob):
                (length,) = struct.unpack_from("<I", blob, pos)
                values.append(blob[pos + 4:pos + 4 + length])
                pos += 4 + length
            out[item["name"]] = values
        else:
            dtype = {"FP32": "<f4", "INT64": "<i8"}[item["datatype"]]
            out[item["name"]] = np.frombuffer(blob, dtype).reshape(item["shape"])
    assert at == len(body)
    return out


def json_outputs(doc: dict[str, Any]) -> dict[str, Any]:
    return {o["name"]: (o["data"] if o["datatype"] == "BYTES" else np.reshape(o["data"], o["shape"]))
            for o in doc["outputs"]}


def ask_path(path: Path, request: dict[str, Any]) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(GUARD_S)
        s.connect(str(path))
        s.sendall(json.dumps(request).encode() + b"\n")
        with s.makefile("rb") as f:
            return json.loads(f.readline())
