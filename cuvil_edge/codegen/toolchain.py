"""The kernel toolchain: clang (from the ``ziglang`` wheel) compiling generated C to wasm32 + SIMD128.

Host side only: a device never compiles C. Builds are cached by a hash of source and flags.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime_wasm.engine import TIER_RELAXED, TIER_SIMD128, TIERS

from ..errors import ToolchainError

#: ``-disable-lsr``: LLVM's loop strength reduction rewrites a loop's pointers without the no-wrap flag the
#: wasm backend needs to fold a constant offset into a load, so every ``VLOAD(p + 4)`` in a kernel loop
#: cost an ``i32.add`` of its own (Cranelift cannot fold it: wasm's 32-bit add wraps). Without it the
#: offsets fold: a 256x1024x512 f32 GEMM 4.2% faster, int8/int4 1.1-1.3%, the real-size models 0.5-4%,
#: same bits (2026-12-05, interleaved A/B in one process).
BASE_FLAGS = ("--target=wasm32-freestanding", "-msimd128", "-O3", "-nostdlib", "-ffreestanding",
              "-fno-math-errno", "-mllvm", "-disable-lsr", "-Wl,--no-entry", "-Wl,--export-dynamic",
              "-Wl,-z,stack-size=1048576", "-s", "-Wall", "-Wno-unused-function")


@dataclass(frozen=True)
class Target:
    """One module variant: the SIMD tier and the host family the kernels are tuned for."""

    tier: str = TIER_SIMD128  # or TIER_RELAXED
    family: str = "x86"  # or "arm"

    @property
    def name(self) -> str:
        return f"f32-{'wasmsimd' if self.tier == TIER_SIMD128 else 'wasmrelaxedsimd'}-{self.family}"

    def flags(self) -> list[str]:
        flags = list(BASE_FLAGS)
        if self.tier == TIER_RELAXED:
            flags += ["-mrelaxed-simd", "-DCUVIL_RELAXED=1"]
        if self.family == "arm":
            flags.append("-DCUVIL_ARM=1")
        return flags


ALL_TARGETS = tuple(Target(t, f) for t in TIERS for f in ("x86", "arm"))


def _cache_dir() -> Path:
    base = os.environ.get("CUVIL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cuvil-edge")
    return Path(base) / "build"


def compiler_command() -> list[str]:
    try:
        import ziglang  # noqa: F401
    except ImportError as exc:
        raise ToolchainError("the kernel toolchain is missing: pip install 'cuvil-edge[host]' "
                             "(it brings the ziglang wheel with clang for wasm32)") from exc
    return [sys.executable, "-m", "ziglang", "cc"]


def compile_c(source: str, target: Target, use_cache: bool = True, extra_flags: Sequence[str] = ()) -> bytes:
    """Compile one generated C translation unit to a wasm module (bytes); ``extra_flags``: the program's
    own (``CProgram.link_flags``: a threaded module's shared memory)."""
    flags = [*target.flags(), *extra_flags]
    key = hashlib.sha256(("\0".join(flags) + "\0" + source).encode()).hexdigest()
    cached = _cache_dir() / f"{key}.wasm"
    if use_cache and cached.exists():
        wasm = cached.read_bytes()
        check_stack(wasm, flags, target)
        return wasm
    with tempfile.TemporaryDirectory(prefix="cuvil-cc-") as tmp:
        src, out = Path(tmp) / "model.c", Path(tmp) / "model.wasm"
        src.write_text(source)
        cmd = [*compiler_command(), *flags, "-o", str(out), str(src)]
        env = dict(os.environ, ZIG_GLOBAL_CACHE_DIR=str(_cache_dir() / "zig"),
                   ZIG_LOCAL_CACHE_DIR=str(Path(tmp) / "zig-local"))
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0 or not out.exists():
            raise ToolchainError(f"kernel compiler failed for {target.name}:\n{proc.stderr[-4000:]}")
        wasm = out.read_bytes()
    check_stack(wasm, flags, target)
    if use_cache:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp_path = cached.with_suffix(f".tmp{os.getpid()}")
            tmp_path.write_bytes(wasm)
            os.replace(tmp_path, cached)
        except OSError:
            pass
    return wasm


#: a stack frame's allocation in clang's wasm prologue: ``global.get 0`` (``__stack_pointer``, LEB maybe
#: padded), ``i32.const N`` (signed LEB), ``i32.sub``
_FRAME = re.compile(rb"\x23(?:\x80)*\x00\x41([\x80-\xff]*[\x00-\x7f])\x6b")
_STACK_FLAG = "-Wl,-z,stack-size="


def _leb(data: bytes, at: int, signed: bool = False) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if signed and byte & 0x40:
                value -= 1 << shift
            return value, at


def _sections(wasm: bytes) -> dict[int, bytes]:
    out, at = {}, 8
    while at < len(wasm):
        size, body = _leb(wasm, at + 1)
        out.setdefault(wasm[at], wasm[body:body + size])
        at = body + size
    return out


def stack_bound(wasm: bytes) -> int:
    """Bytes of shadow stack the module can use at most: the sum of every function's frame (no call chain
    holds a function twice: generated code and kernels do not recurse)."""
    code = _sections(wasm).get(10, b"")
    return sum(max(0, _leb(m.group(1), 0, signed=True)[0]) for m in _FRAME.finditer(code))


def module_memory(wasm: bytes) -> int:
    """Initial bytes of the module's own or imported memory."""
    sections = _sections(wasm)
    if 5 in sections:  # memory section: count, flags, min
        _, at = _leb(sections[5], 1)  # count 1, then flags
        return _leb(sections[5], at)[0] * 65536
    data = sections[2]  # import section: the one import is the memory
    at = _leb(data, 0)[1]
    for _ in range(2):  # module and field names
        n, at = _leb(data, at)
        at += n
    return _leb(data, at + 2)[0] * 65536  # kind, flags, min


def check_stack(wasm: bytes, flags: Sequence[str], target: Target) -> None:
    """Refuse a module whose frames could overflow half its per-thread stack (the rest: safety margin)."""
    stack = int([f for f in flags if f.startswith(_STACK_FLAG)][-1].removeprefix(_STACK_FLAG))
    need = stack_bound(wasm)
    if 2 * need > stack:
        raise ToolchainError(f"{target.name}: the module's stack frames sum to {need} bytes, over half of "
                             f"its {stack}-byte stack per thread")
