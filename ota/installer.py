"""A/B installation under a state directory: verify, write the inactive slot, self-test, switch atomically.

Layout: ``trust.json`` (root + release counter), ``active`` (which slot serves), ``slots/{a,b}/``
(``bundle.json`` = signed envelope, ``model.json`` = spec, payloads) and ``cache/`` (precompiled
modules). The active slot is never written; the pointer changes by ``os.replace`` only, so after a
crash at any point exactly the old or the new model is active. See docs/SECURITY.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from runtime_wasm import EngineConfig, ModelSource, ModuleCache, RuntimePolicy, SupervisedModel, schema
from runtime_wasm.loader import SPEC_FILE

from .bundle import read_header, read_payloads, verify_bundle
from .config import OtaConfig
from .crypto import canonical_bytes, parse_json
from .errors import (
    BrokenChain,
    CorruptSlot,
    DiskFull,
    HashMismatch,
    InstallError,
    NoActiveModel,
    NothingToRollBack,
    OtaError,
    SelfTestFailed,
    StateLocked,
    WrongModel,
)
from .golden import decode_vector
from .metadata import FileEntry, Manifest, Root, parse_envelope
from .store import remove_temp_files
from .trust import Report, TrustState, check_payload

log = logging.getLogger(__name__)
SLOTS = ("a", "b")
TRUST_FILE = "trust.json"
POINTER_FILE = "active"
ENVELOPE_FILE = "bundle.json"
LOCK_FILE = "lock"
MODELS_DIR = "models"  # <state_dir>/models/<name>: one state directory per model line of a device
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


class StateLock:
    """One writer per state directory, across processes and threads: an exclusive ``flock`` on
    ``<state>/lock`` (released by the kernel if the holder dies, so a crash never leaves it stuck) plus a
    thread lock; re-entrant for its holder. Waits at most ``timeout_s``, then ``StateLocked``."""

    def __init__(self, path: Path, timeout_s: float) -> None:
        self.path, self.timeout_s = path, timeout_s
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            raise StateLocked(f"{self.path.parent} is busy in this process for over {self.timeout_s}s")
        try:
            if self._depth == 0:
                self._fd = self._acquire()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    os.close(self._fd)  # closing the descriptor releases the flock
                    self._fd = None
        finally:
            self._thread_lock.release()

    def _acquire(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        end = time.monotonic() + self.timeout_s
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if not waited:
                    waited = True
                    log.warning("waiting for %s: another install, rollback or root update holds it",
                                self.path)
                if time.monotonic() >= end:
                    os.close(fd)
                    raise StateLocked(f"another install, rollback or root update holds {self.path} for "
                                      f"over {self.timeout_s}s") from None
                time.sleep(0.05)


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
                 policy: RuntimePolicy | None = None, read_only: bool = False, model: str = "") -> None:
        """``root`` provisions an empty state directory; an existing ``trust.json`` always wins. ``policy``
        is what the model will be served under: the self-test runs under its memory cap. ``model`` binds
        this directory to one model line (a multi-model device): only bundles whose signed manifest has
        that name are installed; empty: any name (a single-model device)."""
        self.state_dir, self.model = Path(state_dir), model
        self.hardware_id, self.profile = hardware_id, profile
        self.config = config or OtaConfig()
        self.policy = policy or RuntimePolicy()
        self.read_only = read_only
        self._on_step = on_step
        self._writer = writer or FileWriter()
        self._report: Report | None = None
        self.cache = ModuleCache(self.state_dir / "cache")
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
                self._save_trust(TrustState(root, 0, self.config))
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
            self._trust = TrustState.from_dict(parse_json(path.read_bytes(), "trust state"), self.config)
            self._trust_id = ident
        return self._trust

    def _fresh_trust(self) -> TrustState:
        """Under the lock: a private copy read from disk, to change and then save (or drop on failure)."""
        self._trust = None
        trust = self.trust
        self._trust = None
        return trust

    def _save_trust(self, trust: TrustState) -> None:
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
                    self._self_test(slot, manifest)
                    self._write_temp(staged, _pointer_bytes(slot))
                    self._step("pointer_staged")
                    trust.accept_release(manifest)
                    self._save_trust(trust)
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
                self._self_test(slot, manifest)
            except (OtaError, OSError) as exc:
                raise NothingToRollBack(f"slot {slot.name} holds no healthy model: {exc}") from exc
            self._switch(slot)
        return manifest

    def update_root(self, chain: list[Mapping[str, Any]]) -> None:
        """Rotate the root of trust (all links or none) and persist it."""
        self._writable()
        with self.lock.hold():
            trust = self._fresh_trust()
            trust.update_root(chain)
            self._save_trust(trust)

    def active_manifest(self) -> Manifest:
        return self._slot_manifest(self.active_dir())

    def verify_active(self) -> Manifest:
        """Health check: the active slot's files match its manifest and it passes its self-test."""
        slot = self.active_dir()
        manifest = self._slot_manifest(slot)
        self._check_slot(slot, manifest)
        self._self_test(slot, manifest)
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
        supervised worker under the memory cap it will be served with (``policy``) and the self-test
        deadline (``OtaConfig``): a module that loops, or that would not fit when served, fails here, before
        the commit point, not in the agent afterwards. Whatever goes wrong is a ``SelfTestFailed``."""
        what = f"{manifest.name} release {manifest.release}"
        if not manifest.golden:
            raise SelfTestFailed(f"{what}: bundle carries no golden vectors to self-test with")
        try:
            det = self.policy.deterministic  # the variant and engine it will be served with
            source = ModelSource.from_dir(slot, cache_dir=str(self.cache.directory), deterministic=det)
            self.cache.load(source.wasm, EngineConfig(source.variant.tier, deterministic=det))
            self._step("precompiled")
            self._run_golden(source, manifest)
        except SelfTestFailed:
            raise
        except Exception as exc:  # DeadlineExceeded, WorkerCrashed, traps, malformed vectors, ...
            raise SelfTestFailed(f"{what}: {type(exc).__name__}: {exc}") from exc
        self._step("selftested")

    def _run_golden(self, source: ModelSource, manifest: Manifest) -> None:
        cfg = self.config
        with SupervisedModel(source, self.policy.memory_cap_bytes,
                             start_timeout_s=max(cfg.selftest_start_timeout_s,
                                                 self.policy.worker_start_timeout_s)) as model:
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
            _fsync_dir(path.parent)
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
            _fsync_dir(slot.parent)

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
            self._save_trust(trust)

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


# -- one device, one root: the trust of every model line together -------------------------------------------
def line_dirs(state_dir: str | os.PathLike[str], models: Iterable[str]) -> dict[str, Path]:
    """Each model line's state directory on a multi-model device (``<state_dir>/models/<name>``)."""
    return {m: Path(state_dir) / MODELS_DIR / m for m in models}


def trusted_root(state_dirs: Iterable[Path]) -> dict[str, Any] | None:
    """The newest root any of these state directories trusts (None when none is provisioned): a model line
    added to a device is provisioned with the device's root, never an older one from its config."""
    newest: TrustState | None = None
    for d in state_dirs:
        path = Path(d) / TRUST_FILE
        if path.exists():
            trust = TrustState.from_dict(parse_json(path.read_bytes(), f"trust state {path}"))
            if newest is None or trust.root.version > newest.root.version:
                newest = trust
    return newest.root_envelope if newest else None


def _root_version(link: Mapping[str, Any]) -> int:
    return Root.from_dict(parse_envelope(link, "root metadata")[0]).version


@contextlib.contextmanager
def _all_locked(installers: Sequence[Installer]) -> Iterator[list[TrustState]]:
    """Every line's lock, in the given order, and each line's trust state read from disk under it."""
    with contextlib.ExitStack() as held:
        for inst in installers:
            inst._writable()
            held.enter_context(inst.lock.hold())
        yield [inst._fresh_trust() for inst in installers]


def update_roots(installers: Sequence[Installer], chain: Sequence[Mapping[str, Any]]) -> int:
    """Rotate the root of every model line of one device (one root per device, so a key revoked for one
    line is revoked for all). Under all the lines' locks each line's part of ``chain`` (the links newer
    than its root) is checked on a copy first, so one bad link changes no line; then the links are saved
    one version at a time across the lines, so a crash leaves them at most one version apart, which
    ``align_roots`` closes. Returns the device's root version."""
    versions = [_root_version(link) for link in chain]
    with _all_locked(installers) as trusts:
        for trust in trusts:
            trial = TrustState(trust.root_envelope, trust.release_counter, trust.config)
            trial.update_root([link for link, v in zip(chain, versions) if v > trust.root.version])
        for link, version in zip(chain, versions):
            for inst, trust in zip(installers, trusts):
                if version > trust.root.version:
                    trust.update_root([link])
                    inst._save_trust(trust)
        return _align(installers, trusts)


def align_roots(installers: Sequence[Installer]) -> int:
    """Bring every model line up to the newest root any of them trusts (a rotation a crash cut short, a
    line restored from an old backup); a line's trust never goes back. Returns the device's root
    version; ``BrokenChain`` when a line is more than one version behind (the links between are not on
    the device: rotate it with ``cuvil-agent trust --root``, each missing version in order)."""
    with _all_locked(installers) as trusts:
        return _align(installers, trusts)


def _align(installers: Sequence[Installer], trusts: Sequence[TrustState]) -> int:
    newest = max(trusts, key=lambda t: t.root.version)
    for inst, trust in zip(installers, trusts):
        if trust.root.version == newest.root.version:
            continue
        if trust.root.version + 1 != newest.root.version:
            raise BrokenChain(f"{inst.state_dir} trusts root v{trust.root.version}, another model line of "
                              f"this device v{newest.root.version}: give the versions between with "
                              "cuvil-agent trust --root")
        trust.update_root([newest.root_envelope])  # the very next link, checked like any other
        inst._save_trust(trust)
    return newest.root.version
