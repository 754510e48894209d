"""``standalone_act`` (attrs ``kind``, ``a``, ``b``): activations that have no fused-epilogue form (Mish,
Softplus, Elu, Celu, Selu, Softsign, ThresholdedRelu, Shrink), so never fold into a producer as an
``epilogue_act`` does. One vector pass each (kernel family ``f32-act-param``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import same_type, split_rows
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


#: kind -> numpy reference f(x, a, b) in float64
STANDALONE_ACTS = {
    "mish": lambda x, a, b: x * np.tanh(_softplus(x)),
    "softplus": lambda x, a, b: _softplus(x),
    "elu": lambda x, a, b: np.where(x > 0, x, a * np.expm1(np.minimum(x, 0))),
    "celu": lambda x, a, b: np.maximum(x, 0) + a * np.expm1(np.minimum(x / a, 0)),
    "selu": lambda x, a, b: b * np.where(x > 0, x, a * np.expm1(np.minimum(x, 0))),
    "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0),
    "shrink": lambda x, a, b: np.where(x < -a, x + b, np.where(x > a, x - b, 0)),
}


def _infer(node: Node) -> list[TensorType]:
    if node.attrs["kind"] not in STANDALONE_ACTS or node.inputs[0].type.dtype != "float32":
        raise ShapeError(f"{node.name}: standalone_act {node.attrs['kind']!r} on {node.inputs[0].type.dtype}")
    return same_type(node)


def _fold(node: Node, args) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        y = STANDALONE_ACTS[node.attrs["kind"]](args[0].astype(np.float64), node.attrs["a"], node.attrs["b"])
    return [y.astype(np.float32)]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y, kind = node.inputs[0], node.outputs[0], node.attrs["kind"]
    ctx.use_kernel(f"f32-v{kind}-4")
    a, b = (float(np.float32(node.attrs[k])) for k in "ab")
    return split_rows(ctx, x.type.size, x.type.size, lambda c, i: (
        f"f32_v{kind}({c}, {ctx.ptr(x)} + {i}, {ctx.ptr(y)} + {i}, {a!r}f, {b!r}f);"), unit=16, by_row=(x, y))


register(OpDef("standalone_act", _infer, _fold, _emit,
               kernels=("f32-unary", "f32-act-param"), inplace=True, dtypes=F32))
