"""``scatter_elements``: ONNX ScatterElements (and opset-9 Scatter). Inputs: data, indices (int32 or
int64, run time or constant), updates (the indices' shape).

attrs: ``axis`` (non-negative), ``reduction`` (none/add/mul/max/min). The output is a copy of data with
each update written (or combined) at its index along ``axis``; updates apply in order, so a repeated
index keeps the last (or combines all), as onnxruntime does. An index outside ``[-dim, dim)`` traps the
module (onnxruntime rejects it too). One C loop on thread 0: decoders scatter one row per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import CTYPES
from .movement import strides_of
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

#: reduction -> (C statement combining ``u`` into ``*p``, numpy ufunc for folding)
REDUCTIONS = {"none": ("*p = u;", None), "add": ("*p += u;", np.add), "mul": ("*p *= u;", np.multiply),
              "max": ("*p = *p > u ? *p : u;", np.maximum), "min": ("*p = *p < u ? *p : u;", np.minimum)}


def _infer(node: Node) -> list[TensorType]:
    data, ind, upd = (v.type for v in node.inputs)
    axis = node.attrs["axis"]
    if (ind.shape != upd.shape or len(ind.shape) != len(data.shape) or upd.dtype != data.dtype
            or ind.dtype not in ("int32", "int64") or not 0 <= axis < len(data.shape)
            or any(i > d for k, (i, d) in enumerate(zip(ind.shape, data.shape)) if k != axis)
            or node.attrs["reduction"] not in REDUCTIONS):
        raise ShapeError(f"{node.name}: scatter of {upd} at {ind} into {data} on axis {axis} "
                         f"({node.attrs['reduction']})")
    return [data]


def _fold(node: Node, args) -> list[np.ndarray]:
    data, ind, upd = args
    axis, ufunc = node.attrs["axis"], REDUCTIONS[node.attrs["reduction"]][1]
    out = data.copy()
    idx = ind.astype(np.int64)
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    for pos in np.ndindex(*ind.shape):
        at = pos[:axis] + (idx[pos],) + pos[axis + 1:]
        out[at] = upd[pos] if ufunc is None else ufunc(out[at], upd[pos])
    return [out]


def _emit(node: Node, ctx: EmitContext) -> str:
    data, ind, upd = node.inputs
    y = node.outputs[0]
    axis = node.attrs["axis"]
    dim = data.type.shape[axis]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-scatter-{node.attrs['reduction']}")
    ystr, dims = strides_of(y.type.shape), ind.type.shape
    # flat update index -> output offset: every coordinate but the axis one comes from the position
    terms = [f"(size_t)j * {ystr[axis]}"] + [
        f"(size_t)(k / {int(np.prod(dims[d + 1:], dtype=np.int64))} % {dims[d]}) * {ystr[d]}"
        for d in range(len(dims)) if d != axis and dims[d] > 1]
    ct = CTYPES[y.type.dtype]
    copy = [] if not data.is_const and ctx.plan.offset(y) == ctx.plan.offset(data) else [
        f"memmove({ctx.ptr(y, 'unsigned char')}, {ctx.ptr(data, 'unsigned char')}, {data.type.nbytes});"]
    return "\n".join([
        *copy,
        f"for (size_t k = 0; k < {ind.type.size}; k++) {{",
        f"  int64_t j = (int64_t){ctx.ptr(ind)}[k];",
        f"  j = j < 0 ? j + {dim} : j;",
        f"  if (j < 0 || j >= {dim}) __builtin_trap();",
        f"  {ct} *p = {ctx.ptr(y)} + {' + '.join(terms)}, u = {ctx.ptr(upd)}[k];",
        f"  {REDUCTIONS[node.attrs['reduction']][0]}",
        "}",
    ])


register(OpDef("scatter_elements", _infer, _fold, _emit, inplace=True))
