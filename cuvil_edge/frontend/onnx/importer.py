"""ONNX -> IR. Weights from initializers and Constant nodes; shapes made static at build time; fp16 tensors
run as float32 rounded to half after each op (``float16.py``); out-of-order nodes are sorted first."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from runtime_wasm.spec import LENGTH_SUFFIX  # the device's name for a data-dependent length's output

from ...errors import InputError, ModelFormatError, NotConstant, ShapeError, UnsupportedOperator
from ...ir.graph import STRING_WIDTH, Graph, TensorType, Value, string_width
from ...ir.limits import import_budget
from ...quant.qdq import fuse_qdq, graph_record
from . import containers, held_int8
from .convert_random import keep_run_counter
from .float16 import HalfFloats
from .registry import (
    CONTRIB_DOMAIN,
    CONVERTERS,
    DOMAIN_CONVERTERS,
    ML_CONVERTERS,
    ML_DOMAIN,
    ConvertContext,
    node_name,
)

#: every default-domain opset the onnx wheel defines (1.23: 28); an op's later versions are accepted where
#: they only widen its types, and a node using an attribute its converter does not read is refused
MIN_OPSET, MAX_OPSET = 7, 28
#: non-default-domain operators with a converter (com.microsoft ones in ``CONTRIB_CONVERTERS``, the others
#: in ``CONVERTERS``, under their op_type)
CONTRIB_OPS = frozenset({("ai.onnx.preview.training", "Gradient"), *((CONTRIB_DOMAIN, op) for op in (
    "Attention", "BiasGelu", "DynamicQuantizeMatMul", "EmbedLayerNormalization", "FastGelu", "FusedMatMul",
    "Gelu", "GroupQueryAttention", "MatMulNBits", "MultiHeadAttention", "QLinearAdd", "QLinearAveragePool",
    "QLinearConcat", "QLinearGlobalAveragePool", "QLinearLeakyRelu", "QLinearMul", "QLinearSigmoid",
    "QLinearSoftmax", "QuickGelu", "RotaryEmbedding", "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization"))})
#: operators onnxruntime defines in the default domain and onnx does not (its transformer optimizer writes
#: them): onnx's checker, which refuses an unknown default-domain op, sees them in the contrib domain
ORT_DEFAULT_DOMAIN_OPS = frozenset({"SimplifiedLayerNormalization"})
#: non-default-domain operators onnx defines as functions: expanded as the default domain's are
FUNCTION_OPS = frozenset({("ai.onnx.preview", "FlexAttention")})


def load_onnx(model: str | os.PathLike[str] | bytes | Any):
    """Read and check an ONNX model; every failure is a ``ModelFormatError``."""
    import onnx

    raw = bytes(model) if isinstance(model, (bytes, bytearray)) else None
    try:
        if isinstance(model, onnx.ModelProto):
            proto = model
        elif raw is not None:
            proto = onnx.load_from_string(raw)
        else:
            proto = onnx.load(os.fspath(model))
    except FileNotFoundError:
        raise
    except Exception as exc:  # onnx raises DecodeError, ValueError, ... for corrupt files
        raise ModelFormatError(f"not a readable ONNX model: {exc}") from exc
    _check_text(proto, "model")
    ordered = _topologically_sorted(proto)
    checked = _checkable(ordered)
    try:  # a ModelProto is serialized again for the checker (0.25 s per 170 MB): give it the bytes read
        onnx.checker.check_model(raw if raw is not None and checked is proto else checked)
    except Exception as exc:
        raise ModelFormatError(f"ONNX model fails the checker: {str(exc).splitlines()[0]}") from exc
    return ordered


def _checkable(proto: Any) -> Any:
    """``proto`` as onnx's checker takes it: a copy with the ``ORT_DEFAULT_DOMAIN_OPS`` nodes of its graph
    moved to the contrib domain (whose schemas the checker does not know), or itself when it has none."""
    from onnx import helper

    def ort_own(node: Any) -> bool:
        return node.domain in ("", "ai.onnx") and node.op_type in ORT_DEFAULT_DOMAIN_OPS

    if not any(ort_own(n) for n in proto.graph.node):
        return proto
    out = type(proto)()
    out.CopyFrom(proto)
    for n in out.graph.node:
        if ort_own(n):
            n.domain = CONTRIB_DOMAIN
    if all(o.domain != CONTRIB_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(CONTRIB_DOMAIN, 1))
    return out


def _check_text(msg: Any, where: str) -> None:
    """Every string field of ``msg`` and of the messages in it is text. protobuf hands a name that is not
    valid UTF-8 back as bytes, which name lookups and onnx's own helpers then trip on (a fuzzed model's
    output name ``b'\\xe1'`` ended in a UnicodeDecodeError inside onnx.helper)."""
    from google.protobuf.descriptor import FieldDescriptor

    for field, value in msg.ListFields():
        if field.type not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
            continue
        items = value if field.is_repeated else [value]
        for item in items:
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                _check_text(item, f"{where}.{field.name}")
            elif not isinstance(item, str):
                raise ModelFormatError(f"{where}.{field.name} is not valid UTF-8 text: {bytes(item)[:40]!r}")


def _upgraded(proto: Any) -> Any:
    """A model of an opset before ``MIN_OPSET`` through onnx's version converter (its adapters rewrite
    the ops whose meaning changed), or ``ModelFormatError`` when it has no adapter for one."""
    from onnx import version_converter

    try:
        return version_converter.convert_version(proto, MIN_OPSET)
    except Exception as exc:  # the converter raises RuntimeError/ValueError for ops it cannot adapt
        raise ModelFormatError(f"ONNX opset {next(o.version for o in proto.opset_import)} could not be "
                               f"upgraded to {MIN_OPSET}: {str(exc).splitlines()[0]}") from exc


def _reads(node: Any) -> list[str]:
    """Names a node reads, those of its subgraphs' nodes included (outer-scope values)."""
    names = list(node.input)
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            names += [x for n in sub.node for x in _reads(n)]
    return names


def _topologically_sorted(proto: Any) -> Any:
    """onnxruntime runs graphs whose nodes are out of order (its fp16 converter writes some when it keeps
    float32 inputs): such a graph comes back as a copy in order, each node as early as it can run and
    ties in file order; an ordered graph (or one with a cycle, for the checker to name) as it is."""
    import heapq

    nodes = proto.graph.node
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    deps = [{producer[x] for x in _reads(n) if x in producer} - {i} for i, n in enumerate(nodes)]
    if all(d < i for i, ds in enumerate(deps) for d in ds):
        return proto
    users: dict[int, list[int]] = {}
    for i, ds in enumerate(deps):
        for d in ds:
            users.setdefault(d, []).append(i)
    waiting = [len(ds) for ds in deps]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, []):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(nodes):
        return proto
    out = type(proto)()
    out.CopyFrom(proto)
    del out.graph.node[:]
    out.graph.node.extend(nodes[i] for i in order)
    return out


#: the ops that read string tensors (held as ``S<W>`` rows: ``ops/strings.py``); any other refuses them
STRING_OPS = ("StringNormalizer",)
_STRINGS_ONLY = f"string tensors are supported only as model inputs read by {', '.join(STRING_OPS)}"


def import_onnx(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
                name: str | None = None, max_trip_count: Mapping[str, int] | None = None,
                max_string_bytes: int = STRING_WIDTH, bind: Mapping[str, Any] | None = None) -> Graph:
    """``max_trip_count``: Loop node name -> most iterations, for loops whose trip count is not a
    build-time constant (their scan outputs are allocated for it; see ``convert_control``).
    ``bind``: input name -> its value, fixed at build time (the input leaves the graph's inputs and is
    a constant to every converter: an axis, shape or pads fed as an input, see ``NotConstant``).
    ``max_string_bytes``: UTF-8 bytes each element of a string input holds (a longer one is refused at
    run time, never cut)."""
    if not isinstance(max_string_bytes, int) or max_string_bytes < 1:
        raise InputError(f"max_string_bytes must be a positive int, got {max_string_bytes!r}")
    proto = load_onnx(model)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:  # only other domains' operators (ai.onnx.ml, a vendor's): refused by name below
        opset = MAX_OPSET
    elif opset < MIN_OPSET:
        proto, opset = _upgraded(proto), MIN_OPSET
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ModelFormatError(f"ONNX opset {opset} is outside the supported range {MIN_OPSET}-{MAX_OPSET}")
    g = proto.graph
    graph = Graph(name or g.name or "model")
    graph.meta.update(source="onnx", opset=opset, producer=proto.producer_name,
                      max_trip_count=dict(max_trip_count or {}))
    env: dict[str, Value] = {}
    scope = _ImportScope(HalfFloats(graph), _declared_shapes(g))
    held = proto.ByteSize()  # the model's bytes, weights in external files included (``load_onnx`` read them)
    for init in g.initializer:
        if init.data_type == _ONNX_STRING:
            raise UnsupportedOperator("Initializer", init.name, opset, _STRINGS_ONLY)
        env[init.name] = scope.half.constant(init.name, tensor_array(init, "Initializer", init.name, opset))

    with import_budget(held):  # what converters and folds create, beyond what the model holds
        shapes, bound = dict(input_shapes or {}), dict(bind or {})
        for inp in g.input:
            if inp.name in env:
                continue  # old-style graphs list initializers as inputs too
            if inp.name in bound:
                value = _bound_value(inp, bound.pop(inp.name), shapes.pop(inp.name, None), max_string_bytes)
                env[inp.name] = scope.half.constant(inp.name, value)
                graph.meta.setdefault("bound_inputs", []).append(inp.name)
                continue
            if containers.sequence_item_type(inp) is not None:
                env[inp.name] = containers.sequence_input(  # type: ignore[assignment]
                    graph, inp, shapes.pop(inp.name, None), scope.half,
                    lambda vi, s: _input_type(vi, s, max_string_bytes))
                continue
            v = graph.value(inp.name, _input_type(inp, shapes.pop(inp.name, None), max_string_bytes))
            graph.inputs.append(v)
            env[inp.name] = scope.half.graph_input(v)
        names = [i.name for i in g.input if i.name not in {t.name for t in g.initializer}]
        if shapes:
            raise ShapeError(f"--input-shape names unknown inputs {sorted(shapes)}; model inputs are {names}")
        if bound:
            raise InputError(f"bind names unknown inputs {sorted(bound)}; model inputs are {names}")

        _convert_nodes(graph, env, g.node, opset, scope)
        outs, graph.meta["output_names"] = containers.graph_outputs(graph, g.output, env, opset)
        graph.outputs.extend(scope.half.graph_output(held_int8.graph_output(graph, v, t)) for v, t in outs)
        add_length_outputs(graph)
        keep_run_counter(graph)  # after the model's own outputs: a state's output comes last
        record = graph_record(graph, "onnx")  # the model's own quantization (QDQ, QLinear*), for ``inspect``
        if record is not None:
            graph.meta["source_quantization"] = record
        fuse_qdq(graph)  # pre-quantized layers onto the integer kernels while their weights are known
    return graph


@dataclass
class _ImportScope:
    """Per-model import state the node loop threads through (also into inlined ``If`` branches)."""

    half: HalfFloats
    declared: Mapping[str, tuple[int, ...]]


def _declared_shapes(graph_proto: Any) -> dict[str, tuple[int, ...]]:
    """Static shapes the model declares for its outputs and intermediate values (value_info)."""
    out = {}
    for vi in [*graph_proto.value_info, *graph_proto.output]:
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    return out


def _convert_nodes(graph: Graph, env: dict[str, Value], nodes: Sequence[Any], opset: int,
                   scope: _ImportScope) -> None:
    for node in nodes:
        if node.domain not in ("", "ai.onnx") and (node.domain, node.op_type) not in CONTRIB_OPS | \
                FUNCTION_OPS and not (node.domain == ML_DOMAIN and ML_CONVERTERS.get(node.op_type)):
            raise UnsupportedOperator(f"{node.domain}.{node.op_type}", node_name(node), opset,
                                      "custom-domain operators are not supported")
        cond = env.get(node.input[0]) if node.op_type == "If" and node.input else None
        if isinstance(cond, Value) and cond.is_const:
            _inline_if(graph, env, node, opset, scope)
            continue
        if node.op_type == "Loop" and any(not isinstance(env.get(x), Value) for x in node.input[2:] if x):
            containers.unroll_loop(ConvertContext(graph, env, node, opset, scope.declared),
                                   lambda b, bound, at: _inline_body(graph, env, b, bound, opset, scope, at))
            continue
        if node.op_type not in STRING_OPS and _touches_strings(node, env):
            raise UnsupportedOperator(node.op_type, node_name(node), opset, _STRINGS_ONLY)
        fn = DOMAIN_CONVERTERS.get(node.domain, CONVERTERS).get(node.op_type)
        if fn is None:
            expanded = _function_body(node, env, opset, scope.half.half)
            if expanded is None:
                raise UnsupportedOperator(node.op_type, node_name(node), opset)
            body, body_opset = expanded
            try:
                _convert_nodes(graph, env, body, body_opset, scope)
            except NotConstant as exc:  # the same, and still which model inputs would fix it
                raise NotConstant(node.op_type, node_name(node), opset, exc.index, exc.input_name,
                                  exc.model_inputs, f"its ONNX function: unsupported operator "
                                  f"{exc.op_type!r} at node {exc.node!r}") from exc
            except UnsupportedOperator as exc:  # name the model's own node, then what stopped inside it
                raise UnsupportedOperator(node.op_type, node_name(node), opset,
                                          f"its ONNX function: {exc}") from exc
            continue
        ctx = ConvertContext(graph, env, node, opset, scope.declared)
        first_new = len(graph.nodes)
        fn(ctx)
        ctx.check_attrs_read()
        ctx.check_dtypes(graph.nodes[first_new:])
        missing = [o for o in node.output if o and o not in env]
        if missing:
            raise ctx.unsupported(f"outputs {missing} were not produced")
        scope.half.after_node(node, env, first_new)


#: the private domain an operator's schema function is declared in while onnx's inliner expands it
_EXPAND_DOMAIN = "cuvil.expand"


def _function_body(node: Any, env: Mapping[str, Any], opset: int, half: Mapping[Value, str]
                   ) -> tuple[list[Any], int] | None:
    """An operator without a converter whose ONNX schema defines it as a function of other operators
    (Attention, RotaryEmbedding, the losses, MeanVarianceNormalization, ... at this opset): that
    function's nodes for this node, expanded by onnx's own inliner (renaming, attribute references,
    subgraphs), and the opset they are written at. None when the schema has no function."""
    import onnx
    import onnx.inliner
    from onnx import defs, helper

    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain and (domain, node.op_type) not in FUNCTION_OPS:
        return None
    try:
        schema = defs.get_schema(node.op_type, opset, domain)
    except defs.SchemaError:
        return None
    fixed = [v for v in schema.function_opset_versions if v <= opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if not fixed and not dependent:
        return None
    inputs = []
    for name in node.input:
        if not name:  # an optional input left out: an untyped place keeps the later ones' positions
            inputs.append(onnx.ValueInfoProto())
            continue
        typed = containers.typed_input(name, env.get(name), half, _ONNX_OF_DTYPE)
        if typed is None:
            return None
        inputs.append(typed)
    function = onnx.FunctionProto()
    if dependent and (not fixed or max(dependent) >= max(fixed)):
        raw = schema.get_context_dependent_function_with_opset_version(
            max(dependent), node.SerializeToString(), [i.type.SerializeToString() for i in inputs])
    else:
        raw = schema.get_function_with_opset_version(max(fixed))
    function.ParseFromString(raw)
    function.domain = _EXPAND_DOMAIN
    call = onnx.NodeProto()
    call.CopyFrom(node)
    call.domain = _EXPAND_DOMAIN
    for name, attr in schema.attributes.items():  # the schema's defaults, for the body's references
        if attr.default_value.type and name not in {a.name for a in call.attribute}:
            call.attribute.append(attr.default_value)
    body_opset = next((o.version for o in function.opset_import if o.domain in ("", "ai.onnx")), opset)
    graph = helper.make_graph([call], "expand", [i for i in inputs if i.name],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
                               for o in node.output if o])
    model = helper.make_model(graph, functions=[function], opset_imports=[
        helper.make_opsetid("", body_opset), helper.make_opsetid(_EXPAND_DOMAIN, 1)])
    inlined = onnx.inliner.inline_local_functions(model)
    return list(inlined.graph.node), body_opset


def _touches_strings(node: Any, env: Mapping[str, Any]) -> bool:
    """Whether the node reads a string tensor or holds one in an attribute (Constant's value)."""
    held = any(a.name == "value_strings" or (a.HasField("t") and a.t.data_type == _ONNX_STRING)
               for a in node.attribute)
    return held or any(isinstance(v := env.get(x), Value) and string_width(v.type.dtype) for x in node.input)


def _inline_if(graph: Graph, env: dict[str, Value], node: Any, opset: int, scope: _ImportScope) -> None:
    """An ``If`` whose condition folds at build time: the taken branch's nodes join the parent graph
    (branch names are scoped so they cannot shadow the parent's; outer names stay visible)."""
    from onnx import helper

    ctx = ConvertContext(graph, env, node, opset)
    taken = "then_branch" if bool(ctx.scalar(0, "condition")) else "else_branch"
    branch = helper.get_attribute_value(next(a for a in node.attribute if a.name == taken))
    ctx.set_outputs(*_inline_body(graph, env, branch, {}, opset, scope, ctx.name))


def _inline_body(graph: Graph, env: dict[str, Any], body: Any, bound: Mapping[str, Any], opset: int,
                 scope: _ImportScope, tag: str) -> list[Any]:
    """The nodes of graph attribute ``body`` (a branch, an unrolled Loop's iteration) joined to the parent
    graph with its inputs ``bound`` (name -> value), its outputs returned as the import holds them. Its
    names are scoped so they cannot shadow the parent's; outer names stay visible."""
    inner = {**env, **bound}
    for init in body.initializer:
        inner[init.name] = scope.half.constant(f"{tag}/{init.name}",
                                               tensor_array(init, "Initializer", init.name, opset))
    _convert_nodes(graph, inner, body.node, opset, scope)
    return [inner[o.name] for o in body.output]


def import_subgraph(ctx: ConvertContext, attr: str, formal: Sequence[TensorType],
                    sequences: bool = False) -> tuple[Graph, list[Value]]:
    """Graph attribute ``attr`` of the node (a Loop body, an If branch) as its own graph: inputs are
    ``formal`` (typed here, the ONNX ones may be unshaped) then one per outer run-time value it reads
    (returned as the captures, in that order); outer constants are used directly. ``sequences``: it
    may return sequences and optionals too (``containers.body_outputs``)."""
    body, opset = ctx.attr(attr), ctx.opset
    graph = Graph(f"{ctx.name}/{attr}")
    graph.meta.update(opset=opset, max_trip_count=ctx.graph.meta.get("max_trip_count", {}))
    scope = _ImportScope(HalfFloats(graph), _declared_shapes(body))
    env: dict[str, Value] = {}
    for inp, ttype in zip(body.input, formal):
        env[inp.name] = graph.value(inp.name, ttype)
        graph.inputs.append(env[inp.name])
    for init in body.initializer:
        env[init.name] = scope.half.constant(init.name, tensor_array(init, "Initializer", init.name, opset))
    inner = set(env) | {o for n in body.node for o in n.output}
    captures: list[Value] = []
    for x in dict.fromkeys([*(x for n in body.node for x in _reads(n)), *(o.name for o in body.output)]):
        if not x or x in inner or x not in ctx.env:
            continue
        src = ctx.env[x]
        if not isinstance(src, Value):
            raise ctx.unsupported(f"its {attr} reads the sequence {x!r} (only tensors cross into bodies)")
        if src.is_const:
            env[x] = src
        else:
            env[x] = graph.value(x, src.type)
            graph.inputs.append(env[x])
            captures.append(src)
    _convert_nodes(graph, env, body.node, opset, scope)
    graph.outputs = containers.body_outputs(graph, env, body.output, sequences, f"its {attr}",
                                            ctx.unsupported)
    add_length_outputs(graph)
    return graph, captures


class Padded(NamedTuple):
    """A value allocated for its bound whose real length is known only at run time (entries of
    ``graph.meta["padded_scans"]`` by the value's id): its int64 ``length``, the node and op that made it."""

    length: Value
    node: str
    op: str = "Loop"  # Loop's and StringNormalizer's converters record (length, node)


#: IR ops whose output keeps its input's layout and zero padding (an fp16 graph's rounding and casts):
#: a padded value they read passes its length on
PADDING_SAFE_OPS = frozenset({"cast", "round_f16", "round_bf16"})


def mark_padded(ctx: ConvertContext, v: Value, length: Value) -> None:
    """Record that ``v`` is allocated for its bound and holds ``length`` entries at run time: a model
    output gets ``<name>:length`` for it, any other use is refused naming ``ctx``'s node."""
    ctx.graph.meta.setdefault("padded_scans", {})[id(v)] = Padded(length, ctx.name, ctx.op_type)


def add_length_outputs(graph: Graph) -> None:
    """A graph output of run-time length (``Padded``: a Loop's scan output, NonZero's result, ...) gets a
    companion output ``<name>:length`` (int64: its real entries); such a value must be read by nothing
    but ``PADDING_SAFE_OPS``."""
    padded = {k: Padded(*e) for k, e in graph.meta.pop("padded_scans", {}).items()}
    if not padded:
        return
    names, opset = graph.meta.get("output_names"), graph.meta.get("opset")
    for node in graph.nodes:
        for v in node.inputs:
            src = padded.get(id(v))
            if src is None:
                continue
            if node.op in PADDING_SAFE_OPS and node.outputs[0].type.shape == v.type.shape:
                padded[id(node.outputs[0])] = src
                continue
            raise UnsupportedOperator(src.op, src.node, opset,
                                      f"its output {v.name!r} has a run-time length and is read by node "
                                      f"{node.name!r}: only model outputs may have one")
    if names is None:  # a body: its outputs have one static shape per iteration
        bad = next((v for v in graph.outputs if id(v) in padded), None)
        if bad is not None:
            raise UnsupportedOperator(padded[id(bad)].op, padded[id(bad)].node, opset,
                                      f"its output {bad.name!r} has a run-time length and is an "
                                      "output of an enclosing body: only model outputs may have one")
        return
    for v, out_name in list(zip(graph.outputs, names)):
        if id(v) in padded:
            graph.outputs.append(padded[id(v)].length)
            names.append(out_name + LENGTH_SUFFIX)


_ONNX_STRING = 8  # TensorProto.STRING: an input held as ``S<max_string_bytes>``
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
                9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
                # stored types (float16.py): held wider between the graph's edges
                16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2",
                20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1fn", 24: "float8_e8m0fnu",
                25: "uint2", 26: "int2"}
#: IR dtype -> ONNX element type (the typed call ``_function_body`` expands)
_ONNX_OF_DTYPE = {v: k for k, v in _ONNX_DTYPES.items()}


def _bound_value(inp: Any, value: Any, override: Sequence[int] | None, max_string_bytes: int) -> np.ndarray:
    """``value`` as the constant input ``inp`` is bound to: converted to the input's element type when
    every value fits it exactly, in a shape its declared one allows."""
    given = np.asarray(value)
    declared = _static_dims(inp)
    if declared is not None and given.shape != declared and given.size == int(np.prod(declared)):
        given = given.reshape(declared)  # a flat list for an input of static shape (``--bind axes=1``)
    if override is not None and tuple(int(d) for d in override) != given.shape:
        raise InputError(f"bind: {inp.name!r} has shape {given.shape}, --input-shape says {tuple(override)}")
    want = _input_type(inp, given.shape, max_string_bytes).dtype
    if given.dtype.name == want:  # ml_dtypes' types (bfloat16, float8, int4: stored types) are kind "V"
        return given
    if given.dtype.kind not in "biuf":
        raise InputError(f"bind: {inp.name!r} takes {want}, got {given.dtype}")
    with np.errstate(all="ignore"):
        arr = given.astype(want)
    if not np.array_equal(arr, given, equal_nan=arr.dtype.kind == "f"):
        raise InputError(f"bind: the values given for {inp.name!r} do not fit its type {want}")
    return arr


def _static_dims(inp: Any) -> tuple[int, ...] | None:
    """A tensor input's declared shape when every dimension is a number, else None."""
    tt = inp.type.tensor_type
    dims = tt.shape.dim if inp.type.HasField("tensor_type") and tt.HasField("shape") else None
    if dims is None or not all(d.HasField("dim_value") for d in dims):
        return None
    return tuple(int(d.dim_value) for d in dims)


def _input_type(inp: Any, override: Sequence[int] | None, max_string_bytes: int) -> TensorType:
    typ, held = inp.type, ""
    if typ.WhichOneof("value") == "optional_type":  # fed as its tensor: present in every run
        typ, held = typ.optional_type.elem_type, "optional "
    kind = typ.WhichOneof("value") or "untyped_type"  # an optional of nothing is not refused by the checker
    if kind != "tensor_type":  # sequence_type, map_type, sparse_tensor_type
        raise UnsupportedOperator("Input", inp.name, None,
                                  f"a {held}{kind.removesuffix('_type').replace('_', ' ')} input: graph "
                                  "inputs must be tensors or optional tensors")
    tt = typ.tensor_type
    dtype = f"S{max_string_bytes}" if tt.elem_type == _ONNX_STRING else _ONNX_DTYPES.get(tt.elem_type)
    if dtype is None:
        raise UnsupportedOperator("Input", inp.name, None,
                                  f"input element type {_type_name(tt.elem_type)} is not supported")
    if override is not None:
        shape = tuple(int(d) for d in override)
        # -1 marks a dynamic dimension in some exporters' models (paddle2onnx's), as a dim_param does
        declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                    for d in tt.shape.dim]
        if tt.HasField("shape") and (len(declared) != len(shape) or any(
                d is not None and d != s for d, s in zip(declared, shape))):
            raise ShapeError(f"input {inp.name!r}: shape {shape} conflicts with the model's {declared}")
        return TensorType(shape, dtype)
    if not tt.HasField("shape"):
        raise ShapeError(f"input {inp.name!r} has no shape: give one with --input-shape {inp.name}=...")
    dims = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(d.dim_value)
        elif i == 0:
            dims.append(1)  # symbolic batch: compile for batch 1 unless told otherwise
        else:
            raise ShapeError(f"input {inp.name!r} has a dynamic dimension {i} ({d.dim_param or '?'}): "
                             f"fix it at build time with --input-shape {inp.name}=...")
    return TensorType(tuple(dims), dtype)


def _type_name(elem_type: int) -> str:
    """An ONNX element type as its name (``FLOAT8E4M3FN``, ``UNDEFINED`` for a sequence or optional)."""
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def tensor_array(t: Any, op: str, where: str, opset: int | None) -> np.ndarray:
    """A TensorProto's value (an initializer, a Constant's or ConstantOfShape's attribute): its element
    type one the IR holds, its data there and matching its dims, else a typed error naming it."""
    from onnx import TensorProto, numpy_helper

    if t.data_type not in _ONNX_DTYPES:
        raise UnsupportedOperator(op, where, opset,
                                  f"tensor {t.name!r} of element type {_type_name(t.data_type)}")
    if t.data_location == TensorProto.EXTERNAL:  # ``load_onnx`` read every file it could resolve
        raise ModelFormatError(f"tensor {t.name!r} of {where!r} names external data that was not loaded")
    try:
        return numpy_helper.to_array(t)
    except Exception as exc:  # onnx raises ValueError, TypeError, ... when data and dims disagree
        raise ModelFormatError(f"tensor {t.name!r} of {where!r} cannot be read: {exc}") from exc


def np_dtype_of_onnx(elem_type: int, op: str = "Cast", node: str = "?", opset: int | None = None) -> str:
    """The IR dtype of an ONNX element type (an attribute's: Cast's ``to``), else refused naming the node."""
    try:
        return _ONNX_DTYPES[elem_type]
    except KeyError:
        raise UnsupportedOperator(op, node, opset, f"element type {_type_name(elem_type)}") from None


__all__ = ["LENGTH_SUFFIX", "MAX_OPSET", "MIN_OPSET", "import_onnx", "import_subgraph", "load_onnx",
           "np_dtype_of_onnx"]
