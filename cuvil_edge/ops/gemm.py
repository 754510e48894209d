"""GEMM family: ``gemm`` (activations x constant weights), ``matmul`` (both operands at run time).

Both lower to the packed-panel microkernels in ``kernels/templates/f32-gemm.c.in``.
"""

from __future__ import annotations

import numpy as np

from ..codegen.emit import EmitContext
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import act_c, act_numpy
from .registry import OpDef, register

NR = 8  # panel width of the f32 GEMM microkernels


def pack_b_panels(b: np.ndarray) -> np.ndarray:
    """[K, N] -> [ceil(N/8), K, 8] zero padded: the layout ``f32_gemm`` streams (same as f32_pack_b)."""
    k, n = b.shape
    npan = -(-n // NR)
    padded = np.zeros((k, npan * NR), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, npan, NR).transpose(1, 0, 2))


def pad_to(v: np.ndarray, multiple: int) -> np.ndarray:
    out = np.zeros(-(-v.size // multiple) * multiple, np.float32)
    out[: v.size] = v.reshape(-1)
    return out


def gemm_kernel_name(ctx: EmitContext, m: int) -> str:
    return f"f32-gemm-{min(m, 4)}x8"


# -- gemm: y[..., N] = act(x[..., K] @ w[K, N] + bias[N]) -----------------------------------------
def _gemm_infer(node: Node) -> list[TensorType]:
    x, w = node.inputs[0].type, node.inputs[1].type
    if len(w.shape) != 2 or x.shape[-1] != w.shape[0]:
        raise ShapeError(f"{node.name}: gemm shapes {x.shape} x {w.shape} do not agree")
    return [TensorType((*x.shape[:-1], w.shape[1]), "float32")]


def _gemm_fold(node: Node, args) -> list[np.ndarray]:
    y = args[0] @ args[1] + (args[2] if len(args) > 2 else 0)
    return [act_numpy(y, node.attrs.get("act")).astype(np.float32)]


def _gemm_emit(node: Node, ctx: EmitContext) -> str:
    x, w = node.inputs[0], node.inputs[1]
    k, n = w.type.shape
    m = x.type.size // k
    bp = ctx.weight(pack_b_panels(w.const.astype(np.float32)))
    bias = ctx.weight(pad_to(node.inputs[2].const.astype(np.float32), NR)) if len(node.inputs) > 2 else "0"
    ctx.use_kernel(gemm_kernel_name(ctx, m))
    return (f"f32_gemm({m}, {n}, {k}, {ctx.ptr(x)}, {k}, {bp}, {ctx.ptr(node.outputs[0])}, {n}, "
            f"0, {bias}, {act_c(node)});")


register(OpDef("gemm", _gemm_infer, _gemm_fold, _gemm_emit, kernels=("f32-gemm",)))


# -- matmul: numpy matmul semantics on run-time operands (rank >= 2, batch broadcast) -------------
def _matmul_infer(node: Node) -> list[TensorType]:
    a, b = node.inputs[0].type.shape, node.inputs[1].type.shape
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise ShapeError(f"{node.name}: matmul shapes {a} x {b} do not agree")
    try:
        batch = np.broadcast_shapes(a[:-2], b[:-2])
    except ValueError as exc:
        raise ShapeError(f"{node.name}: matmul batch dims {a[:-2]} and {b[:-2]} do not broadcast") from exc
    return [TensorType((*batch, a[-2], b[-1]), "float32")]


def _matmul_fold(node: Node, args) -> list[np.ndarray]:
    return [np.matmul(args[0], args[1]).astype(np.float32)]


def _matmul_scratch(node: Node) -> int:
    k, n = node.inputs[1].type.shape[-2:]
    return k * (-(-n // NR) * NR) * 4


def _matmul_emit(node: Node, ctx: EmitContext) -> str:
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    m, k = a.type.shape[-2:]
    n = b.type.shape[-1]
    batch = y.type.shape[:-2]
    ctx.use_kernel(gemm_kernel_name(ctx, m))
    lines = []
    # batch offsets (in elements) of a and b under broadcasting, flattened at build time
    idx = np.indices(batch).reshape(len(batch), -1).T if batch else np.zeros((1, 0), int)
    a_batch, b_batch = a.type.shape[:-2], b.type.shape[:-2]

    def flat(shape: tuple[int, ...], i: np.ndarray) -> int:
        i = i[len(i) - len(shape):] if shape else i[:0]
        return int(np.ravel_multi_index(tuple(np.where(np.array(shape) == 1, 0, i)), shape)) if shape else 0

    scratch = ctx.scratch()
    for bi, i in enumerate(idx):
        ao, bo = flat(a_batch, i) * m * k, flat(b_batch, i) * k * n
        lines.append(f"f32_pack_b({k}, {n}, {ctx.ptr(b)} + {bo}, {n}, {scratch});")
        lines.append(f"f32_gemm({m}, {n}, {k}, {ctx.ptr(a)} + {ao}, {k}, {scratch}, "
                     f"{ctx.ptr(y)} + {bi * m * n}, {n}, 0, 0, {act_c(node)});")
    return "\n".join(lines)


register(OpDef("matmul", _matmul_infer, _matmul_fold, _matmul_emit, kernels=("f32-gemm",),
               scratch=_matmul_scratch))
