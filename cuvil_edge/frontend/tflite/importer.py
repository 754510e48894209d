"""TFLite -> IR: constants from buffers (fp16 and int8 weights dequantized at build time), graph inputs
and outputs in TFLite order (NHWC) with the layout changed inside (``layout.py``), one converter per
operator looked up by builtin name or, for custom ops, by custom code."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from ...codegen.memplan import StateVar
from ...errors import ModelFormatError, ShapeError, UnsupportedOperator
from ...ir.graph import Graph, QuantParams, TensorType, Value
from ...ir.limits import import_budget
from ...ops import get as get_op
from ...quant.qdq import fuse_qdq, source_record
from ..onnx.importer import add_length_outputs
from ..registry import emit_node
from .layout import Laid, identity
from .reader import TflModel, TflOperator, TflSubgraph, TflTensor, read_tflite
from .registry import BUILTINS, CUSTOM, ImportState, TflContext, Variables, variable_name

#: TFLite dtypes a graph input may have
INPUT_DTYPES = ("float32", "int32", "int64", "int8", "uint8", "bool")


def import_tflite(model: str | os.PathLike[str] | bytes | TflModel,
                  input_shapes: Mapping[str, Sequence[int]] | None = None, name: str | None = None,
                  signature: str | None = None) -> Graph:
    """Import the subgraph of ``signature`` (default: the first signature, else subgraph 0); inputs and
    outputs take the signature's names when it has them, their tensor names (what LiteRT's
    ``get_input_details`` reports: ``serving_default_x:0``) kept as aliases (``meta["aliases"]``), which
    the compiled model answers to as well."""
    if isinstance(model, TflModel):
        held = sum(t.data.nbytes for sg in model.subgraphs for t in sg.tensors if t.data is not None)
    else:
        held = len(model) if isinstance(model, (bytes, bytearray)) else os.path.getsize(model)
    with import_budget(held):  # what the reader (sparse weights), converters and folds create
        tm = model if isinstance(model, TflModel) else read_tflite(model)
        return _import(tm, input_shapes, name, signature)


def _import(tm: TflModel, input_shapes: Mapping[str, Sequence[int]] | None, name: str | None,
            signature: str | None) -> Graph:
    sg, inputs, outputs = entry_io(tm, signature)
    graph = Graph(name or sg.name or "model")
    graph.meta.update(source="tflite", tflite_version=tm.version)
    state = ImportState(Variables(tm, _assigned_variables(sg), converting={id(sg)}))
    _constants(graph, state, sg)
    shapes = dict(input_shapes or {})
    for label, t in inputs:
        fixed = shapes.pop(label, None) if label in shapes else shapes.pop(t.name, None)  # by either name
        v = graph.value(label, _input_type(t, label, fixed))
        graph.inputs.append(v)
        held = _to_held(graph, v) if t.index in state.held_quant else v
        state.env[t.index] = Laid(held, identity(len(v.type.shape)))
    if shapes:
        raise ShapeError(f"--input-shape names unknown inputs {sorted(shapes)}; "
                         f"model inputs are {[v.name for v in graph.inputs]}")
    for op in sg.operators:
        _convert(graph, state, sg, op)
    for _, t in outputs:
        idx = t.index
        if idx not in state.env:
            raise ModelFormatError(f"graph output {t.name!r} is never written")
        probe = TflContext(graph, state, sg, _output_probe(sg, idx))
        held = probe.held(0)
        v = probe.relaid(held, identity(len(held.perm)), key=idx)
        graph.outputs.append(_from_held(graph, v) if t.dtype == "int8" and idx in state.held_quant else v)
    names = [name for name, _ in outputs]
    graph.meta["output_names"] = names
    graph.meta["aliases"] = {role: {name: [t.name] for name, t in io if t.name != name}
                             for role, io in (("inputs", inputs), ("outputs", outputs))}
    record = _quant_record(sg, [name for name, _ in inputs], names)
    if record is not None:
        graph.meta["source_quantization"] = record
    add_length_outputs(graph)  # WHERE's and UNIQUE's outputs of run-time length: ``<name>:length`` too
    _keep_states(graph, state)
    fuse_qdq(graph)  # quantized layers onto the integer kernels while their weights' integers are known
    return graph


def convert_subgraph(graph: Graph, state: ImportState, sg: TflSubgraph) -> None:
    """A subgraph (a CALL_ONCE initializer, an IF branch) converted into ``graph``; one that runs itself
    through a cycle of IF or CALL_ONCE subgraphs is refused (it would never end)."""
    converting = state.variables.converting
    if id(sg) in converting:
        raise UnsupportedOperator("SUBGRAPH", sg.name, None,
                                  "it runs itself through IF or CALL_ONCE subgraphs")
    converting.add(id(sg))
    try:
        _constants(graph, state, sg)
        for op in sg.operators:
            _convert(graph, state, sg, op)
    finally:
        converting.discard(id(sg))


def _constants(graph: Graph, state: ImportState, sg: TflSubgraph) -> None:
    for t in sg.tensors:
        if t.data is not None:
            state.env[t.index] = Laid(_constant(graph, state, t), identity(len(t.shape)))
        elif t.quant is not None and t.dtype in ("int8", "uint8", "int16"):
            state.held_quant[t.index] = _held_params(t)


def _keep_states(graph: Graph, state: ImportState) -> None:
    """Each variable the run reads and then assigns: its last value an extra graph output, recorded with
    the extra input that read it (``StateVar``)."""
    states = []
    for name, read in state.variables.reads.items():
        graph.outputs.append(state.current[name])
        states.append(StateVar(name, graph.inputs.index(read), len(graph.outputs) - 1,
                               state.variables.init[name]))
    if states:
        graph.meta["states"] = states


def _assigned_variables(sg: TflSubgraph) -> set[str]:
    """Variables some ASSIGN_VARIABLE of ``sg`` writes (the others are constants there)."""
    handles = {op.outputs[0]: variable_name(op.options) for op in sg.operators
               if op.op == "VAR_HANDLE" and op.outputs}
    return {handles[op.inputs[0]] for op in sg.operators
            if op.op == "ASSIGN_VARIABLE" and op.inputs and op.inputs[0] in handles}


def _params(t: TflTensor) -> QuantParams:
    return QuantParams(t.quant.scale, t.quant.zero_point, t.quant.axis, t.dtype)


def _quant_record(sg: TflSubgraph, in_names: list[str], out_names: list[str]) -> dict | None:
    """The model's own quantization, for ``inspect`` (None when it has none): its quantized tensors'
    ``QuantParams`` summarised by ``source_record``."""
    quantized = [t for t in sg.tensors if t.quant is not None]

    def named(indices: list[int], names: list[str]) -> list[tuple[str, QuantParams]]:
        return [(n, _params(sg.tensors[i])) for i, n in zip(indices, names) if sg.tensors[i].quant]

    return source_record("tflite", [_params(t) for t in quantized if t.data is not None],
                         sum(t.data is None for t in quantized), named(sg.inputs, in_names),
                         named(sg.outputs, out_names))


def _constant(graph: Graph, state: ImportState, t: TflTensor) -> Value:
    """A constant's real value: fp16 widened, quantized integers dequantized (an int8 one's record kept
    for the converters that hand it to a conv or gemm: ``TflContext.weight``)."""
    if t.dtype == "float16":
        return graph.constant(t.name, t.data.astype(np.float32))
    if t.quant is None or t.dtype not in ("int8", "uint8", "int32"):
        return graph.constant(t.name, t.data)
    params = _params(t)
    if t.dtype == "int8":
        state.int_weights[t.index] = params
    return graph.constant(t.name, params.real_of(t.data.astype(np.int64) - params.along(params.zero_point,
                                                                                       t.data.ndim)))


def _held_params(t: TflTensor) -> tuple[float, int]:
    """(scale, zero point) of a run-time quantized tensor as held in uint8."""
    if t.dtype == "int16":
        raise UnsupportedOperator("TENSOR", t.name, None, "int16 (16x8) quantized activations")
    if t.quant.scale.size != 1:
        raise UnsupportedOperator("TENSOR", t.name, None, "per-channel quantized activations")
    return float(t.quant.scale[0]), int(_params(t).held_zero_point[0])


def _shift(graph: Graph, v: Value) -> tuple[Value, Value]:
    """Scale 1 and zero point 128: int8 <-> held uint8."""
    return graph.constant(f"{v.name}/one", np.float32(1)), graph.constant(f"{v.name}/128", np.uint8(128))


def _to_held(graph: Graph, v: Value) -> Value:
    """A uint8 or int8 graph input as held: uint8, int8 shifted by +128 (exact through f32)."""
    if v.type.dtype == "uint8":
        return v
    f = emit_node(graph, "cast", [v], {"to": "float32"}, f"{v.name}/f32")[0]
    one, shift = _shift(graph, v)
    return emit_node(graph, "quantize", [f, one, shift], {"axis": 1}, f"{v.name}/held")[0]


def _from_held(graph: Graph, v: Value) -> Value:
    """An int8 graph output from its held uint8 form."""
    one, shift = _shift(graph, v)
    f = emit_node(graph, "dequantize", [v, one, shift], {"axis": 1}, f"{v.name}/f32")[0]
    return emit_node(graph, "cast", [f], {"to": "int8"}, f"{v.name}/int8")[0]


def entry_io(tm: TflModel, signature: str | None = None
             ) -> tuple[TflSubgraph, list[tuple[str, TflTensor]], list[tuple[str, TflTensor]]]:
    """The subgraph ``import_tflite`` imports for ``signature`` and its inputs and outputs, each under
    the name the graph gives it (the signature's, else the tensor's): what a caller that only needs the
    model's interface reads (``pretrained``), without converting an operator."""
    sg_index, in_names, out_names = _entry(tm, signature)
    sg = tm.subgraphs[sg_index]
    return (sg, [(in_names.get(i, sg.tensors[i].name), sg.tensors[i]) for i in sg.inputs],
            [(out_names.get(i, sg.tensors[i].name), sg.tensors[i]) for i in sg.outputs])


def _entry(tm: TflModel, signature: str | None) -> tuple[int, dict[int, str], dict[int, str]]:
    """(subgraph index, tensor index -> input name, tensor index -> output name)."""
    if not tm.signatures:
        if signature is not None:
            raise ModelFormatError(f"signature {signature!r} asked for; the model has none")
        return 0, {}, {}
    sig = next((s for s in tm.signatures if s.key == signature), None) if signature else tm.signatures[0]
    if sig is None or not 0 <= sig.subgraph < len(tm.subgraphs):
        raise ModelFormatError(f"no usable signature {signature!r}; the model has "
                               f"{[s.key for s in tm.signatures]}")
    return (sig.subgraph, {i: n for n, i in sig.inputs.items()}, {i: n for n, i in sig.outputs.items()})


#: ops that only move, pick or fill elements: within one quantization they run on the held uint8 values
#: as they are (a max pool's max of the bytes is the byte of the max, a pad fills with the zero point's
#: byte), as LiteRT's int8 kernels do
ON_HELD = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "CONCATENATION", "STRIDED_SLICE",
                     "SLICE", "GATHER", "SPLIT", "SPLIT_V", "PACK", "UNPACK", "PAD", "PADV2", "MAX_POOL_2D"})


#: the operators without outputs (they write a variable, or run a subgraph for its writes)
WRITES_NOTHING = frozenset({"ASSIGN_VARIABLE", "CALL_ONCE"})


def _moves_held(state: ImportState, op: TflOperator) -> bool:
    """An ``ON_HELD`` op whose quantized inputs and outputs all share one scale and zero point."""
    if op.op not in ON_HELD or op.options.get("FusedActivationFunction"):
        return False
    outs = {state.held_quant.get(t) for t in op.outputs if t >= 0}
    ins = {state.held_quant[t] for t in op.inputs if t in state.held_quant}
    return len(outs) == 1 and None not in outs and ins <= outs


def _convert(graph: Graph, state: ImportState, sg: TflSubgraph, op: TflOperator) -> None:
    ctx = TflContext(graph, state, sg, op, raw=_moves_held(state, op))
    if op.op not in WRITES_NOTHING and (not op.outputs or op.outputs[0] < 0):
        raise ctx.unsupported("it has no output")
    if op.custom_code is not None:
        fn = CUSTOM.get(op.custom_code)
        if fn is None:
            raise ctx.unsupported(f"no converter is registered for custom op {op.custom_code!r}")
    else:
        fn = BUILTINS.get(op.op)
        if fn is None:
            raise ctx.unsupported()
    first_new = len(graph.nodes)
    fn(ctx)
    for n in graph.nodes[first_new:]:  # the kernels' dtype table (``OpDef.dtypes``), as the ONNX import
        if (wrong := get_op(n.op).dtype_problem(n)) is not None:
            raise ctx.unsupported(wrong)
    missing = [sg.tensors[o].name for o in op.outputs
               if o >= 0 and o not in state.env and o not in state.handles]  # a handle has no value
    if missing:
        raise ctx.unsupported(f"outputs {missing} were not produced")


def _output_probe(sg: TflSubgraph, idx: int) -> TflOperator:
    """A one-input stand-in operator, so graph outputs are laid back to TFLite order by the same code."""
    return TflOperator(-1, "OUTPUT", -1, None, [idx], [], {}, b"")


def _input_type(t: TflTensor, label: str, override: Sequence[int] | None) -> TensorType:
    if t.dtype not in INPUT_DTYPES:
        raise UnsupportedOperator("INPUT", label, None, f"input type {t.dtype} is not supported")
    if override is not None:
        shape = tuple(int(d) for d in override)
        if len(shape) != len(t.shape):
            raise ShapeError(f"input {label!r}: shape {shape} conflicts with the model's {t.shape}")
        return TensorType(shape, t.dtype)
    if any(d < 0 for d in t.shape[1:]):
        raise ShapeError(f"input {label!r} has a dynamic dimension: fix it with --input-shape {label}=...")
    return TensorType(tuple(max(d, 1) for d in t.shape), t.dtype)
