"""Lower a planned IR graph to one C translation unit: kernels, weight/arena regions and ``run()``."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from runtime_wasm.spec import (
    EXPORT_ARENA,
    EXPORT_STACK_POINTER,
    EXPORT_STACKS,
    EXPORT_THREAD_STRIDE,
    EXPORT_WEIGHTS,
    MAX_THREADS,
    StateSpec,
    node_export,
)

from ..ir.graph import Graph, Node, Value
from ..ops import get as get_op
from ..ops.common import CTYPES, RowSplit
from ..ops.registry import node_code
from .kernels import kernel_source
from .kernels.table import family_order, resolve
from .memplan import ALIGN, MemoryPlan, graph_states, plan_memory

#: bytes after each region that kernels may over-read with full-vector loads (never used as data)
GUARD = 64
#: threads a module is built for unless told otherwise: edge boards have 4 cores (Raspberry Pi 4/5); the
#: memory of the threads past the first is laid out above the arena, so a device running fewer gives less
DEFAULT_THREADS = 4
#: shadow-stack bytes of each thread of a threaded module (the first thread's is the linker's
#: ``-z stack-size``): the sum of every stack frame of the zoo's modules is under 2 KiB (a generated
#: function's frame is its kernels' few locals), and ``toolchain.compile_c`` refuses a module whose frames
#: could sum past half of it. Overflow traps: the first stack lies at address 0 (below it wraps out of
#: bounds) and each other's bottom holds a canary the thread checks after its share of a run
STACK_BYTES = 64 << 10
#: bytes between the first stack and thread 0's pack buffers for the linker's static data: a few hundred
#: bytes, the threads' counters; had it more, the module's weights getter reports 0, which the runtime
#: refuses
STATIC_RESERVE = 64 << 10
WASM_PAGE = 65536
_PACK_BUFFER = re.compile(r"^#define \w+_APACK_FLOATS (\d+)$", re.M)

@dataclass
class EmitContext:
    """What an op's ``emit`` sees: addresses of values, packed weights, scratch, kernel choice."""

    graph: Graph
    plan: MemoryPlan
    weights: list[bytes] = field(default_factory=list)
    weights_size: int = 0
    _wkeys: dict[bytes, int] = field(default_factory=dict)
    kernels_used: dict[str, str] = field(default_factory=dict)  # node name -> kernel name
    node: Node | None = None
    threads: int = 1
    #: nodes whose code every thread runs (each its share, by ``tid`` of ``nt``): see ``parallel``
    parallel_nodes: list[str] = field(default_factory=list)
    #: how each split node shares its rows, when it says (``split_rows``); None: unknown, any bytes
    row_splits: dict[str, RowSplit | None] = field(default_factory=dict)
    private_scratch: set[str] = field(default_factory=set)  # nodes with a scratch region per thread
    #: while set, where ``weight`` puts packed constants instead (``f16w``: the blob holds them as fp16)
    weight_store: Callable[[np.ndarray, str], str] | None = None

    def ptr(self, v: Value, ctype: str | None = None) -> str:
        """C pointer expression to ``v``'s data (arena or weights)."""
        ct = ctype or CTYPES[v.type.dtype]
        if v.is_const:
            return f"(({ct}*)(W + {self.const_offset(v.const)}))"
        return f"(({ct}*)(A + {self.plan.offset(v)}))"

    def const_offset(self, array: np.ndarray) -> int:
        """Place an array in the weights blob (once per distinct content) and return its offset."""
        data = np.ascontiguousarray(array).tobytes()
        k = hashlib.sha256(data).digest() + str(array.dtype).encode()
        off = self._wkeys.get(k)
        if off is None:
            off = self.weights_size
            pad = (-len(data)) % ALIGN
            self.weights.append(data + b"\0" * pad)
            self.weights_size += len(data) + pad
            self._wkeys[k] = off
        return off

    def weight(self, array: np.ndarray, ctype: str = "float") -> str:
        """Pointer expression to a packed constant made by the emitter (e.g. transposed weights)."""
        if self.weight_store is not None:
            return self.weight_store(array, ctype)
        return f"(({ctype}*)(W + {self.const_offset(array)}))"

    def scratch(self, ctype: str = "float", shared: bool = False) -> str:
        """The node's scratch area. In a threaded module each thread past the first gets a region of its
        own, unless ``shared``: then all threads see the planned area (the kernel splits its use)."""
        assert self.node is not None
        off = self.plan.scratch[id(self.node)]
        if self.threads == 1 or shared:
            return f"(({ctype}*)(A + {off}))"
        self.private_scratch.add(self.node.name)
        return f"(({ctype}*)(tid ? TS + (size_t)(tid - 1) * TS_STRIDE : A + {off}))"

    def parallel(self, rows: RowSplit | None = None) -> None:
        """The current node's code splits its work by ``tid`` (0 .. ``nt`` - 1, C locals in scope): every
        thread runs it, with a barrier before and after wherever another thread's bytes meet it (see
        ``_Epoch``; ``rows`` says which bytes each thread touches, None: any). Each output
        element must be computed by the same code whatever ``nt`` is (split on whole kernel tiles), so
        threaded outputs are bit-identical. Nodes that never call this run on thread 0 alone."""
        assert self.node is not None
        if self.threads == 1:
            return
        name = self.node.name
        if name not in self.parallel_nodes:
            self.parallel_nodes.append(name)
            self.row_splits[name] = rows
        else:
            old = self.row_splits[name]
            self.row_splits[name] = old.merge(rows) if old is not None else None

    def use_kernel(self, name: str) -> None:
        """Record the kernel (by grammar name) the current node runs, for ``inspect`` and tests; a name
        outside ``kernels/table.py`` is refused here, where the op that chose it is on the stack."""
        assert self.node is not None
        resolve(name)
        self.kernels_used[self.node.name] = name


@dataclass
class CProgram:
    source: str
    weights: bytes
    arena_size: int
    plan: MemoryPlan
    kernels_used: dict[str, str]
    profiled_nodes: list[str] = field(default_factory=list)  # export cuvil_node_<i> runs node i
    threads: int = 1  # most threads the module runs (1: a plain module with its own memory)
    parallel_nodes: list[str] = field(default_factory=list)
    thread_scratch: int = 0  # scratch bytes of each thread past the first (the parallel nodes' largest)
    states: tuple[StateSpec, ...] = ()  # persistent tensors: where each lives and its initial value
    layout: SharedLayout | None = None  # a threaded module's regions

    def link_flags(self) -> list[str]:
        """A threaded module imports a shared memory: initial what one thread needs, max what all do (the
        runtime makes it the size of the threads it runs; the module never grows it)."""
        if self.threads == 1:
            return []
        at = self.layout
        assert at is not None
        return ["-matomics", "-mbulk-memory", "-Wl,--shared-memory", "-Wl,--import-memory",
                f"-Wl,-z,stack-size={STACK_BYTES}", f"-Wl,--initial-memory={at.memory(1)}",
                f"-Wl,--max-memory={at.memory(self.threads)}", f"-Wl,--export={EXPORT_STACK_POINTER}"]

    def memory_table(self) -> tuple[int, ...]:
        """Bytes of linear memory the module needs running on 1, 2, .. ``threads`` threads (threaded
        modules; a plain module's is its own memory section: ``toolchain.module_memory``)."""
        assert self.layout is not None
        return tuple(self.layout.memory(k) for k in range(1, self.threads + 1))


@dataclass(frozen=True)
class SharedLayout:
    """Where a threaded module's regions lie: at fixed addresses, not in ``.bss``. wasm-ld zero-fills the
    ``.bss`` of an imported shared memory in the start function (it cannot know the memory is fresh), which
    touched every page of the weights before they were read in: 65 ms of instantiation for a 180 MB
    encoder. From address 0: the first stack, the static data (``STATIC_RESERVE``), thread 0's pack buffers
    (``_pack_bytes``: a kernel family's per-thread buffer, e.g. f32-gemm's packed A rows), the weights, the
    arena, then one region per thread past the first (``stride`` bytes: a canary word, its stack, its
    scratch, its pack buffers), so the memory for k threads ends at the (k-1)-th region and holds k pack
    buffers, not the built maximum."""

    weights: int  # address of the weights region (its size plus GUARD)
    arena: int  # address of the arena (its size plus GUARD)
    threads: int  # address of thread 1's region
    stride: int  # bytes of each thread's region
    scratch: int  # offset of the scratch in a region (after its canary and stack)
    pack0: int  # address of thread 0's pack buffers
    pack: int  # offset of the pack buffers in a region (after its scratch)

    @staticmethod
    def of(weights: int, arena: int, scratch: int, pack: int) -> SharedLayout:
        """``scratch``: each thread's scratch bytes past the first; ``pack``: each thread's pack buffers."""
        pack = -(-pack // ALIGN) * ALIGN
        p0 = STACK_BYTES + STATIC_RESERVE
        w = p0 + pack
        a = w + -(-(weights + GUARD) // ALIGN) * ALIGN
        base = a + -(-(arena + GUARD) // ALIGN) * ALIGN
        at_pack = ALIGN + STACK_BYTES + -(-scratch // ALIGN) * ALIGN
        return SharedLayout(w, a, base, at_pack + pack, ALIGN + STACK_BYTES, p0, at_pack)

    def memory(self, threads: int) -> int:
        """Bytes of memory (whole pages) for running on ``threads`` threads."""
        return -(-(self.threads + (threads - 1) * self.stride) // WASM_PAGE) * WASM_PAGE


def emit_c(graph: Graph, progress: Callable[[str], None] | None = None, profile: bool = False,
           threads: int = DEFAULT_THREADS) -> CProgram:
    """``threads``: most threads the module runs (the runtime picks how many, up to it); 1 builds a plain
    module. ``profile=True`` also exports each node as ``cuvil_node_<i>`` so a host can time nodes one by
    one (the profiling build only, single-threaded: shipped modules export nothing but run, the address
    getters and the thread entry points)."""
    if not 1 <= threads <= MAX_THREADS:
        raise ValueError(f"threads must be 1..{MAX_THREADS}, got {threads}")
    threads = 1 if profile else threads
    plan = plan_memory(graph)
    ctx = EmitContext(graph, plan, threads=threads)
    body: list[str] = []
    node_funcs: list[str] = []
    profiled: list[str] = []
    scratch_bytes = 0
    epoch = _Epoch()
    # loop/if bodies' nodes need their kernel families too
    families = family_order(fam for n in graph.walk() for fam in get_op(n.op).kernels)
    for n in graph.nodes:
        op = get_op(n.op)
        code = node_code(n, ctx)
        if code is None:
            continue
        comment = f"  /* {n.name}: {n.op} -> {', '.join(str(o.type) for o in n.outputs)} */"
        lines = ["  " + line for line in code.strip().splitlines()]
        if profile:
            fn = node_export(len(profiled))
            head = f'EXPORT("{fn}") __attribute__((noinline)) void {fn}(void) {{'
            node_funcs += [head, "  const int tid = 0, nt = 1; (void)tid; (void)nt;", comment, *lines, "}"]
            body.append(f"  {fn}();")
            profiled.append(n.name)
        elif threads == 1:
            body += [comment, *lines]
        else:
            split = n.name in ctx.parallel_nodes
            body += epoch.enter(_accesses(n, ctx, split))
            if split:
                body += [comment, *lines]
                if n.name in ctx.private_scratch:
                    scratch_bytes = max(scratch_bytes, op.scratch(n))
            else:
                # one thread: nt is 1 inside, so kernels that split or wait do neither
                body += [comment, "  if (tid == 0) {", "    const int nt = 1; (void)nt;",
                         *("  " + line for line in lines), "  }"]
    states, copies = _state_updates(graph, ctx)
    if copies:  # the run's last step, on one thread once every node is done with the states' bytes
        if threads > 1:
            body += epoch.enter([_access(ctx, graph.inputs[s.input], True, True) for s in graph_states(graph)]
                                + [_access(ctx, graph.outputs[s.output], False, True)
                                   for s in graph_states(graph)])
        body += ["  /* state: the new values replace the old */",
                 *(["  if (tid == 0) {", *("  " + c for c in copies), "  }"] if threads > 1 else copies)]
    ctx.node = None
    weights = b"".join(ctx.weights)
    arena = plan.arena_size
    scratch_bytes = -(-scratch_bytes // ALIGN) * ALIGN
    layout = SharedLayout.of(len(weights), arena, scratch_bytes, _pack_bytes(families)) \
        if threads > 1 else None
    parts = [
        f"/* generated by cuvil-edge from model {graph.name!r}; do not edit */",
        f"#define CUVIL_MAX_THREADS {threads}",
        *(_thread_defines(layout) if layout is not None else []),
        *(kernel_source(f) for f in families),
        *_regions(len(weights), arena, layout),
        *(_thread_exports(layout) if layout is not None else []),
        f'EXPORT("{EXPORT_ARENA}") unsigned cuvil_arena(void) {{ return (unsigned)(uintptr_t)A; }}',
        *node_funcs,
        "static inline __attribute__((always_inline)) void cuvil_body(const int tid) {",
        "  const int nt = CUVIL_NT; (void)nt;",
        *(["  if (tid) *CUVIL_CANARY(tid) = CUVIL_CANARY_WORD;"] if threads > 1 else []),
        *body,
        *(["  if (tid && *CUVIL_CANARY(tid) != CUVIL_CANARY_WORD) __builtin_trap();  /* stack overflow */"]
          if threads > 1 else []),
        "}",
        "CUVIL_ENTRY_POINTS",
        "",
    ]
    return CProgram("\n".join(parts), weights, arena, plan, ctx.kernels_used, profiled, threads,
                    ctx.parallel_nodes, scratch_bytes, states, layout)


def _thread_defines(at: SharedLayout) -> list[str]:
    """Thread t's region (t >= 1) at ``at.threads + (t - 1) * at.stride``: its canary word at the bottom,
    its stack above (growing down to the canary), its scratch ``TS``, its pack buffers last
    (``CUVIL_APACK``: thread 0's lie below the weights). Defined before the kernels, which use them."""
    region = f"({at.threads}u + (unsigned)((tid) - 1) * {at.stride}u)"
    return [
        f"#define CUVIL_REGION(tid) {region}",
        f"#define TS ((unsigned char *)(uintptr_t){at.threads + at.scratch}u)",
        f"#define TS_STRIDE {at.stride}",
        f"#define CUVIL_APACK(tid) ((float *)(uintptr_t)((tid) ? CUVIL_REGION(tid) + {at.pack}u : "
        f"{at.pack0}u))",
        "#define CUVIL_CANARY(tid) ((volatile uint32_t *)(uintptr_t)CUVIL_REGION(tid))",
        "#define CUVIL_CANARY_WORD 0x5AC4C0DEu",
    ]


def _thread_exports(at: SharedLayout) -> list[str]:
    """The stacks' base and the regions' stride, for the runtime, which sets each thread's stack pointer to
    its stack's top."""
    return [
        f'EXPORT("{EXPORT_STACKS}") unsigned cuvil_stacks_base(void) {{ '
        f'return {at.threads - at.stride + at.scratch}u; }}',
        f'EXPORT("{EXPORT_THREAD_STRIDE}") unsigned cuvil_thread_stride(void) {{ return {at.stride}u; }}',
    ]


def _pack_bytes(families: list[str]) -> int:
    """Each thread's pack buffers: the ``#define <NAME>_APACK_FLOATS n`` a kernel family declares for the
    buffer it takes through ``CUVIL_APACK(tid)``."""
    return 4 * sum(int(n) for f in families for n in _PACK_BUFFER.findall(kernel_source(f)))


def _regions(weights: int, arena: int, at: SharedLayout | None) -> list[str]:
    """The weights ``W`` and arena ``A`` and their getters: static arrays in a plain module, fixed
    addresses in a threaded one (``SharedLayout``), whose getter reports 0 if the static data below
    reached them (the runtime refuses such a module instead of running it over its own tables)."""
    getter = f'EXPORT("{EXPORT_WEIGHTS}") unsigned cuvil_weights(void) {{ return '
    if at is None:
        return [f"static unsigned char W[{weights + GUARD}] __attribute__((aligned({ALIGN})));",
                f"static unsigned char A[{arena + GUARD}] __attribute__((aligned({ALIGN})));",
                getter + "(unsigned)(uintptr_t)W; }"]
    return [f"static unsigned char *const W = (unsigned char *)(uintptr_t){at.weights}u;",
            f"static unsigned char *const A = (unsigned char *)(uintptr_t){at.arena}u;",
            "extern unsigned char __heap_base;",
            getter + "(uintptr_t)&__heap_base <= (uintptr_t)W ? (unsigned)(uintptr_t)W : 0u; }"]


@dataclass(frozen=True)
class _Access:
    """Arena bytes [lo, hi) a node reads or writes, on thread 0 alone (``serial``) or on every thread.
    With ``rows`` (rows, unit, stride) each thread touches only its share of the rows (``cuvil_split``),
    row r being bytes [lo + r * stride, lo + (r + 1) * stride)."""

    lo: int
    hi: int
    write: bool
    serial: bool
    rows: tuple[int, int, int] | None = None

    def races(self, other: _Access) -> bool:
        """Whether, with no barrier between, two threads may touch one byte of both, one of them writing.
        Equal row partitions of the same bytes give each thread the same rows: it meets only itself."""
        if not (self.write or other.write) or self.hi <= other.lo or other.hi <= self.lo:
            return False
        if self.serial and other.serial:
            return False
        return self.rows is None or (self.rows, self.lo) != (other.rows, other.lo)


@dataclass
class _Epoch:
    """What the threads touched since the last barrier: a node gets a barrier before it only when one of
    its accesses races with one of these (serial ones kept apart: they never race each other)."""

    serial: list[_Access] = field(default_factory=list)
    split: list[_Access] = field(default_factory=list)

    def enter(self, accesses: list[_Access]) -> list[str]:
        """The barrier a node with these accesses needs before it (none or one), then its accesses."""
        barrier = any(a.races(e) for a in accesses
                      for e in (self.split if a.serial else self.split + self.serial))
        if barrier:
            self.serial, self.split = [], []
        for a in accesses:
            (self.serial if a.serial else self.split).append(a)
        return ["  cuvil_barrier();"] if barrier else []


def _access(ctx: EmitContext, v: Value, write: bool, serial: bool, rows: RowSplit | None = None) -> _Access:
    lo = ctx.plan.offset(v)
    by_row = rows is not None and id(v) in rows.by_row and v.type.nbytes % rows.rows == 0
    return _Access(lo, lo + v.type.nbytes, write, serial,
                   (rows.rows, rows.unit, v.type.nbytes // rows.rows) if by_row else None)


def _accesses(n: Node, ctx: EmitContext, split: bool) -> list[_Access]:
    """The arena bytes a node touches: its inputs, outputs and scratch (its row split's share for the
    values it names), or the whole arena for a node with bodies (their values live in its own part)."""
    if n.subgraphs:
        return [_Access(0, ctx.plan.arena_size, True, not split)]
    rows = ctx.row_splits.get(n.name) if split else None
    out = [_access(ctx, v, w, not split, rows) for vs, w in ((n.inputs, False), (n.outputs, True))
           for v in vs if not v.is_const and v.type.nbytes]
    if id(n) in ctx.plan.scratch:
        lo = ctx.plan.scratch[id(n)]
        out.append(_Access(lo, lo + get_op(n.op).scratch(n), True, not split))
    return out


def _state_updates(graph: Graph, ctx: EmitContext) -> tuple[tuple[StateSpec, ...], list[str]]:
    """Each state's spec (its initial value placed in the weights) and the copy of its new value over the
    old. The copy runs after every node, so no node of this run reads a half-updated state."""
    specs, copies = [], []
    for s in graph_states(graph):
        old, new = graph.inputs[s.input], graph.outputs[s.output]
        init = np.ascontiguousarray(s.init, dtype=old.type.dtype).reshape(old.type.shape)
        specs.append(StateSpec(s.name, old.type.dtype, old.type.shape, ctx.plan.offset(old),
                               ctx.const_offset(init)))
        copies.append(f"  memcpy(A + {ctx.plan.offset(old)}, {ctx.ptr(new, 'unsigned char')}, "
                      f"{old.type.nbytes});")
    return tuple(specs), copies
