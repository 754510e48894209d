"""Shape-only ops. ``reshape`` is an alias (no code, no memory); ``copy`` materialises a value."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _reshape_infer(node: Node) -> list[TensorType]:
    shape = tuple(node.attrs["shape"])
    src = node.inputs[0].type
    if int(np.prod(shape, dtype=np.int64)) != src.size:
        raise ShapeError(f"{node.name}: cannot reshape {src.shape} to {shape}")
    return [TensorType(shape, src.dtype)]


register(OpDef("reshape", _reshape_infer, lambda n, a: [a[0].reshape(n.attrs["shape"])], alias=True))


def _copy_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    ctx.use_kernel("x8-memmove")
    return (f"memmove({ctx.ptr(y, 'unsigned char')}, {ctx.ptr(x, 'unsigned char')}, "
            f"{x.type.nbytes});")


register(OpDef("copy", lambda n: [n.inputs[0].type], lambda n, a: [a[0].copy()], _copy_emit))
