"""Precompiled-module cache: Cranelift output keyed by module hash + wasmtime + config + CPU.

Only artifacts this device compiled itself are loaded (never native code from the network); a
corrupt or stale entry is recompiled, never trusted.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import wasmtime

from .engine import EngineConfig, engine_for
from .errors import ModuleLoadError


def default_cache_dir() -> Path:
    base = os.environ.get("CUVIL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuvil-edge")
    return Path(base) / "modules"


class ModuleCache:
    """Compile-once store of ``wasmtime.Module`` artifacts on local disk."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.hits = 0
        self.misses = 0

    def key(self, wasm: bytes, config: EngineConfig) -> str:
        h = hashlib.sha256(config.fingerprint().encode())
        h.update(hashlib.sha256(wasm).digest())
        return h.hexdigest()

    def load(self, wasm: bytes, config: EngineConfig) -> wasmtime.Module:
        engine = engine_for(config)
        path = self.directory / f"{self.key(wasm, config)}.cwasm"
        if path.exists():
            try:
                module = wasmtime.Module.deserialize_file(engine, str(path))
                self.hits += 1
                return module
            except wasmtime.WasmtimeError:
                path.unlink(missing_ok=True)  # stale or corrupt: recompile below
        module = compile_module(engine, wasm)
        self.misses += 1
        self._store(path, module.serialize())
        return module

    def remove_temp_files(self) -> None:
        """Drop ``.tmp-*`` files a crash left inside ``_store`` (only at start, when no one writes here)."""
        for tmp in self.directory.glob(".tmp-*"):
            tmp.unlink(missing_ok=True)

    def _store(self, path: Path, data: bytes) -> None:
        """Write-then-rename so a crash never leaves a truncated artifact under the final name."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass  # a read-only or full cache only costs a recompile next time


def compile_module(engine: wasmtime.Engine, wasm: bytes) -> wasmtime.Module:
    try:
        return wasmtime.Module(engine, wasm)
    except wasmtime.WasmtimeError as exc:
        raise ModuleLoadError(f"wasmtime rejected the module: {str(exc).splitlines()[0]}") from exc
