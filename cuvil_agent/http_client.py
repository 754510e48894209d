"""A small client of the device's HTTP inference API (``cuvil_agent.http_api``) for local apps: the standard
library's ``http.client`` plus numpy, over TCP or the API's Unix socket, one keep-alive connection.

    with InferenceClient("http://127.0.0.1:8080") as client:
        result = client.infer("detector", {"image": frame}, captured_at=time.time())
        boxes = result.outputs["boxes"]
        labels = client.infer("sentiment", {"text": ["I love this movie!"]}).outputs["label"]  # bytes

Tensors travel in the binary tensor data extension by default (no JSON number formatting either way).
Errors: ``InferenceRefused`` carries the server's status, error type and Retry-After hint (an app backs
off on ``kind == "Overloaded"``); ``ServerUnreachable`` wraps connection failures.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import numpy as np

from ota.errors import BadInferenceRequest, InferenceRefused, ServerUnreachable
from ota.parse import parse_decimal

from . import oip


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _array(value: Any) -> np.ndarray:
    """Numbers as they are; strings and bytes (texts, encoded images for a model with processing) as a
    BYTES tensor: an object array of ``bytes``, strings UTF-8 encoded."""
    a = np.asarray(value)
    if a.dtype.kind not in "USO":
        return a
    out = np.empty(a.shape, dtype=object)
    out.ravel()[:] = [x.encode() if isinstance(x, str) else bytes(x) for x in a.ravel()]
    return out


@dataclass(frozen=True)
class InferResult:
    model_name: str
    model_version: str  # the release that answered
    id: str | None
    outputs: dict[str, np.ndarray]


class InferenceClient:
    """``url`` (``http://host:port``) or ``unix_socket``; ``timeout_s`` bounds every connect and read."""

    def __init__(self, url: str = "http://127.0.0.1:8080", unix_socket: str = "",
                 timeout_s: float = 30.0) -> None:
        self._conn: http.client.HTTPConnection
        if unix_socket:
            self._conn = _UnixConnection(unix_socket, timeout_s)
        else:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(f"want an http://host:port URL, got {url!r}")
            self._conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)

    def _request(self, method: str, path: str, body: bytes | None = None,
                 headers: Mapping[str, str] | None = None) -> tuple[int, http.client.HTTPResponse, bytes]:
        """One exchange; a keep-alive connection the server closed meanwhile is reopened once."""
        for attempt in (1, 2):
            try:
                self._conn.request(method, path, body, dict(headers or {}))
                response = self._conn.getresponse()
                return response.status, response, response.read()
            except (OSError, http.client.HTTPException) as exc:
                self._conn.close()
                if attempt == 2 or not isinstance(exc, (http.client.RemoteDisconnected, BrokenPipeError,
                                                        ConnectionResetError)):
                    raise ServerUnreachable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    @staticmethod
    def _refused(status: int, response: http.client.HTTPResponse, body: bytes) -> InferenceRefused:
        try:
            doc = json.loads(body)
            message, kind = str(doc.get("error", "")), str(doc.get("type", ""))
        except (ValueError, AttributeError):
            message, kind = body[:200].decode("utf-8", "replace"), ""
        retry = parse_decimal(response.getheader("Retry-After"))
        return InferenceRefused(message or f"HTTP {status}", status, kind or f"HTTP{status}",
                                None if retry is None else float(retry))

    # -- the protocol's calls ---------------------------------------------------------------------
    def live(self) -> bool:
        return self._request("GET", "/v2/health/live")[0] == 200

    def ready(self) -> bool:
        return self._request("GET", "/v2/health/ready")[0] == 200

    def model_ready(self, name: str) -> bool:
        return self._request("GET", f"/v2/models/{quote(name, safe='')}/ready")[0] == 200

    def metadata(self, name: str) -> dict[str, Any]:
        """Inputs and outputs (name, datatype, shape), versions, release, version and variant."""
        status, response, body = self._request("GET", f"/v2/models/{quote(name, safe='')}")
        if status != 200:
            raise self._refused(status, response, body)
        return json.loads(body)

    def infer(self, name: str, inputs: Mapping[str, Any], outputs: Sequence[str] | None = None,
              binary: bool = True, captured_at: float | None = None, request_id: str | None = None
              ) -> InferResult:
        """Run ``name`` on ``inputs`` (arrays, cast to nothing: send the model's dtypes); ``outputs``
        picks some (default: all); ``captured_at`` (unix seconds) lets the policy refuse stale data."""
        tensors = [(k, _array(v), binary) for k, v in inputs.items()]
        items, blob = oip.encode_tensors(tensors)
        doc: dict[str, Any] = {"inputs": items}
        if request_id is not None:
            doc["id"] = request_id
        if captured_at is not None:
            doc["parameters"] = {"captured_at": captured_at}
        if outputs is not None:
            doc["outputs"] = [{"name": n, "parameters": {"binary_data": binary}} for n in outputs]
        elif binary:
            doc.setdefault("parameters", {})["binary_data_output"] = True
        body, header_length = oip.join_body(doc, blob)
        headers = {"Content-Type": "application/octet-stream" if header_length else "application/json"}
        if header_length is not None:
            headers[oip.HEADER_LENGTH] = str(header_length)
        status, response, reply = self._request("POST", f"/v2/models/{quote(name, safe='')}/infer", body,
                                                headers)
        if status != 200:
            raise self._refused(status, response, reply)
        try:
            meta, arrays = oip.decode_outputs(reply, response.getheader(oip.HEADER_LENGTH))
        except BadInferenceRequest as exc:
            raise ServerUnreachable(f"malformed reply from the server: {exc}") from exc
        return InferResult(str(meta.get("model_name", "")), str(meta.get("model_version", "")),
                           meta.get("id"), arrays)

    def close(self) -> None:
        self._conn.close()  # idempotent in http.client

    def __enter__(self) -> InferenceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
