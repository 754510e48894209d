"""Stored element types: ONNX tensors of types wasm has no arithmetic for run as a wider IR type.

float16, bfloat16 and the float8/float4 formats run as float32 values that hold their numbers, int4,
uint4, int2 and uint2 as int8/uint8 ones (``ops.cast.HELD``): the importer keeps every converter on the
held type. Initializers and constants widen to it (exactly), graph inputs are widened by a ``cast`` as
they enter and graph outputs narrowed by one as they leave. After each ONNX node whose output is of a
stored type the result is put on that type's grid: ``round_f16`` / ``round_bf16`` after an op computing
in float16 / bfloat16 (to nearest even, overflow to inf, subnormals kept: each op computes in f32 and
yields a float16 tensor, as ONNX defines); a ``cast`` to the type and back after a Cast or CastLike to
the others (with the node's ``saturate`` and ``round_mode``; the small integers wrap). Data movement
cannot leave the grid, so it is not rounded again (``EXACT_OPS``); a converter that makes a tensor of a
stored type at run time (QuantizeLinear) has it widened. No other op computes in float8, float4 or the
small integers (their ONNX schemas allow only movement, casts and quantization): one that would is
refused. onnxruntime's CPU provider skips some fp16 roundings (it runs chains of fp16 ops that lack fp16
kernels in f32 and removes the casts between them), so the two agree within fp16 tolerance rather than
bit for bit.

Which outputs have a stored type follows ONNX's type rules: ``Cast`` and ops with a ``dtype`` attribute
say so, constants by their own type, every other op's output has the type of the inputs sharing its
type variable in the op's schema (CastLike's ``target_type``, DequantizeLinear's scale).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary, ref

import numpy as np

from ...codegen.kernels.table import dtype_code
from ...errors import UnsupportedOperator
from ...ir.graph import Graph, Node, Value
from ...ops.cast import FLOAT8, HELD, cast_numpy
from ..registry import emit_node
from .registry import node_name

if TYPE_CHECKING:
    import onnx

#: IR ops whose output holds only numbers of their stored-type inputs: no rounding after them
EXACT_OPS = frozenset({"reshape", "copy", "transpose", "concat", "split", "slice", "pad", "expand", "tile",
                       "gather", "where", "round_f16", "round_bf16"})
#: the stored types ops compute in (in float32, rounded after each op)
_ROUND_OPS = {"float16": "round_f16", "bfloat16": "round_bf16"}
#: ops whose output has the type of one input though its schema gives it a type variable of its own
#: (DequantizeLinear's T3: the scale's type unless ``output_dtype`` says)
_TYPED_LIKE = {"DequantizeLinear": 1}
#: each graph being imported -> its tracker (``stored_type_of``)
_TRACKERS: WeakKeyDictionary[Graph, HalfFloats] = WeakKeyDictionary()


def stored_type_of(graph: Graph, v: Value) -> str | None:
    """The stored type ``v`` stands for while ``graph`` is imported (None: its own dtype): what a
    converter reads where the held type is not enough (QuantizeLinear to an int4 zero point's type)."""
    tracker = _TRACKERS.get(graph)
    return tracker.half.get(v) if tracker is not None else None


def stored_type(elem_type: int) -> str | None:
    """The stored type (a key of ``HELD``) an ONNX element type is, else None."""
    from onnx import helper

    try:
        name = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return None
    return name if name in HELD else None


@cache
def _formal_types(op_type: str, domain: str, opset: int) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The type strings (``T``, ``tensor(int64)``) of an op's formal inputs and outputs, None without a
    schema."""
    from onnx import defs

    try:
        schema = defs.get_schema(op_type, opset, domain)
    except defs.SchemaError:
        return None
    ins, outs = tuple(p.type_str for p in schema.inputs), tuple(p.type_str for p in schema.outputs)
    return (ins, outs) if ins and outs else None


def _name(v: Value, dtype: str) -> str:
    """The name of v's value as ``dtype`` (``x/f32``, ``x/h``)."""
    return f"{v.name}/{dtype_code(dtype)}"


class HalfFloats:
    """Tracks which IR values stand for tensors of a stored type (``half``: value -> its stored type)
    while one model is imported."""

    def __init__(self, graph: Graph) -> None:
        # weakly: ``_TRACKERS`` holds this tracker under the graph, and a value that keeps its weak key
        # alive keeps the entry (and every graph ever imported) for the process's life
        self._graph = ref(graph)
        _TRACKERS[graph] = self
        self.half: dict[Value, str] = {}
        #: a widened value -> the stored-type value it was widened from (a graph output takes that back)
        self._narrow: dict[Value, Value] = {}

    @property
    def graph(self) -> Graph:
        graph = self._graph()
        assert graph is not None, "a stored-type tracker outlived its graph"
        return graph

    def constant(self, name: str, array: np.ndarray) -> Value:
        """An initializer or constant: stored-type arrays become their held type (exact) and are marked."""
        stored = array.dtype.name
        if stored not in HELD:
            return self.graph.constant(name, array)
        v = self.graph.constant(name, array.astype(HELD[stored]))
        self.half[v] = stored
        return v

    def graph_input(self, v: Value) -> Value:
        """The value converters see for graph input v: stored-type inputs widen on entry."""
        return self._widened(v, keep_narrow=False) if v.type.dtype in HELD else v

    def graph_output(self, v: Value) -> Value:
        """Stored-type outputs narrow back (their values are already on the type's grid)."""
        if v not in self.half:
            return v
        narrow = self._narrow.get(v)
        if narrow is not None:
            return narrow
        # exact for values on the grid: E5M2's inf stays inf, and FLOAT8E8M0's smallest value, 2^-127, a
        # float32 subnormal, is kept only by rounding down
        stored = self.half[v]
        exact = {"saturate": False} if stored in FLOAT8 else {}
        if stored == "float8_e8m0fnu":
            exact["round_mode"] = "down"
        return emit_node(self.graph, "cast", [v], {"to": stored, **exact}, _name(v, stored))[0]

    def after_node(self, node: onnx.NodeProto, env: dict[str, Value], first_new: int) -> None:
        """Round (or mark) the tensor outputs of ONNX ``node``, converted into ``graph.nodes[first_new:]``.
        Sequences are left alone: their items are values, marked as they were made."""
        produced = {id(o): n for n in self.graph.nodes[first_new:] for o in n.outputs}
        wanted = self._output_types(node, [env.get(i) if i else None for i in node.input])
        for name, want in zip(node.output, wanted):
            v = env.get(name) if name else None
            if not isinstance(v, Value):
                continue
            if v.type.dtype in HELD:  # a converter's stored-type tensor (QuantizeLinear's) or constant
                env[name] = self.constant(_name(v, HELD[v.type.dtype]), v.const) if v.is_const \
                    else self._widened(v)
            elif want is not None and self.half.get(v) != want:
                env[name] = self._rounded(node, v, produced.get(id(v)), want)
            elif want is None and v in self.half:  # Cast(to=FLOAT) of fp16: the same numbers, unmarked
                env[name] = emit_node(self.graph, "reshape", [v], {"shape": list(v.type.shape)},
                                      _name(v, v.type.dtype))[0]

    def _output_types(self, node: onnx.NodeProto, inputs: list) -> list[str | None]:
        """The stored type of each of the node's outputs (None: not one)."""
        attrs = {a.name: a for a in node.attribute}
        n = len(node.output)
        if node.op_type == "Cast":
            return [stored_type(attrs["to"].i)] * n
        for attr in ("dtype", "output_dtype"):
            if attrs.get(attr) is not None and attrs[attr].i:
                return [stored_type(attrs[attr].i)] * n
        marks = [self.half.get(v) if isinstance(v, Value) else None for v in inputs]
        if node.op_type in _TYPED_LIKE:
            return [marks[_TYPED_LIKE[node.op_type]] if len(marks) > _TYPED_LIKE[node.op_type] else None] * n
        if not any(marks):
            return [None] * n
        formal = _formal_types(node.op_type, node.domain, int(self.graph.meta.get("opset") or 1))
        if formal is None:  # no schema to read: every output as its first stored input
            return [next(m for m in marks if m)] * n
        ins, outs = formal
        in_types = [ins[min(i, len(ins) - 1)] for i in range(len(marks))]
        return [next((m for m, t in zip(marks, in_types) if m and t == outs[min(j, len(outs) - 1)]), None)
                for j in range(n)]

    def _widened(self, narrow: Value, keep_narrow: bool = True) -> Value:
        """A run-time stored-type value as its held type, marked (and remembered, for graph outputs)."""
        stored = narrow.type.dtype
        wide = emit_node(self.graph, "cast", [narrow], {"to": HELD[stored]}, _name(narrow, HELD[stored]))[0]
        self.half[wide] = stored
        if keep_narrow:
            self._narrow[wide] = narrow
        return wide

    def _rounded(self, node: onnx.NodeProto, v: Value, producer: Node | None, want: str) -> Value:
        """v, the held-type result of an ONNX node whose output is of stored type ``want``, on its grid."""
        held = HELD[want]
        attrs = {a.name: a for a in node.attribute}
        params = {}
        if want in FLOAT8:  # Cast, CastLike: ONNX's defaults where the node leaves them out
            params["saturate"] = bool(attrs["saturate"].i) if "saturate" in attrs else True
            if "round_mode" in attrs:
                params["round_mode"] = attrs["round_mode"].s.decode()
        if v.is_const:
            out = self.constant(_name(v, want), cast_numpy(v.const, want, **params))
            if np.array_equal(out.const, v.const):  # already on the grid: still the quantized weights
                out.quant = v.quant
            return out
        if producer is not None and producer.op in EXACT_OPS and v.type.dtype == held and all(
                self.half.get(i) == want or i.type.dtype != held for i in producer.inputs):
            self.half[v] = want
            return v
        if want in _ROUND_OPS and v.type.dtype == "float32":
            out = emit_node(self.graph, _ROUND_OPS[want], [v], {}, _name(v, want))[0]
            self.half[out] = want
            return out
        if v.type.dtype == "float32" if held == "float32" else np.dtype(v.type.dtype).kind in "biu":
            narrow = emit_node(self.graph, "cast", [v], {"to": want, **params}, _name(v, want))[0]
            return self._widened(narrow)
        raise UnsupportedOperator(node.op_type, node_name(node), None,
                                  f"it computes a {want} tensor from {v.type.dtype} at run time")
