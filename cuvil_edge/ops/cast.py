"""``cast``: element type conversion, and ``round_f16`` / ``round_bf16``: float32 rounded to the nearest
float16 / bfloat16, kept as float32.

Constant inputs fold (every dtype the IR knows, as ONNX's reference converts). Run-time casts use the
f32-cast kernels: between any two of float32, float64, the integer types and bool; from any of those to
int4, uint4, int2 and uint2 (wrapping, as ml_dtypes and onnxruntime do) and from those to the byte type
they are held as; between float32 and each stored float type (float16, bfloat16, the float8 and float4
formats), the float8 ones with ONNX Cast's ``saturate`` and FLOAT8E8M0 with its ``round_mode`` (attrs,
default 1 and "up"). Graphs compute the stored types in the wider type ``HELD`` names (see
``frontend/onnx/float16.py``), so they exist at run time only at the graph's edges and in casts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from runtime_wasm.spec import STORED_DTYPES, STORED_RANGES

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import same_type
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

#: stored type -> the IR dtype its values are held as (and computed in) between the graph's edges
HELD = {"float16": "float32", **{d: s if d in STORED_RANGES else "float32" for d, s in STORED_DTYPES.items()}}
#: the float8 formats: the ones Cast's ``saturate`` applies to
FLOAT8 = frozenset(d for d in STORED_DTYPES if d.startswith("float8"))
#: FLOAT8E8M0's ``round_mode``s, in the order the kernel numbers them
ROUND_MODES = ("up", "down", "nearest")
#: the types the plain kernels convert between (bool: as a destination, and read as uint8)
_PLAIN = ("float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")

RUNTIME_CASTS = frozenset(
    {(s, d) for s in (*_PLAIN, "bool") for d in (*_PLAIN, "bool") if s != d and (s, d) != ("bool", "uint8")}
    | {(s, d) for s in (*_PLAIN, "bool") for d in STORED_RANGES}
    | {(d, HELD[d]) for d in STORED_RANGES}
    | {pair for d, h in HELD.items() if h == "float32" for pair in (("float32", d), (d, "float32"))})


def cast_numpy(x: np.ndarray, to: str, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """x converted to IR dtype ``to`` as ONNX Cast converts (its reference's rules; host only for the
    stored types, which need ml_dtypes)."""
    with np.errstate(all="ignore"):
        if to not in STORED_DTYPES:
            return x.astype(to)
        import ml_dtypes

        typ = getattr(ml_dtypes, to)
        if to == "float8_e8m0fnu":
            return _to_e8m0(x.astype(np.float32), saturate, round_mode).view(typ)
        if to in FLOAT8 and saturate:  # inf too: to the largest finite value
            info = ml_dtypes.finfo(typ)
            return np.clip(x.astype(np.float32), info.min, info.max).astype(typ)
        return x.astype(typ)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """FLOAT8E8M0's bits for float32 x: the exponent, plus one where ``round_mode`` rounds up (never past
    the largest finite value when saturating); NaN and inf become NaN (0xFF)."""
    u = x.view(np.uint32)
    e = (u >> 23) & 0xFF
    up = {"up": (u & 0x7FFFFF) != 0, "down": np.zeros(u.shape, bool),
          "nearest": ((u & 0x400000) != 0) & (((u & 0x3FFFFF) != 0) | (e > 0))}[round_mode] & (e != 0xFF)
    if saturate:
        up &= e != 0xFE
    return np.where(e == 0xFF, 0xFF, e + up).astype(np.uint8)


def _infer(node: Node) -> list[TensorType]:
    mode = node.attrs.get("round_mode", "up")
    if mode not in ROUND_MODES:
        raise ShapeError(f"{node.name}: round_mode {mode!r} is not one of {ROUND_MODES}")
    return [TensorType(node.inputs[0].type.shape, node.attrs["to"])]


def _fold(node: Node, args) -> list[np.ndarray]:
    return [cast_numpy(args[0], node.attrs["to"], bool(node.attrs.get("saturate", True)),
                       node.attrs.get("round_mode", "up"))]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    src = "u8" if x.type.dtype == "bool" else dtype_code(x.type.dtype)
    fn = f"{src}_{dtype_code(y.type.dtype)}_vcvt"
    args = [str(x.type.size), ctx.ptr(x), ctx.ptr(y)]
    if y.type.dtype in FLOAT8 or y.type.dtype == "float4_e2m1fn":
        args.append(str(int(bool(node.attrs.get("saturate", True)))))
    if y.type.dtype == "float8_e8m0fnu":
        args.append(str(ROUND_MODES.index(node.attrs.get("round_mode", "up"))))
    ctx.use_kernel(fn.replace("_", "-"))
    return f"{fn}({', '.join(args)});"


register(OpDef("cast", _infer, _fold, _emit, kernels=("f32-cast",), inplace=True))


def _rounding(op: str, to: str) -> OpDef:
    """The op keeping float32 values on ``to``'s grid (round to nearest even, overflow to inf, a NaN as
    it is): what a float16 or bfloat16 op's result is, computed in float32."""
    kernel = f"f32_vround{dtype_code(to)}"

    def infer(node: Node) -> list[TensorType]:
        if node.inputs[0].type.dtype != "float32":
            raise ShapeError(f"{node.name}: {op} takes float32, not {node.inputs[0].type.dtype}")
        return same_type(node)

    def fold(node: Node, args) -> list[np.ndarray]:
        return [cast_numpy(args[0], to).astype(np.float32)]

    def emit(node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        ctx.use_kernel(kernel.replace("_", "-"))
        return f"{kernel}({x.type.size}, {ctx.ptr(x)}, {ctx.ptr(y)});"

    return OpDef(op, infer, fold, emit, kernels=("f32-cast",), inplace=True)


register(_rounding("round_f16", "float16"))
register(_rounding("round_bf16", "bfloat16"))
