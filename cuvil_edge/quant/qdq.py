"""Pre-quantized models onto the integer kernels (``fuse_qdq``), and the summary of their quantization
that ``inspect`` shows (``source_record``).

The frontends give every quantized format its exact float meaning: QDQ stays DequantizeLinear ->
Conv/MatMul/Gemm -> QuantizeLinear, and QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger (ONNX,
``frontend/onnx/convert_quant.py``) and TFLite's quantized operators become the same dequantize -> float
op (-> quantize) shape. A quantized constant is folded to its real (f32) values, its ``Value.quant``
(``QuantParams``) recording the integers behind them; converters that re-lay such a constant carry the
record over (``QuantParams.relaid``), those that change its numbers (alpha, folded BN) do not.
``fuse_qdq`` runs at the end of import and turns each float conv/gemm whose input comes from a per-tensor
``dequantize`` and whose weights carry an int8 record (per-output-channel scale) into ``qconv``/``qgemm``
in "input" mode: the uint8 activations and their scale/zero point go straight to the kernel.

Also dropped: the f32 -> int32 -> f32 cast pair behind a fused ``*Integer`` op (its output is already
the exact integer sum as f32, which is what ONNX's Cast(int32 -> float) would give).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir.graph import Graph, Node, QuantParams, Value
from ..ops.qlinear import ActQuant
from ..passes.simplify import eliminate_dead


def _int8_weights(w: Value, out_axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(int8 weights, per-output-channel scale) behind f32 constant ``w``, or None when it has none."""
    q = w.quant
    steps = q.steps(w.const) if q is not None else None
    if steps is None or steps.min() < -128 or steps.max() > 127:
        return None
    n = w.type.shape[out_axis]
    if q.axis == out_axis:
        scale = q.scale
    elif (q.scale == q.scale[0]).all():  # per tensor, or the same scale in every channel
        scale = np.full(n, q.scale[0], np.float32)
    else:
        return None
    return steps.astype(np.int8), np.ascontiguousarray(scale, np.float32)


def _fuse_layer(graph: Graph, node: Node, producers: dict[int, Node]) -> bool:
    dq = producers.get(id(node.inputs[0]))
    if dq is None or dq.op != "dequantize" or dq.inputs[1].type.size != 1 or dq.inputs[2].type.size != 1:
        return False
    if node.op == "conv" and len(node.inputs[0].type.shape) != 4:
        return False
    w = node.inputs[1]
    found = _int8_weights(w, 0 if node.op == "conv" else 1) if w.is_const else None
    if found is None:
        return False
    q, scale = found
    xq, s, z = dq.inputs
    node.inputs = [xq, graph.constant(f"{w.name}/q8", q), graph.constant(f"{w.name}/s8", scale),
                   *node.inputs[2:], s, z]
    node.op, node.attrs["xq"] = "q" + node.op, ActQuant.input()
    return True


def _integral(node: Node | None) -> bool:
    """A fused layer whose f32 output is an exact integer sum (unit scales, no bias: *Integer ops)."""
    if node is None or node.op not in ("qconv", "qgemm") or len(node.inputs) != 5:
        return False
    return all(v.is_const and np.all(v.const == 1) for v in (node.inputs[2], node.inputs[3]))


def fuse_qdq(graph: Graph) -> bool:
    """Fuse every quantized layer (see the module docstring); returns True when the graph changed."""
    producers = graph.producers()
    changed = False
    for node in graph.nodes:
        if node.op in ("conv", "gemm"):
            changed |= _fuse_layer(graph, node, producers)
    for node in graph.nodes:
        inner = producers.get(id(node.inputs[0])) if node.op == "cast" else None
        if inner is not None and inner.op == "cast" and node.attrs["to"] == "float32" \
                and inner.attrs["to"] == "int32" and _integral(producers.get(id(inner.inputs[0]))):
            graph.replace_uses(node.outputs[0], inner.inputs[0])
            changed = True
    if changed:
        eliminate_dead(graph)
    return changed


Named = tuple[str, QuantParams]


def source_record(fmt: str, constants: Sequence[QuantParams], activations: int, inputs: Sequence[Named],
                  outputs: Sequence[Named]) -> dict[str, Any] | None:
    """A source model's own quantization for ``inspect`` (``spec.extra["source_quantization"]``; None
    when it has none): each quantized graph input's and output's parameters, how many quantized
    activations, and the quantized constants summarised (how many, their types, how many per channel, the
    scale range). Both frontends describe their tensors by ``QuantParams`` and call this."""
    if not constants and not activations:
        return None

    def params(name: str, q: QuantParams) -> dict[str, Any]:
        return {"name": name, "dtype": q.dtype, "axis": q.axis, "scale": q.scale.tolist(),
                "zero_point": q.zero_point.tolist()}

    scales = np.concatenate([q.scale for q in constants]) if constants else np.zeros(0, np.float32)
    dtypes: dict[str, int] = {}
    for q in constants:
        dtypes[q.dtype] = dtypes.get(q.dtype, 0) + 1
    return {
        "format": fmt,
        "inputs": [params(n, q) for n, q in inputs],
        "outputs": [params(n, q) for n, q in outputs],
        "activations": activations,
        "weights": {"tensors": len(constants), "per_channel": sum(q.per_channel for q in constants),
                    "dtypes": dtypes, "scale_min": float(scales.min()) if scales.size else None,
                    "scale_max": float(scales.max()) if scales.size else None},
    }


def graph_record(graph: Graph, fmt: str) -> dict[str, Any] | None:
    """``source_record`` of an imported graph whose frontend put its records on the values
    (``Value.quant``): before fusion, where each quantized tensor is still one value."""
    quantized = [v for v in graph.values() if v.quant is not None]
    names = dict(zip(map(id, graph.outputs),
                     graph.meta.get("output_names") or [v.name for v in graph.outputs]))
    return source_record(fmt, [v.quant for v in quantized if v.is_const],
                         sum(not v.is_const for v in quantized),
                         [(v.name, v.quant) for v in graph.inputs if v.quant is not None],
                         [(names[id(v)], v.quant) for v in graph.outputs if v.quant is not None])
