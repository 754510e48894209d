"""Per-node timing: build a profiling module that exports every node, then time each one in wasmtime; conv
and GEMM nodes also get their achieved rate next to the ceiling of their dtype measured on this host and
tier, so the next bottleneck shows."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from runtime_wasm.spec import node_export

from .codegen.toolchain import Target
from .here import compile_here, host_target
from .ir.graph import Graph, Node
from .oracle import random_feeds

if TYPE_CHECKING:
    from .model import CuvilModel

#: dtype of the math of each conv/GEMM op (the weights' type: int4 runs the int8 dot loop on unpacked nibbles)
RATE_DTYPE = {"conv": "fp32", "conv_transpose": "fp32", "gemm": "fp32", "matmul": "fp32", "qconv": "int8",
              "qgemm": "int8", "qb4conv": "int4", "qb4gemm": "int4"}
#: The MatMul whose rate is a dtype's ceiling (M, N, K; ``bench.measured_ceilings``): compute-bound (134M
#: multiply-adds), weights within L2 at int8, big enough that tile edges and the call do not count. Timed
#: at each precision on the profiled target, it is what our own GEMM kernels reach on this host and tier
#: (single thread): on the 2026-12-05 Xeon box 42 GFLOP/s fp32, 98 GOPS int8, 108 int4 (relaxed) and
#: 32 / 63 / 53 (SIMD128).
CEILING_SHAPE = (256, 1024, 512)
#: share of its ceiling a conv/GEMM node should reach (issue 9): the summary line counts those that do
CEILING_SHARE = 0.8


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

    def rate_text(self, ceilings: Mapping[str, float]) -> str:
        """``31.2 GFLOP/s of 38 (82%)`` (achieved, the dtype's ceiling and the share), blank for other
        nodes."""
        if not self.ops:
            return ""
        dtype = RATE_DTYPE[self.op]
        unit = "GFLOP/s" if dtype == "fp32" else "GOPS"
        return f"{self.rate:.1f} {unit} of {ceilings[dtype]:.0f} ({100 * self.rate / ceilings[dtype]:.0f}%)"


def profile_table(rows: list[NodeTiming], top: int, repeat: int, tier: str,
                  ceilings: Mapping[str, float]) -> list[str]:
    """The slowest ``top`` nodes, one line each with their share of the total and, for conv/GEMM nodes,
    the achieved rate against the ceiling of their dtype (``bench.measured_ceilings``); then the total and how
    many conv/GEMM nodes reach CEILING_SHARE of it."""
    total = sum(r.median_us for r in rows) or 1.0
    out = [f"{'node':36s} {'op':14s} {'kernel':30s} {'output':26s} {'us':>9s} {'share':>6s}  rate (ceiling)"]
    for r in sorted(rows, key=lambda r: -r.median_us)[:top]:
        out.append(f"{r.name[:36]:36s} {r.op:14s} {r.kernel[:30]:30s} {r.output[:26]:26s} {r.median_us:9.1f} "
                   f"{100 * r.median_us / total:5.1f}%  {r.rate_text(ceilings)}".rstrip())
    out.append(f"total {total:.1f} us over {len(rows)} nodes (medians of {repeat}, tier {tier}); rate: "
               f"2 x multiply-adds / time, ceilings: a {'x'.join(map(str, CEILING_SHAPE))} MatMul here")
    rated = [r for r in rows if r.ops]
    if rated:
        good = [r for r in rated if r.rate >= CEILING_SHARE * ceilings[RATE_DTYPE[r.op]]]
        share = sum(r.median_us for r in good) / (sum(r.median_us for r in rated) or 1.0)
        out.append(f"conv/GEMM nodes at >= {100 * CEILING_SHARE:.0f}% of their ceiling: {len(good)} of "
                   f"{len(rated)}, {100 * share:.0f}% of their time; ceilings: " +
                   ", ".join(f"{d} {v:.1f}" for d, v in ceilings.items()))
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
