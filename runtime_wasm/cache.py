"""Precompiled-module cache: Cranelift output keyed by module hash + wasmtime + config + CPU.

Threat model. The runtime (installer, serving workers) writes the cache directory as the device user.
Someone who can write that directory but not read the key (``cache.key``, kept outside it) can delete,
swap, truncate, corrupt or plant entries: every entry carries an HMAC-SHA256 over its cache key and
its bytes, so anything this device did not compile from that exact wasm with that engine config fails
the check before wasmtime maps it, is deleted and recompiled from the verified wasm; the worst case is
a slower load. Whoever can read or write the key or the state directory controls the device anyway.
Precompiled code never comes from the network: bundles carry wasm only and each device compiles its own.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path

import wasmtime

from .engine import EngineConfig, engine_for
from .errors import CacheKeyError, ModuleLoadError

KEY_BYTES = 32
_MAGIC = b"cuvil-cwasm-hmac-sha256-v1\n"  # entries without it (older formats) are never deserialized
_HEADER = len(_MAGIC) + hashlib.sha256().digest_size


def default_cache_dir() -> Path:
    base = os.environ.get("CUVIL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuvil-edge")
    return Path(base) / "modules"


class ModuleCache:
    """Compile-once store of ``wasmtime.Module`` artifacts on local disk, each authenticated by a device key.

    The key (``key_path``, default ``<directory>/../cache.key``: ``state_dir/cache.key`` for the installer)
    is 32 random bytes made on first use, mode 0600, published with ``link`` so that concurrent first
    uses end with one key. A key of the wrong length (tampering, a crash) is replaced atomically: entries
    then fail their MAC and are recompiled, which is safe. A key that exists but cannot be read raises
    ``CacheKeyError`` (a misconfiguration to fix, e.g. another owner); one that cannot be written (read-only
    or full disk) only disables caching, like a failed entry store.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None,
                 key_path: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.key_path = Path(key_path) if key_path is not None else self.directory.parent / "cache.key"
        if self.key_path.resolve().is_relative_to(self.directory.resolve()):
            raise CacheKeyError(f"the cache key {self.key_path} must live outside the cache it authenticates")
        self.hits = 0
        self.misses = 0
        self.rejected = 0  # entries that failed authentication or deserialization (deleted and recompiled)
        self._key: bytes | None = None

    def key(self, wasm: bytes, config: EngineConfig, wasm_sha256: bytes | None = None) -> str:
        """``wasm_sha256``: the module's digest when the caller already has it (one hash per load)."""
        h = hashlib.sha256(config.fingerprint().encode())
        h.update(wasm_sha256 or hashlib.sha256(wasm).digest())
        return h.hexdigest()

    def load(self, wasm: bytes, config: EngineConfig, wasm_sha256: bytes | None = None) -> wasmtime.Module:
        engine = engine_for(config)
        name = self.key(wasm, config, wasm_sha256)
        path = self.directory / f"{name}.cwasm"
        secret = self._secret()
        if secret is not None:
            module = self._read_entry(engine, path, self._mac(secret, name))
            if module is not None:
                self.hits += 1
                return module
        module = compile_module(engine, wasm)
        self.misses += 1
        if secret is not None:
            artifact = module.serialize()
            mac = self._mac(secret, name)
            mac.update(artifact)
            self._store(path, _MAGIC + mac.digest(), artifact)
        return module

    def remove_temp_files(self) -> None:
        """Drop ``.tmp-*`` files a crash left inside ``_store`` (only at start, when no one writes here)."""
        for tmp in self.directory.glob(".tmp-*"):
            tmp.unlink(missing_ok=True)

    def _read_entry(self, engine: wasmtime.Engine, path: Path, mac: hmac.HMAC) -> wasmtime.Module | None:
        """The entry's module if its MAC verifies; deserialized from the very bytes that were checked."""
        try:
            with open(path, "rb") as f:
                header, artifact = f.read(_HEADER), f.read()
        except FileNotFoundError:
            return None
        except OSError:
            header, artifact = b"", b""  # unreadable: rejected like a forged entry
        mac.update(artifact)
        if header[:len(_MAGIC)] == _MAGIC and hmac.compare_digest(header[len(_MAGIC):], mac.digest()):
            try:
                return wasmtime.Module.deserialize(engine, artifact)
            except wasmtime.WasmtimeError:
                pass
        self.rejected += 1
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only cache: the entry stays rejected on every load
        return None

    @staticmethod
    def _mac(secret: bytes, name: str) -> hmac.HMAC:
        """HMAC over magic + cache key (binds wasm digest and engine fingerprint); callers add the bytes."""
        return hmac.new(secret, _MAGIC + bytes.fromhex(name), hashlib.sha256)

    def _secret(self) -> bytes | None:
        if self._key is None:
            self._key = read_or_create_key(self.key_path)
        return self._key

    def _store(self, path: Path, *chunks: bytes) -> None:
        """Write-then-rename so a crash never leaves a truncated artifact under the final name."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    for chunk in chunks:
                        f.write(chunk)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass  # a read-only or full cache only costs a recompile next time


def read_or_create_key(path: Path) -> bytes | None:
    """The device's cache key, made on first use; None when it cannot be written (caching is then off).

    A key another user could have read (group/other permission bits, or another owner) is treated as
    leaked and replaced: every entry then fails its MAC and is recompiled, which is safe."""
    for _ in range(3):  # only concurrent replacements loop; give up rather than spin
        try:
            with open(path, "rb") as f:
                key = f.read(KEY_BYTES + 1)
                st = os.fstat(f.fileno())
        except (FileNotFoundError, NotADirectoryError):  # no key yet, or no directory that could hold one
            if not _publish_key(path, os.link):  # link fails if another process published first
                return None
            continue
        except OSError as exc:
            raise CacheKeyError(f"cannot read the module cache key {path}: {exc.strerror}") from exc
        private = not st.st_mode & 0o077 and st.st_uid == os.geteuid()
        if len(key) == KEY_BYTES and private:
            return key
        if not _publish_key(path, os.replace):
            return None
    return None


def _publish_key(path: Path, place: Callable[[str, Path], None]) -> bool:
    """Write fresh random bytes to a 0600 temp file (``O_CREAT|O_EXCL``), then ``place`` it at ``path``:
    readers never see a partial key. The temp name matches ``ota.store``'s, so recovery drops leftovers."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
        place(tmp, path)
    except FileExistsError:
        pass  # another process won the race: the caller reads its key
    except OSError:
        return False
    finally:
        Path(tmp).unlink(missing_ok=True)
    return True


def compile_module(engine: wasmtime.Engine, wasm: bytes) -> wasmtime.Module:
    try:
        return wasmtime.Module(engine, wasm)
    except wasmtime.WasmtimeError as exc:
        raise ModuleLoadError(f"wasmtime rejected the module: {str(exc).splitlines()[0]}") from exc
