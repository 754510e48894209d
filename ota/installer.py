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
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from runtime_wasm import schema
from runtime_wasm.policy import RuntimePolicy
from runtime_wasm.spec import SPEC_FILE

from .bundle import read_header, read_payloads, verify_bundle
from .config import OtaConfig
from .crypto import canonical_bytes, parse_json
from .errors import (
    CorruptSlot,
    DiskFull,
    HashMismatch,
    InstallError,
    NoActiveModel,
    NothingToRollBack,
    OtaError,
    WrongModel,
)
from .metadata import FileEntry, Manifest, parse_envelope
from .selftest import SELFTEST_FILE, GoldenReport, SelfTester, read_report
from .store import StateLock, fsync_dir, remove_temp_files
from .trust import Report, TrustState, check_payload

if TYPE_CHECKING:  # the runtime (wasmtime, worker processes) loads when an installer is made, not before
    from runtime_wasm.supervisor import SupervisedModel

log = logging.getLogger(__name__)
SLOTS = ("a", "b")
TRUST_FILE = "trust.json"
POINTER_FILE = "active"
ENVELOPE_FILE = "bundle.json"
LOCK_FILE = "lock"
CACHE_DIR = "cache"  # precompiled modules (``runtime_wasm.cache.ModuleCache``)
#: the ``active`` pointer (and its staged copy): which slot serves
POINTER_SCHEMA = schema.record({"slot": schema.one_of(*SLOTS)})
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


@dataclass(frozen=True)
class ActiveModel:
    """The installed model a server loads (``Installer.active_model``): the directory holding its spec
    (``model.json``), modules, weights and processing, its signed manifest, and the precompiled-module
    cache beside them, and what its self-test measured (``ota.selftest``; None from an older installer).
    Read it, never write it: the installer owns the slots."""

    directory: Path
    manifest: Manifest
    cache_dir: Path
    golden: dict[str, Any] | None = None

    @property
    def release(self) -> int:
        return self.manifest.release


class ActiveModelSource(Protocol):
    """What serving needs of the installer: the model that serves now, and the worker its self-test left
    loaded with it, if any (``Installer.take_warm``)."""

    def active_model(self) -> ActiveModel: ...

    def take_warm(self, directory: Path) -> SupervisedModel | None: ...


class Installer:
    """Installs signed bundles into A/B slots and serves the active one.

    Every change (install, rollback, root update, crash recovery) runs under the state directory's lock
    and starts from the trust state *on disk*: another process (``cuvil-agent install`` or a root rotation
    by an operator while the agent runs) may have changed it, and acting on a stale copy would undo a key
    revocation or lower the counter. ``read_only=True`` opens a directory for inspection: no lock, no
    recovery, no writes (what ``cuvil-agent status`` uses, so it can never disturb a running install).
    """

    def __init__(self, state_dir: str | os.PathLike[str], hardware_id: str, profile: str | None = None,
                 root: Mapping[str, Any] | None = None, config: OtaConfig | None = None,
                 on_step: Callable[[str], None] | None = None, writer: FileWriter | None = None,
                 policy: RuntimePolicy | None = None, read_only: bool = False, model: str = "",
                 keep_warm: bool = False) -> None:
        """``root`` provisions an empty state directory; an existing ``trust.json`` always wins. ``policy``
        is what the model will be served under: the self-test runs under its memory cap. ``model`` binds
        this directory to one model line (a multi-model device): only bundles whose signed manifest has
        that name are installed; empty: any name (a single-model device). ``keep_warm``: an install's or
        rollback's self-test worker runs with the policy's batch slots and threads and is kept, loaded, for
        the server to take once that release is active (``take_warm``), so the switch waits for no model
        load; ``close`` ends one not taken."""
        self.state_dir, self.model = Path(state_dir), model
        self.hardware_id, self.profile = hardware_id, profile
        self.config = config or OtaConfig()
        self.policy = policy or RuntimePolicy()
        self.read_only = read_only
        self._on_step = on_step
        self._writer = writer or FileWriter()
        self._report: Report | None = None
        from runtime_wasm.cache import ModuleCache

        self.cache = ModuleCache(self.state_dir / CACHE_DIR)
        self.selftest = SelfTester(self.config, self.policy, self.cache, self._step, keep_warm)
        self.lock = StateLock(self.state_dir / LOCK_FILE, self.config.lock_timeout_s)
        self._trust: TrustState | None = None
        self._trust_id: tuple[int, int, int] | None = None
        if read_only:
            self.trust  # noqa: B018 - fails now, with a clear error, on a directory that holds no state
            return
        if root is None and not (self.state_dir / TRUST_FILE).exists():
            raise InstallError(f"{self.state_dir} holds no trust state; provision it with a root")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self.lock.hold():
            if not (self.state_dir / TRUST_FILE).exists():
                if root is None:
                    raise InstallError(f"{self.state_dir} holds no trust state; provision it with a root")
                (self.state_dir / "slots").mkdir(parents=True, exist_ok=True)
                self.save_trust(TrustState(root, 0, self.config))
            self._recover()

    # -- trust on disk ------------------------------------------------------------------------
    @property
    def trust(self) -> TrustState:
        """The trust state as saved now (re-read whenever ``trust.json`` was replaced since)."""
        path = self.state_dir / TRUST_FILE
        try:
            st = path.stat()
        except FileNotFoundError:
            raise InstallError(f"{self.state_dir} holds no trust state; provision it with a root") from None
        ident = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._trust is None or ident != self._trust_id:
            try:
                data = path.read_bytes()
            except OSError as exc:  # a directory in its place, no permission: typed, naming the file
                raise InstallError(f"{path} cannot be read: {exc.strerror}") from exc
            self._trust = TrustState.from_dict(parse_json(data, "trust state"), self.config)
            self._trust_id = ident
        return self._trust

    @contextlib.contextmanager
    def changing_trust(self) -> Iterator[TrustState]:
        """Under the state lock (held until the block ends): the trust state read from disk, to change and
        store with ``save_trust``, or drop on failure."""
        self._writable()
        with self.lock.hold():
            yield self._fresh_trust()

    def _fresh_trust(self) -> TrustState:
        """Under the lock: a private copy read from disk, to change and then save (or drop on failure)."""
        self._trust = None
        trust = self.trust
        self._trust = None
        return trust

    def save_trust(self, trust: TrustState) -> None:
        self._trust = None  # whatever happens, the next read comes from disk
        self._atomic_write(self.state_dir / TRUST_FILE, canonical_bytes(trust.to_dict()))

    # -- public -------------------------------------------------------------------------------
    def install(self, bundle: str | os.PathLike[str], now: datetime | None = None,
                report: Report | None = None) -> Manifest:
        """Verify fully, then write, re-verify, self-test and switch; on failure the old model stays.

        Past the commit point (the raised counter saved) the install has happened: a later failure (the
        pointer replace or a directory fsync) is reported as a warning, not raised, since the staged
        pointer already names the new slot for every reader and the next start completes the switch."""
        self._writable()
        now = now or datetime.now(timezone.utc)
        with self.lock.hold(), self._reporting(report):
            trust = self._fresh_trust()
            slot = self._slot_dir(self._inactive_slot())
            pointer = self.state_dir / POINTER_FILE
            staged = _temp(pointer)
            with open(bundle, "rb") as f:
                envelope, manifest = verify_bundle(f, trust, now, self.hardware_id, self.profile, report)
                if self.model and manifest.name != self.model:
                    raise WrongModel(f"release {manifest.release} is signed for model {manifest.name!r}, not "
                                     f"for this line's model {self.model!r}")
                self._step("verified")
                try:
                    self._remove(slot)
                    self._step("slot_cleared")
                    f.seek(0)
                    self._write_slot(f, envelope, manifest, slot)
                    self._step("files_synced")
                    self._check_slot(slot, manifest)
                    self._step("reverified")
                    self._keep_report(slot, self.selftest.run(slot, manifest))
                    self._write_temp(staged, _pointer_bytes(slot))
                    self._step("pointer_staged")
                    trust.accept_release(manifest)
                    self.save_trust(trust)
                except OSError as exc:
                    self._abort(staged, slot)
                    raise _os_failure(exc) from exc
                except Exception:
                    self._abort(staged, slot)
                    raise
            self._step("trust_saved")
            try:
                self._replace(staged, pointer, "pointer_switched", committed=True)
            except (OSError, InstallError) as exc:
                self._warn(f"release {manifest.release} is committed and active; finishing the switch on "
                           f"disk failed ({exc}): the next start completes it")
        return manifest

    def rollback(self, now: datetime | None = None) -> Manifest:
        """Make the other slot active again, after re-checking its signatures and expiry under the *current*
        root (a release signed by a since-revoked key stays out: ``UntrustedKey``), its files and its
        self-test."""
        self._writable()
        with self.lock.hold():
            trust = self._fresh_trust()
            slot = self._slot_dir(self._inactive_slot())
            try:
                envelope = parse_json((slot / ENVELOPE_FILE).read_bytes(), "installed manifest")
            except (OtaError, OSError) as exc:
                raise NothingToRollBack(f"slot {slot.name} holds no complete model: {exc}") from exc
            manifest = trust.recheck_release(envelope, now or datetime.now(timezone.utc))
            try:
                self._check_slot(slot, manifest)
                report = self.selftest.run(slot, manifest)
            except (OtaError, OSError) as exc:
                raise NothingToRollBack(f"slot {slot.name} holds no healthy model: {exc}") from exc
            self._keep_report(slot, report)
            self._switch(slot)
        return manifest

    def update_root(self, chain: list[Mapping[str, Any]]) -> None:
        """Rotate the root of trust (all links or none) and persist it."""
        with self.changing_trust() as trust:
            trust.update_root(chain)
            self.save_trust(trust)

    def active_manifest(self) -> Manifest:
        return self._slot_manifest(self.active_dir())

    def active_model(self) -> ActiveModel:
        """What a server loads: the active slot's files and signed manifest, read together (``NoActiveModel``
        when nothing is installed, ``CorruptSlot`` when the manifest is unreadable)."""
        slot = self.active_dir()
        return ActiveModel(slot, self._slot_manifest(slot), self.cache.directory, read_report(slot))

    def active_stamp(self) -> tuple[str, int, int] | None:
        """Which slot is active and which file its signed manifest is (an install writes a new one), from
        ``stat`` alone (cheap enough to check every second): a change means another model to serve. None
        when there is none or it is unreadable."""
        try:
            slot = self.active_dir()
            st = (slot / ENVELOPE_FILE).stat()
        except (OtaError, OSError):
            return None
        return slot.name, st.st_ino, st.st_mtime_ns

    def verify_active(self) -> Manifest:
        """Health check: the active slot's files match its manifest and it passes its self-test."""
        slot = self.active_dir()
        manifest = self._slot_manifest(slot)
        self._check_slot(slot, manifest)
        self.selftest.run(slot, manifest, keep=False)
        return manifest

    def describe(self) -> dict[str, Any]:
        """What is on disk, read only: counter, root, and per slot its release and whether its files still
        match its signed manifest (a corrupted active slot shows as such, not as serving)."""
        trust = self.trust
        try:
            active = self._active_slot()
        except InstallError as exc:
            active, pointer_problem = None, str(exc)
        else:
            pointer_problem = ""
        slots: dict[str, dict[str, Any]] = {}
        for name in SLOTS:
            path = self._slot_dir(name)
            if not path.exists() and not path.is_symlink():
                continue
            info: dict[str, Any] = {"active": name == active}
            try:
                manifest = self._slot_manifest(path)
                info.update(name=manifest.name, version=manifest.version, release=manifest.release)
                self._check_slot(path, manifest)
                info["healthy"] = True
            except (OtaError, OSError) as exc:
                info.update(healthy=False, problem=f"{type(exc).__name__}: {exc}")
            slots[name] = info
        return {"release_counter": trust.release_counter, "root_version": trust.root.version,
                "active": active, "pointer_problem": pointer_problem, "slots": slots}

    # -- steps --------------------------------------------------------------------------------
    def _step(self, name: str) -> None:
        if self._on_step:
            self._on_step(name)

    def _writable(self) -> None:
        if self.read_only:
            raise RuntimeError("this Installer was opened read-only")

    @contextlib.contextmanager
    def _reporting(self, report: Report | None) -> Iterator[None]:
        self._report = report
        try:
            yield
        finally:
            self._report = None

    def _warn(self, message: str) -> None:
        """A problem that changes nothing about the outcome (durability after a commit): said, not raised."""
        log.warning("%s", message)
        if self._report:
            self._report(f"warning: {message}")
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
        fsync_dir(slot)
        fsync_dir(slot.parent)

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

    def take_warm(self, directory: Path) -> SupervisedModel | None:
        """The worker the latest install's or rollback's self-test left loaded (``SelfTester.take``)."""
        return self.selftest.take(directory)

    def close(self) -> None:
        """End a kept self-test worker nobody took. Idempotent."""
        self.selftest.close()

    def _keep_report(self, slot: Path, report: GoldenReport) -> None:
        """Beside the slot's files, before it becomes active (the active slot is never written)."""
        self._atomic_write(slot / SELFTEST_FILE, json.dumps(report.to_dict(), sort_keys=True).encode())

    def _switch(self, slot: Path) -> None:
        self._atomic_write(self.state_dir / POINTER_FILE, _pointer_bytes(slot), staged="pointer_staged",
                           replaced="pointer_switched")

    def _abort(self, staged: Path, slot: Path) -> None:
        """A failed install before its commit point: no staged pointer, no inactive slot, old model serves."""
        self.close()
        staged.unlink(missing_ok=True)
        self._remove(slot)

    # -- state on disk ------------------------------------------------------------------------
    def _slot_dir(self, name: str) -> Path:
        return self.state_dir / "slots" / name

    def _pointed_slot(self, path: Path) -> str | None:
        """The slot a pointer file names; None when there is none; ``CorruptSlot`` when it is garbage."""
        try:
            doc = parse_json(path.read_bytes(), "active pointer")
        except FileNotFoundError:
            return None
        except (OtaError, OSError) as exc:
            raise CorruptSlot(f"active pointer {path.name} is unreadable: {exc}") from exc
        return schema.read(doc, POINTER_SCHEMA, f"active pointer {path.name}", CorruptSlot)["slot"]

    def _active_slot(self) -> str | None:
        """The pointer's slot, or the staged one when that install passed its commit point (the switch
        itself was lost or failed): what recovery will make the pointer say at the next start."""
        staged = _temp(self.state_dir / POINTER_FILE)
        pointed = self._pointed_slot(self.state_dir / POINTER_FILE)
        return self._committed_slot(staged, pointed) or pointed

    def _inactive_slot(self) -> str:
        return "b" if self._active_slot() == "a" else "a"

    def active_dir(self) -> Path:
        """The slot directory that serves now (what a server loads, through its own supervisor)."""
        slot = self._active_slot()
        if slot is None:
            raise NoActiveModel(f"no model installed under {self.state_dir}")
        return self._slot_dir(slot)

    def _slot_manifest(self, slot: Path) -> Manifest:
        """The signed manifest stored in a slot; ``CorruptSlot`` when it is missing or unreadable."""
        try:
            envelope = parse_json((slot / ENVELOPE_FILE).read_bytes(), "installed manifest")
            signed, _ = parse_envelope(envelope, "installed manifest")
            return Manifest.from_dict(signed)
        except (OtaError, OSError) as exc:
            raise CorruptSlot(f"slot {slot.name}: {type(exc).__name__}: {exc}") from exc

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

    def _replace(self, tmp: Path, path: Path, step: str = "", committed: bool = False) -> None:
        """``os.replace`` is the change; a directory fsync failing after it only weakens durability across a
        power loss (warned, not raised: failing here would report a change that did happen as not made).
        A ``committed`` temp file is kept when the replace fails: it already counts (``_active_slot``)."""
        try:
            os.replace(tmp, path)
        except OSError as exc:
            if not committed:
                tmp.unlink(missing_ok=True)
            raise _os_failure(exc) from exc
        try:
            if step:
                self._step(step)
            fsync_dir(path.parent)
        except OSError as exc:
            self._warn(f"{path.name} was replaced but syncing {path.parent} failed: {exc}")

    def _remove(self, slot: Path) -> None:
        """Empty a slot, whatever sits there (a planted symlink or file included); ``InstallError`` when it
        cannot be removed, rather than failing later with a confusing ``File exists``."""
        try:
            if slot.is_symlink() or slot.is_file():
                slot.unlink()
            elif slot.exists():
                shutil.rmtree(slot)
        except OSError as exc:
            raise InstallError(f"cannot clear slot {slot.name}: {exc}") from exc
        if slot.parent.exists():
            fsync_dir(slot.parent)

    def _recover(self) -> None:
        """After a crash (under the lock): finish a committed switch, drop temp files and an incomplete
        inactive slot; the counter catches up with the active release (state written before the counter was
        saved first). A corrupt slot is left for the agent to report and roll back from, never fatal here."""
        staged, pointer = _temp(self.state_dir / POINTER_FILE), self.state_dir / POINTER_FILE
        try:
            pointed = self._pointed_slot(pointer)
        except CorruptSlot:
            pointed = None
        if self._committed_slot(staged, pointed):
            self._replace(staged, pointer)
        for tmp in self.state_dir.glob("*.tmp"):
            tmp.unlink()
        remove_temp_files(self.state_dir)
        self.cache.remove_temp_files()
        try:
            inactive = self._slot_dir(self._inactive_slot())
        except CorruptSlot as exc:
            log.warning("recovery: %s", exc)
            return
        if (inactive.exists() or inactive.is_symlink()) and not (inactive / ENVELOPE_FILE).is_file():
            self._remove(inactive)
        try:
            active = self._slot_manifest(self.active_dir())
        except NoActiveModel:  # nothing installed yet: nothing to catch up with
            return
        except CorruptSlot as exc:
            log.warning("recovery: %s", exc)
            return
        trust = self._fresh_trust()
        if active.release > trust.release_counter:
            trust.raise_counter(active.release)
            self.save_trust(trust)

    def _committed_slot(self, staged: Path, pointed: str | None) -> str | None:
        """A staged pointer to the other slot whose release the saved counter already reached: that install
        passed its commit point (``trust_saved``) and only the switch is missing."""
        try:
            slot = self._pointed_slot(staged)
            if slot is not None and slot != pointed and \
                    self._slot_manifest(self._slot_dir(slot)).release == self.trust.release_counter:
                return slot
        except OtaError:
            pass
        return None
