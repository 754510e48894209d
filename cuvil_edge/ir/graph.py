"""The typed IR: static-shape tensors, nodes in topological order, constants held by value.

Every value has a static shape and dtype once imported. Runtime nodes carry normalised attributes
(explicit pads, fused activation, ...), so passes and code generation never see format quirks.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from runtime_wasm.spec import STORED_DTYPES, storage_dtype

from ..errors import ShapeError
from .limits import check_shape

#: dtypes the IR knows (a quantized tensor's integers are one of them; its parameters: ``QuantParams``);
#: the stored types (bfloat16, float8, int4, ...: ``STORED_DTYPES``) exist at run time only at the
#: model's edges and in casts, held as a wider type in between (``frontend/onnx/float16.py``)
DTYPES = ("float32", "float16", "int64", "int32", "int8", "uint8", "bool", "float64", "int16", "uint16",
          "uint32", "uint64", *STORED_DTYPES)
#: bytes per string element unless the build says otherwise: ONNX string tensors exist at the model's edge
#: only, held as ``S<W>`` (numpy's fixed-width bytes: UTF-8, zero padded, one row of W bytes each)
STRING_WIDTH = 64


def string_width(dtype: str) -> int | None:
    """W of a string dtype ``S<W>``; None for the numeric ones."""
    return int(dtype[1:]) if dtype[:1] == "S" and dtype[1:].isdigit() and int(dtype[1:]) > 0 else None


@dataclass(frozen=True)
class TensorType:
    """A static shape and dtype."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES and string_width(self.dtype) is None:
            raise ValueError(f"unknown dtype {self.dtype!r}")
        if any((not isinstance(d, (int, np.integer))) or d < 0 for d in self.shape):
            raise ShapeError(f"shape must be static non-negative ints, got {self.shape}")
        check_shape(self.shape)
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def itemsize(self) -> int:
        return storage_dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True, eq=False)
class QuantParams:
    """A source model's affine quantization of one tensor: ``real = scale * (q - zero_point)`` for its
    ``dtype`` integers q, per tensor (``axis`` None, one scale) or per channel along ``axis``.

    On a ``Value`` (``Value.quant``, set by the frontends): a constant holds the real (float32) values,
    exactly ``real_of`` its integers, so ``steps`` gets them back for the integer kernels; a run-time
    value holds the integers as uint8, an int8 tensor shifted by +128 (``held_zero_point``). A value a
    converter or pass makes anew has none: the record goes only where the numbers stay the same.
    """

    scale: np.ndarray  #: float32 [1] or [channels]
    zero_point: np.ndarray  #: int64, as many as ``scale``
    axis: int | None = None
    dtype: str = "int8"

    def __post_init__(self) -> None:
        scale, zp = np.asarray(self.scale, np.float32).reshape(-1), np.asarray(self.zero_point).reshape(-1)
        scale, zp = np.broadcast_arrays(scale, zp.astype(np.int64))
        if scale.size == 0 or (scale.size > 1 and self.axis is None):
            raise ValueError(f"{scale.size} scales need an axis (one scale is per tensor)")
        object.__setattr__(self, "scale", np.array(scale))
        object.__setattr__(self, "zero_point", np.array(zp))
        object.__setattr__(self, "axis", None if scale.size == 1 else int(self.axis))

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    @property
    def held_zero_point(self) -> np.ndarray:
        """The zero point of the tensor as held at run time (uint8: an int8 one shifted by +128)."""
        return self.zero_point + (128 if self.dtype == "int8" else 0)

    def along(self, p: np.ndarray, rank: int) -> np.ndarray:
        """Per-channel ``p`` (scale, zero point) shaped to broadcast against a rank-``rank`` tensor."""
        return p.reshape([-1 if d == self.axis else 1 for d in range(rank)] if self.axis is not None else ())

    def real_of(self, steps: np.ndarray) -> np.ndarray:
        """float32 ``scale * steps`` (steps: integers less their zero point), the exact product rounded
        once (as ONNX's f32 product of steps below 2^24, 8-bit ones certainly)."""
        return (steps * self.along(self.scale, steps.ndim).astype(np.float64)).astype(np.float32)

    def steps(self, real: np.ndarray) -> np.ndarray | None:
        """``q - zero_point`` of a constant's real values (int64), None when they are not exactly that
        (the constant is not the tensor this record describes)."""
        scale = self.along(self.scale, real.ndim).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            steps = np.where(scale != 0, np.rint(real / np.where(scale != 0, scale, 1)), 0).astype(np.int64)
        return steps if np.array_equal(self.real_of(steps), real) else None

    def relaid(self, shape: tuple[int, ...], relayout: Callable[[np.ndarray], np.ndarray]
               ) -> QuantParams | None:
        """This record for the tensor ``relayout`` makes of one of ``shape`` (a transpose, a gather of
        non-channel positions, ...): per tensor as it is, per channel along the axis its channels land on;
        None when they no longer lie along one axis."""
        if self.axis is None:
            return self
        n = self.scale.size
        moved = relayout(np.broadcast_to(self.along(np.arange(n), len(shape)), shape))
        for axis, size in enumerate(moved.shape):
            along = np.arange(n).reshape([-1 if d == axis else 1 for d in range(moved.ndim)])
            if size == n and np.array_equal(moved, np.broadcast_to(along, moved.shape)):
                return replace(self, axis=axis)
        return None


@dataclass(eq=False)
class Value:
    """An SSA value. ``const`` is set for weights and folded tensors; ``quant`` for a quantized tensor
    of the source model (see ``QuantParams``)."""

    name: str
    type: TensorType
    const: np.ndarray | None = None
    quant: QuantParams | None = None

    @property
    def is_const(self) -> bool:
        return self.const is not None


@dataclass(eq=False)
class Node:
    op: str
    name: str
    inputs: list[Value]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def subgraphs(self) -> list[Graph]:
        """Bodies this node runs (``loop``, ``if``): graphs held in its attrs, each with its own values."""
        return [g for g in self.attrs.values() if isinstance(g, Graph)]

    def __repr__(self) -> str:
        ins = ", ".join(v.name for v in self.inputs)
        outs = ", ".join(f"{v.name}:{v.type}" for v in self.outputs)
        return f"{self.name} = {self.op}({ins}) -> {outs} {self.attrs or ''}"


class Graph:
    """Nodes in execution order, graph inputs/outputs and a name-unique value namespace."""

    def __init__(self, name: str = "model") -> None:
        self.name = name
        self.nodes: list[Node] = []
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.meta: dict[str, Any] = {}
        self._names: set[str] = set()  # values and nodes have separate namespaces
        self._node_names: set[str] = set()
        self._counter = itertools.count()

    # -- construction -------------------------------------------------------------------------
    def unique(self, base: str, taken: set[str] | None = None) -> str:
        taken = self._names if taken is None else taken
        name = base
        while name in taken:
            name = f"{base}_{next(self._counter)}"
        taken.add(name)
        return name

    def clone(self) -> Graph:
        """Same values (constants shared, never mutated), fresh nodes and name sets: a rewrite of the
        clone leaves this graph as it was."""
        g = copy.copy(self)
        g.nodes = [Node(n.op, n.name, list(n.inputs), list(n.outputs), dict(n.attrs)) for n in self.nodes]
        g.inputs, g.outputs, g.meta = list(self.inputs), list(self.outputs), dict(self.meta)
        g._names, g._node_names = set(self._names), set(self._node_names)
        return g

    def value(self, name: str, ttype: TensorType, const: np.ndarray | None = None) -> Value:
        return Value(self.unique(name), ttype, const)

    def constant(self, name: str, array: np.ndarray) -> Value:
        array = np.ascontiguousarray(array).reshape(np.shape(array))  # keep 0-d scalars 0-d
        return self.value(name, TensorType(array.shape, str(array.dtype)), array)

    def add_node(self, op: str, name: str, inputs: list[Value], outputs: list[Value],
                 attrs: dict[str, Any] | None = None) -> Node:
        node = Node(op, self.unique(name or op, self._node_names), inputs, outputs, dict(attrs or {}))
        self.nodes.append(node)
        return node

    # -- queries ------------------------------------------------------------------------------
    def consumers(self) -> dict[int, list[Node]]:
        """Map ``id(value)`` to the nodes that read it (graph outputs are not nodes)."""
        uses: dict[int, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                uses.setdefault(id(v), []).append(n)
        return uses

    def sole_consumer(self, v: Value, uses: dict[int, list[Node]]) -> Node | None:
        """The one node reading ``v`` (``uses``: this graph's ``consumers()``), None when more or none do
        or ``v`` is also a graph output: the node a fusion may fold ``v``'s producer into."""
        users = uses.get(id(v), [])
        if len(users) != 1 or any(o is v for o in self.outputs):
            return None
        return users[0]

    def producers(self) -> dict[int, Node]:
        return {id(v): n for n in self.nodes for v in n.outputs}

    def inputs_feeding(self, v: Value) -> tuple[str, ...]:
        """The names of this graph's inputs that ``v`` is computed from (``v``'s own when it is one), in
        input order: what an error about a value known only at run time can tell the user to fix."""
        made, seen, todo = self.producers(), set(), [v]
        while todo:
            x = todo.pop()
            if id(x) in seen or x.is_const:
                continue
            seen.add(id(x))
            todo += made[id(x)].inputs if id(x) in made else []
        return tuple(i.name for i in self.inputs if id(i) in seen)

    def values(self) -> Iterator[Value]:
        seen: set[int] = set()
        for v in itertools.chain(self.inputs, (x for n in self.nodes for x in (*n.inputs, *n.outputs)),
                                 self.outputs):
            if id(v) not in seen:
                seen.add(id(v))
                yield v

    def replace_uses(self, old: Value, new: Value, nodes: Iterable[Node] | None = None) -> None:
        for n in self.nodes if nodes is None else nodes:
            n.inputs = [new if v is old else v for v in n.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]

    def walk(self) -> Iterator[Node]:
        """Every node, those inside subgraphs included (after the node that holds them)."""
        for n in self.nodes:
            yield n
            for sub in n.subgraphs:
                yield from sub.walk()

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def __repr__(self) -> str:
        lines = [f"graph {self.name}(" + ", ".join(f"{v.name}:{v.type}" for v in self.inputs) + ")"]
        lines += [f"  {n!r}" for n in self.nodes]
        lines.append("  return " + ", ".join(v.name for v in self.outputs))
        return "\n".join(lines)
