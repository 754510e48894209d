"""ONNX int8 quantized tensors held as uint8 (their values and zero points shifted by +128, what the
``quantize`` / ``dequantize`` kernels and the integer layers read; ``ops/qlinear.py``): run-time int8
inputs and zero points go onto that grid as they enter a quantized op, and a graph output ONNX declares
int8 leaves it again, so the model answers in its own type.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Value
from ..registry import emit_node

#: ONNX TensorProto.INT8
ONNX_INT8 = 3


def flip_sign(graph: Graph, v: Value, to: str, name: str) -> Value:
    """int8 ``v`` as its held uint8 (``to`` "uint8") or a held uint8 ``v`` as int8 (``to`` "int8"): x + 128
    both ways is the same bits with the top one flipped, a wrapping cast and an xor on uint8 (constants
    fold)."""
    sign = graph.constant(f"{name}/sign", np.array(128, np.uint8))
    if to == "uint8":
        v = emit_node(graph, "cast", [v], {"to": "uint8"}, f"{name}/bits")[0]
    flipped = emit_node(graph, "binary_loop", [v, sign], {"kind": "bitxor"}, f"{name}/flipped")[0]
    return flipped if to == "uint8" else emit_node(graph, "cast", [flipped], {"to": "int8"}, name)[0]


def graph_output(graph: Graph, v: Value, elem_type: int) -> Value:
    """Graph output ``v`` as the model declares it (``elem_type``): int8 where it is held as uint8."""
    if v.type.dtype == "uint8" and elem_type == ONNX_INT8:
        return flip_sign(graph, v, "int8", f"{v.name}/int8")
    return v
