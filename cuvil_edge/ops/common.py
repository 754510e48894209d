"""Helpers shared by op definitions: C types, fused-activation encoding and broadcasting."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from runtime_wasm.spec import STORED_DTYPES

from ..errors import ShapeError
from ..ir.graph import Node, TensorType, Value

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

#: IR dtype -> the C type its elements are read and written as
CTYPES = {"float32": "float", "int32": "int32_t", "int64": "int64_t", "int8": "int8_t", "uint8": "uint8_t",
          "int16": "int16_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
          "bool": "uint8_t", "float16": "uint16_t", "float64": "double"}
CTYPES.update({dtype: CTYPES[store] for dtype, store in STORED_DTYPES.items()})  # held as their storage

#: fused activations: name -> C enum (see kernels/templates/common.c.in)
ACTS = {"none": "ACT_NONE", "relu": "ACT_RELU", "clip": "ACT_CLIP", "hardsigmoid": "ACT_HARDSIGMOID",
        "hardswish": "ACT_HARDSWISH", "sigmoid": "ACT_SIGMOID", "leakyrelu": "ACT_LEAKYRELU",
        "tanh": "ACT_TANH", "silu": "ACT_SILU"}


#: elements a node must touch to be split between threads: below it, a barrier costs about what the
#: split saves (an elementwise pass over this many floats takes a few microseconds)
PARALLEL_MIN_WORK = 16384


@dataclass(frozen=True)
class RowSplit:
    """How a node split by ``split_rows`` shares its work, so the emitter can tell when the next node
    needs no barrier: thread t gets the same rows of ``rows`` in ``unit``s as in every node with equal
    (rows, unit) (``cuvil_split``), and for each value in ``by_row`` (ids) row r touches only the r-th of
    ``rows`` equal contiguous slices of its bytes. Values not listed may be touched anywhere."""

    rows: int
    unit: int
    by_row: frozenset[int]

    def merge(self, other: RowSplit | None) -> RowSplit | None:
        """The description of a node that splits twice (e.g. a two-pass pool): None unless alike."""
        if other is None or (other.rows, other.unit) != (self.rows, self.unit):
            return None
        return RowSplit(self.rows, self.unit, self.by_row | other.by_row)


def split_rows(ctx: EmitContext, rows: int, work: int, call: Callable[[str, str], str], unit: int = 1,
               by_row: Sequence[Value] = ()) -> str:
    """C code running ``call(count, first)`` (C expressions) over ``rows`` independent rows or elements,
    split between threads in whole ``unit``s when the node touches at least ``PARALLEL_MIN_WORK``
    elements (``work``), or when the node is split already (every thread runs its code). A unit of 16
    keeps vector loops' scalar tails where single-threaded runs have them, so every element is computed by
    the same code. ``by_row``: the values whose row r is the r-th of ``rows`` equal slices, all that row r
    reads or writes of them (see ``RowSplit``); an unsplit call in a threaded build runs on thread 0 only,
    as the node's later calls may split it."""
    split = ctx.node is not None and ctx.node.name in ctx.parallel_nodes
    if ctx.threads == 1 or not split and (work < PARALLEL_MIN_WORK or rows < 2 * unit):
        code = call(str(rows), "0")
        return code if ctx.threads == 1 else f"if (tid == 0) {{ {code} }}"
    ctx.parallel(RowSplit(rows, unit, frozenset(id(v) for v in by_row)))
    return (f"{{ int lo, hi; cuvil_split({rows}, {unit}, tid, nt, &lo, &hi);\n"
            f"  if (lo < hi) {call('(hi - lo)', 'lo')} }}")


def act_c(node: Node) -> str:
    """C ``Act`` literal for a node's ``act`` attr: ``(kind, a, b)`` with kind a key of ``ACTS``."""
    kind, a, b = node.attrs.get("act") or ("none", 0.0, 0.0)
    return f"(Act){{{ACTS[kind]}, {cfloat(a)}, {cfloat(b)}}}"


def cfloat(x: float) -> str:
    x = float(x)
    if np.isinf(x):
        return "(-__builtin_inff())" if x < 0 else "__builtin_inff()"
    return f"{float(np.float32(x))!r}f"


def act_numpy(x: np.ndarray, act: tuple[str, float, float] | None) -> np.ndarray:
    """Reference semantics of fused activations (used by folding and tests)."""
    kind, a, b = act or ("none", 0.0, 0.0)
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "clip":
        return np.clip(x, a, b)
    if kind == "hardsigmoid":
        return np.clip(x * a + b, 0, 1)
    if kind == "hardswish":
        return x * np.clip(x / 6 + 0.5, 0, 1)
    if kind == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if kind == "leakyrelu":
        return np.where(x >= 0, x, x * a)
    if kind == "tanh":
        return np.tanh(x)
    if kind == "silu":
        return x / (1 + np.exp(-x))
    return x


def broadcast_shape(shapes: Sequence[Sequence[int]], where: str) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError as exc:
        raise ShapeError(f"{where}: shapes {list(map(tuple, shapes))} do not broadcast") from exc


def is_row_bias(shape: tuple[int, ...], n: int) -> bool:
    """A constant that adds the same value to every row of an [..., n] result: a scalar, or a vector
    along the last axis ([n], [1, n], ...). A column [m, 1] is not, even when m == n."""
    size = int(np.prod(shape, dtype=np.int64))
    return size == 1 or (len(shape) >= 1 and shape[-1] == n and size == n)


def same_type(node: Node) -> list[TensorType]:
    """Output type equals input 0's type."""
    return [node.inputs[0].type]


def cint_list(values: Sequence[int]) -> str:
    return ", ".join(str(int(v)) for v in values)
