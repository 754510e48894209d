"""ARM on paper (issue 40): our hot loops as Cranelift compiles them for aarch64, counted per iteration
next to XNNPACK's NEON microkernels for the same tiles, and the ratio to native a throughput model
predicts on a Cortex-A76 (Raspberry Pi 5) and a Cortex-A78AE (Jetson Orin).

Small models whose hot loop is one kernel are built for ``relaxed-arm`` and ``simd128-arm`` here, then
serialized by wasmtime (the runtime's own ``EngineConfig``) under the emulated arm64 host of
``.ci/arm_emulated.sh`` with ``QEMU_CPU=cortex-a76`` (Cranelift picks ISA features from the CPU it runs
on, and this wasmtime wheel cannot cross-compile), and the ELF artifact is disassembled with binutils'
``aarch64-linux-gnu-objdump``. Kernels are inlined into the model's functions, so loops are found, not
named: each backward branch closes an innermost loop, and the iteration counted is the cheapest path
from its head back to it (the path with no activation and no border work: a steady-state interior
iteration); the loop with the most multiply lanes is the kernel's, the most vector work without
multiplies a Winograd transform.

    python benchmarks/arm_disasm.py [--cpu cortex-a76] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARM_ROOT = Path(os.environ.get("CUVIL_ARM_ROOT") or Path.home() / ".cache/cuvil-edge/arm64")
OBJDUMP = "aarch64-linux-gnu-objdump"
BRANCHES = ("b", "cbz", "cbnz", "tbz", "tbnz")
_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(?:[0-9a-f]{8}\s+)?([a-z][\w.]*)\s*(.*?)\s*(?://.*)?$")
_FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")
_TARGET = re.compile(r"\b([0-9a-f]+) <")
_ARRANGEMENT = re.compile(r"v\d+\.(\d+)([bhsd])")
#: multiplies and the products one instruction makes: lanes of the destination, times 4 for dot products
MULTIPLIES = {"fmla", "fmls", "fmul", "fmadd", "sdot", "udot", "usdot", "smull", "smull2", "umull",
              "umull2", "smlal", "smlal2", "umlal", "umlal2", "mul", "mla"}
INTEGER_MULTIPLIES = {m for m in MULTIPLIES if not m.startswith("f")}


@dataclass(frozen=True)
class Insn:
    """One disassembled instruction: address, mnemonic, operands, the wasm function it is in."""

    addr: int
    mnem: str
    ops: str
    func: str

    @property
    def vector(self) -> bool:
        return "v" in self.ops and bool(re.search(r"\bv\d+\.", self.ops)) or self.mnem in ("movi", "dup")

    @property
    def memory(self) -> bool:
        return self.mnem.startswith(("ld", "st")) and "[" in self.ops

    @property
    def branch(self) -> bool:
        return self.mnem in BRANCHES or self.mnem.startswith("b.") or self.mnem in ("bl", "ret", "br")

    def target(self) -> int | None:
        found = _TARGET.search(self.ops) if self.branch else None
        return int(found[1], 16) if found else None

    def products(self) -> int:
        """Multiply-adds (products) this instruction computes; 0 for anything else."""
        if self.mnem not in MULTIPLIES:
            return 0
        found = _ARRANGEMENT.search(self.ops)
        if not found:
            return 1 if self.mnem in ("fmla", "fmls", "fmul", "fmadd") and self.ops[:1] == "s" else 0
        lanes = int(found[1])
        return lanes * 4 if self.mnem.endswith("dot") else lanes


@dataclass
class Counts:
    """What one loop iteration executes, by kind."""

    func: str = ""
    head: int = 0
    total: int = 0
    multiplies: int = 0
    products: int = 0
    vector_other: int = 0
    loads: int = 0
    stores: int = 0
    spills: int = 0
    moves: int = 0
    scalar: int = 0
    branches: int = 0
    mnemonics: dict[str, int] = field(default_factory=dict)

    def add(self, insn: Insn, integer: bool = False) -> None:
        self.total += 1
        self.mnemonics[insn.mnem] = self.mnemonics.get(insn.mnem, 0) + 1
        if insn.memory:
            self.loads += insn.mnem.startswith("ld")
            self.stores += insn.mnem.startswith("st")
            self.spills += "[sp" in insn.ops
        elif insn.branch:
            self.branches += 1
        elif insn.products() and (insn.mnem in INTEGER_MULTIPLIES or not integer):
            self.multiplies += 1
            self.products += insn.products()
        elif insn.mnem in ("mov", "fmov", "orr") and insn.vector and _is_copy(insn):
            self.moves += 1
        elif insn.vector:
            self.vector_other += 1
        else:
            self.scalar += 1

    @property
    def vector_ops(self) -> int:
        """Instructions the two ASIMD pipes issue (multiplies, other vector arithmetic, copies)."""
        return self.multiplies + self.vector_other + self.moves

    @property
    def per_multiply(self) -> float:
        return self.total / self.multiplies if self.multiplies else float("inf")


def _is_copy(insn: Insn) -> bool:
    regs = re.findall(r"v\d+", insn.ops)
    return insn.mnem == "mov" or (insn.mnem == "orr" and len(regs) == 3 and regs[1] == regs[2])


def parse_objdump(text: str) -> list[Insn]:
    """``objdump -d`` text into instructions, each tagged with its symbol (``wasm[0]::function[N]``)."""
    out, func = [], ""
    for line in text.splitlines():
        head = _FUNC.match(line)
        if head:
            func = head[1]
            continue
        m = _LINE.match(line)
        if m and m[2] not in ("udf", ".word", ".inst"):
            out.append(Insn(int(m[1], 16), m[2], m[3], func))
    return out


def innermost_loops(insns: list[Insn]) -> list[tuple[int, int]]:
    """(head index, latch index) of each backward branch whose range holds no other backward branch."""
    index = {i.addr: k for k, i in enumerate(insns)}
    loops = [(index[t], k) for k, i in enumerate(insns)
             if (t := i.target()) is not None and t <= i.addr and t in index and i.mnem != "bl"]
    return [(h, t) for h, t in loops if not any((h, t) != o and h <= o[0] and o[1] <= t for o in loops)]


def steady_path(insns: list[Insn], head: int, latch: int) -> list[Insn]:
    """The cheapest path from the loop head to its latch that stays inside the loop (forward branches
    only, inner loops excluded): one steady-state iteration with every optional branch (activation,
    border masking, tails) not taken."""
    index = {i.addr: k for k, i in enumerate(insns)}
    inf = 1 << 30
    cost = [inf] * (latch + 2)
    step: list[int | None] = [None] * (latch + 2)
    cost[latch] = 1
    for k in range(latch - 1, head - 1, -1):
        insn, options = insns[k], []
        t = insn.target()
        inside = t is not None and t in index and head < index[t] <= latch
        if insn.mnem == "ret":
            continue
        if insn.mnem == "br":  # a switch (the fused activation): its cheapest case, none
            options = _switch_cases(insns, k, latch, index)
        elif insn.mnem != "b":  # falls through unless an unconditional jump
            options.append(k + 1)
        if inside and insn.mnem != "bl":
            options.append(index[t])
        best = min(options, key=lambda n: cost[n], default=None)
        if best is not None and cost[best] < inf:
            cost[k], step[k] = cost[best] + 1, best
    path, k = [], head
    while k is not None and k <= latch and cost[k] < inf:
        path.append(insns[k])
        k = None if k == latch else step[k]
    return path


def _switch_cases(insns: list[Insn], k: int, latch: int, index: dict[int, int]) -> list[int]:
    """The case blocks of a jump table at ``k``: those between it and the block they all jump to (the
    target of the first unconditional forward jump after it)."""
    for m in range(k + 1, latch):
        t = insns[m].target()
        if insns[m].mnem == "b" and t is not None and t > insns[m].addr and t in index:
            join = index[t]
            return [k + 1] + [n + 1 for n in range(k + 1, join) if insns[n].mnem == "b" and n + 1 < join]
    return []


def count(path: list[Insn]) -> Counts:
    """An iteration's counts; in a loop with integer multiplies (int8 kernels) only those are the
    multiply-adds, its float multiplies being the dequantizing epilogue."""
    c = Counts(func=path[0].func if path else "", head=path[0].addr if path else 0)
    integer = any(i.mnem in INTEGER_MULTIPLIES and i.products() for i in path)
    for insn in path:
        c.add(insn, integer)
    return c


def loop_counts(insns: list[Insn]) -> list[Counts]:
    """Every innermost loop's steady iteration, most products first, then most vector work."""
    found = [count(steady_path(insns, h, t)) for h, t in innermost_loops(insns)]
    return sorted((c for c in found if c.total), key=lambda c: (-c.products, -c.vector_ops))


# --- the throughput model: per-iteration cycles from resource counts (steady state, no stalls) ------------

@dataclass(frozen=True)
class Core:
    """Published per-core issue limits (see benchmarks/results/arm_on_paper.md for the sources)."""

    name: str
    front: float     # instructions decoded (or delivered from the macro-op cache) per cycle
    vector: float    # ASIMD/FP pipes (V0, V1): FMLA, SDOT, and every other vector op
    memory: float    # load/store address pipes
    scalar: float    # integer ALUs
    branch: float    # branch units


CORES = (Core("Cortex-A76", 4, 2, 2, 3, 1), Core("Cortex-A78AE", 6, 2, 3, 4, 2))


def cycles(c: Counts, core: Core) -> float:
    """Cycles per iteration: the busiest of front end, vector pipes, memory pipes, ALUs, branches."""
    return max(c.total / core.front, c.vector_ops / core.vector, (c.loads + c.stores) / core.memory,
               c.scalar / core.scalar, c.branches / core.branch)


def xnn(kernel: str, products: int, multiplies: int, vector_other: int, loads: int, stores: int,
        scalar: int, branches: int) -> Counts:
    """XNNPACK's main loop as counted from its published source (see the results file for the loop)."""
    c = Counts(func=kernel, multiplies=multiplies, products=products, vector_other=vector_other,
               loads=loads, stores=stores, scalar=scalar, branches=branches)
    c.total = multiplies + vector_other + loads + stores + scalar + branches
    return c


#: per iteration of each main loop; multiplies are FMLA (4 products), SDOT (16), SMULL/SMLAL .8h (8)
XNNPACK = {
    "f32-gemm": xnn("f32-gemm 4x8 aarch64-neonfma-ld128", 128, 32, 0, 8, 0, 1, 1),
    "qs8-gemm": xnn("qs8-gemm 4x8c4 neondot (rndnu)", 256, 16, 0, 8, 0, 1, 1),
    "f32-dwconv": xnn("f32-dwconv 9p8c neonfma", 72, 18, 4, 38, 2, 1, 1),
    "qs8-dwconv": xnn("qs8-qc8w-dwconv 9p16c fp32 neonv8-mla8-ld128", 144, 18, 42, 26, 1, 1, 1),
}


# --- building and serializing the models ----------------------------------------------------------------

#: (label, precision, kind): kind names the layer; the kernel each builds is checked against KERNELS
CASES = (("f32-gemm", "fp32", "matmul"), ("qs8-gemm", "int8", "matmul"), ("f32-dwconv", "fp32", "dw"),
         ("qs8-dwconv", "int8", "dw"), ("f32-winograd", "fp32", "conv"), ("qs8-conv", "int8", "conv"))
KERNELS = {"f32-gemm": "f32-gemm-4x8", "qs8-gemm": "qs8-gemm-8x4", "f32-dwconv": "f32-dwconv-3x3s1",
           "qs8-dwconv": "qs8-dwconv-3x3s1", "f32-winograd": "f32-conv-winograd-f2x2-4x8",
           "qs8-conv": "qs8-conv-im2col-gemm-8x4"}


def case_model(kind: str):
    """A one-layer ONNX model whose hot loop is the kernel: MatMul 64x256x256, depthwise 3x3 over 32
    channels of 32x32, a 3x3 stride-1 conv 32 -> 32 channels on 16x16 (Winograd's minimum is 16)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if kind == "matmul":
        node, x, y, w = helper.make_node("MatMul", ["x", "W"], ["y"]), [64, 256], [64, 256], {"W": (256, 256)}
    else:
        group, hw = (32, 32) if kind == "dw" else (1, 16)
        node = helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[1, 1, 1, 1], group=group)
        x = y = [1, 32, hw, hw]
        w = {"W": (32, 32 // group, 3, 3), "B": (32,)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float32), k)
             for k, s in w.items()]
    graph = helper.make_graph([node], kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build(out: Path) -> dict[str, Path]:
    """Each case's model directory with its relaxed-arm and simd128-arm modules."""
    from cuvil_edge import CuvilModel, Target
    from cuvil_edge.oracle import random_inputs

    targets = [Target("relaxed", "arm"), Target("simd128", "arm")]
    dirs = {}
    for label, precision, kind in CASES:
        model = case_model(kind)
        extra = {"calibration": list(random_inputs(model, 4, seed=1))} if precision == "int8" else {}
        d = CuvilModel.load(model).optimize(precision, targets=targets, **extra).save(out / label)
        used = {n["kernel"] for n in json.loads((d / "model.json").read_text())["extra"]["nodes"]}
        if KERNELS[label] not in used:
            raise RuntimeError(f"{label}: built {sorted(used)}, not {KERNELS[label]}")
        dirs[label] = d
    return dirs


SERIALIZE = """
import json, sys, wasmtime
from runtime_wasm.engine import EngineConfig
for wasm, out, tier in json.loads(sys.argv[1]):
    engine = wasmtime.Engine(EngineConfig(tier=tier).build())
    with open(wasm, "rb") as f, open(out, "wb") as g:
        g.write(wasmtime.Module(engine, f.read()).serialize())
"""


def arm_env() -> dict[str, str] | None:
    """QEMU, SYSROOT, ARM_PYTHON, ARM_SITE of a finished ``.ci/arm_emulated.sh`` setup, else None."""
    env_file = ARM_ROOT / "env.sh"
    if not ((ARM_ROOT / "ready").is_file() and env_file.is_file()):
        return None
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    ok = all(Path(env.get(k, "")).exists() for k in ("QEMU", "SYSROOT", "ARM_PYTHON", "ARM_SITE"))
    return env if ok else None


def serialize(jobs: list[tuple[Path, Path, str]], cpu: str, env: dict[str, str]) -> None:
    """Compile each (wasm, artifact, tier) with wasmtime on the emulated ``cpu`` (one qemu process)."""
    child = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
             "PYTHONPATH": f"{REPO}:{env['ARM_SITE']}", "PYTHONNOUSERSITE": "1", "QEMU_CPU": cpu,
             "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    argv = [env["QEMU"], "-L", env["SYSROOT"], env["ARM_PYTHON"], "-c", SERIALIZE,
            json.dumps([[str(w), str(o), t] for w, o, t in jobs])]
    subprocess.run(argv, env=child, check=True, capture_output=True, text=True, timeout=1800)


def disassemble(artifact: Path) -> str:
    return subprocess.run([OBJDUMP, "-d", "--no-show-raw-insn", str(artifact)], check=True,
                          capture_output=True, text=True).stdout


# --- tables -----------------------------------------------------------------------------------------------

def row(label: str, c: Counts) -> str:
    ipm = f"{c.per_multiply:.2f}" if c.multiplies else "-"
    ipp = f"{c.total / c.products:.3f}" if c.products else "-"
    model = " | ".join(f"{cycles(c, core):.1f}" for core in CORES)
    return (f"| {label} | {c.total} | {c.multiplies} | {c.products} | {c.vector_other} "
            f"| {c.loads}/{c.stores} | {c.spills} | {c.moves} | {c.scalar} | {c.branches} | {ipm} | {ipp} "
            f"| {model} |")


HEADER = ("| loop | insns | mul insns | products | other vec | ld/st | spills | v-moves | scalar | branches "
          "| insns/mul | insns/product | " + " | ".join(f"cyc {c.name}" for c in CORES) + " |\n"
          + "|---" * (12 + len(CORES)) + "|")


def report(results: dict[str, dict[str, list[Counts]]], top: int) -> str:
    lines = [HEADER]
    for label, by_tier in results.items():
        for tier, loops in by_tier.items():
            hot = loops[:top] if not label.endswith("winograd") else _winograd_loops(loops)
            for c in hot:
                lines.append(row(f"{label} {tier} @{c.func.split('::')[-1]}+{c.head:#x}", c))
    lines += ["", HEADER]
    lines += [row(f"XNNPACK {c.func}", c) for c in XNNPACK.values()]
    lines += ["", "| kernel | " + " | ".join(f"ours/XNNPACK {c.name} (cycles per product)" for c in CORES)
              + " |", "|---" * (1 + len(CORES)) + "|"]
    for label, native in XNNPACK.items():
        if label not in results:
            continue
        ours = results[label]["relaxed"][0]
        ratio = [cycles(ours, core) / ours.products / (cycles(native, core) / native.products)
                 for core in CORES]
        lines.append(f"| {label} | " + " | ".join(f"{r:.2f}" for r in ratio) + " |")
    return "\n".join(lines)


def _winograd_loops(loops: list[Counts]) -> list[Counts]:
    """The GEMM loop (most products) and the two transforms (most vector work with no multiplies)."""
    transforms = [c for c in loops if not c.products and c.vector_ops >= 8]
    return loops[:1] + sorted(transforms, key=lambda c: -c.vector_ops)[:2]


def relaxed_dot_lowering(wasm: Path, env: dict[str, str], work: Path) -> dict[str, str]:
    """What i32x4.relaxed_dot_i8x16_i7x16_add_s becomes per emulated CPU: the qs8 loop's multiplies."""
    out = {}
    for cpu in ("cortex-a76", "cortex-a72"):
        artifact = work / f"dot-{cpu}.cwasm"
        serialize([(wasm, artifact, "relaxed")], cpu, env)
        hot = loop_counts(parse_objdump(disassemble(artifact)))[0]
        out[cpu] = ", ".join(f"{m} x{n}" for m, n in sorted(hot.mnemonics.items())
                             if m in MULTIPLIES or m in ("saddlp", "addp"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", default="cortex-a76", help="QEMU_CPU the artifacts are compiled on")
    ap.add_argument("--keep", type=Path, help="keep models, artifacts and disassembly here")
    ap.add_argument("--top", type=int, default=1, help="loops listed per module")
    args = ap.parse_args()
    env = arm_env()
    if env is None or shutil.which(OBJDUMP) is None:
        raise SystemExit(f"needs the emulated arm64 host ({ARM_ROOT}: bash .ci/arm_emulated.sh) and "
                         f"{OBJDUMP} (apt-get install binutils-aarch64-linux-gnu)")
    work = args.keep or Path(tempfile.mkdtemp(prefix="arm-disasm-"))
    work.mkdir(parents=True, exist_ok=True)
    dirs = build(work / "models")
    tiers = {"relaxed": "f32-wasmrelaxedsimd-arm.wasm", "simd128": "f32-wasmsimd-arm.wasm"}
    jobs = [(d / name, work / f"{label}-{tier}.cwasm", tier) for label, d in dirs.items()
            for tier, name in tiers.items()]
    serialize(jobs, args.cpu, env)
    results: dict[str, dict[str, list[Counts]]] = {}
    for _, artifact, tier in jobs:
        text = disassemble(artifact)
        if args.keep:
            artifact.with_suffix(".s").write_text(text)
        results.setdefault(artifact.stem.rsplit("-", 1)[0], {})[tier] = loop_counts(parse_objdump(text))
    from runtime_wasm.engine import wasmtime_version

    version = subprocess.run([OBJDUMP, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"wasmtime {wasmtime_version()}, QEMU_CPU={args.cpu}, {version}\n")
    print(report(results, args.top))
    print("\nrelaxed dot lowering:", relaxed_dot_lowering(dirs["qs8-gemm"] / tiers["relaxed"], env, work))


if __name__ == "__main__":
    main()
