"""float64 math in double precision (the ``f64-math`` kernels): ``unary_f64`` (attr ``kind``: ``UNARY``) and
the float64 paths of ``matmul`` (``emit_bmm_f64``) and ``softmax`` (``emit_softmax_f64``).

The float32 kernels are vector polynomials good to float32; a float64 graph (ReduceLogSumExp of the
ONNX tests, double attention) wants double results, so these run double precision throughout.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

F64 = frozenset({"float64"})
KERNELS = ("f64-math",)
#: unary_f64 kind -> numpy reference
UNARY = {"exp": np.exp, "log": np.log, "neg": np.negative, "abs": np.abs, "sqrt": np.sqrt, "floor": np.floor,
         "ceil": np.ceil, "round": np.round, "reciprocal": np.reciprocal, "sign": np.sign}


def _unary_infer(node: Node) -> list[TensorType]:
    if node.attrs["kind"] not in UNARY:
        raise ShapeError(f"{node.name}: unary_f64 kind {node.attrs['kind']!r} ({', '.join(UNARY)})")
    return [node.inputs[0].type]


def _unary_fold(node: Node, args) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [UNARY[node.attrs["kind"]](args[0]).astype(np.float64)]


def _unary_emit(node: Node, ctx: EmitContext) -> str:
    kind, x, y = node.attrs["kind"], node.inputs[0], node.outputs[0]
    ctx.use_kernel(f"f64-v{kind}-1")
    return f"f64_v{kind}({x.type.size}, {ctx.ptr(x)}, {ctx.ptr(y)});"


register(OpDef("unary_f64", _unary_infer, _unary_fold, _unary_emit, kernels=KERNELS, inplace=True,
               dtypes=F64))


def emit_bmm_f64(ctx: EmitContext, node: Node, aoff: np.ndarray, boff: np.ndarray, k: int, n: int,
                 sk: int, sn: int) -> str:
    """A float64 ``matmul``: both operands read in place (a constant B too: nothing packed)."""
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    ctx.use_kernel("f64-gemm-2x4")
    ao, bo = (ctx.weight(o, "int32_t") for o in (aoff, boff))
    return (f"f64_bmm({len(aoff)}, {a.type.shape[-2]}, {n}, {k}, {ctx.ptr(a)}, {ao}, {ctx.ptr(b)}, {bo}, "
            f"{sk}, {sn}, {ctx.ptr(y)});")


def emit_softmax_f64(ctx: EmitContext, node: Node) -> str:
    """A float64 ``softmax`` over x[outer][n][inner]."""
    x, y = node.inputs[0], node.outputs[0]
    s, ax = x.type.shape, node.attrs["axis"]
    log = bool(node.attrs["log"])
    ctx.use_kernel(f"f64-{'log' if log else ''}softmax-1")
    return (f"f64_softmax({math.prod(s[:ax])}, {s[ax] if s else 1}, {math.prod(s[ax + 1:])}, {ctx.ptr(x)}, "
            f"{ctx.ptr(y)}, {int(log)});")
