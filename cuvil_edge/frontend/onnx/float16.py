"""fp16 graphs: ONNX float16 tensors run as float32 values that hold float16 numbers.

wasm has no half arithmetic, so the importer keeps every converter on float32: fp16 initializers and
constants widen to float32 (exactly), fp16 graph inputs are widened by a ``cast`` as they enter, and
fp16 graph outputs narrowed by one as they leave. After each ONNX node whose output is float16 a
``round_f16`` node rounds the float32 result to the nearest half (to nearest even, overflow to inf,
subnormals kept): each op computes in f32 and yields a float16 tensor, as ONNX defines. Data movement
cannot leave the fp16 grid, so it is not rounded again (``EXACT_OPS``). onnxruntime's CPU provider
skips some of these roundings (it runs chains of fp16 ops that lack fp16 kernels in f32 and removes the
casts between them), so the two agree within fp16 tolerance rather than bit for bit.

Which outputs are float16 follows ONNX's type rules: ``Cast`` and ops with a ``dtype`` attribute say
so, constants by their own type, every other op has the float type of its float16 inputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...errors import UnsupportedOperator
from ...ir.graph import Graph, Node, Value
from ..registry import emit_node

if TYPE_CHECKING:
    import onnx

#: onnx.TensorProto.FLOAT16
ONNX_FLOAT16 = 10
#: IR ops whose float32 output holds only numbers of their float16 inputs: no rounding after them
EXACT_OPS = frozenset({"reshape", "copy", "transpose", "concat", "split", "slice", "pad", "expand", "tile",
                       "gather", "where", "round_f16"})


class HalfFloats:
    """Tracks which float32 IR values stand for float16 ONNX tensors while one model is imported."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.half: set[Value] = set()

    def constant(self, name: str, array: np.ndarray) -> Value:
        """An initializer or constant: float16 arrays become float32 (exact) and are marked."""
        if array.dtype != np.float16:
            return self.graph.constant(name, array)
        v = self.graph.constant(name, array.astype(np.float32))
        self.half.add(v)
        return v

    def graph_input(self, v: Value) -> Value:
        """The value converters see for graph input v: float16 inputs widen to float32 on entry."""
        if v.type.dtype != "float16":
            return v
        wide = emit_node(self.graph, "cast", [v], {"to": "float32"}, f"{v.name}/f32")[0]
        self.half.add(wide)
        return wide

    def graph_output(self, v: Value) -> Value:
        """float16 outputs narrow back to float16 (their values are already on the fp16 grid)."""
        if v not in self.half:
            return v
        return emit_node(self.graph, "cast", [v], {"to": "float16"}, f"{v.name}/f16")[0]

    def after_node(self, node: onnx.NodeProto, env: dict[str, Value], first_new: int) -> None:
        """Round (or mark) the tensor outputs of ONNX ``node``, converted into ``graph.nodes[first_new:]``.
        Sequences are left alone: their items are values, marked as they were made."""
        produced = {id(o): n for n in self.graph.nodes[first_new:] for o in n.outputs}
        half_out = self._output_is_half(node, [env[i] for i in node.input if i])
        for name in filter(None, node.output):
            v = env[name]
            if not isinstance(v, Value):
                continue
            if v.type.dtype == "float16":
                if not v.is_const:
                    raise UnsupportedOperator(node.op_type, node.name or name, None,
                                              "it makes a float16 tensor at run time")
                env[name] = self.constant(f"{v.name}/f32", v.const)
            elif half_out and v.type.dtype == "float32" and v not in self.half:
                env[name] = self._rounded(v, produced.get(id(v)))
            elif not half_out and v in self.half:  # Cast(to=FLOAT) of fp16: the same numbers, unmarked
                env[name] = emit_node(self.graph, "reshape", [v], {"shape": list(v.type.shape)},
                                      f"{v.name}/f32")[0]

    def _output_is_half(self, node: onnx.NodeProto, inputs: list) -> bool:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Cast":
            return attrs["to"].i == ONNX_FLOAT16
        if node.op_type == "CastLike":  # the type of the tensor it is cast like
            return isinstance(inputs[1], Value) and inputs[1] in self.half
        if "dtype" in attrs:
            return attrs["dtype"].i == ONNX_FLOAT16
        return any(isinstance(v, Value) and v in self.half for v in inputs)

    def _rounded(self, v: Value, producer: Node | None) -> Value:
        if v.is_const:
            out = self.constant(f"{v.name}/f16", v.const.astype(np.float16))
            if np.array_equal(out.const, v.const):  # already on the fp16 grid: still the quantized weights
                out.quant = v.quant
        elif producer is not None and producer.op in EXACT_OPS and all(
                i in self.half or i.type.dtype != "float32" for i in producer.inputs):
            out = v
        else:
            out = emit_node(self.graph, "round_f16", [v], {}, f"{v.name}/f16")[0]
        self.half.add(out)
        return out

