"""ONNX converter table (the shared ``ConverterTable``: each public module of this package is one op
family, loaded on first lookup) and the per-node conversion context."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import NotConstant, ShapeError, UnsupportedOperator
from ...ir.graph import Graph, Node, Value
from ...ir.limits import MAX_OUTPUTS
from ..registry import ConverterTable, IRBuilder

if TYPE_CHECKING:
    import onnx

Converter = Callable[["ConvertContext"], None]
_NOT_CONVERTERS = ("float16", "importer", "registry")
#: ONNX op type (default domain) -> converter
CONVERTERS: ConverterTable[Converter] = ConverterTable("ONNX", __package__, skip=_NOT_CONVERTERS)
#: ``@converter("OnnxOp", ...)``: register the decorated function as the converter for those op types
converter = CONVERTERS.register
#: com.microsoft op type -> converter, the only table a node of that domain is looked up in: its Gelu,
#: Attention and RotaryEmbedding take other inputs and attributes than the default domain's namesakes
CONTRIB_CONVERTERS: ConverterTable[Converter] = ConverterTable("ONNX com.microsoft", __package__,
                                                               skip=_NOT_CONVERTERS)
#: ``@contrib_converter("Op", ...)``: the decorated function converts those com.microsoft op types
contrib_converter = CONTRIB_CONVERTERS.register
#: the domain whose operators ``CONTRIB_CONVERTERS`` converts
CONTRIB_DOMAIN = "com.microsoft"
#: ai.onnx.ml op type -> converter (scikit-learn's exporters write them: trees, Binarizer, ...)
ML_CONVERTERS: ConverterTable[Converter] = ConverterTable("ONNX ai.onnx.ml", __package__,
                                                          skip=_NOT_CONVERTERS)
ml_converter = ML_CONVERTERS.register
ML_DOMAIN = "ai.onnx.ml"
#: the table a node of each non-default domain is looked up in (any other: ``CONVERTERS``)
DOMAIN_CONVERTERS = {CONTRIB_DOMAIN: CONTRIB_CONVERTERS, ML_DOMAIN: ML_CONVERTERS}


class ConvertContext(IRBuilder):
    """What a converter sees for one ONNX node: inputs, attributes, opset, and ``emit`` for IR nodes.

    ``declared`` holds the model's own static shapes for tensors (graph outputs and value_info), for the
    few converters whose output shape depends on run-time data."""

    def __init__(self, graph: Graph, env: dict[str, Value], node: onnx.NodeProto, opset: int,
                 declared: Mapping[str, tuple[int, ...]] | None = None) -> None:
        from onnx import helper

        self.graph, self.env, self.proto, self.opset = graph, env, node, opset
        self.declared = declared or {}
        self.op_type = node.op_type
        self.name = node_name(node)
        self._attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.read_attrs: set[str] = set()  # what the converter asked for (``check_attrs_read``)

    # -- reading the node ---------------------------------------------------------------------
    @property
    def n_inputs(self) -> int:
        return len(self.proto.input)

    def has_input(self, i: int) -> bool:
        return i < len(self.proto.input) and self.proto.input[i] != ""

    def item(self, i: int) -> Any:
        """Input i as the import holds it: a tensor ``Value`` or a sequence (``TensorSeq``)."""
        if not self.has_input(i):
            raise self.unsupported(f"input {i} is required")
        try:
            return self.env[self.proto.input[i]]
        except KeyError:
            raise ShapeError(f"node {self.name!r} reads undefined tensor {self.proto.input[i]!r}") from None

    def input(self, i: int) -> Value:
        """Input i, which must be a tensor: a sequence fed to a tensor op is refused here, by name."""
        v = self.item(i)
        if not isinstance(v, Value):
            raise self.unsupported(f"input {i} ({self.proto.input[i]!r}) is a sequence, not a tensor")
        return v

    def inputs(self) -> list[Value]:
        return [self.input(i) for i in range(self.n_inputs) if self.has_input(i)]

    def const(self, i: int, default: Any = None) -> np.ndarray | None:
        """Input i's value, which must be known at build time (weights, folded shape chains)."""
        if not self.has_input(i):
            return default
        if not self.input(i).is_const:
            raise self.not_constant(i)
        return self.input(i).const

    def not_constant(self, i: int, why: str = "") -> NotConstant:
        """The error for input i, needed at build time (``why`` says what for) and known only at run time,
        naming the model inputs its value is computed from."""
        return NotConstant(self.op_type, self.name, self.opset, i, self.proto.input[i],
                           self.graph.inputs_feeding(self.input(i)), why)

    def scalar(self, i: int, what: str) -> Any:
        """Input i's one build-time value (a count, an axis, a step): empty or several is refused."""
        c = np.asarray(self.const(i))
        if c.size != 1:
            raise self.unsupported(f"the {what} (input {i}) must be one value, got shape {c.shape}")
        return c.reshape(-1)[0]

    def declared_shape(self, i: int = 0) -> tuple[int, ...] | None:
        """Output i's static shape as the model declares it, if it does."""
        return self.declared.get(self.proto.output[i]) if i < len(self.proto.output) else None

    def attr(self, name: str, default: Any = None) -> Any:
        self.read_attrs.add(name)
        v = self._attrs.get(name, default)
        if not isinstance(v, bytes):
            return v
        try:
            return v.decode()
        except UnicodeDecodeError:
            raise self.unsupported(f"attribute {name} is not UTF-8 text: {v[:40]!r}") from None

    def texts(self, name: str) -> list[str]:
        """A strings attribute (its items are protobuf bytes, which the load-time UTF-8 check of text
        fields does not cover) as text; an item that is not UTF-8 is refused naming the attribute."""
        out = []
        for v in self.attr(name, []) or []:
            try:
                out.append(v.decode() if isinstance(v, bytes) else str(v))
            except UnicodeDecodeError:
                raise self.unsupported(f"attribute {name} holds text that is not UTF-8: {v[:40]!r}") from None
        return out

    def positive_ints(self, name: str, default: Sequence[int], n: int) -> list[int]:
        """Int-list attribute ``name`` (strides, dilations, a kernel) with one item >= 1 per spatial
        axis: a 0 or a negative one (later a divisor or a size) or the wrong count is refused here."""
        got = [int(v) for v in self.attr(name, default)]
        if len(got) != n or any(v < 1 for v in got):
            raise self.unsupported(f"{name}={got}: needs {n} values, each at least 1")
        return got

    def axis(self, value: Any, rank: int, what: str = "axis") -> int:
        """``value`` (an int, or a constant's one integer) as an axis of a rank-``rank`` tensor (negative
        counts from the back)."""
        v = int_list(value, f"{self.name}: {what}")
        if len(v) != 1 or not -rank <= v[0] < rank:
            raise self.unsupported(f"{what} {v} is outside a rank-{rank} tensor")
        return v[0] % rank

    def check_attrs_read(self) -> None:
        """Refuse the node when it sets an attribute its converter never read to anything but the
        schema's default at this opset: a later opset's new attribute (SpaceToDepth's ``mode`` at 28,
        DequantizeLinear's ``output_dtype`` at 23) is refused by name instead of silently ignored."""
        from onnx import defs, helper

        unread = [a for a in self.proto.attribute if a.name not in self.read_attrs]
        if not unread:
            return
        try:
            schema = defs.get_schema(self.op_type, self.opset, self.proto.domain)
        except defs.SchemaError:  # contrib ops: their converters read every attribute they honour
            if self.proto.domain == CONTRIB_DOMAIN:
                raise self.unsupported(f"attribute {unread[0].name} is not supported") from None
            return
        for a in unread:
            spec = schema.attributes.get(a.name)
            value = helper.get_attribute_value(a)
            if spec is not None and spec.default_value.type and \
                    _same(helper.get_attribute_value(spec.default_value), value):
                continue
            raise self.unsupported(f"attribute {a.name}={value!r} is not supported")

    def check_dtypes(self, nodes: Sequence[Node]) -> None:
        """The IR nodes this ONNX node became run on element types their kernels take (``OpDef.dtypes``),
        else the ONNX node is refused naming the dtype: never generated code that does not compile."""
        from ...ops.registry import get

        for n in nodes:
            if (wrong := get(n.op).dtype_problem(n)) is not None:
                raise self.unsupported(wrong)

    def unsupported(self, detail: str = "") -> UnsupportedOperator:
        domain = self.proto.domain
        op = self.op_type if domain in ("", "ai.onnx") else f"{domain}.{self.op_type}"
        return UnsupportedOperator(op, self.name, self.opset, detail)

    # -- producing IR (emit, emit1, constant: IRBuilder) ------------------------------------------
    def set_outputs(self, *values: Value) -> None:
        for out_name, v in zip(self.proto.output, values):
            if out_name:
                self.env[out_name] = v



def int_list(values: Any, what: str) -> list[int]:
    """A build-time shape, axes or sizes as ints: integers only (a float tensor's NaN or infinity has
    no int), at most ``MAX_OUTPUTS`` of them (a rank, a node's outputs), refused with a ``ShapeError``
    naming ``what`` otherwise."""
    a = np.asarray(values).reshape(-1)
    if a.dtype.kind not in "iub":
        raise ShapeError(f"{what}: {a.dtype} values {a[:8].tolist()} where integers are needed")
    if a.size > MAX_OUTPUTS:  # a folded input can be huge: a Python list of it would be many times more
        raise ShapeError(f"{what}: {a.size} values, over the limit of {MAX_OUTPUTS} (cuvil_edge.ir.limits)")
    return [int(v) for v in a]


def node_name(node: onnx.NodeProto) -> str:
    """A node's name for errors and IR: its own, else made from its op and first output."""
    return node.name or f"{node.op_type}_{node.output[0] if node.output else '?'}"


def _same(default: Any, value: Any) -> bool:
    """An attribute's value equals its schema default (lists and floats compared as values)."""
    try:
        return bool(np.array_equal(np.asarray(default), np.asarray(value)))
    except (TypeError, ValueError):
        return default == value
