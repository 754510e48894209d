"""Per-node timing: build a profiling module that exports every node, then time each one in wasmtime; conv
and GEMM nodes also get their achieved rate next to the measured ceiling of their dtype, so the next
bottleneck shows."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from runtime_wasm.spec import node_export

from .codegen.toolchain import Target
from .host import compile_here, host_target
from .ir.graph import Graph, Node
from .oracle import random_feeds

if TYPE_CHECKING:
    from .model import CuvilModel

#: dtype of the math of each conv/GEMM op (the weights' type: int4 runs the int8 dot loop on unpacked nibbles)
RATE_DTYPE = {"conv": "fp32", "conv_transpose": "fp32", "gemm": "fp32", "matmul": "fp32", "qconv": "int8",
              "qgemm": "int8", "qb4conv": "int4", "qb4gemm": "int4"}
#: Single-thread GEMM ceilings under wasmtime (Cranelift) on the 2-core Zen 4 reference box,
#: /work/shared/MEASUREMENTS.md (2026-11-30): f32 GEMM 1024^3 with the 4x8 tile and f32x4.relaxed_madd
#: (38 GFLOP/s); int8 GEMM with i32x4.relaxed_dot_i8x16_i7x16_add_s (84-100 GOPS, the low end); int4
#: weights are unpacked to int8 panels and run the same dot loop, so they share its ceiling.
CEILING = {"fp32": 38.0, "int8": 84.0, "int4": 84.0}


def node_ops(node: Node) -> int:
    """2 x multiply-adds of a conv/GEMM node from its shapes (0 for other ops): each output element of a
    convolution sums C/G x kernel taps (its weights' size over M), of a GEMM the input's last axis (K);
    ConvTranspose scatters each input element through M/G x kernel taps (weights [C, M/G, k...])."""
    if node.op not in RATE_DTYPE:
        return 0
    x, w, y = node.inputs[0].type, node.inputs[1].type, node.outputs[0].type
    if node.op == "conv_transpose":
        return 2 * x.size * (w.size // w.shape[0])
    if node.op in ("conv", "qconv", "qb4conv"):
        return 2 * y.size * (w.size // w.shape[0])
    return 2 * y.size * x.shape[-1]


@dataclass(frozen=True)
class NodeTiming:
    name: str
    op: str
    kernel: str
    output: str
    median_us: float
    ops: int = 0  #: 2 x multiply-adds (conv/GEMM nodes), else 0

    @property
    def rate(self) -> float:
        """Achieved GFLOP/s (fp32) or GOPS (int8/int4): 0 for nodes that are not conv/GEMM."""
        return self.ops / self.median_us / 1e3 if self.ops and self.median_us > 0 else 0.0

    def rate_text(self) -> str:
        """``31.2 GFLOP/s of 38`` (achieved and the dtype's ceiling), blank for other nodes."""
        if not self.ops:
            return ""
        dtype = RATE_DTYPE[self.op]
        unit = "GFLOP/s" if dtype == "fp32" else "GOPS"
        return f"{self.rate:.1f} {unit} of {CEILING[dtype]:.0f}"


def profile_table(rows: list[NodeTiming], top: int, repeat: int, tier: str) -> list[str]:
    """The slowest ``top`` nodes, one line each with their share of the total and, for conv/GEMM nodes,
    the achieved rate against the ceiling of their dtype; then the total."""
    total = sum(r.median_us for r in rows) or 1.0
    out = [f"{'node':36s} {'op':14s} {'kernel':30s} {'output':26s} {'us':>9s} {'share':>6s}  rate (ceiling)"]
    for r in sorted(rows, key=lambda r: -r.median_us)[:top]:
        out.append(f"{r.name[:36]:36s} {r.op:14s} {r.kernel[:30]:30s} {r.output[:26]:26s} {r.median_us:9.1f} "
                   f"{100 * r.median_us / total:5.1f}%  {r.rate_text()}".rstrip())
    out.append(f"total {total:.1f} us over {len(rows)} nodes (medians of {repeat}, tier {tier}); rate: "
               f"2 x multiply-adds / time, ceilings: single-thread GEMM")
    return out


def profile_model(model: CuvilModel, target: Target | None = None, repeat: int = 20,
                  seed: int = 0) -> list[NodeTiming]:
    """``profile_graph`` of the graph the model was compiled from (the quantized one after
    ``optimize(precision=...)``)."""
    target = target or host_target()
    if model.compiled is None:
        model.optimize(targets=[target])
    assert model.compiled is not None
    return profile_graph(model.compiled.graph, target, repeat, seed)


def profile_graph(graph: Graph, target: Target | None = None, repeat: int = 20,
                  seed: int = 0) -> list[NodeTiming]:
    """Median time of each node of ``graph`` (run in order, on seeded inputs) in a profiling module built
    for ``target`` (default: ``host_target()``)."""
    compiled, inst = compile_here(graph, target or host_target(), profile=True)
    nodes = {n.name: n for n in graph.nodes}
    with inst:
        inst.set_inputs(random_feeds(compiled.spec.inputs, seed))
        calls = [inst.export_function(node_export(i)) for i in range(len(compiled.program.profiled_nodes))]
        samples: list[list[float]] = [[] for _ in calls]
        for _ in range(repeat + 1):  # the first pass warms caches and is dropped
            for i, call in enumerate(calls):
                t = time.perf_counter()
                call()
                samples[i].append(time.perf_counter() - t)
    out = []
    for name, times in zip(compiled.program.profiled_nodes, samples):
        n = nodes[name]
        out.append(NodeTiming(name, n.op, compiled.program.kernels_used.get(name, "-"),
                              str(n.outputs[0].type), float(np.median(times[1:])) * 1e6, node_ops(n)))
    return out
