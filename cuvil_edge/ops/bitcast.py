"""``bitcast``: ONNX BitCast (opset 26), the same bytes read as another element type of the same size
(attr ``to``; bool is one byte, read as uint8). A view of its input as ``reshape`` is: no code, no memory.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .registry import OpDef, register


def _infer(node: Node) -> list[TensorType]:
    x, to = node.inputs[0].type, node.attrs["to"]
    if np.dtype(x.dtype).itemsize != np.dtype(to).itemsize:
        raise ShapeError(f"{node.name}: bitcast of {x.dtype} to {to}, which differ in size")
    return [TensorType(x.shape, to)]


def _fold(node: Node, args) -> list[np.ndarray]:
    x = np.ascontiguousarray(args[0])
    return [x.view(node.attrs["to"]).reshape(x.shape)]


register(OpDef("bitcast", _infer, _fold, alias=True))
