"""GEMM family: ``gemm`` (activations x constant weights), ``matmul`` (both operands at run time).

Both lower to the packed-panel microkernels in ``kernels/templates/f32-gemm.c.in``; batched matmul runs
all batches in one C loop (``f32-bmm``), with a constant B packed at build time. A float64 ``matmul`` runs
the double-precision ``f64_bmm`` (``float64.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .common import act_c, act_numpy
from .float64 import emit_bmm_f64
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

NR = 8  # panel width of the f32 GEMM microkernels
#: matmul's families (f64-math: float64)
KERNELS = ("f32-gemm", "f32-bmm", "f64-math")


def pack_b_panels(b: np.ndarray) -> np.ndarray:
    """[K, N] -> [ceil(N/8), K, 8] zero padded: the layout ``f32_gemm`` streams (same as f32_pack_b)."""
    k, n = b.shape
    npan = -(-n // NR)
    padded = np.zeros((k, npan * NR), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, npan, NR).transpose(1, 0, 2))


def pack_a_panels(a: np.ndarray) -> np.ndarray:
    """[M, K] -> [ceil(M/4), K, 4] zero padded: the layout ``f32_gemm_pa`` reads (same as f32_pack_a)."""
    m, k = a.shape
    npan = -(-m // 4)
    padded = np.zeros((npan * 4, k), np.float32)
    padded[:m] = a
    return np.ascontiguousarray(padded.reshape(npan, 4, k).transpose(0, 2, 1))


def pad_to(v: np.ndarray, multiple: int) -> np.ndarray:
    out = np.zeros(-(-v.size // multiple) * multiple, np.float32)
    out[: v.size] = v.reshape(-1)
    return out


def gemm_kernel_name(m: int) -> str:
    """1-2 rows run the wider GEMV tiles (more FMA chains per broadcast), 3 rows 3x8, more rows 4x8."""
    return {1: "f32-gemm-1x24", 2: "f32-gemm-2x16"}.get(m, f"f32-gemm-{min(m, 4)}x8")


# -- gemm: y[..., N] = act(x[..., K] @ w[K, N] + bias[N]) -----------------------------------------
def _gemm_infer(node: Node) -> list[TensorType]:
    x, w = node.inputs[0].type, node.inputs[1].type
    if len(w.shape) != 2 or not x.shape or x.shape[-1] != w.shape[0]:
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
    ctx.use_kernel(gemm_kernel_name(m))
    ctx.parallel()  # threads split the output columns
    return (f"f32_gemm_part({m}, {n}, {k}, {ctx.ptr(x)}, {k}, {bp}, {ctx.ptr(node.outputs[0])}, {n}, "
            f"0, {bias}, {act_c(node)}, tid, nt);")


register(OpDef("gemm", _gemm_infer, _gemm_fold, _gemm_emit, kernels=("f32-gemm",), dtypes=F32))


# -- matmul: numpy matmul semantics on run-time operands (rank >= 2, batch broadcast) -------------
# attr ``trans_b``: B is stored [..., N, K] (a folded Transpose of the last two dims, e.g. K^T in attention)
def _b_dims(node: Node) -> tuple[int, int]:
    """(K, N) of the B operand, honouring ``trans_b``."""
    k, n = node.inputs[1].type.shape[-2:]
    return (n, k) if node.attrs.get("trans_b") else (k, n)


def _matmul_infer(node: Node) -> list[TensorType]:
    a, b = node.inputs[0].type.shape, node.inputs[1].type.shape
    if len(a) < 2 or len(b) < 2 or a[-1] != _b_dims(node)[0]:
        raise ShapeError(f"{node.name}: matmul shapes {a} x {b} do not agree")
    dtype = node.inputs[0].type.dtype
    if node.inputs[1].type.dtype != dtype or (dtype == "float64" and node.attrs.get("act")):
        raise ShapeError(f"{node.name}: matmul of {dtype} by {node.inputs[1].type.dtype}"
                         f"{' with a fused activation' if node.attrs.get('act') else ''}")
    try:
        batch = np.broadcast_shapes(a[:-2], b[:-2])
    except ValueError as exc:
        raise ShapeError(f"{node.name}: matmul batch dims {a[:-2]} and {b[:-2]} do not broadcast") from exc
    return [TensorType((*batch, a[-2], _b_dims(node)[1]), dtype)]


def _matmul_fold(node: Node, args) -> list[np.ndarray]:
    b = np.swapaxes(args[1], -1, -2) if node.attrs.get("trans_b") else args[1]
    return [np.matmul(args[0], b).astype(args[0].dtype)]


def _matmul_scratch(node: Node) -> int:
    k, n = _b_dims(node)
    packs = not node.inputs[1].is_const and node.inputs[1].type.dtype == "float32"
    return k * (-(-n // NR) * NR) * 4 if packs else 0


def batch_offsets(shape: tuple[int, ...], batch: tuple[int, ...], block: int) -> np.ndarray:
    """Element offset of each batch item (row-major over ``batch``) in an operand of batch dims ``shape``
    (right-aligned, size-1 dims broadcast) whose matrices are ``block`` elements."""
    shape = (1,) * (len(batch) - len(shape)) + tuple(shape)
    idx = np.indices(batch).reshape(len(batch), -1) if batch else np.zeros((0, 1), np.int64)
    flat = np.zeros(idx.shape[1], np.int64)
    for size, i in zip(shape, idx):
        flat = flat * size + (0 if size == 1 else i)
    return (flat * block).astype(np.int32)


def _matmul_emit(node: Node, ctx: EmitContext) -> str:
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    m, k = a.type.shape[-2:]
    _, n = _b_dims(node)
    batch = y.type.shape[:-2]
    aoff = batch_offsets(a.type.shape[:-2], batch, m * k)
    boff = batch_offsets(b.type.shape[:-2], batch, k * n)
    sk, sn = (1, k) if node.attrs.get("trans_b") else (n, 1)
    if y.type.dtype == "float64":
        return emit_bmm_f64(ctx, node, aoff, boff, k, n, sk, sn)
    ctx.use_kernel(gemm_kernel_name(m))
    if b.is_const:  # pack every distinct B matrix at build time
        mats = b.const.astype(np.float32).reshape(-1, *b.type.shape[-2:])
        mats = np.swapaxes(mats, -1, -2) if node.attrs.get("trans_b") else mats
        panels = np.stack([pack_b_panels(w) for w in mats])
        bptr, packed, scratch = ctx.weight(panels), 1, "0"
        boff = (boff // (k * n) * panels[0].size).astype(np.int32)
    else:
        bptr, packed, scratch = ctx.ptr(b), 0, ctx.scratch()
    return (f"f32_bmm({len(aoff)}, {m}, {n}, {k}, {ctx.ptr(a)}, {ctx.weight(aoff, 'int32_t')}, {bptr}, "
            f"{ctx.weight(boff, 'int32_t')}, {sk}, {sn}, {packed}, {ctx.ptr(y)}, {scratch}, {act_c(node)});")


register(OpDef("matmul", _matmul_infer, _matmul_fold, _matmul_emit, kernels=KERNELS,
               scratch=_matmul_scratch, dtypes=F32 | {"float64"}))
