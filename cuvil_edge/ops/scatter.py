"""Index-driven ops: ``scatter_elements`` (ONNX ScatterElements and opset-9 Scatter) and
``gather_elements`` (GatherElements) along one axis, ``scatter_nd`` (ScatterND: slices at index
tuples, as exporters write KV-cache updates) and ``gather_nd`` (GatherND: slices read at index tuples,
as torch's dynamo exporter writes advanced indexing) and ``tensor_scatter`` (TensorScatter: a KV-cache
update written at each batch row's offset along the sequence axis).

``scatter_elements``: inputs data, indices (int32 or int64, run time or constant), updates (the
indices' shape).

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
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-scatter-{node.attrs['reduction']}")
    ct = CTYPES[y.type.dtype]
    copy = _copy_data(node, ctx)
    body = [f"  {ct} *p = {ctx.ptr(y)} + {{at}}, u = {ctx.ptr(upd)}[k];",
            f"  {REDUCTIONS[node.attrs['reduction']][0]}"]
    return "\n".join([*copy, *_index_loop(node, ctx, y.type.shape, body)])


def _copy_data(node: Node, ctx: EmitContext) -> list[str]:
    """The copy of data (input 0) into the output that a scatter writes into: none when the output took
    over data's buffer (``inplace``)."""
    data, y = node.inputs[0], node.outputs[0]
    if not data.is_const and ctx.plan.offset(y) == ctx.plan.offset(data):
        return []
    return [f"memmove({ctx.ptr(y, 'unsigned char')}, {ctx.ptr(data, 'unsigned char')}, {data.type.nbytes});"]


def _index_loop(node: Node, ctx: EmitContext, shape: tuple[int, ...], body: list[str]) -> list[str]:
    """A C loop over every index k of ``node``'s indices (input 1), with ``j`` the index read there
    (negative ones counted from the end; one outside ``[-dim, dim)`` traps) and ``{at}`` in ``body`` the
    offset in a tensor of ``shape`` whose axis coordinate is j and every other one k's own."""
    ind, axis = node.inputs[1], node.attrs["axis"]
    dim = node.inputs[0].type.shape[axis]
    strides, dims = strides_of(shape), ind.type.shape
    terms = [f"(size_t)j * {strides[axis]}"] + [
        f"(size_t)(k / {int(np.prod(dims[d + 1:], dtype=np.int64))} % {dims[d]}) * {strides[d]}"
        for d in range(len(dims)) if d != axis and dims[d] > 1]
    return [f"for (size_t k = 0; k < {ind.type.size}; k++) {{",
            f"  int64_t j = (int64_t){ctx.ptr(ind)}[k];",
            f"  j = j < 0 ? j + {dim} : j;",
            f"  if (j < 0 || j >= {dim}) __builtin_trap();",
            *(line.replace("{at}", " + ".join(terms)) for line in body), "}"]


register(OpDef("scatter_elements", _infer, _fold, _emit, inplace=True))


# -- gather_elements -----------------------------------------------------------------------------------
def _gather_infer(node: Node) -> list[TensorType]:
    data, ind = (v.type for v in node.inputs)
    axis = node.attrs["axis"]
    if (len(ind.shape) != len(data.shape) or ind.dtype not in ("int32", "int64") or not 0 <= axis < len(
            data.shape) or any(i > d for k, (i, d) in enumerate(zip(ind.shape, data.shape)) if k != axis)):
        raise ShapeError(f"{node.name}: gather of {ind} from {data} on axis {axis}")
    return [TensorType(ind.shape, data.dtype)]


def _gather_fold(node: Node, args) -> list[np.ndarray]:
    data, ind = args
    axis = node.attrs["axis"]
    idx = ind.astype(np.int64)
    return [np.take_along_axis(data, np.where(idx < 0, idx + data.shape[axis], idx), axis)]


def _gather_emit(node: Node, ctx: EmitContext) -> str:
    """y[pos] = data[pos with its axis coordinate replaced by indices[pos]]; an index outside
    ``[-dim, dim)`` traps, as in ``scatter_elements``."""
    data, y = node.inputs[0], node.outputs[0]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-gather-elements")
    body = [f"  {ctx.ptr(y)}[k] = {ctx.ptr(data)}[{{at}}];"]
    return "\n".join(_index_loop(node, ctx, data.type.shape, body))


register(OpDef("gather_elements", _gather_infer, _gather_fold, _gather_emit))


# -- scatter_nd ----------------------------------------------------------------------------------------
def _nd_infer(node: Node) -> list[TensorType]:
    data, ind, upd = (v.type for v in node.inputs)
    k = ind.shape[-1] if ind.shape else 0
    if (not ind.shape or ind.dtype != "int64" or not 1 <= k <= len(data.shape) or upd.dtype != data.dtype
            or upd.shape != ind.shape[:-1] + data.shape[k:] or node.attrs["reduction"] not in REDUCTIONS):
        raise ShapeError(f"{node.name}: scatter_nd of {upd} at {ind} into {data} ({node.attrs['reduction']})")
    return [data]


def _nd_fold(node: Node, args) -> list[np.ndarray]:
    data, ind, upd = args
    ufunc = REDUCTIONS[node.attrs["reduction"]][1]
    out = data.copy()
    k = ind.shape[-1]
    flat_ind, flat_upd = ind.reshape(-1, k), upd.reshape(-1, *data.shape[k:])
    for idx, u in zip(flat_ind, flat_upd):
        at = tuple(int(i) + (d if i < 0 else 0) for i, d in zip(idx, data.shape))
        out[at] = u if ufunc is None else ufunc(out[at], u)
    return [out]


def _nd_emit(node: Node, ctx: EmitContext) -> str:
    """ONNX ScatterND: a copy of data, then each index tuple's slice of ``prod(data.shape[k:])`` elements
    written (or combined) from updates, in order; an index outside ``[-dim, dim)`` traps."""
    data, ind, upd = node.inputs
    y = node.outputs[0]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-scatternd-{node.attrs['reduction']}")
    k = ind.type.shape[-1]
    strides, slice_size = strides_of(data.type.shape), int(np.prod(data.type.shape[k:], dtype=np.int64))
    ct = CTYPES[y.type.dtype]
    offset = [f"  int64_t j{d} = {ctx.ptr(ind)}[n * {k} + {d}];\n"
              f"  j{d} = j{d} < 0 ? j{d} + {data.type.shape[d]} : j{d};\n"
              f"  if (j{d} < 0 || j{d} >= {data.type.shape[d]}) __builtin_trap();" for d in range(k)]
    copy = _copy_data(node, ctx)
    at = " + ".join(f"(size_t)j{d} * {strides[d]}" for d in range(k))
    return "\n".join([
        *copy,
        f"for (size_t n = 0; n < {ind.type.size // k}; n++) {{",
        *offset,
        f"  {ct} *row = {ctx.ptr(y)} + {at};",
        f"  for (size_t e = 0; e < {slice_size}; e++) {{",
        f"    {ct} *p = row + e, u = {ctx.ptr(upd)}[n * {slice_size} + e];",
        f"    {REDUCTIONS[node.attrs['reduction']][0]}",
        "  }",
        "}"])


register(OpDef("scatter_nd", _nd_infer, _nd_fold, _nd_emit, inplace=True))


# -- gather_nd -----------------------------------------------------------------------------------------
def _gnd_infer(node: Node) -> list[TensorType]:
    """ONNX GatherND: indices ``[*batch, *rest, k]`` pick slices ``data[*batch, i0..ik-1, ...]``; the
    output is ``indices.shape[:-1] + data.shape[batch_dims + k:]``."""
    data, ind = (v.type for v in node.inputs)
    b = node.attrs["batch_dims"]
    k = ind.shape[-1] if ind.shape else 0
    if (not ind.shape or ind.dtype != "int64" or not 1 <= k <= len(data.shape) - b or b < 0
            or ind.shape[:b] != data.shape[:b] or len(ind.shape) <= b):
        raise ShapeError(f"{node.name}: gather_nd of {ind} from {data} (batch_dims {b})")
    return [TensorType(ind.shape[:-1] + data.shape[b + k:], data.dtype)]


def _gnd_fold(node: Node, args) -> list[np.ndarray]:
    data, ind = args
    b, k = node.attrs["batch_dims"], ind.shape[-1]
    batches = int(np.prod(data.shape[:b], dtype=np.int64))
    flat_data = data.reshape(batches, *data.shape[b:])
    flat_ind = ind.reshape(batches, -1, k)
    rows = []
    dims = data.shape[b:b + k]
    if ((flat_ind < -np.array(dims)) | (flat_ind >= np.array(dims))).any():
        raise ShapeError(f"{node.name}: gather_nd index outside {list(dims)}")
    for bi in range(batches):
        for idx in flat_ind[bi]:
            at = tuple(int(i) + (d if i < 0 else 0) for i, d in zip(idx, dims))
            rows.append(flat_data[bi][at])
    out_shape = ind.shape[:-1] + data.shape[b + k:]
    return [np.array(rows, dtype=data.dtype).reshape(out_shape)]


def _gnd_emit(node: Node, ctx: EmitContext) -> str:
    """One slice of ``prod(data.shape[batch_dims + k:])`` elements copied per index tuple; an index
    outside ``[-dim, dim)`` traps, as in ``scatter_nd``."""
    data, ind = node.inputs
    y = node.outputs[0]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-gathernd")
    b, k = node.attrs["batch_dims"], ind.type.shape[-1]
    shape = data.type.shape
    strides = strides_of(shape)
    slice_size = int(np.prod(shape[b + k:], dtype=np.int64))
    per_batch = int(np.prod(ind.type.shape[b:-1], dtype=np.int64))
    batch_bytes = int(np.prod(shape[b:], dtype=np.int64))  # elements of one batch entry of data
    offset = [f"  int64_t j{d} = {ctx.ptr(ind)}[n * {k} + {d}];\n"
              f"  j{d} = j{d} < 0 ? j{d} + {shape[b + d]} : j{d};\n"
              f"  if (j{d} < 0 || j{d} >= {shape[b + d]}) __builtin_trap();" for d in range(k)]
    at = " + ".join([f"(size_t)(n / {per_batch}) * {batch_bytes}" if b else "0",
                     *(f"(size_t)j{d} * {strides[b + d]}" for d in range(k))])
    return "\n".join([
        f"for (size_t n = 0; n < {ind.type.size // k}; n++) {{",
        *offset,
        f"  memcpy({ctx.ptr(y)} + n * {slice_size}, {ctx.ptr(data)} + {at}, "
        f"{slice_size} * sizeof(*{ctx.ptr(y)}));",
        "}"])


register(OpDef("gather_nd", _gnd_infer, _gnd_fold, _gnd_emit))


# -- tensor_scatter ------------------------------------------------------------------------------------
# ONNX TensorScatter (opset 24). Inputs past_cache, update (past_cache's shape but for ``axis``), and
# optionally write_indices (int64[batch]: where batch row b's update starts along ``axis``; 0 without).
# attrs: ``axis`` (1 .. rank-1: axis 0 is the batch), ``circular`` (the position wraps modulo the cache
# length; else one past the cache traps, as the ONNX reference raises).
def _ts_infer(node: Node) -> list[TensorType]:
    past, upd = node.inputs[0].type, node.inputs[1].type
    axis = node.attrs["axis"]
    ind = node.inputs[2].type if len(node.inputs) > 2 else None
    if (past.dtype not in CTYPES or upd.dtype != past.dtype or len(upd.shape) != len(past.shape)
            or not 1 <= axis < len(past.shape) or upd.shape[axis] > past.shape[axis]
            or any(u != p for k, (u, p) in enumerate(zip(upd.shape, past.shape)) if k != axis)
            or ind is not None and (ind.dtype != "int64" or ind.shape != past.shape[:1])):
        raise ShapeError(f"{node.name}: tensor_scatter of {upd} into {past} on axis {axis}"
                         + (f" at {ind}" if ind else ""))
    return [past]


def _ts_fold(node: Node, args) -> list[np.ndarray]:
    past, upd = args[:2]
    axis, length = node.attrs["axis"], past.shape[node.attrs["axis"]]
    starts = args[2] if len(args) > 2 else np.zeros(past.shape[0], np.int64)
    out = past.copy()
    for prefix in np.ndindex(past.shape[:axis]):
        at = int(starts[prefix[0]]) + np.arange(upd.shape[axis])
        if node.attrs["circular"]:
            at %= length
        elif at.size and (at.min() < 0 or at.max() >= length):
            raise ShapeError(f"{node.name}: tensor_scatter writes rows {at.min()}..{at.max()} of {length}")
        out[(*prefix, at)] = upd[prefix]
    return [out]


def _ts_emit(node: Node, ctx: EmitContext) -> str:
    """A copy of the cache, then per row of the axes before ``axis`` its update's rows copied to their
    positions (each ``prod(shape[axis+1:])`` elements)."""
    past, upd = node.inputs[:2]
    y = node.outputs[0]
    circular = node.attrs["circular"]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-tensorscatter-{'circular' if circular else 'linear'}")
    shape, axis = past.type.shape, node.attrs["axis"]
    rows, length, n = int(np.prod(shape[:axis], dtype=np.int64)), shape[axis], upd.type.shape[axis]
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    start = f"{ctx.ptr(node.inputs[2])}[r / {rows // shape[0]}]" if len(node.inputs) > 2 else "0"
    place = (f"    c = (c % {length} + {length}) % {length};" if circular else
             f"    if (c < 0 || c >= {length}) __builtin_trap();")
    return "\n".join([
        *_copy_data(node, ctx),
        f"for (size_t r = 0; r < {rows}; r++) {{",
        f"  for (int64_t s = 0; s < {n}; s++) {{",
        f"    int64_t c = {start} + s;",
        place,
        f"    memmove({ctx.ptr(y)} + (r * {length} + (size_t)c) * {inner},",
        f"            {ctx.ptr(upd)} + (r * {n} + (size_t)s) * {inner}, {inner} * sizeof(*{ctx.ptr(y)}));",
        "  }",
        "}"])


register(OpDef("tensor_scatter", _ts_infer, _ts_fold, _ts_emit, inplace=True))
