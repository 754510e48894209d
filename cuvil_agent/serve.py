"""Local inference for apps on the device: one JSON request per connection on a Unix socket.

Request: ``{"inputs": {name: tensor}}``, optionally with ``"captured_at"`` (unix seconds when the input
data was captured, for the policy's freshness bound); reply: ``{"release": n, "outputs": {name: tensor}}``
or ``{"error": "...", "type": "..."}``, tensors as in golden vectors (``ota.golden``: dtype, shape,
base64 little-endian data). File permissions on the socket decide which local users may ask.

Neither a local app nor the model can hang serving: the model always runs in supervised worker
processes under the policy's deadline (``ModelHost``), and ``ServeLimits`` bound the connections served
at once, the time to send a request and its size (``InferenceServer``). ``ModelRegistry`` names the
models a device serves, for the HTTP API (``cuvil_agent.http_api``) and its metrics.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ota.errors import (
    BadInferenceRequest,
    CannotListen,
    LengthMismatch,
    NoActiveModel,
    NoHealthyModel,
    NoProcessing,
    OtaError,
    ServerUnreachable,
    UnknownModel,
)
from ota.golden import decode_tensor, encode_tensor
from ota.installer import ActiveModelSource
from ota.parse import finite_number
from runtime_wasm import (
    AdmissionGate,
    ModelSource,
    ModelSpec,
    Overloaded,
    RuntimePolicy,
    RuntimeWasmError,
    Scheduler,
)
from runtime_wasm.processing import Processor
from runtime_wasm.supervisor import same_signature

from . import payloads
from .config import ServeLimits
from .shadow import ShadowSampler

log = logging.getLogger(__name__)
#: the client's bound on one reply line
MAX_REPLY_BYTES = 64 << 20


@dataclass(frozen=True)
class ServedModel:
    """What is being served under a name right now: the API's model metadata."""

    name: str
    release: int
    version: str  # the release's semantic version
    variant: str  # the module variant the primary worker runs
    spec: ModelSpec
    #: the release's signed processing (texts/images in, typed results out); None: tensors only
    processor: Processor | None = None
    #: what the install's self-test measured on the golden vectors (``ota.selftest``); None: not recorded
    golden: Mapping[str, Any] | None = None


class ModelHost:
    """The active model, in supervised worker processes behind a ``Scheduler``: every request runs under
    the policy's deadline (default ``RuntimePolicy()``), so a model that loops on one input is killed
    there instead of hanging later requests, reloads and shutdown.

    Swapped whole after an install or rollback, so a request sees old or new. ``load_error`` holds why
    the latest load failed (None after a success); with nothing loaded requests get ``NoActiveModel`` or
    ``NoHealthyModel``. ``name`` is what clients call it: the given one, else the installed manifest's.
    ``admission``: this model's gate into the device-wide admission it shares with the other models of a
    multi-model device (every scheduler it loads passes requests through it). ``shadow``: after a switch
    to a newer release, the previous one goes to it instead of being closed (``cuvil_agent.shadow``).
    """

    def __init__(self, installer: ActiveModelSource, policy: RuntimePolicy | None = None, name: str = "",
                 admission: AdmissionGate | None = None, shadow: ShadowSampler | None = None) -> None:
        self._installer, self.policy, self._name = installer, policy or RuntimePolicy(), name
        self.admission, self.shadow = admission, shadow
        self._lock = threading.Lock()
        self._model: Scheduler | None = None
        self._served: ServedModel | None = None
        self._retiring: list[threading.Thread] = []
        self.release: int | None = None
        self.load_error: Exception | None = None
        with contextlib.suppress(Exception):  # in load_error: serving nothing beats an agent that crashes
            self.reload()

    def reload(self) -> None:
        """Load the installer's active slot (compiled from the local cache) into fresh workers, or take the
        worker its install's self-test left loaded, swap it in and retire the previous model in the
        background: its in-flight request ends by its deadline, so this never waits on it. On failure:
        raises, sets ``load_error``, the previous model keeps serving."""
        try:
            active = self._installer.active_model()
            warm = self._installer.take_warm(active.directory)  # the install's self-test loaded it: no wait
            model = Scheduler(ModelSource.from_dir(active.directory, cache_dir=str(active.cache_dir),
                                                   deterministic=self.policy.deterministic),
                              self.policy, admission=self.admission, warm=warm)
        except Exception as exc:
            self.load_error = exc
            raise
        manifest, processor = active.manifest, payloads.load_processor(active.directory, model.spec)
        served = ServedModel(self._name or manifest.name, manifest.release, manifest.version,
                             model.variants[0], model.spec, processor, active.golden)
        with self._lock:
            old, self._model, self.release, self.load_error = self._model, model, manifest.release, None
            previous, self._served = self._served, served
            self._retiring = [t for t in self._retiring if t.is_alive()]
            if old is not None and not self._to_shadow(old, previous, served):
                retire = threading.Thread(target=old.close, name="retire-model", daemon=True)
                retire.start()
                self._retiring.append(retire)

    def _to_shadow(self, old: Scheduler, previous: ServedModel | None, new: ServedModel) -> bool:
        """Hand the previous release to the shadow sampler (which closes it) when it samples this switch:
        an update (not a rollback or a reload), the same inputs and outputs, and no state (a shadow would
        see only part of the stream)."""
        if self.shadow is None or previous is None or new.release <= previous.release or new.spec.stateful \
                or not same_signature(previous.spec, new.spec):
            return False
        self.shadow.start(old, previous.release, new.release, new.spec.outputs[0].name)
        return True

    @property
    def name(self) -> str:
        """The configured name, else the loaded model's; "" while a nameless host has nothing loaded."""
        with self._lock:
            return self._name or (self._served.name if self._served else "")

    @property
    def ready(self) -> bool:
        with self._lock:
            return self._model is not None

    def served(self) -> ServedModel:
        """What answers requests now; ``NoActiveModel`` / ``NoHealthyModel`` while nothing does."""
        self._current()
        with self._lock:
            if self._served is None:  # closed in between
                raise NoActiveModel("the model host is closed")
            return self._served

    def _current(self) -> tuple[Scheduler, int]:
        with self._lock:
            model, release, error = self._model, self.release, self.load_error
        if model is None or release is None:
            if error is None or isinstance(error, NoActiveModel):
                raise NoActiveModel("no model is installed yet")
            raise NoHealthyModel(f"no healthy model is loaded ({type(error).__name__}: {error})")
        return model, release

    def predict(self, inputs: Mapping[str, np.ndarray], captured_at: float | None = None
                ) -> tuple[int, dict[str, np.ndarray]]:
        model, release = self._current()
        try:
            outputs = model.predict(dict(inputs), captured_at)  # the scheduler queues and batches
        except Overloaded:
            if self._model is model:  # queue full or load shed: the caller's to handle
                raise
            model, release = self._current()  # retired by a reload while queued: the new model answers
            outputs = model.predict(dict(inputs), captured_at)
        if self.shadow is not None:
            self.shadow.offer(release, inputs, outputs)
        return release, outputs

    def metrics(self) -> dict[str, Any] | None:
        """The scheduler's counters and latency percentiles (None while no model is loaded)."""
        with self._lock:
            model = self._model
        return model.metrics() if model is not None else None

    def close(self) -> None:
        """Stop serving and wait for retired models too (each bounded by its deadline): no worker is left."""
        with self._lock:
            model, self._model = self._model, None
            retiring, self._retiring = self._retiring, []
        if model is not None:
            model.close()
        if self.shadow is not None:
            self.shadow.close()
        for t in retiring:
            t.join()


class ModelRegistry:
    """The models a device serves, by name, each with a priority (higher: more important when models
    compete for the device: ``runtime_wasm.admission``). Names are looked up per request, so a host named
    after its installed manifest follows its installs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hosts: list[tuple[ModelHost, int]] = []

    def add(self, host: ModelHost, priority: int = 0) -> None:
        name = host.name
        if name and any(h.name == name for h, _ in self.entries()):
            raise ValueError(f"a model named {name!r} is already registered")
        with self._lock:
            self._hosts.append((host, priority))
            self._hosts.sort(key=lambda e: -e[1])

    def entries(self) -> list[tuple[ModelHost, int]]:
        """(host, priority), highest priority first."""
        with self._lock:
            return list(self._hosts)

    def states(self) -> Iterator[tuple[ModelHost, int, dict[str, Any] | None, ServedModel | None]]:
        """(host, priority, scheduler metrics, what is served) of every model, highest priority first, as
        ``/metrics`` and the telemetry read them: both None while it is not loaded, ``served`` None too when
        it was unloaded just after its metrics were read."""
        for host, priority in self.entries():
            m, served = host.metrics(), None
            if m is not None:
                with contextlib.suppress(OtaError):  # unloaded since metrics() was read
                    served = host.served()
            yield host, priority, m, served

    def get(self, name: str) -> ModelHost:
        for host, _ in self.entries():
            if host.name == name:
                return host
        raise UnknownModel(f"no model named {name!r} is served here")


def _read_line(sock: socket.socket, max_bytes: int, timeout_s: float) -> bytes:
    """The request line (up to a newline or EOF) within ``timeout_s`` in all: a client trickling bytes is
    dropped like a silent one (``TimeoutError``). ``LengthMismatch`` once it exceeds ``max_bytes``: at
    most ``max_bytes + 1`` bytes are ever read."""
    deadline = time.monotonic() + timeout_s
    buf = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no complete request within {timeout_s} s")
        sock.settimeout(left)
        chunk = sock.recv(min(1 << 16, max_bytes + 1 - len(buf)))
        end = chunk.find(b"\n")
        buf += chunk if end < 0 else chunk[:end]
        if len(buf) > max_bytes:
            raise LengthMismatch(f"request too large (over {max_bytes} bytes)")
        if end >= 0 or not chunk:
            return bytes(buf)


def _error(exc: Exception) -> dict[str, Any]:
    return {"error": str(exc), "type": type(exc).__name__}


class _Handler(socketserver.BaseRequestHandler):
    server: InferenceServer
    request: socket.socket

    def handle(self) -> None:
        limits = self.server.limits
        try:
            line = _read_line(self.request, limits.max_request_bytes, limits.read_timeout_s)
        except LengthMismatch as exc:
            reply = _error(exc)
        except OSError as exc:  # TimeoutError included: the client is dropped, others never notice
            log.info("dropped a local client: %s", exc)
            return
        else:
            reply = self._answer(line)
        self.request.settimeout(limits.read_timeout_s)  # a client that does not read its reply is dropped
        with contextlib.suppress(OSError):
            self.request.sendall(json.dumps(reply).encode() + b"\n")

    def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            captured = request.get("captured_at")  # optional: when the app captured the input data
            captured_at = None if captured is None else finite_number(captured, "captured_at",
                                                                      BadInferenceRequest)
            if "text" in request or "image" in request or "audio" in request:
                return self._answer_items(request, captured_at)
            inputs = {k: decode_tensor(v) for k, v in request["inputs"].items()}
            release, outputs = self.server.host.predict(inputs, captured_at)
            return {"release": release, "outputs": {k: encode_tensor(v) for k, v in outputs.items()}}
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OtaError,
                RuntimeWasmError) as exc:  # RecursionError: deeply nested JSON from a local app
            return _error(exc)

    def _answer_items(self, request: dict[str, Any], captured_at: float | None) -> dict[str, Any]:
        """``{"text": [str, ...]}``, ``{"image": [base64 of an encoded image, ...]}`` or ``{"audio": [base64
        of a WAV file, ...], "hop_s": seconds (optional)}`` through the served release's processing:
        ``{"release": n, "results": [{"label", "score", "top"} | {"spans"} | {"embedding"} | {"windows":
        [{"start", "end", "label", "score", "top"}, ...]}, ...]}``."""
        host, limits = self.server.host, self.server.limits
        served = host.served()
        processor = payloads.processor_of(served)
        name = payloads.input_name(processor)
        values = request.get(name)
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise BadInferenceRequest(f"this {processor.config.task} model takes {name!r}: a list of "
                                      + ("strings" if name == "text" else "base64 strings"))
        if name != "text":
            elements = [base64.b64decode(v, validate=True) for v in values]
        else:
            elements = [v.encode("utf-8") for v in values]  # a lone surrogate: UnicodeEncodeError, refused
        items = payloads.decode_items(processor, elements, limits.max_items, limits.max_item_bytes)
        results = payloads.run(host, served, items, captured_at, request.get("hop_s"), limits.max_items)
        return {"release": served.release, "results": [payloads.result_record(r) for r in results]}


class BoundedThreads(socketserver.ThreadingMixIn):
    """One daemon thread per connection, at most ``max_connections`` at once (``limit_connections``): one
    more is handed to ``refuse``, which must not block, and closed without a thread, so a flood of
    clients costs no threads."""

    daemon_threads = True
    max_connections = 1

    def limit_connections(self, n: int) -> None:
        self.max_connections, self._slots = n, threading.BoundedSemaphore(n)

    def refuse(self, request: socket.socket) -> None:
        """Tell a client over the limit why, without waiting on it (a fresh socket's buffer takes it)."""

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            request.setblocking(False)
            with contextlib.suppress(OSError):
                self.refuse(request)
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: its slot is free again
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


@contextlib.contextmanager
def listening_on(what: str) -> Iterator[None]:
    """An ``OSError`` while opening ``what`` (an address and the setting that chose it) as
    ``CannotListen`` naming it: the bare "Address already in use" does not say which address."""
    try:
        yield
    except OSError as exc:
        raise CannotListen(f"cannot listen on {what}: {exc.strerror or exc}") from exc


@contextlib.contextmanager
def unix_socket_at(path: Path, what: str) -> Iterator[str]:
    """A name beside ``path`` to bind and listen on, moved onto ``path`` (mode 0660) in one rename once the
    block has listened there: a client that finds ``path`` is never refused (a socket file appears at
    ``bind``, before ``listen``). ``OSError`` as ``CannotListen`` naming ``what``."""
    staging = path.with_name(path.name + "~")
    with listening_on(what):
        path.parent.mkdir(parents=True, exist_ok=True)
        staging.unlink(missing_ok=True)
        try:
            yield str(staging)
            os.chmod(staging, 0o660)
            os.replace(staging, path)
        finally:
            staging.unlink(missing_ok=True)


class InferenceServer(BoundedThreads, socketserver.UnixStreamServer):
    """Serves ``host`` on ``path`` (mode 0660) from a daemon thread until ``close``; at most
    ``limits.max_connections`` at once, each in its own thread: one more is answered ``Overloaded`` and
    closed without a thread."""

    def __init__(self, path: str | os.PathLike[str], host: ModelHost,
                 limits: ServeLimits | None = None) -> None:
        self.path, self.host, self.limits = Path(path), host, limits or ServeLimits()
        self.limit_connections(self.limits.max_connections)
        with unix_socket_at(self.path, f"the inference socket {self.path} ([agent] socket)") as staging:
            super().__init__(staging, _Handler)
        self.server_address = str(self.path)
        self._thread = threading.Thread(target=self.serve_forever, args=(0.2,), name="infer", daemon=True)
        self._thread.start()

    def refuse(self, request: socket.socket) -> None:
        reply = _error(Overloaded(f"{self.max_connections} connections already being served"))
        request.send(json.dumps(reply).encode() + b"\n")

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        self.path.unlink(missing_ok=True)


def _exchange(path: str | os.PathLike[str], body: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """One request line to the agent's socket and its reply (maybe an error reply); ``ServerUnreachable``,
    naming the socket, when no agent answers there."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(str(path))
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused early: read why
                s.sendall(json.dumps(body).encode() + b"\n")
            with s.makefile("rb") as f:
                line = f.readline(MAX_REPLY_BYTES)
    except OSError as exc:  # no such socket, nobody listening, or no reply within timeout_s
        raise ServerUnreachable(f"agent socket {path}: {exc.strerror or exc}") from exc
    if not line:
        raise OtaError("the agent closed the connection without a reply")
    return json.loads(line)


def infer(path: str | os.PathLike[str], inputs: Mapping[str, np.ndarray], timeout_s: float = 30.0,
          captured_at: float | None = None) -> tuple[int, dict[str, np.ndarray]]:
    """Client side: (release that answered, outputs); ``OtaError`` carrying the agent's error otherwise."""
    body: dict[str, Any] = {"inputs": {k: encode_tensor(np.asarray(v)) for k, v in inputs.items()}}
    if captured_at is not None:
        body["captured_at"] = captured_at
    reply = _exchange(path, body, timeout_s)
    if "error" in reply:
        raise OtaError(f"{reply['type']}: {reply['error']}")
    return reply["release"], {k: decode_tensor(v) for k, v in reply["outputs"].items()}


def infer_items(path: str | os.PathLike[str], texts: Sequence[str] = (), images: Sequence[bytes] = (),
                timeout_s: float = 30.0, audio: Sequence[bytes] = (), hop_s: float | None = None
                ) -> tuple[int, list[dict[str, Any]]] | None:
    """Client side: texts, encoded images or WAV files through the agent's own processing: (release, one
    result record each; clips: their windows, every ``hop_s`` seconds if given). None when the agent does
    not process (the model has none, the agent cannot run it, or an agent older than processed requests):
    the caller can process on its side and send tensors."""
    body: dict[str, Any] = ({"text": list(texts)} if texts else
                            {"image": [base64.b64encode(b).decode() for b in images]} if images else
                            {"audio": [base64.b64encode(b).decode() for b in audio], "hop_s": hop_s})
    reply = _exchange(path, body, timeout_s)
    if reply.get("type") in (NoProcessing.__name__, KeyError.__name__):  # KeyError: no "inputs", older agent
        return None
    if "error" in reply:
        raise OtaError(f"{reply['type']}: {reply['error']}")
    return reply["release"], reply["results"]
