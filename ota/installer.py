"""A/B installation under a state directory: verify, write the inactive slot, self-test, switch atomically.

Layout: ``trust.json`` (root + release counter), ``active`` (which slot serves), ``slots/{a,b}/``
(``bundle.json`` = signed envelope, ``model.json`` = spec, payloads) and ``cache/`` (precompiled
modules). The active slot is never written; the pointer changes by ``os.replace`` only, so after a
crash at any point exactly the old or the new model is active. See docs/SECURITY.md.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from runtime_wasm import (
    EngineConfig,
    ModelSpec,
    ModuleCache,
    RuntimeWasmError,
    WasmModel,
    probe_host,
    select_variant,
)
from runtime_wasm.loader import SPEC_FILE, load_model_dir

from .bundle import read_header, read_payloads, verify_bundle
from .config import OtaConfig
from .crypto import canonical_bytes
from .errors import (
    DiskFull,
    HashMismatch,
    InstallError,
    NoActiveModel,
    NothingToRollBack,
    OtaError,
    SelfTestFailed,
)
from .golden import decode_vector
from .metadata import FileEntry, Manifest, parse_envelope
from .trust import Report, TrustState, check_payload

SLOTS = ("a", "b")
TRUST_FILE = "trust.json"
POINTER_FILE = "active"
ENVELOPE_FILE = "bundle.json"
#: named points of an install, in order; ``on_step`` is called after each (crash tests kill there)
STEPS = ("verified", "slot_cleared", "writing", "files_synced", "reverified", "precompiled", "selftested",
         "pointer_staged", "pointer_switched", "trust_saved")


class FileWriter:
    """Every byte the installer writes passes through ``write``.

    Fault-injection hook: tests pass a subclass that raises ``OSError(ENOSPC)`` to simulate a full
    disk where no size-limited filesystem can be mounted.
    """

    def write(self, f: BinaryIO, data: bytes) -> None:
        f.write(data)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _spec_bytes(manifest: Manifest) -> bytes:
    return json.dumps(manifest.spec, indent=1, sort_keys=True).encode()


def _os_failure(exc: OSError) -> InstallError:
    if exc.errno == errno.ENOSPC:
        return DiskFull(f"storage full while installing: {exc}")
    return InstallError(f"I/O error while installing: {exc}")


class Installer:
    """Installs signed bundles into A/B slots and serves the active one."""

    def __init__(self, state_dir: str | os.PathLike[str], hardware_id: str, profile: str | None = None,
                 root: Mapping[str, Any] | None = None, config: OtaConfig | None = None,
                 on_step: Callable[[str], None] | None = None, writer: FileWriter | None = None) -> None:
        """``root`` provisions an empty state directory; an existing ``trust.json`` always wins."""
        self.state_dir = Path(state_dir)
        self.hardware_id, self.profile = hardware_id, profile
        self.config = config or OtaConfig()
        self._on_step = on_step
        self._writer = writer or FileWriter()
        self.cache = ModuleCache(self.state_dir / "cache")
        trust_path = self.state_dir / TRUST_FILE
        if trust_path.exists():
            self.trust = TrustState.from_dict(json.loads(trust_path.read_bytes()), self.config)
        elif root is not None:
            (self.state_dir / "slots").mkdir(parents=True, exist_ok=True)
            self.trust = TrustState(root, 0, self.config)
            self._save_trust()
        else:
            raise InstallError(f"{self.state_dir} holds no trust state; provision it with a root")
        self._recover()

    # -- public -------------------------------------------------------------------------------
    def install(self, bundle: str | os.PathLike[str], now: datetime | None = None,
                report: Report | None = None) -> Manifest:
        """Verify fully, then write, re-verify, self-test and switch; on failure the old model stays."""
        now = now or datetime.now(timezone.utc)
        slot = self._slot_dir(self._inactive_slot())
        with open(bundle, "rb") as f:
            envelope, manifest = verify_bundle(f, self.trust, now, self.hardware_id, self.profile, report)
            self._step("verified")
            try:
                self._remove(slot)
                self._step("slot_cleared")
                f.seek(0)
                self._write_slot(f, envelope, manifest, slot)
                self._step("files_synced")
                self._check_slot(slot, manifest)
                self._step("reverified")
                self._self_test(slot, manifest)
            except OSError as exc:
                self._remove(slot)
                raise _os_failure(exc) from exc
            except Exception:
                self._remove(slot)
                raise
        self._switch(slot)
        self.trust.accept_release(manifest)
        self._save_trust()
        self._step("trust_saved")
        return manifest

    def rollback(self) -> Manifest:
        """Make the other slot active again, after checking its files and re-running its self-test."""
        slot = self._slot_dir(self._inactive_slot())
        try:
            manifest = self._slot_manifest(slot)
            self._check_slot(slot, manifest)
            self._self_test(slot, manifest)
        except (OtaError, OSError) as exc:
            raise NothingToRollBack(f"slot {slot.name} holds no healthy model: {exc}") from exc
        self._switch(slot)
        return manifest

    def update_root(self, chain: list[Mapping[str, Any]]) -> None:
        """Rotate the root of trust (all links or none) and persist it."""
        self.trust.update_root(chain)
        self._save_trust()

    def active_manifest(self) -> Manifest:
        return self._slot_manifest(self.active_dir())

    def active_model(self) -> WasmModel:
        """The active slot, instantiated for serving."""
        return load_model_dir(self.active_dir(), cache=self.cache)

    def verify_active(self) -> Manifest:
        """Health check: the active slot's files match its manifest and it passes its self-test."""
        slot = self.active_dir()
        manifest = self._slot_manifest(slot)
        self._check_slot(slot, manifest)
        self._self_test(slot, manifest)
        return manifest

    # -- steps --------------------------------------------------------------------------------
    def _step(self, name: str) -> None:
        if self._on_step:
            self._on_step(name)

    def _write_slot(self, f: BinaryIO, envelope: dict[str, Any], manifest: Manifest, slot: Path) -> None:
        """Second pass over the bundle: the header must be the one verified; payloads are re-hashed."""
        if read_header(f, self.config) != envelope:
            raise HashMismatch("bundle header changed between verification and installation")
        slot.mkdir(parents=True)
        first = [True]
        with contextlib.ExitStack() as files:
            opened: list[BinaryIO] = []

            def sink(entry: FileEntry) -> Callable[[bytes], None]:
                out = files.enter_context(open(slot / entry.name, "xb"))
                opened.append(out)

                def write(chunk: bytes) -> None:
                    self._writer.write(out, chunk)
                    if first[0]:
                        first[0] = False
                        self._step("writing")
                return write

            read_payloads(f, manifest, self.config, sink)
            for out in opened:
                out.flush()
                os.fsync(out.fileno())
        self._write_synced(slot / SPEC_FILE, _spec_bytes(manifest))
        self._write_synced(slot / ENVELOPE_FILE, canonical_bytes(envelope))  # last: marks the slot complete
        _fsync_dir(slot)
        _fsync_dir(slot.parent)

    def _check_slot(self, slot: Path, manifest: Manifest) -> None:
        """Read back from disk: the stored manifest is the verified one and every payload matches it."""
        if self._slot_manifest(slot) != manifest or (slot / SPEC_FILE).read_bytes() != _spec_bytes(manifest):
            raise HashMismatch(f"slot {slot.name}: stored manifest or spec differs from the verified one")
        for entry in manifest.files:
            h, size = hashlib.sha256(), 0
            with open(slot / entry.name, "rb") as f:
                while chunk := f.read(self.config.chunk_bytes):
                    h.update(chunk)
                    size += len(chunk)
                    if size > entry.length:
                        break
            check_payload(entry, size, h.hexdigest())

    def _self_test(self, slot: Path, manifest: Manifest) -> None:
        """Precompile the variant this host will run, then run every golden vector through it."""
        if not manifest.golden:
            raise SelfTestFailed("bundle carries no golden vectors to self-test with")
        try:
            spec = ModelSpec.from_json(_spec_bytes(manifest))
            variant = select_variant(spec.variants, probe_host())
            self.cache.load((slot / variant.file).read_bytes(), EngineConfig(variant.tier))
            self._step("precompiled")
            with load_model_dir(slot, variant=variant.name, cache=self.cache) as model:
                for i, vector in enumerate(manifest.golden):
                    inputs, want = decode_vector(vector)
                    got = model.predict(inputs)
                    bad = [k for k in want if k not in got or not np.allclose(
                        got[k], want[k], rtol=self.config.selftest_rtol, atol=self.config.selftest_atol)]
                    if bad or set(got) != set(want):
                        raise SelfTestFailed(f"{manifest.name} release {manifest.release}: golden vector {i} "
                                             f"differs in outputs {bad or sorted(set(got) ^ set(want))}")
        except RuntimeWasmError as exc:
            raise SelfTestFailed(f"{manifest.name} release {manifest.release}: {type(exc).__name__}: {exc}") \
                from exc
        self._step("selftested")

    def _switch(self, slot: Path) -> None:
        self._atomic_write(self.state_dir / POINTER_FILE, json.dumps({"slot": slot.name}).encode(),
                           staged="pointer_staged", replaced="pointer_switched")

    # -- state on disk ------------------------------------------------------------------------
    def _slot_dir(self, name: str) -> Path:
        return self.state_dir / "slots" / name

    def _active_slot(self) -> str | None:
        try:
            slot = json.loads((self.state_dir / POINTER_FILE).read_bytes()).get("slot")
        except FileNotFoundError:
            return None
        if slot not in SLOTS:
            raise InstallError(f"active pointer names unknown slot {slot!r}")
        return slot

    def _inactive_slot(self) -> str:
        return "b" if self._active_slot() == "a" else "a"

    def active_dir(self) -> Path:
        """The slot directory that serves now (what a server loads, through its own supervisor)."""
        slot = self._active_slot()
        if slot is None:
            raise NoActiveModel(f"no model installed under {self.state_dir}")
        return self._slot_dir(slot)

    def _slot_manifest(self, slot: Path) -> Manifest:
        signed, _ = parse_envelope(json.loads((slot / ENVELOPE_FILE).read_bytes()), "installed manifest")
        return Manifest.from_dict(signed)

    def _save_trust(self) -> None:
        self._atomic_write(self.state_dir / TRUST_FILE, canonical_bytes(self.trust.to_dict()))

    def _write_synced(self, path: Path, data: bytes) -> None:
        with open(path, "xb") as f:
            self._writer.write(f, data)
            f.flush()
            os.fsync(f.fileno())

    def _atomic_write(self, path: Path, data: bytes, staged: str = "", replaced: str = "") -> None:
        """Temp file + fsync + ``os.replace`` + fsync of the directory: readers see old or new, never half."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.unlink(missing_ok=True)
            self._write_synced(tmp, data)
            if staged:
                self._step(staged)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise _os_failure(exc) from exc
        if replaced:
            self._step(replaced)
        _fsync_dir(path.parent)

    def _remove(self, slot: Path) -> None:
        shutil.rmtree(slot, ignore_errors=True)
        if slot.parent.exists():
            _fsync_dir(slot.parent)

    def _recover(self) -> None:
        """After a crash: drop temp files and an incomplete inactive slot; the counter catches up with
        the active release (a crash between switch and saving trust)."""
        for tmp in self.state_dir.glob("*.tmp"):
            tmp.unlink()
        inactive = self._slot_dir(self._inactive_slot())
        if inactive.exists() and not (inactive / ENVELOPE_FILE).exists():
            self._remove(inactive)
        if self._active_slot() is not None:
            release = self.active_manifest().release
            if release > self.trust.release_counter:
                self.trust.raise_counter(release)
                self._save_trust()
