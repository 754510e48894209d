"""ONNX QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear at run time, on the ``qu8-*`` kernels:

      quantize     [x f32, scale, zp uint8] (axis)  -> uint8     per tensor or per axis
      dequantize   [x uint8, scale, zp uint8] (axis) -> f32
      quantize_dyn [x f32] -> (uint8, scale f32 [], zp uint8 [])

The scale and the zero point are each one value or one per channel of ``axis``, independently (ConvInteger's
per-channel zero points run under a scale of 1). Quantized tensors are uint8 here: an ONNX int8 one is held
as uint8 with its values and zero point shifted by +128 (``ops/qlinear.py``). Large ones are split across
the threads by ranges of values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType, Value
from .attrs import INT, Attr, declare
from .qlinear import SPLIT_VALUES, braced, split_threads
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _axis_blocks(node: Node) -> tuple[int, int, int]:
    """(outer, channels, inner) when the scale or the zero point is per axis; per tensor is (1, 1, size)."""
    shape = node.inputs[0].type.shape
    if max(p.type.size for p in node.inputs[1:]) == 1:
        return 1, 1, node.inputs[0].type.size
    axis = node.attrs.get("axis", 1) % len(shape)
    return (int(np.prod(shape[:axis], dtype=np.int64)), shape[axis],
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


def broadcast_param(p: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast against a rank-``rank`` tensor (per tensor or along
    ``axis``)."""
    if p.size == 1:
        return p.reshape(())
    return p.reshape([-1 if d == axis % rank else 1 for d in range(rank)])


def _param(p: np.ndarray, node: Node) -> np.ndarray:
    return broadcast_param(p, len(node.inputs[0].type.shape), node.attrs.get("axis", 1))


def _at(p: Value) -> str:
    """The C index of channel ``c``'s scale or zero point: a per-tensor one has only [0]."""
    return "c" if p.type.size > 1 else "0"


def _blockwise(node: Node, ctx: EmitContext, call: str) -> str:
    """Run ``call`` (a qu8_* kernel call over x, y, s, z and n) on each channel block's part in the thread's
    share of the values: whole blocks, or whole 16-value steps of a per-tensor one."""
    outer, chans, inner = _axis_blocks(node)
    x, s, zp = node.inputs
    body = call.format(n="e - i", x=f"{ctx.ptr(x)} + i", y=f"{ctx.ptr(node.outputs[0])} + i",
                       s=f"{ctx.ptr(s)} + {_at(s)}")
    total = outer * chans * inner
    threads = split_threads(ctx, total, SPLIT_VALUES)
    return braced(
        "int lo, hi;",
        f"cuvil_split({total}, {16 if outer * chans == 1 else inner}, {threads}, &lo, &hi);",
        f"for (int i = lo, e; i < hi; i = e) {{\n"
        f"  const int b = i / {inner}, c = b % {chans};\n"
        f"  const int32_t z = {ctx.ptr(zp)}[{_at(zp)}];\n"
        f"  e = (b + 1) * {inner} < hi ? (b + 1) * {inner} : hi;\n  {body}\n}}")


def quantize_u8(x: np.ndarray | float, scale: np.ndarray | float, zero_point: np.ndarray | int,
                qmax: int = 255) -> np.ndarray:
    """``x`` on the uint8 grid (``scale``, ``zero_point``, 0..``qmax``) as the kernels quantize
    (``qu8_quant4``): an f32 divide, round half to even, the zero point added in f32, the clamp; as
    floats (whole numbers; NaN stays NaN)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        q = np.rint(np.asarray(x, np.float32) / np.asarray(scale, np.float32))
        q += np.asarray(zero_point, np.float32)
    return np.clip(q, 0, qmax)


def _quantize_fold(node: Node, args) -> list[np.ndarray]:
    x, s, z = args
    return [quantize_u8(x, _param(s, node), _param(z, node)).astype(np.uint8)]


def _quantize_emit(node: Node, ctx: EmitContext) -> str:
    ctx.use_kernel("qu8-quantize")
    return _blockwise(node, ctx, "qu8_quantize({n}, {x}, {y}, {s}, &z, 255);")


def _dequantize_fold(node: Node, args) -> list[np.ndarray]:
    x, s, z = args
    return [(x.astype(np.int32) - _param(z, node).astype(np.int32)).astype(np.float32)
            * _param(s, node).astype(np.float32)]


def _dequantize_emit(node: Node, ctx: EmitContext) -> str:
    ctx.use_kernel("qu8-dequantize")
    return _blockwise(node, ctx, "qu8_dequantize({n}, {x}, {y}, {s}, &z);")


def _qdq_infer(dtype: str) -> Callable[[Node], list[TensorType]]:
    """x's shape in ``dtype``, once its scale and zero point are one value each or one per channel of
    ``axis`` (what the fold broadcasts and the kernel indexes by channel)."""

    def infer(node: Node) -> list[TensorType]:
        x = node.inputs[0].type
        rank, axis = len(x.shape), node.attrs.get("axis", 1)
        for p in node.inputs[1:]:
            n = p.type.size
            if n != 1 and (len(p.type.shape) != 1 or not -rank <= axis < rank or n != x.shape[axis]):
                raise ShapeError(f"{node.name}: {n} scales or zero points for axis {axis} of {x}")
        return [TensorType(x.shape, dtype)]

    return infer


register(OpDef("quantize", _qdq_infer("uint8"), _quantize_fold, _quantize_emit, kernels=("qs8-gemm",)))
register(OpDef("dequantize", _qdq_infer("float32"), _dequantize_fold, _dequantize_emit,
               kernels=("qs8-gemm",)))
declare("quantize", {"axis": Attr(INT, required=False)})
declare("dequantize", {"axis": Attr(INT, required=False)})


def _quantize_dyn_infer(node: Node) -> list[TensorType]:
    return [TensorType(node.inputs[0].type.shape, "uint8"), TensorType((), "float32"),
            TensorType((), "uint8")]


def _quantize_dyn_fold(node: Node, args) -> list[np.ndarray]:
    x = args[0].astype(np.float32)
    lo, hi = np.float32(min(x.min(), 0)), np.float32(max(x.max(), 0))
    s = np.float32((hi - lo) / np.float32(255)) if hi > lo else np.float32(1)
    z = np.float32(np.clip(np.rint(-lo / s), 0, 255))
    return [np.clip(np.rint(x / s) + z, 0, 255).astype(np.uint8), s, z.astype(np.uint8)]


def _quantize_dyn_emit(node: Node, ctx: EmitContext) -> str:
    x, (y, s, z) = node.inputs[0], node.outputs
    ctx.use_kernel("qu8-quantize-dyn")
    threads = split_threads(ctx, x.type.size, SPLIT_VALUES)
    return braced("int32_t z;",
                   f"qu8_quantize_dyn(1, {x.type.size}, {ctx.ptr(x)}, {ctx.ptr(y)}, {ctx.ptr(s)}, &z, 255, "
                   f"{threads});", f"if (tid == 0) {ctx.ptr(z)}[0] = (uint8_t)z;")


register(OpDef("quantize_dyn", _quantize_dyn_infer, _quantize_dyn_fold, _quantize_dyn_emit,
               kernels=("qs8-gemm",)))
declare("quantize_dyn", {})
