"""ONNX -> IR. Weights from initializers and Constant nodes; shapes made static at build time."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import ModelFormatError, ShapeError, UnsupportedOperator
from ...ir.graph import Graph, TensorType, Value
from ...quant.qdq import fuse_qdq
from .registry import ConvertContext, converters

MIN_OPSET, MAX_OPSET = 7, 21
#: non-default-domain operators with a converter (registered under their op_type)
CONTRIB_OPS = frozenset({("com.microsoft", "MatMulNBits")})


def load_onnx(model: str | os.PathLike[str] | bytes | Any):
    """Read and check an ONNX model; every failure is a ``ModelFormatError``."""
    import onnx

    try:
        if isinstance(model, onnx.ModelProto):
            proto = model
        elif isinstance(model, (bytes, bytearray)):
            proto = onnx.load_from_string(bytes(model))
        else:
            proto = onnx.load(os.fspath(model))
    except FileNotFoundError:
        raise
    except Exception as exc:  # onnx raises DecodeError, ValueError, ... for corrupt files
        raise ModelFormatError(f"not a readable ONNX model: {exc}") from exc
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:
        raise ModelFormatError(f"ONNX model fails the checker: {str(exc).splitlines()[0]}") from exc
    return proto


def import_onnx(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
                name: str | None = None) -> Graph:
    from onnx import numpy_helper

    proto = load_onnx(model)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ModelFormatError(f"ONNX opset {opset} is outside the supported range {MIN_OPSET}-{MAX_OPSET}")
    g = proto.graph
    graph = Graph(name or g.name or "model")
    graph.meta.update(source="onnx", opset=opset, producer=proto.producer_name)
    env: dict[str, Value] = {}
    for init in g.initializer:
        try:
            arr = numpy_helper.to_array(init)
        except Exception as exc:
            raise ModelFormatError(f"initializer {init.name!r} cannot be read: {exc}") from exc
        env[init.name] = graph.constant(init.name, arr)

    shapes = dict(input_shapes or {})
    for inp in g.input:
        if inp.name in env:
            continue  # old-style graphs list initializers as inputs too
        env[inp.name] = v = graph.value(inp.name, _input_type(inp, shapes.pop(inp.name, None)))
        graph.inputs.append(v)
    if shapes:
        raise ShapeError(f"--input-shape names unknown inputs {sorted(shapes)}; "
                         f"model inputs are {[v.name for v in graph.inputs]}")

    _convert_nodes(graph, env, g.node, opset)
    for out in g.output:
        if out.name not in env:
            raise ModelFormatError(f"graph output {out.name!r} is never produced")
        graph.outputs.append(env[out.name])
    graph.meta["output_names"] = [o.name for o in g.output]
    fuse_qdq(graph)  # pre-quantized layers onto the integer kernels while their weights are known
    return graph


def _convert_nodes(graph: Graph, env: dict[str, Value], nodes: Sequence[Any], opset: int) -> None:
    table = converters()
    for node in nodes:
        if node.domain not in ("", "ai.onnx") and (node.domain, node.op_type) not in CONTRIB_OPS:
            raise UnsupportedOperator(f"{node.domain}.{node.op_type}", node.name or node.output[0], opset,
                                      "custom-domain operators are not supported")
        if node.op_type == "If":
            _inline_if(graph, env, node, opset)
            continue
        fn = table.get(node.op_type)
        if fn is None:
            raise UnsupportedOperator(node.op_type, node.name or node.output[0], opset)
        ctx = ConvertContext(graph, env, node, opset)
        fn(ctx)
        missing = [o for o in node.output if o and o not in env]
        if missing:
            raise ctx.unsupported(f"outputs {missing} were not produced")


def _inline_if(graph: Graph, env: dict[str, Value], node: Any, opset: int) -> None:
    """An ``If`` whose condition folds at build time: the taken branch's nodes join the parent graph
    (branch names are scoped so they cannot shadow the parent's; outer names stay visible)."""
    from onnx import helper, numpy_helper

    ctx = ConvertContext(graph, env, node, opset)
    taken = "then_branch" if bool(ctx.const(0).reshape(-1)[0]) else "else_branch"
    branch = helper.get_attribute_value(next(a for a in node.attribute if a.name == taken))
    scope = dict(env)
    for init in branch.initializer:
        scope[init.name] = graph.constant(f"{ctx.name}/{init.name}", numpy_helper.to_array(init))
    _convert_nodes(graph, scope, branch.node, opset)
    for out, res in zip(node.output, branch.output):
        if out:
            env[out] = scope[res.name]


_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 9: "bool", 10: "float16",
                11: "float64"}


def _input_type(inp: Any, override: Sequence[int] | None) -> TensorType:
    tt = inp.type.tensor_type
    dtype = _ONNX_DTYPES.get(tt.elem_type)
    if dtype is None:
        raise UnsupportedOperator("Input", inp.name, None,
                                  f"input element type {tt.elem_type} is not supported")
    if override is not None:
        shape = tuple(int(d) for d in override)
        declared = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
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


def np_dtype_of_onnx(elem_type: int) -> str:
    try:
        return _ONNX_DTYPES[elem_type]
    except KeyError:
        raise UnsupportedOperator("Cast", "?", None, f"element type {elem_type}") from None


__all__ = ["MAX_OPSET", "MIN_OPSET", "import_onnx", "load_onnx", "np_dtype_of_onnx"]
