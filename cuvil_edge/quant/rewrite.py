"""The quantization IR stage: a per-layer plan rewrites float conv/gemm nodes into quantized ops.

Runs on a clone of the optimized fp32 graph (BN folded, activations fused), so the fp32 graph stays
available for calibration and sensitivity runs. Weight quantization (deterministic, build time):
- int8: per output channel, symmetric, scale = max|w| / 127, q = round_half_even(w / scale) in -127..127.
- int4: per group of ``group`` input channels, asymmetric, scale = (max(0,w) - min(0,w)) / 15,
  zero point round(-min / scale) in 0..15 (the MatMulNBits convention).
Activations: 7-bit unsigned affine (0..127, the exact relaxed-dot grid), static from calibration
ranges or dynamic (per row for gemm, per tensor for conv) at run time.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..ir.graph import Graph, Node
from ..ops.qlinear import ActQuant
from ..passes.pipeline import Pass, run_passes
from .calibrate import ActRange
from .chain import chain_int8

#: per-layer choices, cheapest first (the order the mixed planner tries them)
CHOICES = ("int4", "int8", "fp16", "fp32")
QMAX = 127


def weight_rows(node: Node) -> np.ndarray:
    """Weights as [out channels, K] f32 (conv: [M, C/G*kh*kw]; gemm: w^T)."""
    w = node.inputs[1].const.astype(np.float32)
    return w.reshape(w.shape[0], -1) if node.op == "conv" else w.T


def quantizable(node: Node) -> bool:
    """Conv (1D/2D: the integer kernels have no depth axis) and Gemm with constant float weights."""
    if node.op not in ("conv", "gemm") or not node.inputs[1].is_const:
        return False
    is_3d = node.op == "conv" and len(node.inputs[0].type.shape) > 4
    return node.outputs[0].type.dtype == "float32" and not is_3d


def choices_for(node: Node, group: int) -> tuple[str, ...]:
    """int4 needs K a multiple of the group size (and one conv group)."""
    k = weight_rows(node).shape[1]
    int4 = k % group == 0 and group % 32 == 0 and node.attrs.get("group", 1) == 1
    return tuple(c for c in CHOICES if c != "int4" or int4)


def quantize_int8_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    amax = np.abs(rows).max(axis=1)
    scale = np.where(amax > 0, amax / 127, 1).astype(np.float32)
    q = np.clip(np.rint(rows / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def quantize_int4_groups(rows: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    i, k = rows.shape
    g = rows.reshape(i, k // group, group)
    lo, hi = np.minimum(g.min(2), 0), np.maximum(g.max(2), 0)
    scale = np.where(hi > lo, (hi - lo) / 15, 1).astype(np.float32)
    zp = np.clip(np.rint(-lo / scale), 0, 15).astype(np.int32)
    q = np.clip(np.rint(g / scale[..., None]) + zp[..., None], 0, 15).astype(np.uint8)
    return q.reshape(i, k), scale, zp


def act_qparams(r: ActRange) -> tuple[float, int]:
    """Affine 7-bit parameters covering [min(lo,0), max(hi,0)]."""
    lo, hi = min(float(r.lo), 0.0), max(float(r.hi), 0.0)
    scale = float(np.float32((hi - lo) / QMAX)) if hi > lo else 1.0
    return scale, int(np.clip(np.rint(-lo / scale), 0, QMAX))


def rewrite_layer(graph: Graph, node: Node, choice: str, ranges: Mapping[str, ActRange], group: int,
                  dynamic: bool) -> None:
    """Turn one float layer into ``choice``; int8 is static when its input has a calibrated range."""
    if choice == "fp32":
        return
    if choice == "fp16":
        node.attrs["inner"], node.op = node.op, "f16w"
        return
    x, bias = node.inputs[0], node.inputs[2:]
    rng = ranges.get(x.name)
    if choice == "int8" and rng is not None and not dynamic:
        node.attrs["xq"] = ActQuant.static(*act_qparams(rng), QMAX)
    else:
        node.attrs["xq"] = ActQuant.dynamic(QMAX, per_row=True)
    rows = weight_rows(node)
    w = node.inputs[1]
    if choice == "int8":
        q, scale = quantize_int8_rows(rows)
        qw = q.reshape(w.type.shape) if node.op == "conv" else np.ascontiguousarray(q.T)
        node.inputs = [x, graph.constant(f"{w.name}/q8", qw), graph.constant(f"{w.name}/s8", scale), *bias]
        node.op = "q" + node.op
        return
    q4, scale, zp = quantize_int4_groups(rows, group)
    qw = q4.reshape(w.type.shape) if node.op == "conv" else q4
    node.inputs = [x, graph.constant(f"{w.name}/q4", qw), graph.constant(f"{w.name}/s4", scale),
                   graph.constant(f"{w.name}/z4", zp), *bias]
    node.op = "qb4" + node.op


def quantize_graph(graph: Graph, plan: Mapping[str, str], ranges: Mapping[str, ActRange] | None = None,
                   group: int = 32, dynamic: bool = False, log=None, chain: bool = True) -> Graph:
    """A quantized clone of ``graph`` per ``plan`` (node name -> choice), verified like any pass; with
    ``chain``, int8 layers then hand uint8 to their int8 readers (``chain.py``: the same bits, less
    memory; off only to compare against)."""
    q = graph.clone()

    def run(g: Graph) -> bool:
        layers = [n for n in g.nodes if n.name in plan and quantizable(n)]
        for n in layers:
            rewrite_layer(g, n, plan[n.name], ranges or {}, group, dynamic)
        return any(plan[n.name] != "fp32" for n in layers)

    passes = (Pass("quantize", run, "rewrite layers per the precision plan"),
              Pass("chain_int8", chain_int8, "int8 layers hand uint8 to int8 readers"))
    return run_passes(q, passes if chain else passes[:1], log=log)
