"""Content-addressed, size-bounded on-disk cache of whole builds.

Why: ``optimize`` re-runs passes, calibration and clang on every new process (an int8 encoder costs
seconds each time), although its output is a pure function of the model bytes, the options and the
compiler. An entry is the compiled model directory (spec, weights, module variants) under a key that
hashes all three; a hit skips the whole pipeline.

Safety. Entries are built in a temp directory (every file fsynced), then renamed into place in one step:
two builders of one key both succeed and one entry remains. Each entry carries a manifest of tree sha256
digests (``runtime_wasm.digest``: a large file's chunks hash on every core) that is checked on every
read (a build's weights when they go into linear memory: ``DeferredFile``): a corrupt, truncated or
half-deleted entry is discarded and rebuilt, never used. The cache holds the user's own builds; it is
not a trust boundary (signed bundles and the device's own checks are).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import stat
import tempfile
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from runtime_wasm.digest import TREE_CHUNK, weights_tree_sha256
from runtime_wasm.instance import available_cores
from runtime_wasm.spec import is_sha256_hex

from .errors import CuvilError, QuantizationError

MANIFEST = "manifest.json"
#: the one file of a file-state record: the sha256 a file of that state was read to have
STAT_RECORD = "stat.json"
#: a file written this recently is hashed, never looked up by its state: another write in the same
#: timestamp tick would leave its state unchanged (git's "racily clean" case)
SETTLED_NS = 2_000_000_000
_FORMAT = 2  # 2: tree digests (entries of format 1 read as corrupt: rebuilt once)
_STALE_TEMP_S = 3600.0  # a temp/trash directory this old was left by a crashed writer
_SOURCE_SUFFIXES = (".py", ".c", ".h", ".in")


class BuildCacheError(CuvilError):
    """A build-cache setting is invalid (e.g. a negative size bound in ``CUVIL_BUILD_CACHE_MAX_BYTES``)."""


class DeferredFile:
    """An entry file that ``get`` left unread (``defer``): held open from the lookup, so an eviction or a
    replacement of the entry meanwhile cannot pull it away, and its size checked against the manifest. Its
    bytes are checked by whoever reads them: ``read`` against the manifest's digest, or a reader holding a
    digest it trusts (a build's weights go straight into linear memory checked against the tree hash in
    the entry's spec, itself verified). Closed when collected, or by ``close``."""

    def __init__(self, fd: int, size: int, tree_sha256: str) -> None:
        self.size, self.tree_sha256 = size, tree_sha256
        self._fd = fd
        self._close = weakref.finalize(self, os.close, fd)

    def fileno(self) -> int:
        return self._fd

    def read(self) -> bytes:
        """The whole file, checked against the manifest's digest (``DeferredFileError`` if it changed)."""
        parts, got = [], 0
        while got <= self.size and (part := os.pread(self._fd, self.size + 1 - got, got)):
            parts.append(part)
            got += len(part)
        data = b"".join(parts)  # one part (a regular file's usual read): that very object, no copy
        if len(data) != self.size or _digest(data) != self.tree_sha256:
            raise DeferredFileError("a build-cache file changed after its lookup")
        return data

    def close(self) -> None:
        self._close()


class DeferredFileError(BuildCacheError):
    """A file ``get`` deferred no longer matches its manifest when read (damaged after the lookup)."""


def default_build_cache_dir() -> Path:
    if os.environ.get("CUVIL_BUILD_CACHE_DIR"):
        return Path(os.environ["CUVIL_BUILD_CACHE_DIR"])
    base = os.environ.get("CUVIL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuvil-edge")
    return Path(base) / "builds"


@dataclass(frozen=True)
class BuildCacheConfig:
    """Where builds are kept, how many bytes they may take in all (least recently used go first), and
    whether caching is on. ``from_env`` reads ``CUVIL_BUILD_CACHE`` (``0`` disables),
    ``CUVIL_BUILD_CACHE_MAX_BYTES``, and ``CUVIL_BUILD_CACHE_DIR`` (default ``builds`` under
    ``CUVIL_CACHE_DIR``, else under ``$XDG_CACHE_HOME/cuvil-edge``)."""

    directory: Path = field(default_factory=default_build_cache_dir)
    max_bytes: int = 4 << 30
    enabled: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))  # a str given for the path works too
        if not isinstance(self.max_bytes, int) or self.max_bytes < 0:
            raise BuildCacheError(f"max_bytes must be a non-negative int, got {self.max_bytes!r}")

    @classmethod
    def from_env(cls) -> BuildCacheConfig:
        raw = os.environ.get("CUVIL_BUILD_CACHE_MAX_BYTES")
        try:
            limit = int(raw) if raw else cls.max_bytes
        except ValueError:
            raise BuildCacheError(f"CUVIL_BUILD_CACHE_MAX_BYTES must be an integer, got {raw!r}") from None
        return cls(max_bytes=limit, enabled=os.environ.get("CUVIL_BUILD_CACHE", "1") != "0")


@lru_cache(maxsize=1)
def compiler_identity() -> dict[str, str]:
    """What of the compiler shapes a build's bytes, as a build records it (``extra["build"]``): our version,
    the toolchain and numeric libraries, and the sha256 over every source file of the compiler and runtime
    (kernels, generator, passes, quantizer: an edit anywhere shows). Nothing of the host: the same inputs
    build the same bytes on any machine."""
    ident: dict[str, str] = {}
    for dist in ("cuvil-edge", "ziglang", "numpy", "onnx"):
        try:
            ident[dist] = version(dist)
        except PackageNotFoundError:
            ident[dist] = "?"
    h = hashlib.sha256()
    for root in (Path(__file__).parent, Path(__file__).parent.parent / "runtime_wasm"):
        for path in sorted(p for p in root.rglob("*") if p.suffix in _SOURCE_SUFFIXES and p.is_file()):
            h.update(f"{path.relative_to(root.parent)}\0".encode())
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return {**ident, "sources_sha256": h.hexdigest()}


@lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """Everything besides model and options that shapes a cached build: ``compiler_identity``, and the
    wasmtime + CPU a ``kernel_cost="measured"`` build times on."""
    from runtime_wasm.engine import cpu_fingerprint, wasmtime_version

    h = hashlib.sha256(json.dumps(compiler_identity(), sort_keys=True).encode())
    h.update(f"wasmtime={wasmtime_version()} cpu={cpu_fingerprint()}\n".encode())
    return h.hexdigest()


def build_key(parts: Mapping[str, Any]) -> str:
    """The cache key of a build: ``parts`` (JSON-able: model digest, every output-changing option) plus
    the compiler fingerprint."""
    text = json.dumps({"compiler": compiler_fingerprint(), "format": _FORMAT, **parts}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def file_state(path: str | os.PathLike[str]) -> str | None:
    """What tells a file's bytes apart without reading them: device, inode, size, and mtime and ctime in
    ns. A write moves ctime, which user space cannot set back (``os.utime`` sets it to now), so a file
    rewritten to its old size and mtime is in another state (on a filesystem without a real ctime, size and
    mtime decide, as they do for Python's .pyc files). None for what is not a regular file settled for
    ``SETTLED_NS``: a record is only ever made, and so only ever found, for a settled state."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < SETTLED_NS:
        return None
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def data_digest(source: Any) -> tuple[str | None, Any]:
    """(sha256, source to use instead) of calibration data: a file, a directory of .npy/.npz (names and
    bytes), or an iterable of samples, which is materialized into a list (a generator hashed here would be
    spent before quantization reads it). The digest is None when something in it is not numeric data."""
    h = hashlib.sha256()
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz")) if path.is_dir() else [path]
        for p in files:
            h.update(f"{p.name}\0".encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
        return h.hexdigest(), source
    items = list(source)
    try:
        _feed(h, items)
    except QuantizationError:  # not numbers: unhashable here, so not cached; the quantizer says what fits
        return None, items
    return h.hexdigest(), items


def _feed(h: Any, obj: Any) -> None:
    if isinstance(obj, Mapping):
        h.update(b"{%d" % len(obj))
        for k in sorted(obj, key=str):
            h.update(f"{k}\0".encode())
            _feed(h, obj[k])
    elif isinstance(obj, (list, tuple)):
        h.update(b"[%d" % len(obj))
        for item in obj:
            _feed(h, item)
    else:
        arr = np.ascontiguousarray(obj)
        if arr.dtype.hasobject:
            raise QuantizationError(f"calibration data holds a {type(obj).__name__}, not numbers")
        # ml_dtypes' types (bfloat16, float8, int4: bound stored-type inputs) are all "V<n>" by str
        h.update(f"{arr.dtype.name if arr.dtype.kind == 'V' else arr.dtype.str}{arr.shape}".encode())
        h.update(arr.reshape(-1).view(np.uint8).data)


class BuildCache:
    """``get(key)`` the verified files of an entry, ``put(key, files)`` a new one (then evict to the bound).

    Failures to write (read-only or full disk) only cost a rebuild next time; counters ``hits``,
    ``misses``, ``rejected`` (entries that failed verification and were discarded) are for tests and
    benchmarks."""

    def __init__(self, config: BuildCacheConfig | None = None) -> None:
        self.config = config or BuildCacheConfig.from_env()
        self.directory = self.config.directory
        self.hits = self.misses = self.rejected = 0

    def get(self, key: str, defer: frozenset[str] = frozenset()) -> dict[str, bytes | DeferredFile] | None:
        """The entry's files, verified; those named in ``defer`` are opened, not read (``DeferredFile``)."""
        entry = self.directory / key
        try:
            files = _read_verified(entry, key, defer)
        except FileNotFoundError:  # absent, or removed by a concurrent eviction while being read
            self.misses += 1
            return None
        if files is None:
            self.rejected += 1
            self.misses += 1
            self.discard(key)
            return None
        self.hits += 1
        try:
            os.utime(entry)  # recency for LRU eviction
        except OSError:
            pass
        return files

    def recorded_sha256(self, state: str | None) -> str | None:
        """The sha256 recorded for a file in this state (``file_state``), if any."""
        files = self.get(build_key({"file": state})) if state is not None and self.config.enabled else None
        try:
            record = files.get(STAT_RECORD) if files is not None else None
            sha = json.loads(record)["sha256"] if isinstance(record, bytes) else None
        except (KeyError, ValueError, TypeError):
            return None
        return sha if is_sha256_hex(sha) else None

    def record_sha256(self, state: str | None, sha256: str) -> None:
        if state is not None and self.config.enabled:
            self.put(build_key({"file": state}), {STAT_RECORD: json.dumps({"sha256": sha256}).encode()})

    def put(self, key: str, files: Mapping[str, bytes]) -> None:
        """Store an entry (an entry larger than ``max_bytes`` on its own is not stored: it would evict
        everything, itself included), then ``evict`` when this process has put enough since its last scan
        (``_SCAN_SHARE``)."""
        size = sum(len(data) for data in files.values())
        if size > self.config.max_bytes:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.directory))
        except OSError:
            return
        try:
            manifest = {"format": _FORMAT, "key": key, "files": {
                name: {"tree_sha256": _digest(data), "size": len(data)}
                for name, data in files.items()}}
            for name, data in (*files.items(), (MANIFEST, json.dumps(manifest).encode())):
                _write_synced(tmp / name, data)
            _fsync_dir(tmp)
            try:
                os.rename(tmp, self.directory / key)
            except OSError:
                if not (self.directory / key).is_dir():
                    raise
                # another builder of the same key renamed first: its entry stands, ours goes
            else:
                _fsync_dir(self.directory)
        except OSError:
            pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        last, pending = _since_scan.get(self.directory, (-math.inf, 0))
        pending += size
        if pending * _SCAN_SHARE > self.config.max_bytes or time.monotonic() - last > _SCAN_INTERVAL_S:
            self.evict()
            last, pending = time.monotonic(), 0
        _since_scan[self.directory] = (last, pending)

    def discard(self, key: str) -> None:
        _remove_dir(self.directory / key, self.directory)

    def evict(self) -> None:
        """Drop least recently used entries until all fit in ``max_bytes``, and crash leftovers."""
        entries: list[tuple[float, int, str]] = []
        try:
            listing = list(os.scandir(self.directory))
        except OSError:
            return
        now = time.time()
        for d in listing:
            try:
                if not d.is_dir(follow_symlinks=False):
                    continue
                mtime = d.stat(follow_symlinks=False).st_mtime
                if d.name.startswith("."):
                    if now - mtime > _STALE_TEMP_S:
                        _remove_dir(Path(d.path), self.directory)
                    continue
                size = sum(f.stat().st_size for f in os.scandir(d.path) if f.is_file(follow_symlinks=False))
            except OSError:
                continue  # removed meanwhile by another process
            entries.append((mtime, size, d.name))
        total = sum(size for _, size, _ in entries)
        for _, size, name in sorted(entries):
            if total <= self.config.max_bytes:
                break
            self.discard(name)
            total -= size


#: ``evict`` reads every entry's files (~0.3 s at 10,000 entries), so a put runs it only once this process
#: has put more than 1/_SCAN_SHARE of ``max_bytes`` since its last scan, or _SCAN_INTERVAL_S after it
#: (and on its first put): the bound is overshot by at most that share per writing process
_SCAN_SHARE, _SCAN_INTERVAL_S = 16, 60.0
#: directory -> (monotonic time of this process's last scan, bytes it put since)
_since_scan: dict[Path, tuple[float, int]] = {}


def _read_verified(entry: Path, key: str, defer: frozenset[str]) -> dict[str, bytes | DeferredFile] | None:
    """The entry's files if the manifest parses, names this key and every digest matches (a file in
    ``defer``: its size, the rest is left to its reader); else None."""
    try:
        manifest = json.loads((entry / MANIFEST).read_bytes())
        if manifest.get("format") != _FORMAT or manifest.get("key") != key:
            return None
        files: dict[str, bytes | DeferredFile] = {}
        for name, meta in manifest["files"].items():
            if Path(name).name != name or name == MANIFEST or not is_sha256_hex(meta["tree_sha256"]):
                return None
            if name in defer:
                fd = os.open(entry / name, os.O_RDONLY)
                deferred = DeferredFile(fd, int(meta["size"]), meta["tree_sha256"])
                if os.fstat(fd).st_size != deferred.size:
                    return None
                files[name] = deferred
                continue
            data = (entry / name).read_bytes()
            if len(data) != meta["size"] or _digest(data) != meta["tree_sha256"]:
                return None
            files[name] = data
        return files
    except FileNotFoundError:
        if entry.is_dir():
            return None  # a file of a present entry is missing: corrupt (eviction removes whole entries)
        raise
    except (ValueError, KeyError, TypeError, AttributeError, OSError):  # malformed or unreadable manifest
        return None


def _digest(data: bytes) -> str:
    """An entry file's digest: the tree hash, so the encoder's 180 MB of weights verify on both cores of a
    2-core box in 0.05 s (flat sha256: 0.10 s of every hit)."""
    return weights_tree_sha256(data, TREE_CHUNK, available_cores())


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_dir(path: Path, parent: Path) -> None:
    """Rename aside first (one atomic step: readers see the entry or nothing), then delete."""
    trash = parent / f".trash-{uuid.uuid4().hex}"
    try:
        os.rename(path, trash)
    except OSError:
        return  # gone already (another process discarded it)
    shutil.rmtree(trash, ignore_errors=True)
