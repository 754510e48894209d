"""The kernel toolchain: clang (from the ``ziglang`` wheel) compiling generated C to wasm32 + SIMD128.

Host side only: a device never compiles C. Builds are cached by a hash of source and flags.
"""

from __future__ import annotations

import hashlib
import os
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
        return cached.read_bytes()
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
    if use_cache:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp_path = cached.with_suffix(f".tmp{os.getpid()}")
            tmp_path.write_bytes(wasm)
            os.replace(tmp_path, cached)
        except OSError:
            pass
    return wasm
