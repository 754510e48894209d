"""Local inference for apps on the device: one JSON request per connection on a Unix socket.

Request: ``{"inputs": {name: tensor}}``, optionally with ``"captured_at"`` (unix seconds when the input
data was captured, for the policy's freshness bound); reply: ``{"release": n, "outputs": {name: tensor}}``
or ``{"error": "...", "type": "..."}``, tensors as in golden vectors (``ota.golden``: dtype, shape,
base64 little-endian data). File permissions on the socket decide which local users may ask.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from runtime_wasm import ModelSource, RuntimePolicy, RuntimeWasmError, Scheduler, WasmModel

from .errors import NoActiveModel, OtaError
from .golden import decode_tensor, encode_tensor
from .installer import Installer

MAX_REQUEST_BYTES = 64 << 20


class ModelHost:
    """The active model; swapped whole after an install or rollback, so a request sees old or new.

    With a ``policy`` the model runs in supervised worker processes behind a ``Scheduler`` (deadline,
    memory cap, batching, freshness, thermal degrade); without one, in-process (one call at a time).
    """

    def __init__(self, installer: Installer, policy: RuntimePolicy | None = None) -> None:
        self._installer, self._policy = installer, policy
        self._lock = threading.Lock()
        self._model: WasmModel | Scheduler | None = None
        self.release: int | None = None
        self.reload()

    def _load(self) -> WasmModel | Scheduler:
        if self._policy is None:
            return self._installer.active_model()
        source = ModelSource.from_dir(self._installer.active_dir(),
                                      cache_dir=str(self._installer.cache.directory))
        return Scheduler(source, self._policy)

    def reload(self) -> None:
        """Load the installer's active slot (compiled from the local cache) and retire the previous one."""
        try:
            model, release = self._load(), self._installer.active_manifest().release
        except NoActiveModel:
            model, release = None, None
        with self._lock:
            old, self._model, self.release = self._model, model, release
        if old is not None:
            old.close()

    def predict(self, inputs: Mapping[str, np.ndarray], captured_at: float | None = None
                ) -> tuple[int, dict[str, np.ndarray]]:
        with self._lock:
            model, release = self._model, self.release
            if model is None or release is None:
                raise NoActiveModel("no model is installed yet")
            if isinstance(model, WasmModel):
                return release, model.predict(dict(inputs))
        return release, model.predict(dict(inputs), captured_at)  # the scheduler queues and batches

    def metrics(self) -> dict[str, Any] | None:
        """The scheduler's counters and latency percentiles (None when serving in-process)."""
        with self._lock:
            model = self._model
        return model.metrics() if isinstance(model, Scheduler) else None

    def close(self) -> None:
        with self._lock:
            if self._model is not None:
                self._model.close()
            self._model = None


class _Handler(socketserver.StreamRequestHandler):
    server: InferenceServer

    def handle(self) -> None:
        try:
            request = json.loads(self.rfile.readline(MAX_REQUEST_BYTES))
            inputs = {k: decode_tensor(v) for k, v in request["inputs"].items()}
            captured = request.get("captured_at")  # optional: when the app captured the input data
            captured_at = None if captured is None else float(captured)
            release, outputs = self.server.host.predict(inputs, captured_at)
            reply: dict[str, Any] = {"release": release,
                                     "outputs": {k: encode_tensor(v) for k, v in outputs.items()}}
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OtaError,
                RuntimeWasmError) as exc:  # RecursionError: deeply nested JSON from a local app
            reply = {"error": str(exc), "type": type(exc).__name__}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


class InferenceServer(socketserver.ThreadingUnixStreamServer):
    """Serves ``host`` on ``path`` (mode 0660) from a daemon thread until ``close``."""

    daemon_threads = True

    def __init__(self, path: str | os.PathLike[str], host: ModelHost) -> None:
        self.path, self.host = Path(path), host
        self.path.unlink(missing_ok=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(str(self.path), _Handler)
        os.chmod(self.path, 0o660)
        self._thread = threading.Thread(target=self.serve_forever, args=(0.2,), name="infer", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        self.path.unlink(missing_ok=True)


def infer(path: str | os.PathLike[str], inputs: Mapping[str, np.ndarray], timeout_s: float = 30.0,
          captured_at: float | None = None) -> tuple[int, dict[str, np.ndarray]]:
    """Client side: (release that answered, outputs); ``OtaError`` carrying the agent's error otherwise."""
    body: dict[str, Any] = {"inputs": {k: encode_tensor(np.asarray(v)) for k, v in inputs.items()}}
    if captured_at is not None:
        body["captured_at"] = captured_at
    request = json.dumps(body)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(path))
        s.sendall(request.encode() + b"\n")
        with s.makefile("rb") as f:
            reply = json.loads(f.readline(MAX_REQUEST_BYTES))
    if "error" in reply:
        raise OtaError(f"{reply['type']}: {reply['error']}")
    return reply["release"], {k: decode_tensor(v) for k, v in reply["outputs"].items()}
