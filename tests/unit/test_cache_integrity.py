"""The precompiled-module cache never runs code that is not what this device compiled from the module:
swapped, corrupt, truncated and old-format entries are rejected before wasmtime maps them, then
recompiled (real wasmtime, real files; corrupt machine code is only ever loaded in a subprocess)."""

from __future__ import annotations

import os
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import wasmtime

from runtime_wasm import EngineConfig, ModuleCache, engine_for
from runtime_wasm.cache import KEY_BYTES, read_or_create_key
from runtime_wasm.errors import CacheKeyError

CFG = EngineConfig()
ANSWER = '(module (func (export "answer") (result i32) i32.const {}))'
WASM_A, WASM_B = (wasmtime.wat2wasm(ANSWER.format(n)) for n in (1, 2))
#: loads WASM_A from the cache at argv[1] and prints what it answers and the cache's counters
CHILD = """import sys, wasmtime
from runtime_wasm import EngineConfig, ModuleCache, engine_for
cache = ModuleCache(sys.argv[1])
module = cache.load(bytes.fromhex(sys.argv[2]), EngineConfig())
store = wasmtime.Store(engine_for(EngineConfig()))
answer = wasmtime.Instance(store, module, []).exports(store)["answer"](store)
print(answer, cache.rejected, cache.misses, cache.hits)
"""


def answer(module: wasmtime.Module) -> int:
    store = wasmtime.Store(engine_for(CFG))
    return wasmtime.Instance(store, module, []).exports(store)["answer"](store)


def entry(cache: ModuleCache, wasm: bytes) -> Path:
    return cache.directory / f"{cache.key(wasm, CFG)}.cwasm"


def text_section(blob: bytes) -> tuple[int, int]:
    """(offset, size) of ``.text`` in the ELF image inside a cache entry (after any header)."""
    base = blob.index(b"\x7fELF")
    shoff, = struct.unpack_from("<Q", blob, base + 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, base + 0x3A)
    section = lambda i: struct.unpack_from("<IIQQQQ", blob, base + shoff + i * shentsize)  # noqa: E731
    names = base + section(shstrndx)[4]
    for i in range(shnum):
        name, _, _, _, offset, size = section(i)
        if blob[names + name:names + name + 6] == b".text\0":
            return base + offset, size
    raise AssertionError("no .text section")


@pytest.fixture
def cache(tmp_path: Path) -> ModuleCache:
    """A cache under ``tmp_path/cache`` with both modules compiled into it (key: ``tmp_path/cache.key``)."""
    cache = ModuleCache(tmp_path / "cache")
    for wasm in (WASM_A, WASM_B):
        cache.load(wasm, CFG)
    return cache


def assert_recompiled(cache: ModuleCache) -> None:
    """A fresh cache over the tampered directory answers 1, rejects once, and stores a good entry again."""
    again = ModuleCache(cache.directory)
    assert answer(again.load(WASM_A, CFG)) == 1
    assert (again.rejected, again.misses, again.hits) == (1, 1, 0)
    assert answer(again.load(WASM_A, CFG)) == 1 and again.hits == 1, "the recompiled entry was not stored"


def test_another_modules_valid_entry_copied_over_is_rejected(cache: ModuleCache) -> None:
    """A genuine artifact of another model (valid MAC for its own key) does not run under this key."""
    entry(cache, WASM_A).write_bytes(entry(cache, WASM_B).read_bytes())
    assert_recompiled(cache)


@pytest.mark.parametrize("damage", ["int3_text", "flip_text_byte"])
def test_corrupt_machine_code_is_rejected_not_run(cache: ModuleCache, damage: str) -> None:
    """Today's trap: a .text of 0xCC would SIGTRAP the process once mapped, so the load runs in a child."""
    path = entry(cache, WASM_A)
    blob = bytearray(path.read_bytes())
    offset, size = text_section(blob)
    if damage == "int3_text":
        blob[offset:offset + size] = b"\xcc" * size
    else:
        blob[offset] ^= 0x01
    path.write_bytes(blob)
    child = subprocess.run([sys.executable, "-c", CHILD, str(cache.directory), WASM_A.hex()],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, f"the child died ({child.returncode}): {child.stderr[-2000:]}"
    assert child.stdout.split() == ["1", "1", "1", "0"]  # right answer, 1 rejected, 1 compile, 0 hits
    again = ModuleCache(cache.directory)
    assert answer(again.load(WASM_A, CFG)) == 1 and again.hits == 1, "the child did not store a good entry"


@pytest.mark.parametrize("source", ["same_module", "other_module"])
def test_old_format_entry_is_never_trusted(cache: ModuleCache, source: str) -> None:
    """A plain ``Module.serialize()`` (the format before MACs) is recompiled, even a genuine one."""
    wasm = WASM_A if source == "same_module" else WASM_B
    entry(cache, WASM_A).write_bytes(wasmtime.Module(engine_for(CFG), wasm).serialize())
    assert_recompiled(cache)


@pytest.mark.parametrize("cut", ["empty", "inside_header", "half", "last_byte", "mac_zeroed", "mac_stripped"])
def test_truncated_or_unauthenticated_entry_is_recompiled(cache: ModuleCache, cut: str) -> None:
    path = entry(cache, WASM_A)
    blob = path.read_bytes()
    header = blob.index(b"\x7fELF")
    damaged = {"empty": b"", "inside_header": blob[:header // 2], "half": blob[:len(blob) // 2],
               "last_byte": blob[:-1], "mac_zeroed": blob[:header - 32] + bytes(32) + blob[header:],
               "mac_stripped": blob[:header - 32] + blob[header:]}[cut]
    path.write_bytes(damaged)
    assert_recompiled(cache)


def test_key_is_private_outside_the_cache_and_reused(tmp_path: Path) -> None:
    """0600, beside (not in) the cache directory, and one key across instances: the second one hits."""
    first = ModuleCache(tmp_path / "cache")
    first.load(WASM_A, CFG)
    key_file = tmp_path / "cache.key"
    key = key_file.read_bytes()
    assert len(key) == KEY_BYTES and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert not list((tmp_path / "cache").glob("*.key")), "the key must not live in the cache directory"
    second = ModuleCache(tmp_path / "cache")
    assert answer(second.load(WASM_A, CFG)) == 1
    assert (second.hits, second.misses, second.rejected) == (1, 0, 0)
    assert key_file.read_bytes() == key
    with pytest.raises(CacheKeyError, match="outside"):
        ModuleCache(tmp_path / "cache", key_path=tmp_path / "cache" / "k")


def test_concurrent_key_creation_ends_with_one_key(tmp_path: Path) -> None:
    """Processes that find no key at the same moment all end up using the one that was published."""
    key_file, go = tmp_path / "state" / "cache.key", tmp_path / "go"
    script = ("import sys, time\nfrom pathlib import Path\n"
              "from runtime_wasm.cache import read_or_create_key\n"
              "while not Path(sys.argv[2]).exists(): time.sleep(0.001)\n"
              "print(read_or_create_key(Path(sys.argv[1])).hex())")
    children = [subprocess.Popen([sys.executable, "-c", script, str(key_file), str(go)],
                                 stdout=subprocess.PIPE, text=True) for _ in range(6)]
    time.sleep(1.0)  # let them import and start polling
    go.touch()
    keys = {child.communicate(timeout=120)[0].strip() for child in children}
    assert keys == {key_file.read_bytes().hex()}
    assert [p.name for p in key_file.parent.iterdir()] == ["cache.key"], "a temp key file was left behind"


def test_wrong_length_key_is_replaced_and_unreadable_key_is_an_error(tmp_path: Path) -> None:
    key_file = tmp_path / "cache.key"
    key_file.write_bytes(b"short")
    key = read_or_create_key(key_file)
    assert key is not None and len(key) == KEY_BYTES and key_file.read_bytes() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    unreadable = tmp_path / "dir.key"
    unreadable.mkdir()
    with pytest.raises(CacheKeyError, match="cannot read"):
        ModuleCache(tmp_path / "cache", key_path=unreadable).load(WASM_A, CFG)


def test_unwritable_cache_and_key_only_cost_a_recompile(tmp_path: Path) -> None:
    """No place for the key or the entries (a file where their directory should be): compile every time."""
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"")
    cache = ModuleCache(blocker / "cache")
    assert answer(cache.load(WASM_A, CFG)) == 1 and answer(cache.load(WASM_A, CFG)) == 1
    assert (cache.hits, cache.misses, cache.rejected) == (0, 2, 0)


def test_key_readable_by_others_is_replaced(tmp_path):
    """A key with group/other bits may have leaked: a fresh private key replaces it and old entries are
    recompiled, never trusted under the leaked key."""
    key_path = tmp_path / "cache.key"
    first = read_or_create_key(key_path)
    os.chmod(key_path, 0o644)
    second = read_or_create_key(key_path)
    assert second is not None and second != first
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
