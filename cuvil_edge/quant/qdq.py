"""Pre-quantized ONNX onto the integer kernels: fuse dequantize -> conv/gemm into qconv/qgemm.

The ONNX converters (``frontend/onnx/convert_quant.py``) give every quantized format its exact float
meaning: QDQ stays DequantizeLinear -> Conv/MatMul/Gemm -> QuantizeLinear, and QLinearConv,
QLinearMatMul, ConvInteger and MatMulInteger become the same dequantize -> float op (-> quantize)
shape. Constant DequantizeLinear (weights) folds to f32 so the float converters accept it, and
``remember`` notes the integers behind each such array. ``fuse_qdq`` runs at the end of import, while
those notes exist, and turns each float conv/gemm whose input comes from a per-tensor ``dequantize``
and whose weights are a remembered int8 tensor (per-output-channel scale) into ``qconv``/``qgemm`` in
"input" mode: the uint8 activations and their scale/zero point go straight to the kernel. Weights are
matched by value (bit-equal f32, or its transpose for Gemm's transB), so converters that copy or
transpose weights still fuse, and anything that changed them (alpha, folded BN) stays float.

Also dropped: the f32 -> int32 -> f32 cast pair behind a fused ``*Integer`` op (its output is already
the exact integer sum as f32, which is what ONNX's Cast(int32 -> float) would give).
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..passes.simplify import eliminate_dead

_NOTES = "dequantized_weights"


def remember(graph: Graph, value: Value, q: np.ndarray, scale: np.ndarray) -> None:
    """Note that constant ``value`` is exactly ``q * scale`` (q = quantized - zero point, both already
    broadcast to the value's shape)."""
    graph.meta.setdefault(_NOTES, []).append((value.const, q.astype(np.int32), scale.astype(np.float32)))


def _int8_weights(graph: Graph, w: Value, out_axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(int8 weights, per-output-channel scale) behind f32 constant ``w``, or None when it has none."""
    for f32, q, scale in graph.meta.get(_NOTES, []):
        if f32.size != w.const.size:
            continue
        for flip in (False, True):
            if flip and f32.ndim != 2:
                continue
            a, qq, ss = (f32.T, q.T, scale.T) if flip else (f32, q, scale)
            if a.shape != w.type.shape or not np.array_equal(a, w.const):
                continue
            s = np.moveaxis(ss, out_axis, 0).reshape(ss.shape[out_axis], -1)
            if qq.min() < -128 or qq.max() > 127 or not (s == s[:, :1]).all():
                return None
            return qq.astype(np.int8), np.ascontiguousarray(s[:, 0])
    return None


def _fuse_layer(graph: Graph, node: Node, producers: dict[int, Node]) -> bool:
    dq = producers.get(id(node.inputs[0]))
    if dq is None or dq.op != "dequantize" or dq.inputs[1].type.size != 1 or dq.inputs[2].type.size != 1:
        return False
    if node.op == "conv" and len(node.inputs[0].type.shape) != 4:
        return False
    w = node.inputs[1]
    found = _int8_weights(graph, w, 0 if node.op == "conv" else 1) if w.is_const else None
    if found is None:
        return False
    q, scale = found
    xq, s, z = dq.inputs
    node.inputs = [xq, graph.constant(f"{w.name}/q8", q), graph.constant(f"{w.name}/s8", scale),
                   *node.inputs[2:], s, z]
    node.op, node.attrs["xq"] = "q" + node.op, ("input",)
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
    graph.meta.pop(_NOTES, None)
    if changed:
        eliminate_dead(graph)
    return changed
