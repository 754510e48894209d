"""benchmarks/arm_disasm.py (issue 40, ARM on paper): the loop finder and counter on a fixed aarch64
disassembly, and on a small wasm module compiled by wasmtime under the emulated arm64 host."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import wasmtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import arm_disasm as ad  # noqa: E402

#: the relaxed-arm f32-gemm 4x8 k-loop as Cranelift emitted it (objdump form), plus a switch in a loop
SAMPLE = """
0000000000001420 <wasm[0]::function[15]>:
    1454:\tadd\tw1, w4, w7
    1458:\tldr\tq0, [x0, w1, uxtw]
    145c:\tadd\tx1, x0, w5, uxtw
    1460:\tldr\tq1, [x1, #16]
    1464:\tldr\tq2, [x0, w5, uxtw]
    1468:\tadd\tw1, w7, #0x10
    146c:\tadd\tw5, w5, #0x20
    1470:\tfmla\tv24.4s, v1.4s, v0.s[3]
    1474:\tfmla\tv28.4s, v2.4s, v0.s[3]
    1478:\tfmla\tv27.4s, v1.4s, v0.s[2]
    147c:\tfmla\tv26.4s, v2.4s, v0.s[2]
    1480:\tfmla\tv25.4s, v1.4s, v0.s[1]
    1484:\tfmla\tv23.4s, v2.4s, v0.s[1]
    1488:\tfmla\tv22.4s, v1.4s, v0.s[0]
    148c:\tfmla\tv21.4s, v2.4s, v0.s[0]
    1490:\tcmp\tw7, #0xff0
    1494:\tb.cs\t14a0 <wasm[0]::function[15]+0x80>  // b.hs, b.nlast
    1498:\tmov\tx7, x1
    149c:\tb\t1454 <wasm[0]::function[15]+0x34>
    14a0:\tstr\tq24, [x1, #112]
    14a4:\tret

0000000000002000 <wasm[0]::function[16]>:
    2000:\tldr\tq0, [x0]
    2004:\tsdot\tv1.4s, v0.16b, v2.16b
    2008:\tbr\tx12
    200c:\tb\t2024 <wasm[0]::function[16]+0x24>
    2010:\tfmax\tv3.4s, v3.4s, v4.4s
    2014:\tfmul\tv3.4s, v3.4s, v5.4s
    2018:\tfadd\tv3.4s, v3.4s, v5.4s
    201c:\tfmla\tv3.4s, v3.4s, v5.4s
    2020:\tb\t2024 <wasm[0]::function[16]+0x24>
    2024:\tstur\tq3, [sp, #16]
    2028:\tsubs\tw1, w1, #0x1
    202c:\tb.ne\t2000 <wasm[0]::function[16]>
"""


def test_the_gemm_loop_is_found_and_counted_per_iteration():
    insns = ad.parse_objdump(SAMPLE)
    loops = ad.loop_counts(insns)
    assert len(loops) == 2
    gemm = next(c for c in loops if c.func.endswith("[15]"))
    assert (gemm.total, gemm.multiplies, gemm.products) == (19, 8, 32)
    assert (gemm.loads, gemm.stores, gemm.spills, gemm.branches, gemm.scalar) == (3, 0, 0, 2, 6)
    assert gemm.per_multiply == pytest.approx(19 / 8)
    # resource model: the A76's 4-wide front end binds (19 / 4), the A78AE's two FMA pipes (8 / 2)
    assert [ad.cycles(gemm, core) for core in ad.CORES] == pytest.approx([4.75, 4.0])


def test_a_switch_takes_its_cheapest_case_and_int8_loops_count_only_integer_products():
    loop = next(c for c in ad.loop_counts(ad.parse_objdump(SAMPLE)) if c.func.endswith("[16]"))
    # ldr, sdot, br, the empty case's jump, then the join: spill store, subs, b.ne
    assert loop.total == 7 and loop.mnemonics.get("fmla") is None
    assert (loop.multiplies, loop.products, loop.spills) == (1, 16, 1)


def test_xnnpack_references_add_up():
    gemm = ad.XNNPACK["f32-gemm"]
    assert (gemm.total, gemm.products) == (42, 128)
    assert [ad.cycles(gemm, core) for core in ad.CORES] == pytest.approx([16.0, 16.0])


WAT = """
(module (memory 1)
  (func (export "f") (param i32) (result v128) (local v128 v128)
    (loop $l
      (local.set 1 (f32x4.relaxed_madd (v128.load (local.get 0)) (v128.load offset=16 (local.get 0))
                                       (local.get 1)))
      (local.set 2 (i32x4.relaxed_dot_i8x16_i7x16_add_s (v128.load offset=32 (local.get 0))
                                                        (v128.load offset=48 (local.get 0)) (local.get 2)))
      (local.set 0 (i32.sub (local.get 0) (i32.const 64)))
      (br_if $l (local.get 0)))
    (v128.xor (local.get 1) (local.get 2))))
"""


@pytest.mark.integration
def test_relaxed_madd_and_dot_become_fmla_and_sdot_on_an_emulated_cortex_a76(tmp_path):
    env = ad.arm_env()
    if env is None:
        pytest.skip(f"no arm64 emulation under {ad.ARM_ROOT}: run `bash .ci/arm_emulated.sh`")
    if shutil.which(ad.OBJDUMP) is None:
        pytest.skip(f"no {ad.OBJDUMP}: apt-get install binutils-aarch64-linux-gnu")
    wasm, artifact = tmp_path / "m.wasm", tmp_path / "m.cwasm"
    wasm.write_bytes(wasmtime.wat2wasm(WAT))
    ad.serialize([(wasm, artifact, "relaxed")], "cortex-a76", env)
    (loop,) = [c for c in ad.loop_counts(ad.parse_objdump(ad.disassemble(artifact))) if c.multiplies]
    assert loop.mnemonics.get("fmla") == 1 and loop.mnemonics.get("sdot") == 1, loop.mnemonics
    assert loop.loads == 4 and loop.spills == 0
