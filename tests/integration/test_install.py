"""Signed bundles through the real installer: real files, real Ed25519, real wasmtime, real SIGKILL.

One session fixture compiles the test models, creates a keyring and a provisioned device state with
release 1 installed; each test works on its own copy of that state.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from cuvil_edge.signing import Keyring, make_manifest
from ota import (
    STEPS,
    BadSignature,
    DiskFull,
    ExpiredMetadata,
    FileWriter,
    FormatError,
    HashMismatch,
    Installer,
    InstallError,
    LengthMismatch,
    OtaConfig,
    RollbackError,
    SelfTestFailed,
    ThresholdNotMet,
    UntrustedKey,
    VerificationError,
    WrongTarget,
)
from ota.crypto import canonical_bytes
from ota.golden import GOLDEN_FILE, decode_vector, encode_vector
from ota.installer import TRUST_FILE
from ota.selftest import read_report
from ota.store import read_json
from runtime_wasm import RuntimePolicy
from runtime_wasm.errors import SpecError
from runtime_wasm.loader import load_model_dir
from runtime_wasm.spec import SPEC_FILE
from tests.support.install import (
    HW,
    RELEASE_FIELDS,
    ROOT,
    World,
    assert_serving,
    compile_matmul,
    only_active_slot,
    wat_model,
    write_raw_bundle,
)

pytestmark = pytest.mark.integration


#: ``run`` bodies for ``wat_model``: copy x to y (golden output = input), and loop forever
COPY_RUN = '(func (export "run") (v128.store (i32.const 2064) (v128.load (i32.const 2048))))'
LOOP_RUN = '(func (export "run") (loop $l (br $l)))'


def copy_golden() -> list[dict]:
    x = np.arange(4, dtype=np.float32)
    return [encode_vector({"x": x}, {"y": x})]


@pytest.fixture(scope="session")
def world(tmp_path_factory) -> World:
    return World(tmp_path_factory.mktemp("ota"))


@pytest.fixture
def state(world, tmp_path) -> Path:
    return Path(shutil.copytree(world.template, tmp_path / "state"))


# -- 1. tampering, truncation, endless data, mix-and-match -------------------------------------
def _tamper(data: bytes, how: str, other: bytes) -> bytes:
    header_end = 12 + int.from_bytes(data[8:12], "big")
    if how == "module_byte":
        i = len(data) - 10
        return data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]
    if how == "weights_byte":
        return data[:header_end + 3] + bytes([data[header_end + 3] ^ 0x80]) + data[header_end + 4:]
    if how == "manifest":
        return data.replace(b'"version":"1.0.2"', b'"version":"1.0.9"', 1)
    if how == "truncated":
        return data[:-100]
    if how == "longer":
        return data + b"\0" * 4096
    other_header_end = 12 + int.from_bytes(other[8:12], "big")
    return data[:header_end] + other[other_header_end:]  # release 2's manifest, release 1's payloads


@pytest.mark.parametrize("how, error", [
    ("module_byte", HashMismatch), ("weights_byte", HashMismatch), ("manifest", BadSignature),
    ("truncated", LengthMismatch), ("longer", LengthMismatch), ("mix_and_match", HashMismatch)])
def test_tampered_or_misshapen_bundle_is_rejected_and_old_model_serves(world, state, tmp_path, how, error):
    bad = tmp_path / "bad.cvb"
    bad.write_bytes(_tamper(world.bundles[2].read_bytes(), how, world.bundles[1].read_bytes()))
    steps: list[str] = []
    with pytest.raises(error):
        Installer(state, HW, on_step=steps.append).install(bad)
    assert steps == []  # refused before the first write
    only_active_slot(state)
    assert_serving(state, 1)


# -- 2. weak signing --------------------------------------------------------------------------
def test_weak_signatures_are_rejected(world, state, tmp_path):
    release = world.ring.release_keys()
    stranger = Keyring.init(tmp_path / "stranger", 1, 1, 1, 1).release_keys()
    cases = {"unsigned": ([], ThresholdNotMet), "one_of_two": (release[:1], ThresholdNotMet),
             "not_delegated": ([release[0], *stranger], UntrustedKey)}
    for name, (keys, error) in cases.items():
        with pytest.raises(error):
            Installer(state, HW).install(world.signed(tmp_path / f"{name}.cvb", keys))
    only_active_slot(state)
    assert_serving(state, 1)


def test_revoked_release_key_is_rejected(world, state, tmp_path):
    ring = Keyring(shutil.copytree(world.ring.directory, tmp_path / "keys"))
    revoked = sorted(ring.root.release_keys)[0]
    ring.revoke(revoked)  # root v2 delegates a replacement
    inst = Installer(state, HW)
    inst.update_root(ring.root_chain(1))
    old_keys = [ring.private_key(k) for k in sorted(world.ring.root.release_keys)]
    with pytest.raises(UntrustedKey, match="revoked"):
        inst.install(world.signed(tmp_path / "revoked.cvb", old_keys))
    inst.install(world.signed(tmp_path / "fresh.cvb", ring.release_keys()))
    assert_serving(state, 2)


# -- 3. root rotation -------------------------------------------------------------------------
def test_root_rotation_chain_is_accepted_and_persisted(world, state, tmp_path):
    ring = Keyring(shutil.copytree(world.ring.directory, tmp_path / "keys"))
    ring.revoke(sorted(ring.root.root_keys)[0])  # v2: a root key replaced
    ring.add_key("root")  # v3
    Installer(state, HW).update_root(ring.root_chain(1))
    assert Installer(state, HW).trust.root.version == 3  # survives a restart


def test_bad_link_aborts_root_rotation_with_trust_unchanged(world, state, tmp_path):
    ring = Keyring(shutil.copytree(world.ring.directory, tmp_path / "keys"))
    ring.add_key("release")
    ring.add_key("root")
    v2, v3 = ring.root_chain(1)
    v3["signed"]["release_threshold"] = 1  # altered after signing
    before = (state / "trust.json").read_bytes()
    with pytest.raises(BadSignature):
        Installer(state, HW).update_root([v2, v3])
    assert (state / "trust.json").read_bytes() == before
    assert Installer(state, HW).trust.root.version == 1


# -- 4. rollback ------------------------------------------------------------------------------
def test_replayed_older_release_is_a_rollback_even_after_restart(world, state):
    Installer(state, HW).install(world.bundles[2])
    for bundle in (world.bundles[1], world.bundles[2]):
        with pytest.raises(RollbackError):
            Installer(state, HW).install(bundle)  # a new Installer: the counter came from disk
    assert json.loads((state / "trust.json").read_bytes())["release_counter"] == 2
    assert_serving(state, 2)


def test_operator_rollback_keeps_the_counter(world, state):
    inst = Installer(state, HW)
    inst.install(world.bundles[2])
    assert inst.rollback().release == 1
    assert_serving(state, 1)
    with pytest.raises(RollbackError):
        Installer(state, HW).install(world.bundles[1])


# -- 5. freeze --------------------------------------------------------------------------------
def test_expired_release_is_refused_and_current_model_serves(world, state, tmp_path):
    bundle = world.signed(tmp_path / "old.cvb", world.ring.release_keys(), expires="2020-01-01T00:00:00Z")
    with pytest.raises(ExpiredMetadata):
        Installer(state, HW).install(bundle)
    only_active_slot(state)
    assert_serving(state, 1)


# -- 6. wrong target --------------------------------------------------------------------------
def test_bundle_for_other_hardware_is_wrong_target_before_any_write(world, state, tmp_path):
    bundle = world.signed(tmp_path / "pi.cvb", world.ring.release_keys(),
                          targets={"hardware_ids": ["raspberry-pi-4"], "profiles": []})
    steps: list[str] = []
    with pytest.raises(WrongTarget):
        Installer(state, HW, on_step=steps.append).install(bundle)
    assert steps == []
    only_active_slot(state)


# -- 7. power loss at every step --------------------------------------------------------------
CRASHING_INSTALL = """
import os, signal, sys
from ota import Installer
def die_at(step):
    if step == sys.argv[3]:
        os.kill(os.getpid(), signal.SIGKILL)
Installer(sys.argv[1], {hw!r}, on_step=die_at).install(sys.argv[2])
"""


@pytest.mark.parametrize("step", STEPS)
def test_sigkill_at_any_step_leaves_exactly_old_or_new_model(world, state, step):
    proc = subprocess.run([sys.executable, "-c", CRASHING_INSTALL.format(hw=HW), str(state),
                           str(world.bundles[2]), step], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    switched = STEPS.index(step) >= STEPS.index("trust_saved")  # commit point: a restart finishes the switch
    assert_serving(state, 2 if switched else 1)
    if not switched:  # the interrupted release can still be installed afterwards
        Installer(state, HW).install(world.bundles[2])
        assert_serving(state, 2)


# -- 8. bad model -----------------------------------------------------------------------------
def test_trapping_module_is_rolled_back(world, state, tmp_path):
    zeros = np.zeros(4, np.float32)
    golden = [encode_vector({"x": zeros}, {"y": zeros})]
    bundle = world.bundle(3, wat_model(tmp_path / "trap"), golden=golden)
    with pytest.raises(SelfTestFailed, match="InferenceTrap"):
        Installer(state, HW).install(bundle)
    only_active_slot(state)
    assert_serving(state, 1)


def test_wrong_golden_output_is_rolled_back(world, state, tmp_path):
    inputs, outputs = decode_vector(world.manifest2["golden"][0])
    wrong = [encode_vector(inputs, {k: v + 1.0 for k, v in outputs.items()})]
    with pytest.raises(SelfTestFailed, match="golden vector 0 differs"):
        Installer(state, HW).install(world.signed(tmp_path / "wrong.cvb", world.ring.release_keys(),
                                                  golden=wrong))
    only_active_slot(state)
    assert_serving(state, 1)
    Installer(state, HW).install(world.bundles[2])  # the failed attempt did not consume release 2
    assert_serving(state, 2)


def test_golden_vectors_in_their_payload_self_test_the_install(world, state, tmp_path):
    """Golden vectors too large for the signed header ship as the ``golden.json`` payload: the install's
    self-test runs every one of them; a file whose vectors lie (validly signed, as a key holder's mistake)
    fails it and release 1 keeps serving."""
    wide = compile_matmul(tmp_path / "wide", seed=3, n_in=1, n_out=250_000)
    manifest, payloads = make_manifest(wide, version="1.0.2", release=2, **RELEASE_FIELDS)
    assert manifest["golden"] == [] and GOLDEN_FILE in payloads
    vectors = json.loads(payloads[GOLDEN_FILE])
    inputs, outputs = decode_vector(vectors[1])
    lying = canonical_bytes([vectors[0], encode_vector(inputs, {k: v + 1.0 for k, v in outputs.items()})])
    files = [{**f, "length": len(lying), "sha256": hashlib.sha256(lying).hexdigest()}
             if f["name"] == GOLDEN_FILE else f for f in manifest["files"]]
    bad = write_raw_bundle(tmp_path / "lying.cvb", {**manifest, "files": files}, world.ring.release_keys(),
                           {**payloads, GOLDEN_FILE: lying})
    with pytest.raises(SelfTestFailed, match="golden vector 1 differs"):
        Installer(state, HW).install(bad)
    only_active_slot(state)
    assert_serving(state, 1)
    good = write_raw_bundle(tmp_path / "wide.cvb", manifest, world.ring.release_keys(), payloads)
    installer = Installer(state, HW)
    installer.install(good)
    assert read_report(installer.active_dir())["vectors"] == 2


# -- 9. disk full -----------------------------------------------------------------------------
class FullDisk(FileWriter):
    """Fault injection at the installer's write layer: ENOSPC once ``budget`` bytes were written."""

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def write(self, f, data: bytes) -> None:
        if len(data) > self.budget:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.budget -= len(data)
        super().write(f, data)


def _mount_small_tmpfs(where: Path, size_bytes: int) -> bool:
    where.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(where)],
                          capture_output=True)
    return proc.returncode == 0


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize("how", ["tmpfs", "injected"])
def test_disk_full_fails_cleanly_and_old_model_serves(world, state, tmp_path, how):
    big = world.bundle(5, compile_matmul(tmp_path / "big", seed=5, n_in=256, n_out=512))  # 512 KiB weights
    if how == "tmpfs":
        mnt = tmp_path / "mnt"
        if not _mount_small_tmpfs(mnt, _du(state) + (192 << 10)):
            pytest.skip("cannot mount a tmpfs here; the 'injected' case covers ENOSPC")
        try:
            small = Path(shutil.copytree(state, mnt / "state"))
            with pytest.raises(DiskFull):
                Installer(small, HW).install(big)
            only_active_slot(small)
            assert_serving(small, 1)
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
    else:
        with pytest.raises(DiskFull):
            Installer(state, HW, writer=FullDisk(64 << 10)).install(big)
        only_active_slot(state)
        assert_serving(state, 1)


# -- 10. security review regressions (each demonstrated against the previous code) ----------------
@pytest.mark.parametrize("where", ["other_slot", "absolute"])
def test_variant_outside_the_signed_payloads_is_refused(world, state, tmp_path, where):
    """A variant may only name a module payload of its own release (with that payload's sha256)."""
    outside = tmp_path / "outside.wasm"
    manifest = json.loads(json.dumps(world.manifest2))
    for v in manifest["spec"]["variants"]:
        outside.write_bytes(world.payloads2[v["file"]])
        v.update(file=f"../a/{v['file']}" if where == "other_slot" else str(outside),
                 sha256=v["sha256"] if where == "other_slot" else "")
    manifest["files"] = [f for f in manifest["files"] if f["name"] == "weights.bin"]
    bundle = write_raw_bundle(tmp_path / "escape.cvb", manifest, world.ring.release_keys(),
                              world.payloads2)
    with pytest.raises(FormatError, match="variant"):
        Installer(state, HW).install(bundle)
    only_active_slot(state)
    assert_serving(state, 1)


@pytest.mark.parametrize("how", ["endless_loop", "over_memory_cap"])
def test_selftest_runs_under_a_deadline_and_memory_cap(world, state, tmp_path, how):
    """A module that loops (or needs more memory than allowed) fails its self-test instead of hanging
    or bloating the agent: the golden vectors run in a supervised worker."""
    model = wat_model(tmp_path / "m", LOOP_RUN) if how == "endless_loop" else \
        wat_model(tmp_path / "m", COPY_RUN, pages=64)
    bundle = world.bundle(3, model, golden=copy_golden())
    config = OtaConfig(selftest_deadline_s=1.0)
    served_under = RuntimePolicy(memory_cap_bytes=1 << 20)  # the self-test uses the serving memory cap
    outcome: list[BaseException] = []

    def install() -> None:
        try:
            Installer(state, HW, config=config, policy=served_under).install(bundle)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=install, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "install() hung in the self-test"
    assert outcome and isinstance(outcome[0], SelfTestFailed), outcome
    assert ("DeadlineExceeded" if how == "endless_loop" else "ModuleLoadError") in str(outcome[0])
    only_active_slot(state)
    assert_serving(state, 1)


def test_negative_module_addresses_fail_the_install_cleanly(world, state, tmp_path):
    bundle = world.bundle(3, wat_model(tmp_path / "m", COPY_RUN, arena_ptr=-(1 << 31)), golden=copy_golden())
    with pytest.raises(SelfTestFailed, match="ModuleLoadError"):
        Installer(state, HW).install(bundle)
    assert_serving(state, 1)


def test_malformed_spec_or_golden_data_fails_cleanly(world, state, tmp_path):
    """A spec with a negative dim is refused at verification; malformed golden data fails the
    self-test: neither escapes as a plain ValueError/KeyError."""
    manifest = json.loads(json.dumps(world.manifest2))
    manifest["spec"]["outputs"][0]["shape"] = [-1]
    with pytest.raises(FormatError, match="negative"):
        Installer(state, HW).install(write_raw_bundle(tmp_path / "spec.cvb", manifest,
                                                      world.ring.release_keys(), world.payloads2))
    with pytest.raises(SelfTestFailed):
        Installer(state, HW).install(world.signed(tmp_path / "golden.cvb", world.ring.release_keys(),
                                                  golden=[{}]))
    only_active_slot(state)
    assert_serving(state, 1)


class FullOnTrust(FileWriter):
    """ENOSPC exactly when trust.json is saved (the last write of an install)."""

    def write(self, f, data: bytes) -> None:
        if f.name.endswith("trust.json.tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().write(f, data)


def test_disk_full_saving_the_counter_leaves_the_old_release_active(world, state):
    """The counter is saved before the switch: a failure there is a clean DiskFull with the old model
    active (before, the new release was already active and reported as failed)."""
    inst = Installer(state, HW, writer=FullOnTrust())
    with pytest.raises(DiskFull):
        inst.install(world.bundles[2])
    assert inst.active_manifest().release == 1
    assert json.loads((state / "trust.json").read_bytes())["release_counter"] == 1
    only_active_slot(state)
    assert_serving(state, 1)
    Installer(state, HW).install(world.bundles[2])
    assert_serving(state, 2)


def test_rollback_rechecks_signatures_and_expiry_under_the_current_root(world, state, tmp_path):
    """Rolling back to an expired release is ExpiredMetadata; to one signed by a since-revoked key,
    UntrustedKey; either way the current release keeps serving."""
    inst = Installer(state, HW)
    inst.install(world.bundles[2])  # slot b; slot a keeps release 1
    with pytest.raises(ExpiredMetadata):
        inst.rollback(now=datetime(2100, 1, 1, tzinfo=timezone.utc))
    ring = Keyring(shutil.copytree(world.ring.directory, tmp_path / "keys"))
    ring.revoke(sorted(ring.root.release_keys)[0])  # root v2: one of release 2's two signers revoked
    inst.update_root(ring.root_chain(1))
    inst.install(world.signed(tmp_path / "r3.cvb", ring.release_keys(), release=3, version="1.0.3"))
    with pytest.raises(UntrustedKey, match="revoked"):
        inst.rollback()
    assert_serving(state, 3)


def test_stale_temp_files_are_removed_on_start(world, state):
    (state / ".agent.json.ab12cd_9").write_bytes(b"half")
    (state / "cache" / ".tmp-x1y2z3w4").write_bytes(b"half")
    Installer(state, HW)
    assert not list(state.glob(".agent.json.*")) and not list((state / "cache").glob(".tmp-*"))


def test_verification_errors_share_one_base():
    for error in (HashMismatch, BadSignature, LengthMismatch, ThresholdNotMet, UntrustedKey, RollbackError,
                  ExpiredMetadata, WrongTarget):
        assert issubclass(error, VerificationError)


# -- command line -----------------------------------------------------------------------------
def test_cli_keys_bundle_verify_install_rollback(world, tmp_path, capsys, monkeypatch, host_cli):
    from cuvil_agent.cli import main as agent

    host = host_cli

    keys = str(tmp_path / "keys")
    monkeypatch.setenv("CUVIL_TEST_PASS", "correct horse")
    host("keys", "init", keys, "--passphrase-env", "CUVIL_TEST_PASS")
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in Path(keys).glob("*.key"))
    listing = host("keys", "add", keys, "--role", "release", "--passphrase-env", "CUVIL_TEST_PASS")
    assert "root v2" in listing and listing.count("\n  release  ") == 2
    root_json = str(Path(keys) / "root.json")
    for n in (1, 2):
        host("bundle", str(world.models[n]), "-o", str(tmp_path / f"{n}.cvb"), "--keyring", keys,
             "--passphrase-env", "CUVIL_TEST_PASS", "--release", str(n), "--version", f"1.0.{n}",
             "--hardware-id", HW)
    checks = host("verify", str(tmp_path / "2.cvb"), "--root", root_json, "--hardware-id", HW)
    assert [line.split()[1] for line in checks.splitlines() if line.startswith("ok")] == [
        "root:", "signatures:", "manifest", "expiry:", "rollback:", "target:", "payloads:"]
    state = str(tmp_path / "device")
    assert agent(["install", str(tmp_path / "1.cvb"), "--state-dir", state, "--root", root_json,
                  "--hardware-id", HW]) == 0
    assert agent(["install", str(tmp_path / "2.cvb"), "--state-dir", state, "--hardware-id", HW]) == 0
    assert agent(["install", str(tmp_path / "1.cvb"), "--state-dir", state, "--hardware-id", HW]) == 2
    assert "RollbackError" in capsys.readouterr().err
    assert agent(["rollback", "--state-dir", state, "--hardware-id", HW]) == 0
    assert_serving(Path(state), 1)


def test_unreadable_state_files_are_typed_errors_naming_them(state):
    """A directory where the active model's module or spec, ``trust.json`` or a JSON state file should be
    (disk damage, a botched manual repair): typed errors naming the file, never a bare OSError."""
    inst = Installer(state, HW)
    active = inst.active_dir()
    for module in active.glob("*.wasm"):
        module.unlink()
    with pytest.raises(SpecError, match=r"\.wasm cannot be read"):
        load_model_dir(active, cache=inst.cache)
    (active / SPEC_FILE).unlink()
    (active / SPEC_FILE).mkdir()
    with pytest.raises(SpecError, match=f"{SPEC_FILE} cannot be read"):
        load_model_dir(active, cache=inst.cache)
    (state / TRUST_FILE).unlink()
    (state / TRUST_FILE).mkdir()
    with pytest.raises(InstallError, match=f"{TRUST_FILE} cannot be read"):
        assert Installer(state, HW).trust
    (state / "progress.json").mkdir()
    with pytest.raises(FormatError, match="progress.json cannot be read"):
        read_json(state / "progress.json", None)
