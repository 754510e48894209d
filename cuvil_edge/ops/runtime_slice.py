"""Slices and ranges whose start is known only at run time (a decoder loop's step): ``slice_rt`` and
``range_rt``. Their length is static (the importer proves ``end - start`` is a constant, see
``frontend/onnx/convert_tensor.py``), so the output shape stays static; the module recomputes the
length ONNX gives at run time (negative starts count from the end, bounds clamp) and traps when it
differs, e.g. a start too close to the end, instead of returning a wrong-sized tensor.

``slice_rt`` inputs: x, start, end (one integer each). attrs: ``axis``, ``step`` (> 0), ``length``.
``range_rt`` inputs: start, limit, delta (scalars of one type). attrs: ``length``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import CTYPES
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _single_values(node: Node, count: int) -> None:
    """The last ``count`` inputs (the bounds) hold one value each."""
    for v in node.inputs[-count:]:
        if v.type.size != 1:
            raise ShapeError(f"{node.name}: bounds must be single values, got {v.type}")


# -- slice_rt ------------------------------------------------------------------------------------------
def _slice_infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    axis, step, n = node.attrs["axis"], node.attrs["step"], node.attrs["length"]
    _single_values(node, 2)
    if not 0 <= axis < len(x.shape) or step < 1 or not 0 <= n <= x.shape[axis]:
        raise ShapeError(f"{node.name}: {n} elements by {step} from axis {axis} of {x}")
    return [TensorType((*x.shape[:axis], n, *x.shape[axis + 1:]), x.dtype)]


def _slice_fold(node: Node, args) -> list[np.ndarray]:
    x, start, end = args
    axis, step = node.attrs["axis"], node.attrs["step"]
    out = np.take(x, range(*slice(int(start.reshape(-1)[0]), int(end.reshape(-1)[0]), step).indices(
        x.shape[axis])), axis=axis)
    if out.shape[axis] != node.attrs["length"]:
        raise ShapeError(f"{node.name}: the slice has {out.shape[axis]} elements, not {node.attrs['length']}")
    return [out]


def _clamp(var: str, dim: int) -> str:
    """ONNX Slice bound normalisation (positive step) of C variable ``var`` over a dim of ``dim``."""
    return (f"{var} = {var} < 0 ? {var} + {dim} : {var}; "
            f"{var} = {var} < 0 ? 0 : {var} > {dim} ? {dim} : {var};")


def _slice_emit(node: Node, ctx: EmitContext) -> str:
    x, start, end = node.inputs
    y = node.outputs[0]
    axis, step, n = node.attrs["axis"], node.attrs["step"], node.attrs["length"]
    s = x.type.shape
    outer, dim, inner = math.prod(s[:axis]), s[axis], math.prod(s[axis + 1:]) * x.type.itemsize
    ctx.use_kernel("x8-slice-rt")
    xp, yp = ctx.ptr(x, "uint8_t"), ctx.ptr(y, "uint8_t")
    return "\n".join([
        "{",
        f"  int64_t s = (int64_t)*{ctx.ptr(start)}, e = (int64_t)*{ctx.ptr(end)};",
        f"  {_clamp('s', dim)}",
        f"  {_clamp('e', dim)}",
        f"  if ((e > s ? (e - s + {step - 1}) / {step} : 0) != {n}) __builtin_trap();",
        f"  for (int o = 0; o < {outer}; o++)",
        f"    for (int i = 0; i < {n}; i++)",
        f"      memmove({yp} + ((size_t)o * {n} + i) * {inner}, "
        f"{xp} + ((size_t)o * {dim} + s + (size_t)i * {step}) * {inner}, {inner});",
        "}",
    ])


register(OpDef("slice_rt", _slice_infer, _slice_fold, _slice_emit))


# -- range_rt ------------------------------------------------------------------------------------------
def _range_infer(node: Node) -> list[TensorType]:
    _single_values(node, 3)
    dtypes = {v.type.dtype for v in node.inputs}
    if len(dtypes) != 1 or next(iter(dtypes)) not in ("int32", "int64", "float32", "float64"):
        raise ShapeError(f"{node.name}: range over {sorted(dtypes)}")
    return [TensorType((node.attrs["length"],), node.inputs[0].type.dtype)]


def _range_fold(node: Node, args) -> list[np.ndarray]:
    start, limit, delta = (a.reshape(()) for a in args)
    n = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    if n != node.attrs["length"]:
        raise ShapeError(f"{node.name}: the range has {n} elements, not {node.attrs['length']}")
    return [(start + np.arange(n) * delta).astype(start.dtype)]


def _range_emit(node: Node, ctx: EmitContext) -> str:
    start, limit, delta = (f"*{ctx.ptr(v)}" for v in node.inputs)
    y, n = node.outputs[0], node.attrs["length"]
    ct = CTYPES[y.type.dtype]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-range-rt")
    count = (f"(({limit}) - ({start}) + ({delta}) + (({delta}) > 0 ? -1 : 1)) / ({delta})"
             if ct.startswith("int") else f"__builtin_ceil((double)(({limit}) - ({start})) / ({delta}))")
    return "\n".join([
        "{",
        f"  int64_t n = (int64_t)({count});",
        f"  if ((n < 0 ? 0 : n) != {n}) __builtin_trap();",
        f"  for (int i = 0; i < {n}; i++) {ctx.ptr(y)}[i] = ({ct})({start} + i * ({delta}));",
        "}",
    ])


register(OpDef("range_rt", _range_infer, _range_fold, _range_emit))
