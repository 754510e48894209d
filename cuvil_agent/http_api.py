"""The device's HTTP inference API: the Open Inference Protocol (KServe v2) over HTTP/1.1 with the binary
tensor data extension, plus Prometheus metrics at ``/metrics``.

    GET  /v2/health/live | /v2/health/ready            200, or 400 while no model answers (ready)
    GET  /v2 | /v2/                                    server metadata and extensions
    GET  /v2/models/{name}[/versions/{release}]        model metadata (+ release, version, variant)
    GET  /v2/models/{name}[/versions/{release}]/ready  200, or 400 while it is not loaded
    POST /v2/models/{name}[/versions/{release}]/infer  inference (``oip``): tensors, or for a model
                                                       with processing a BYTES text/image/audio
                                                       input and typed results (``payloads``)
    GET  /metrics                                      Prometheus text format (``cuvil_agent.metrics``)

Errors are ``{"error": "<Type>: <message>", "type": "<Type>"}``: 400 malformed request (or text that is not
UTF-8, an unreadable image or WAV file), 404 unknown model or path, 405 method, 408 too slow, 413 body too
large (or ``InputOverLimit``: too many texts/images/clips or audio windows, one too large), 422
``StaleInput``, 431 headers too large, 503 ``Overloaded`` (queue full, load shed, connection limit),
``ModelChanged`` or no model loaded, with ``Retry-After``; 504 deadline exceeded; 500 the model trapped or
its worker crashed.

Why h11 and not a framework: h11 (python-hyper; pure Python, no dependencies, ~100 KB) parses HTTP/1.1
and nothing else, so this module owns the socket and can put a total deadline on each phase of a
request (headers, body, reply), which is what stops slow-loris clients: ``http.server`` and WSGI servers
such as waitress only bound the wait per read (a byte every few seconds keeps a connection for ever),
and asyncio servers (uvicorn, aiohttp) pull in an event-loop stack that is larger than this whole
agent. Connections are served by one thread each, at most ``max_connections`` (``BoundedThreads``), so
a small device's memory is bounded by ``HttpSettings``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import socketserver
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import h11

from ota.errors import (
    BadInferenceRequest,
    InputOverLimit,
    ModelChanged,
    NoActiveModel,
    OtaError,
    UnknownModel,
)
from ota.parse import parse_decimal, split_url
from runtime_wasm.errors import (
    DeadlineExceeded,
    InferenceInputError,
    Overloaded,
    ProcessingError,
    RuntimeWasmError,
    StaleInput,
)

from . import oip, payloads
from .config import HttpSettings
from .metrics import CONTENT_TYPE, ServingMetrics
from .serve import BoundedThreads, ModelHost, ModelRegistry, listening_on, unix_socket_at

log = logging.getLogger(__name__)
PLATFORM = "cuvil_wasm"
_MODEL_PATH = re.compile(r"/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?"
                         r"(?P<what>/ready|/infer)?")
#: the protocol's OpenAPI file names server metadata ``/v2/``, its prose ``v2``: both are served
_SERVER_ENDPOINTS = {"/v2/health/live": "health_live", "/v2/health/ready": "health_ready", "/v2": "server",
                     "/v2/": "server", "/metrics": "metrics"}
#: how long a connection closed with an unread body is drained first, so the client reads our reply
#: instead of a reset (a lingering close)
_LINGER_S = 2.0
#: the HTTP status of each error type; the first match wins, anything else is a 500
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (UnknownModel, 404), (InputOverLimit, 413), (BadInferenceRequest, 400), (StaleInput, 422),
    (InferenceInputError, 400), (ProcessingError, 400), (Overloaded, 503), (NoActiveModel, 503),
    (ModelChanged, 503), (DeadlineExceeded, 504))


@dataclass
class Reply:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "application/json"


def _json(status: int, doc: Any, headers: list[tuple[str, str]] | None = None) -> Reply:
    return Reply(status, json.dumps(doc).encode(), headers or [])


def _error(status: int, kind: str, message: str, retry_after_s: int = 0) -> Reply:
    headers = [("Retry-After", str(retry_after_s))] if status == 503 else []
    return _json(status, {"error": f"{kind}: {message}", "type": kind}, headers)


def _raw(reply: Reply) -> bytes:
    """A whole response outside h11's state machine (before a request was parsed); it closes."""
    head = [f"HTTP/1.1 {reply.status} {HTTPStatus(reply.status).phrase}",
            f"Content-Type: {reply.content_type}", f"Content-Length: {len(reply.body)}", "Connection: close",
            *(f"{k}: {v}" for k, v in reply.headers)]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + reply.body


class _Timeout(Exception):
    """A phase of a request (``header`` or ``body``) ran past its total deadline."""


class _Connection:
    """One client connection: h11 parses; reads and writes happen here under the phase deadlines."""

    def __init__(self, sock: socket.socket, api: HttpApiServer) -> None:
        self.sock, self.api, self.limits = sock, api, api.settings
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
        self._head = False  # the request being answered is a HEAD

    def serve(self) -> None:
        """Requests until the client closes, asks to close, or breaks a limit (keep-alive in between).
        The error boundary of the connection: whatever goes wrong, the client gets an answer (a 500 for
        a bug, logged) and the thread ends normally, never by an exception."""
        try:
            self._serve()
        except Exception:
            log.exception("HTTP API: unexpected error on a connection")
            if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # nothing of a reply sent yet
                self._send_raw(_error(500, "InternalError", "the server failed on this request (logged)"))

    def _serve(self) -> None:
        while True:
            try:
                request = self._next(time.monotonic() + self.limits.header_timeout_s, "header")
                if not isinstance(request, h11.Request):
                    return  # closed by the client between requests
                reply, label, endpoint, close = self._answer(request)
            except _Timeout as exc:
                if str(exc) == "header" and not self.h11.trailing_data[0]:
                    return  # an idle keep-alive connection: nothing was asked, nothing to answer
                self.api.metrics.timeouts.labels(str(exc)).inc()
                self._send_raw(_error(408, "RequestTimeout", f"the request's {exc} did not arrive within "
                                      "its time limit"))
                return
            except h11.RemoteProtocolError as exc:  # malformed HTTP, or headers over max_header_bytes
                status = exc.error_status_hint
                kind = "HeadersTooLarge" if status == 431 else "BadHttpRequest"
                self._send_raw(_error(status, kind, str(exc)))
                return
            self.api.metrics.requests.labels(label, endpoint, str(reply.status)).inc()
            self._send(reply, close)
            if close or self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
                self._linger()
                return
            self.h11.start_next_cycle()

    def _next(self, deadline: float, phase: str) -> Any:
        """The next h11 event, reading as needed until ``deadline``; the socket's errors end the
        connection as a closed one."""
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout(phase)
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                raise _Timeout(phase) from None
            except OSError:
                data = b""
            self.h11.receive_data(data)

    def _answer(self, request: h11.Request) -> tuple[Reply, str, str, bool]:
        """Read the body within its limits, then route: (reply, model label, endpoint, close after)."""
        self._head = request.method == b"HEAD"
        head_bytes = len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)
        if head_bytes > self.limits.max_header_bytes:  # h11 bounds only a head still incomplete
            too_large = _error(431, "HeadersTooLarge", f"over {self.limits.max_header_bytes} bytes")
            return too_large, "", "other", True
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        declared = parse_decimal(headers.get("content-length"))
        if declared is not None and declared > self.limits.max_body_bytes:
            return self._too_large(), "", "other", True
        if self.h11.client_is_waiting_for_100_continue:
            self._write(self.h11.send(h11.InformationalResponse(status_code=100, headers=[])))
        deadline = time.monotonic() + self.limits.body_timeout_s
        body = bytearray()
        while True:
            event = self._next(deadline, "body")
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.limits.max_body_bytes:  # chunked bodies declare no length
                    return self._too_large(), "", "other", True
            elif isinstance(event, h11.EndOfMessage):
                break
            else:  # closed mid-body
                raise h11.RemoteProtocolError("the connection closed before the body was complete")
        method, target = request.method.decode("latin-1"), request.target.decode("latin-1")
        reply, label, endpoint = self.api.respond(method, target, headers, bytes(body))
        return reply, label, endpoint, headers.get("connection", "").lower() == "close"

    def _too_large(self) -> Reply:
        return _error(413, "RequestTooLarge", f"the body is over {self.limits.max_body_bytes} bytes")

    def _send(self, reply: Reply, close: bool) -> None:
        headers = [("Content-Type", reply.content_type), ("Content-Length", str(len(reply.body))),
                   *reply.headers, *([("Connection", "close")] if close else [])]
        try:
            data = self.h11.send(h11.Response(status_code=reply.status, headers=headers))
            if not self._head:  # a HEAD request's answer is the head alone (h11 refuses a body)
                data += self.h11.send(h11.Data(data=reply.body))
            data += self.h11.send(h11.EndOfMessage())
        except h11.LocalProtocolError:  # the client's own state forbids a reply (it already closed)
            return
        self._write(data)

    def _write(self, data: bytes) -> None:
        self.sock.settimeout(self.limits.write_timeout_s)  # all of sendall: a stalled reader is dropped
        with contextlib.suppress(OSError):
            self.sock.sendall(data)

    def _send_raw(self, reply: Reply) -> None:
        self.api.metrics.requests.labels("", "other", str(reply.status)).inc()
        self._write(_raw(reply))
        self._linger()

    def _linger(self) -> None:
        """Stop sending, then discard what the client still sends for up to ``_LINGER_S``: closing on
        unread data would reset the connection and could destroy the reply before the client reads it."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)
            end = time.monotonic() + _LINGER_S
            while (left := end - time.monotonic()) > 0:
                self.sock.settimeout(left)
                if not self.sock.recv(1 << 16):
                    break


class _Handler(socketserver.BaseRequestHandler):
    request: socket.socket

    def handle(self) -> None:
        _Connection(self.request, self.server.api).serve()  # type: ignore[attr-defined]


class _Listener(BoundedThreads):
    api: HttpApiServer

    def refuse(self, request: socket.socket) -> None:
        s = self.api.settings
        self.api.metrics.refused.inc()
        request.send(_raw(_error(503, "Overloaded", f"{s.max_connections} connections already open",
                                 s.retry_after_s)))
        with contextlib.suppress(OSError):  # what already arrived: closing on unread data resets
            request.recv(s.max_header_bytes)


class _TcpListener(_Listener, socketserver.TCPServer):
    allow_reuse_address = True


class _Tcp6Listener(_TcpListener):
    address_family = socket.AF_INET6


class _UnixListener(_Listener, socketserver.UnixStreamServer):
    pass


class HttpApiServer:
    """Serves ``models`` over HTTP from a daemon thread until ``close``: on ``settings.unix_socket`` if
    given (mode 0660), else on ``host:port`` (loopback by default)."""

    def __init__(self, models: ModelRegistry, settings: HttpSettings | None = None) -> None:
        self.models, self.settings = models, settings or HttpSettings()
        self.metrics = ServingMetrics(models)
        self._closed = False
        listener: _Listener
        if self.settings.unix_socket:
            path = Path(self.settings.unix_socket)
            with unix_socket_at(path, f"the HTTP socket {path} ([http] unix_socket)") as staging:
                listener = _UnixListener(staging, _Handler)
            listener.server_address = str(path)
        else:
            tcp = _Tcp6Listener if ":" in self.settings.host else _TcpListener
            with listening_on(f"HTTP {self.settings.host}:{self.settings.port} ([http] host and port)"):
                listener = tcp((self.settings.host, self.settings.port), _Handler)
        listener.api = self
        listener.limit_connections(self.settings.max_connections)
        self._listener = listener
        self._thread = threading.Thread(target=listener.serve_forever, args=(0.2,), name="http-api",
                                        daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int] | str:
        """(host, port) as bound (an ephemeral ``port = 0`` resolved), or the Unix socket's path."""
        return self.settings.unix_socket or self._listener.server_address[:2]  # type: ignore[return-value]

    # -- routing (no I/O) -----------------------------------------------------------------------
    def respond(self, method: str, target: str, headers: Mapping[str, str], body: bytes
                ) -> tuple[Reply, str, str]:
        """One request's reply, the model label for the metrics ("" when none, or unknown: hostile
        names must not grow the metrics) and the endpoint. Never raises."""
        path, label, endpoint = target, "", "other"
        try:
            path = split_url(target, BadInferenceRequest, "request target").path
            if path in _SERVER_ENDPOINTS:
                endpoint = _SERVER_ENDPOINTS[path]
                return self._allow(method, "GET") or self._server(path), label, endpoint
            match = _MODEL_PATH.fullmatch(path)
            if match is None:
                return _error(404, "NotFound", f"no endpoint {path!r}"), label, endpoint
            what = (match["what"] or "/metadata")[1:]
            endpoint = what
            host = self.models.get(unquote(match["name"]))
            label = host.name
            if what == "infer":
                reply = self._allow(method, "POST") or self._infer(host, match["version"], headers, body)
            else:
                reply = self._allow(method, "GET") or self._model(host, match["version"], what == "ready")
        except Exception as exc:  # typed errors become their status; anything else is a bug, logged
            status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
            if not isinstance(exc, (OtaError, RuntimeWasmError)):
                log.exception("HTTP API: unexpected error on %s %r", method, path[:200])
            reply = _error(status, type(exc).__name__, str(exc), self.settings.retry_after_s)
        return reply, label, endpoint

    @staticmethod
    def _allow(method: str, allowed: str) -> Reply | None:
        if method == allowed:
            return None
        return _json(405, {"error": f"MethodNotAllowed: use {allowed}", "type": "MethodNotAllowed"},
                     [("Allow", allowed)])

    def _server(self, path: str) -> Reply:
        if path == "/v2/health/live":
            return _json(200, {"live": True})
        if path == "/v2/health/ready":
            hosts = [h for h, _ in self.models.entries()]
            waiting = [h.name or "(unnamed)" for h in hosts if not h.ready]
            if hosts and not waiting:
                return _json(200, {"ready": True})
            why = f"models not loaded: {waiting}" if waiting else "no model is registered"
            return _json(400, {"ready": False, "error": f"NotReady: {why}", "type": "NotReady"})
        if path == "/metrics":
            return Reply(200, self.metrics.render(), content_type=CONTENT_TYPE)
        try:
            version = metadata.version("cuvil-edge")
        except metadata.PackageNotFoundError:
            version = "unknown"
        return _json(200, {"name": "cuvil-edge", "version": version, "extensions": ["binary_tensor_data"]})

    @staticmethod
    def _check_version(host: ModelHost, version: str | None) -> Any:
        served = host.served()
        if version is not None and version != str(served.release):
            raise UnknownModel(f"model {served.name!r} serves version {served.release}, not {version!r}")
        return served

    def _model(self, host: ModelHost, version: str | None, ready_only: bool) -> Reply:
        if ready_only:
            if not host.ready:
                return _json(400, {"name": host.name, "ready": False, "error": "NotReady: not loaded",
                                   "type": "NotReady"})
            served = self._check_version(host, version)
            return _json(200, {"name": served.name, "ready": True})
        served = self._check_version(host, version)
        tensors = oip.Signature(served.spec.inputs, served.spec.outputs)
        doc: dict[str, Any] = {"name": served.name, "versions": [str(served.release)], "platform": PLATFORM}
        if served.processor is not None:  # the processed call first; the tensors still work
            shown = payloads.signature(served.processor)
            config = served.processor.config
            doc |= {"task": config.task, "labels": list(config.labels),
                    "tensor_inputs": [oip.tensor_metadata(t) for t in tensors.inputs],
                    "tensor_outputs": [oip.tensor_metadata(t) for t in tensors.outputs]}
        else:
            shown = tensors
        return _json(200, doc | {
            "inputs": [oip.tensor_metadata(t) for t in shown.inputs],
            "outputs": [oip.tensor_metadata(t) for t in shown.outputs],
            "release": served.release, "version": served.version, "variant": served.variant})

    def _infer(self, host: ModelHost, version: str | None, headers: Mapping[str, str], body: bytes) -> Reply:
        """Tensors in, tensors out; or, for a model with processing, one BYTES ``text``/``image``/``audio``
        input through the served release's processing and its typed results out (``payloads``)."""
        served = self._check_version(host, version)
        signatures = [oip.Signature(served.spec.inputs, served.spec.outputs)]
        if served.processor is not None:
            signatures.append(payloads.signature(served.processor))
        s = self.settings
        request = oip.parse_infer_request(body, headers.get(oip.HEADER_LENGTH.lower()), signatures,
                                          oip.BytesLimits(s.max_items, s.max_item_bytes))
        processor = served.processor
        if processor is not None and payloads.input_name(processor) in request.inputs:
            elements = request.inputs[payloads.input_name(processor)].ravel().tolist()
            items = payloads.decode_items(processor, elements, s.max_items, s.max_item_bytes)
            results = payloads.run(host, served, items, request.captured_at, request.hop_s, s.max_items)
            release, outputs = served.release, payloads.result_tensors(results)
        else:
            release, outputs = host.predict(request.inputs, request.captured_at)
        data, header_length = oip.encode_infer_response(served.name, str(release), request, outputs)
        if header_length is None:
            return Reply(200, data)
        return Reply(200, data, [(oip.HEADER_LENGTH, str(header_length))], "application/octet-stream")

    def close(self) -> None:
        """Stop accepting (connections in progress end with their requests); idempotent."""
        if self._closed:
            return
        self._closed = True
        self._listener.shutdown()
        self._listener.server_close()
        if self.settings.unix_socket:
            Path(self.settings.unix_socket).unlink(missing_ok=True)

    def __enter__(self) -> HttpApiServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
