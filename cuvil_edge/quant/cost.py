"""Kernel cost in the plan: a layer goes int8 only where its int8 kernel is not slower than its fp32 one.

Accuracy is not the only price of int8. Some int8 kernels lose to their fp32 counterparts: a 3x3 conv
with few channels runs im2col + the int8 GEMM where fp32 runs Winograd F(2x2, 3x3) (2.25x fewer
multiplies), a first conv over 3 channels packs more than it multiplies. YOLOv8n at 320 has three such
layers, 1.22-1.26x slower at int8. So the quantizer times both: one profiling build of the fp32 graph and
one of the planned int8 graph, each node's median over a few runs, and a layer whose int8 time exceeds its
fp32 time by more than ``SLOWER`` stays fp32 (closer to fp32 too). ``kernel_cost=False`` keeps every layer
at the asked precision.

Times are taken on the build host, with the same wasm kernels the device runs: relative costs carry
across hosts better than absolute ones, and the record names the host target they came from. Layers
under ``MIN_MACS`` are not timed (their difference is within timer noise) and keep their choice; with none
to time, nothing is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..ir.graph import Graph, Node

#: int8 time over fp32 time above which a layer stays fp32: a margin over per-node timing noise, so a
#: layer near parity does not change precision between two builds of the same model
SLOWER = 1.1
#: multiply-adds under which a layer is not timed
MIN_MACS = 4_000_000
#: profiled runs per node (the median is taken; the profile drops one warm-up run)
REPEAT = 7


@dataclass(frozen=True)
class LayerCost:
    """Median microseconds of one layer's node in the fp32 and the int8 build."""

    fp32_us: float
    int8_us: float

    @property
    def int8_slower(self) -> bool:
        return self.int8_us > SLOWER * self.fp32_us

    def record(self) -> dict[str, float]:
        """As the quantization record keeps it (``cost_us`` of a layer)."""
        return {"fp32": round(self.fp32_us, 1), "int8": round(self.int8_us, 1)}


def timed_layers(layers: Sequence[Node], plan: Mapping[str, str]) -> list[str]:
    """The layers worth timing: planned int8 and at least ``MIN_MACS`` multiply-adds."""
    from ..profile import node_ops

    return [n.name for n in layers if plan[n.name] == "int8" and node_ops(n) >= 2 * MIN_MACS]


def measure(fp32: Graph, int8: Graph, names: Sequence[str]) -> dict[str, LayerCost]:
    """Each named layer's time in a profiling build of ``fp32`` and of ``int8`` (same node names)."""
    from ..profile import profile_graph

    want = set(names)
    f = {t.name: t.median_us for t in profile_graph(fp32, repeat=REPEAT) if t.name in want}
    q = {t.name: t.median_us for t in profile_graph(int8, repeat=REPEAT) if t.name in want}
    return {n: LayerCost(f[n], q[n]) for n in names if n in f and n in q}


def drop_slow_int8(plan: Mapping[str, str], costs: Mapping[str, LayerCost]) -> dict[str, str]:
    """``plan`` with every int8 layer whose int8 kernel is slower (``LayerCost.int8_slower``) at fp32."""
    return {k: "fp32" if c == "int8" and k in costs and costs[k].int8_slower else c for k, c in plan.items()}
