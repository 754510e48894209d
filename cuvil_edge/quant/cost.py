"""Kernel cost in the plan: a layer goes int8 only where its int8 kernel is not slower than its fp32 one.

Accuracy is not the only price of int8. Some int8 kernels lose to their fp32 counterparts: a 3x3 conv
with few channels runs im2col + the int8 GEMM where fp32 runs Winograd F(2x2, 3x3) (2.25x fewer
multiplies), a first conv over 3 channels packs more than it multiplies (YOLOv8n at 320: its 3 -> 16
stem, 1.21x slower at int8). A layer whose int8 cost exceeds its fp32 cost by more than ``SLOWER``
stays fp32 (closer to fp32 too); ``kernel_cost=False`` keeps every layer at the asked precision.

The default costs come from a model, not a clock (``MODEL``): the same graph gives the same plan, so the
same bytes, on any machine under any load. Timing both builds on the build host flipped YOLOv8n layers
between int8 and fp32 from one build to the next on a loaded box (its 48 -> 32 1x1 timed 1.02-1.18x in
four builds, around ``SLOWER``; with both cores busy, four layers moved). The model sums, per kernel, the
work its loops do (GEMM multiply-adds over the padded tile, Winograd transforms, im2col and packed
bytes, the activation quantize pass, the epilogue's outputs, weights streamed) at microseconds per unit
fitted (non-negative least squares on relative error) to the per-node medians of the 144 costed layers
of MobileNetV2 224, ResNet-50 224 and YOLOv8n 320 (2026-12-06, relaxed-SIMD x86 host, 7 runs each):
within 6% (median) of them, the stems' ratios within 0.01 (YOLOv8n 1.20 vs 1.21, MobileNetV2 1.01 vs
1.01). The direct kernel (``uses_direct``) is im2col's GEMM without the packing; zoo.unet's 24 -> 8 3x3
at 64x64 on it: 1.23x by the model, 1.29-1.41x timed. Every choice in those nets, the 64x64 zoo nets and
the BERT-shaped encoder is the timed one, but for that YOLOv8n 1x1 (int8 by the model: 0.71x). A tie
keeps int8. ``kernel_cost="measured"`` times the two profiling builds instead (opt-in): the record then
names the host and says the plan is not reproducible. Layers under ``MIN_MACS`` keep their choice either
way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..ir.graph import Graph, Node

#: int8 cost over fp32 cost above which a layer stays fp32: a margin over the model's error (and over
#: timing noise, measured), so a layer near parity keeps the smaller, int8 weights
SLOWER = 1.1
#: multiply-adds under which a layer's choice stays (per-call costs the model leaves out dominate there)
MIN_MACS = 4_000_000
#: profiled runs per node in the measured mode (the median is taken; the profile drops one warm-up run)
REPEAT = 7
#: the default cost model's name: change it (and the tables) together, it goes into every record
MODEL = "cuvil-kernel-cost-1"
#: microseconds per unit of work of the fp32 kernels: GEMM multiply-adds (M padded to the 4-row panel,
#: Winograd's 16/36 or 25/36 of them), Winograd transform values, im2col values, outputs, weights
#: streamed (Winograd's transformed ones), depthwise multiply-adds
FP32_US = {"gemm": 5.13e-5, "transform": 6.38e-4, "im2col": 5.14e-4, "output": 8.23e-4, "weights": 1.44e-3,
           "dw": 9.09e-5}
#: the same for the int8 kernels: GEMM multiply-adds (rows padded to 8, K to 4), activation bytes packed
#: for the GEMM (K padded to 4, per pixel or row), im2col bytes, input values quantized, outputs, and output
#: pixels of a strided im2col conv (its per-pixel gather of strided bytes)
INT8_US = {"gemm": 2.34e-5, "pack": 2.92e-5, "im2col": 2.80e-4, "quantize": 1.15e-4, "output": 9.87e-4,
           "pixel": 2.29e-2}


@dataclass(frozen=True)
class LayerCost:
    """One layer's cost in microseconds at fp32 and at int8 (modelled, or the measured medians)."""

    fp32_us: float
    int8_us: float

    @property
    def int8_slower(self) -> bool:
        """Strictly beyond the margin: a tie keeps int8, so equal costs decide the same way everywhere."""
        return self.int8_us > SLOWER * self.fp32_us

    def record(self) -> dict[str, float]:
        """As the quantization record keeps it (``cost_us`` of a layer)."""
        return {"fp32": round(self.fp32_us, 1), "int8": round(self.int8_us, 1)}


def model_identity() -> dict[str, Any]:
    """What a rebuild needs to know decided the plan: the model's name and the sha256 of its tables."""
    tables = {"fp32": FP32_US, "int8": INT8_US, "slower": SLOWER, "min_macs": MIN_MACS}
    digest = hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()
    return {"mode": "model", "model": MODEL, "sha256": digest, "int8_slower_than": SLOWER}


def costed_layers(layers: Sequence[Node], plan: Mapping[str, str]) -> list[str]:
    """The layers whose cost decides: planned int8 and at least ``MIN_MACS`` multiply-adds."""
    from ..timing import node_ops

    return [n.name for n in layers if plan[n.name] == "int8" and node_ops(n) >= 2 * MIN_MACS]


def _up(n: int, to: int) -> int:
    return -(-n // to) * to


def _conv_cost(node: Node) -> LayerCost:
    from ..ops.conv import (
        conv_geometry,
        is_depthwise,
        is_pointwise,
        is_pointwise_strided,
        uses_direct,
        uses_subsample_1x1,
        uses_winograd,
        uses_winograd_s2,
    )

    g = conv_geometry(node)
    c, m, k = g["C"], g["M"], g["C"] // g["G"] * g["kd"] * g["kh"] * g["kw"]
    p = g["N"] * g["OD"] * g["OH"] * g["OW"]
    outputs, inputs = m * p, g["N"] * c * g["D"] * g["H"] * g["W"]
    f, q = FP32_US, INT8_US
    quant = q["quantize"] * inputs + q["output"] * outputs
    if is_depthwise(g):
        macs = outputs * k
        return LayerCost(f["dw"] * macs + f["output"] * outputs, quant)
    gemm = _up(m // g["G"], 4) * g["G"] * k * p
    tiles = g["N"] * ((g["OH"] + 1) // 2) * ((g["OW"] + 1) // 2)
    if uses_winograd(g):  # F(2x2, 3x3): 16 of 36 multiplies, 16 transformed values per tile and channel
        fp32 = f["gemm"] * gemm * 16 / 36 + f["transform"] * 16 * (c + m) * tiles + f["weights"] * 16 * c * m
    elif uses_winograd_s2(g):  # F(2x2, 2x2) over polyphase components: 25 of 36
        fp32 = (f["gemm"] * gemm * 25 / 36 + f["transform"] * (25 * c + 9 * m) * tiles
                + f["weights"] * 25 * c * m)
    else:
        # values packed before the GEMM: none where it reads the input in place (1x1, or the direct kernel)
        packed = 0 if is_pointwise(g) or uses_direct(g) else c * p if uses_subsample_1x1(g) else k * p
        fp32 = f["gemm"] * gemm + f["im2col"] * packed + f["weights"] * m * k
    fp32 += f["output"] * outputs
    int8 = q["gemm"] * _up(m // g["G"], 8) * g["G"] * _up(k, 4) * p + q["pack"] * _up(k, 4) * p + quant
    if not is_pointwise(g):  # im2col rows (a strided 1x1: its subsampled planes)
        strided = (g["sh"], g["sw"]) != (1, 1) and not is_pointwise_strided(g)
        int8 += q["im2col"] * k * p + (q["pixel"] * p if strided else 0)
    return LayerCost(fp32, int8)


def _gemm_cost(node: Node) -> LayerCost:
    """A GEMM is a 1x1 conv over its rows: x [rows, K] times w [K, N]."""
    x, w = node.inputs[0].type, node.inputs[1].type
    k, n = w.shape[0], w.shape[-1]
    rows = x.size // k
    f, q = FP32_US, INT8_US
    fp32 = f["gemm"] * _up(n, 4) * k * rows + f["weights"] * n * k + f["output"] * n * rows
    int8 = (q["gemm"] * _up(n, 8) * _up(k, 4) * rows + q["pack"] * _up(k, 4) * rows + q["quantize"] * x.size
            + q["output"] * n * rows)
    return LayerCost(fp32, int8)


def estimate(node: Node) -> LayerCost:
    """The model's cost of a float conv or gemm node at fp32 and at int8: a pure function of its shapes
    and attributes, and of the kernels ``ops/conv.py`` and ``ops/qlinear.py`` pick for them."""
    return _conv_cost(node) if node.op == "conv" else _gemm_cost(node)


def estimated(layers: Sequence[Node], names: Sequence[str]) -> dict[str, LayerCost]:
    """``estimate`` of each named layer."""
    want = set(names)
    return {n.name: estimate(n) for n in layers if n.name in want}


def measure(fp32: Graph, int8: Graph, names: Sequence[str]) -> dict[str, LayerCost]:
    """Each named layer's time in a profiling build of ``fp32`` and of ``int8`` (same node names): the
    opt-in measured mode, which varies with the host and its load."""
    from ..timing import profile_graph

    want = set(names)
    f = {t.name: t.median_us for t in profile_graph(fp32, repeat=REPEAT) if t.name in want}
    q = {t.name: t.median_us for t in profile_graph(int8, repeat=REPEAT) if t.name in want}
    return {n: LayerCost(f[n], q[n]) for n in names if n in f and n in q}


def drop_slow_int8(plan: Mapping[str, str], costs: Mapping[str, LayerCost]) -> dict[str, str]:
    """``plan`` with every int8 layer whose int8 kernel is slower (``LayerCost.int8_slower``) at fp32."""
    return {k: "fp32" if c == "int8" and k in costs and costs[k].int8_slower else c for k, c in plan.items()}
