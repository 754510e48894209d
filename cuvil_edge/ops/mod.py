"""``mod`` and ``pow_loop``: ONNX Mod and Pow with numpy broadcasting as the C loops of the ``logic`` family.

``mod`` (float32, float64 and every integer type; attrs: ``fmod``, 1: the sign of the dividend, C fmod;
0: the sign of the divisor, numpy.mod) calls the ``<dtype>_mod`` helpers of the f32-mod template (exact
float fmod, no libm in the module). ``pow_loop`` (every integer type and float64: float32 runs on the
vector kernels of ``binary_f32``) calls the ``<dtype>_pow`` helpers of the f64-pow template: exact
integer powers that wrap as numpy's do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import broadcast_shape
from .logic import broadcast_loop
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

_INTS = tuple(f"{s}int{b}" for b in (8, 16, 32, 64) for s in ("", "u"))
#: the element types ``mod`` runs on
MOD_DTYPES = ("float32", "float64", *_INTS)
#: the element types ``pow_loop`` runs on
POW_DTYPES = ("float64", *_INTS)


def _same_type_infer(dtypes: tuple[str, ...]):
    """Infer for a broadcasting binary op whose operands share one of ``dtypes``."""
    def infer(node: Node) -> list[TensorType]:
        a, b = node.inputs[0].type, node.inputs[1].type
        if a.dtype != b.dtype or a.dtype not in dtypes:
            raise ShapeError(f"{node.name}: {node.op} of {a.dtype} by {b.dtype}")
        return [TensorType(broadcast_shape([a.shape, b.shape], node.name), a.dtype)]
    return infer


def _mod_fold(node: Node, args) -> list[np.ndarray]:
    a, b = args
    with np.errstate(all="ignore"):
        return [(np.fmod(a, b) if node.attrs["fmod"] else np.mod(a, b)).astype(a.dtype)]


def _call_emit(node: Node, ctx: EmitContext, helper: str, extra: str = "") -> str:
    """The broadcast loop calling the ``<dtype>_<helper>`` template function on each element pair."""
    code = dtype_code(node.outputs[0].type.dtype)
    ctx.use_kernel(f"{code}-{helper}")
    return broadcast_loop(ctx, node.outputs[0], node.inputs, f"{code}_{helper}({{0}}, {{1}}{extra})")


register(OpDef("mod", _same_type_infer(MOD_DTYPES), _mod_fold,
               lambda n, ctx: _call_emit(n, ctx, "mod", f", {int(not n.attrs['fmod'])}"),
               kernels=("f32-mod",)))


def pow_numpy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a ** b as the helpers compute it: integers wrap, and a negative integer exponent gives 1 / a^-b
    truncated (numpy refuses those)."""
    if a.dtype.kind == "f":
        with np.errstate(all="ignore"):
            return np.power(a, b)
    a, b = np.broadcast_arrays(a, b)
    with np.errstate(all="ignore"):
        pos = np.power(a, np.where(b < 0, 0, b).astype(b.dtype))
    neg = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0)).astype(a.dtype)
    return np.where(b < 0, neg, pos)


register(OpDef("pow_loop", _same_type_infer(POW_DTYPES), lambda n, a: [pow_numpy(a[0], a[1])],
               lambda n, ctx: _call_emit(n, ctx, "pow"), kernels=("f64-math", "f64-pow")))
