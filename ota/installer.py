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

from runtime_wasm import EngineConfig, ModelSource, ModuleCache, SupervisedModel, WasmModel
from runtime_wasm.loader import SPEC_FILE, load_model_dir

from .bundle import read_header, read_payloads, verify_bundle
from .config import OtaConfig
from .crypto import canonical_bytes, parse_json
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
from .store import remove_temp_files
from .trust import Report, TrustState, check_payload

SLOTS = ("a", "b")
TRUST_FILE = "trust.json"
POINTER_FILE = "active"
ENVELOPE_FILE = "bundle.json"
#: named points of an install, in order; ``on_step`` is called after each (crash tests kill there)
#: ``trust_saved`` (the raised counter on disk) is the commit point: a crash after it completes the switch
#: on restart, so the counter on disk is never below the active release and a failed install never raised it
STEPS = ("verified", "slot_cleared", "writing", "files_synced", "reverified", "precompiled", "selftested",
         "pointer_staged", "trust_saved", "pointer_switched")


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


def _temp(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def _pointer_bytes(slot: Path) -> bytes:
    return json.dumps({"slot": slot.name}).encode()


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
        pointer = self.state_dir / POINTER_FILE
        staged = _temp(pointer)
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
                self._write_temp(staged, _pointer_bytes(slot))
                self._step("pointer_staged")
                self._save_trust(release_counter=manifest.release)
            except OSError as exc:
                self._abort(staged, slot)
                raise _os_failure(exc) from exc
            except Exception:
                self._abort(staged, slot)
                raise
        self.trust.accept_release(manifest)
        self._step("trust_saved")
        self._replace(staged, pointer, "pointer_switched")
        return manifest

    def rollback(self, now: datetime | None = None) -> Manifest:
        """Make the other slot active again, after re-checking its signatures and expiry under the *current*
        root (a release signed by a since-revoked key stays out: ``UntrustedKey``), its files and its
        self-test."""
        slot = self._slot_dir(self._inactive_slot())
        try:
            envelope = parse_json((slot / ENVELOPE_FILE).read_bytes(), "installed manifest")
        except (OtaError, OSError) as exc:
            raise NothingToRollBack(f"slot {slot.name} holds no complete model: {exc}") from exc
        manifest = self.trust.recheck_release(envelope, now or datetime.now(timezone.utc))
        try:
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
        """Precompile the variant this host will run, then run every golden vector through it in a
        supervised worker (deadline and memory cap from ``OtaConfig``): a module that loops or hogs memory
        is killed there, not in the agent. Whatever goes wrong is a ``SelfTestFailed``."""
        what = f"{manifest.name} release {manifest.release}"
        if not manifest.golden:
            raise SelfTestFailed(f"{what}: bundle carries no golden vectors to self-test with")
        try:
            source = ModelSource.from_dir(slot, cache_dir=str(self.cache.directory))
            self.cache.load(source.wasm, EngineConfig(source.variant.tier))
            self._step("precompiled")
            self._run_golden(source, manifest)
        except SelfTestFailed:
            raise
        except Exception as exc:  # DeadlineExceeded, WorkerCrashed, traps, malformed vectors, ...
            raise SelfTestFailed(f"{what}: {type(exc).__name__}: {exc}") from exc
        self._step("selftested")

    def _run_golden(self, source: ModelSource, manifest: Manifest) -> None:
        cfg = self.config
        with SupervisedModel(source, cfg.selftest_memory_cap_bytes,
                             start_timeout_s=cfg.selftest_start_timeout_s) as model:
            for i, vector in enumerate(manifest.golden):
                inputs, want = decode_vector(vector)
                got = model.predict(inputs, cfg.selftest_deadline_s)
                bad = [k for k in want if k not in got or not np.allclose(
                    got[k], want[k], rtol=cfg.selftest_rtol, atol=cfg.selftest_atol)]
                if bad or set(got) != set(want):
                    raise SelfTestFailed(f"{manifest.name} release {manifest.release}: golden vector {i} "
                                         f"differs in outputs {bad or sorted(set(got) ^ set(want))}")

    def _switch(self, slot: Path) -> None:
        self._atomic_write(self.state_dir / POINTER_FILE, _pointer_bytes(slot), staged="pointer_staged",
                           replaced="pointer_switched")

    def _abort(self, staged: Path, slot: Path) -> None:
        """A failed install before its commit point: no staged pointer, no inactive slot, old model serves."""
        staged.unlink(missing_ok=True)
        self._remove(slot)

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

    def _save_trust(self, release_counter: int | None = None) -> None:
        """Persist the trust state; with ``release_counter``, as it will be once that release is accepted
        (saved first, so a failed save leaves both the disk and memory unchanged)."""
        state = self.trust.to_dict()
        if release_counter is not None:
            state["release_counter"] = release_counter
        self._atomic_write(self.state_dir / TRUST_FILE, canonical_bytes(state))

    def _write_synced(self, path: Path, data: bytes) -> None:
        with open(path, "xb") as f:
            self._writer.write(f, data)
            f.flush()
            os.fsync(f.fileno())

    def _write_temp(self, tmp: Path, data: bytes) -> None:
        tmp.unlink(missing_ok=True)
        self._write_synced(tmp, data)

    def _atomic_write(self, path: Path, data: bytes, staged: str = "", replaced: str = "") -> None:
        """Temp file + fsync + ``os.replace`` + fsync of the directory: readers see old or new, never half."""
        tmp = _temp(path)
        try:
            self._write_temp(tmp, data)
            if staged:
                self._step(staged)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise _os_failure(exc) from exc
        self._replace(tmp, path, replaced)

    def _replace(self, tmp: Path, path: Path, step: str = "") -> None:
        try:
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise _os_failure(exc) from exc
        if step:
            self._step(step)
        _fsync_dir(path.parent)

    def _remove(self, slot: Path) -> None:
        shutil.rmtree(slot, ignore_errors=True)
        if slot.parent.exists():
            _fsync_dir(slot.parent)

    def _recover(self) -> None:
        """After a crash: finish a committed switch, drop temp files and an incomplete inactive slot; the
        counter catches up with the active release (state written before the counter was saved first)."""
        staged, pointer = _temp(self.state_dir / POINTER_FILE), self.state_dir / POINTER_FILE
        if self._committed(staged):
            self._replace(staged, pointer)
        for tmp in self.state_dir.glob("*.tmp"):
            tmp.unlink()
        remove_temp_files(self.state_dir)
        self.cache.remove_temp_files()
        inactive = self._slot_dir(self._inactive_slot())
        if inactive.exists() and not (inactive / ENVELOPE_FILE).exists():
            self._remove(inactive)
        if self._active_slot() is not None:
            release = self.active_manifest().release
            if release > self.trust.release_counter:
                self.trust.raise_counter(release)
                self._save_trust()

    def _committed(self, staged: Path) -> bool:
        """A staged pointer to the other slot whose release the saved counter already reached: the install
        passed its commit point (``trust_saved``) and only the switch was lost."""
        try:
            slot = json.loads(staged.read_bytes()).get("slot")
            return slot in SLOTS and slot != self._active_slot() and \
                self._slot_manifest(self._slot_dir(slot)).release == self.trust.release_counter
        except (OSError, ValueError, AttributeError, OtaError):
            return False
