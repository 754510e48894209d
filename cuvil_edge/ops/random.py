"""``random`` and ``multinomial``: draws from a counter-based generator (``f32-random``: Philox4x32-10).

Both read the module's run counter (an int64 ``[1]`` persistent state, input 0 of ``random`` and input 1
of ``multinomial``: ``frontend/onnx/convert_random.py`` makes it) and carry ``key`` (two uint32: the
node's seed or name) and ``draw`` (which copy of one source node this is). A draw is a pure function of
(key, draw, run, element), integer arithmetic for the bits and contraction-free double arithmetic for the
values, so the same model gives the same numbers on every host, and the next inference the next numbers.

attrs of ``random``: ``dist`` (``uniform``: ``a`` + u (``b`` - ``a``), u in [0, 1) from the top ``bits``
bits (24 float32, 11 float16, 8 bfloat16, 53 float64); ``normal``: mean ``a``, scale ``b``), ``shape``,
``dtype`` (float32 or float64; float16 and bfloat16 draw as float32 and are cast by the importer).
attrs of ``multinomial``: ``samples``, ``dtype`` (int32 or int64); input 0 holds [batch, classes]
unnormalized log-probabilities (float32 or float64). Never folded: a draw is not a constant.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .attrs import INT, Attr, declare
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

#: the run counter's type
RUN_TYPE = TensorType((1,), "int64")
_FLOATS = ("float32", "float64")
_KEYED = {"key": Attr(list, items=INT), "draw": Attr(INT)}


def _check_run(node: Node, v_type: TensorType) -> None:
    if v_type != RUN_TYPE:
        raise ShapeError(f"{node.name}: the run counter must be {RUN_TYPE}, got {v_type}")


def _random_infer(node: Node) -> list[TensorType]:
    _check_run(node, node.inputs[0].type)
    dtype, dist = node.attrs["dtype"], node.attrs["dist"]
    if dtype not in _FLOATS or dist not in ("uniform", "normal"):
        raise ShapeError(f"{node.name}: {dist} draws of {dtype}")
    return [TensorType(tuple(node.attrs["shape"]), dtype)]


def _stream_args(node: Node, ctx: EmitContext, run_index: int) -> str:
    """The C arguments naming the node's stream: key, draw and the run counter."""
    k0, k1 = node.attrs["key"]
    return f"{k0:#x}u, {k1:#x}u, {node.attrs['draw']}u, {ctx.ptr(node.inputs[run_index])}"


def _random_emit(node: Node, ctx: EmitContext) -> str:
    y, dist, a, b = node.outputs[0], node.attrs["dist"], node.attrs["a"], node.attrs["b"]
    fn = f"{dtype_code(y.type.dtype)}_random_{dist}"
    ctx.use_kernel(fn.replace("_", "-"))
    params = [float(a), float(b - a)] if dist == "uniform" else [float(a), float(b)]
    bits = [str(node.attrs["bits"])] if fn == "f32_random_uniform" else []
    args = [ctx.ptr(y), str(y.type.size), *bits, *map(repr, params), _stream_args(node, ctx, 0)]
    return f"{fn}({', '.join(args)});"


def _multinomial_infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    _check_run(node, node.inputs[1].type)
    if len(x.shape) != 2 or x.shape[1] < 1 or x.dtype not in _FLOATS or node.attrs["samples"] < 1 \
            or node.attrs["dtype"] not in ("int32", "int64"):
        raise ShapeError(f"{node.name}: multinomial of {x} ([batch, classes] float32/float64), "
                         f"{node.attrs['samples']} samples as {node.attrs['dtype']}")
    return [TensorType((x.shape[0], node.attrs["samples"]), node.attrs["dtype"])]


def _multinomial_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    fn = f"{dtype_code(x.type.dtype)}_multinomial"
    ctx.use_kernel(fn.replace("_", "-"))
    rows, classes = x.type.shape
    args = [ctx.ptr(x), str(rows), str(classes), str(node.attrs["samples"]), ctx.ptr(y, "void"),
            str(int(y.type.dtype == "int64")), ctx.scratch("double"), _stream_args(node, ctx, 1)]
    return f"{fn}({', '.join(args)});"


register(OpDef("random", _random_infer, None, _random_emit, kernels=("f32-random",)))
register(OpDef("multinomial", _multinomial_infer, None, _multinomial_emit, kernels=("f32-random",),
               scratch=lambda n: 8 * math.prod(n.inputs[0].type.shape[1:])))
declare("random", {"dist": Attr(str), "shape": Attr(list, items=INT), "dtype": Attr(str), "a": Attr(float),
                   "b": Attr(float), "bits": Attr(INT), **_KEYED})
declare("multinomial", {"samples": Attr(INT), "dtype": Attr(str), **_KEYED})
