"""Local inference for apps on the device: one JSON request per connection on a Unix socket.

Request: ``{"inputs": {name: tensor}}``; reply: ``{"release": n, "outputs": {name: tensor}}`` or
``{"error": "...", "type": "..."}``, tensors as in golden vectors (``ota.golden``: dtype, shape,
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

from runtime_wasm import RuntimeWasmError, WasmModel

from .errors import NoActiveModel, OtaError
from .golden import decode_tensor, encode_tensor
from .installer import Installer

MAX_REQUEST_BYTES = 64 << 20


class ModelHost:
    """The active model; swapped whole after an install or rollback, so a request sees old or new."""

    def __init__(self, installer: Installer) -> None:
        self._installer = installer
        self._lock = threading.Lock()
        self._model: WasmModel | None = None
        self.release: int | None = None
        self.reload()

    def reload(self) -> None:
        """Load the installer's active slot (compiled from the local cache) and retire the previous one."""
        try:
            model, release = self._installer.active_model(), self._installer.active_manifest().release
        except NoActiveModel:
            model, release = None, None
        with self._lock:
            old, self._model, self.release = self._model, model, release
        if old is not None:
            old.close()

    def predict(self, inputs: Mapping[str, np.ndarray]) -> tuple[int, dict[str, np.ndarray]]:
        with self._lock:
            if self._model is None or self.release is None:
                raise NoActiveModel("no model is installed yet")
            return self.release, self._model.predict(dict(inputs))

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
            release, outputs = self.server.host.predict(inputs)
            reply: dict[str, Any] = {"release": release,
                                     "outputs": {k: encode_tensor(v) for k, v in outputs.items()}}
        except (ValueError, KeyError, TypeError, AttributeError, OtaError, RuntimeWasmError) as exc:
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


def infer(path: str | os.PathLike[str], inputs: Mapping[str, np.ndarray],
          timeout_s: float = 30.0) -> tuple[int, dict[str, np.ndarray]]:
    """Client side: (release that answered, outputs); ``OtaError`` carrying the agent's error otherwise."""
    request = json.dumps({"inputs": {k: encode_tensor(np.asarray(v)) for k, v in inputs.items()}})
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(path))
        s.sendall(request.encode() + b"\n")
        with s.makefile("rb") as f:
            reply = json.loads(f.readline(MAX_REQUEST_BYTES))
    if "error" in reply:
        raise OtaError(f"{reply['type']}: {reply['error']}")
    return reply["release"], {k: decode_tensor(v) for k, v in reply["outputs"].items()}
