"""Converter for BitCast (opset 26): one ``bitcast`` view (``ops/bitcast.py``)."""

from __future__ import annotations

from ...ops.cast import HELD
from .float16 import stored_type_of
from .importer import np_dtype_of_onnx
from .registry import ConvertContext, converter


@converter("BitCast")
def bitcast(ctx: ConvertContext) -> None:
    """The stored types (float16, bfloat16, float8, int4, ...) run as a wider type whose bits are not
    theirs, so a BitCast from or to one is refused."""
    x = ctx.input(0)
    src = stored_type_of(ctx.graph, x) or x.type.dtype
    to = np_dtype_of_onnx(int(ctx.attr("to")), ctx.op_type, ctx.name, ctx.opset)
    if src in HELD or to in HELD:
        raise ctx.unsupported(f"BitCast from {src} to {to} (a stored type runs as a wider one)")
    ctx.set_outputs(ctx.emit1("bitcast", [x], {"to": to}))
