"""Transformer ops: ``layernorm``, ``gelu`` and fused ``attention``.

``attention`` is softmax(scale * Q K^T + mask) V over [B, H, S, D] operands. Each operand is a stored
tensor read through a permutation (``*_perm``: logical = stored.transpose(perm)), so the head split and
merge transposes around attention fold into element strides; the kernel keeps one block of query rows'
scores at a time and never materialises the [S, L] score matrix.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType, Value
from .common import cint_list, same_type, split_rows
from .elementwise import UNARY_NUMPY
from .movement import strides_of
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

ATTN_ROWS = 32  # query rows per score block (ATTN_ROWS in f32-transformer.c.in)
KERNELS = ("f32-unary", "f32-gemm", "f32-bmm", "f32-transformer")


# -- layernorm: normalise over dims [axis:], then * gamma + beta (both flattened to that size) -------
def _ln_rows(node: Node) -> tuple[int, int]:
    s = node.inputs[0].type.shape
    return math.prod(s[:node.attrs["axis"]]), math.prod(s[node.attrs["axis"]:])


def _ln_infer(node: Node) -> list[TensorType]:
    _, n = _ln_rows(node)
    if any(v.type.size != n for v in node.inputs[1:]):
        raise ShapeError(f"{node.name}: layernorm gamma/beta must have {n} elements")
    return same_type(node)


def layernorm_numpy(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, axis: int, eps: float) -> np.ndarray:
    axes = tuple(range(axis, x.ndim))
    x64 = x.astype(np.float64)
    d = x64 - x64.mean(axis=axes, keepdims=True)
    y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)
    return (y * gamma.reshape(x.shape[axis:]) + beta.reshape(x.shape[axis:])).astype(np.float32)


def _ln_fold(node: Node, args) -> list[np.ndarray]:
    return [layernorm_numpy(args[0], args[1], args[2], node.attrs["axis"], node.attrs["eps"])]


def _ln_emit(node: Node, ctx: EmitContext) -> str:
    x, g, b = node.inputs
    rows, n = _ln_rows(node)
    ctx.use_kernel("f32-layernorm")
    return split_rows(ctx, rows, rows * n, lambda c, i: (
        f"f32_layernorm({c}, {n}, {ctx.ptr(x)} + (size_t){i} * {n}, {ctx.ptr(g)}, {ctx.ptr(b)}, "
        f"{float(np.float32(node.attrs['eps']))!r}f, {ctx.ptr(node.outputs[0])} + (size_t){i} * {n});"),
        by_row=(x, node.outputs[0]))


register(OpDef("layernorm", _ln_infer, _ln_fold, _ln_emit, kernels=KERNELS, inplace=True, dtypes=F32))


# -- gelu (attr ``approximate``: "none" = erf form, "tanh") -----------------------------------------
def gelu_numpy(x: np.ndarray, approximate: str) -> np.ndarray:
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        t = np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3))
    else:
        t = UNARY_NUMPY["erf"](x64 / math.sqrt(2))
    return (0.5 * x64 * (1 + t)).astype(x.dtype)


def _gelu_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    tanh = int(node.attrs["approximate"] == "tanh")
    ctx.use_kernel("f32-gelu-tanh" if tanh else "f32-gelu")
    return split_rows(ctx, x.type.size, x.type.size, lambda c, i: (
        f"f32_gelu({c}, {ctx.ptr(x)} + {i}, {ctx.ptr(y)} + {i}, {tanh});"), unit=16, by_row=(x, y))


register(OpDef("gelu", same_type, lambda n, a: [gelu_numpy(a[0], n.attrs["approximate"])], _gelu_emit,
               kernels=KERNELS, inplace=True, dtypes=F32))


# -- attention(q, k, v[, mask]) attrs scale, q_perm, k_perm, v_perm, y_perm -------------------------
def _view(v: Value, perm: list[int]) -> tuple[tuple[int, ...], list[int]]:
    """Logical shape and element strides of ``v.transpose(perm)``, left-padded to rank 4."""
    st = strides_of(v.type.shape)
    shape = [v.type.shape[p] for p in perm]
    strides = [st[p] for p in perm]
    pad = 4 - len(shape)
    return (1,) * pad + tuple(shape), [0] * pad + strides


def _batch_strides(shape: tuple[int, ...], strides: list[int], bh: tuple[int, int]) -> list[int]:
    """Strides of the (B, H) dims with broadcast (size-1) dims read at stride 0."""
    return [0 if d == 1 and want != 1 else s for d, s, want in zip(shape[:2], strides[:2], bh)]


def _attn_shapes(node: Node) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    q, k, v = (_view(x, node.attrs[f"{p}_perm"])[0] for x, p in zip(node.inputs[:3], "qkv"))
    return q, k, v


def _attn_infer(node: Node) -> list[TensorType]:
    q, k, v = _attn_shapes(node)
    try:
        bh = np.broadcast_shapes(q[:2], k[:2], v[:2])
    except ValueError:
        bh = None
    if bh is None or q[3] != k[3] or k[2] != v[2]:
        raise ShapeError(f"{node.name}: attention shapes q{q} k{k} v{v} do not agree")
    if len(node.inputs) > 3 and (not node.inputs[3].type.shape or node.inputs[3].type.shape[-1] != k[2]):
        # the kernel reads a mask row per query: one broadcast along the keys is the pattern's to keep
        raise ShapeError(f"{node.name}: attention mask {node.inputs[3].type.shape} must span all {k[2]} keys")
    logical = (*bh, q[2], v[3])
    perm = node.attrs["y_perm"]
    rank = len(perm)
    if logical[:4 - rank] != (1,) * (4 - rank):
        raise ShapeError(f"{node.name}: attention output {logical} does not fit rank {rank}")
    out = [0] * rank
    for i, p in enumerate(perm):
        out[p] = logical[4 - rank + i]
    return [TensorType(tuple(out), "float32")]


def _attn_fold(node: Node, args) -> list[np.ndarray]:
    q, k, v = (np.transpose(a, node.attrs[f"{p}_perm"]).astype(np.float64) for a, p in zip(args, "qkv"))
    s = q @ np.swapaxes(k, -1, -2) * node.attrs["scale"]
    if len(args) > 3:
        s = s + args[3]
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    y = (e / e.sum(axis=-1, keepdims=True)) @ v
    return [np.transpose(y, np.argsort(node.attrs["y_perm"])).astype(np.float32)]


def _attn_scratch(node: Node) -> int:
    _, k, v = _attn_shapes(node)
    length, d, dv = k[2], k[3], v[3]
    return (-(-length // 8) * 8 * d + -(-dv // 8) * 8 * length + ATTN_ROWS * length) * 4


def _attn_emit(node: Node, ctx: EmitContext) -> str:
    y = node.outputs[0]
    (qs, qst), (ks, kst), (vs, vst) = (_view(x, node.attrs[f"{p}_perm"]) for x, p in zip(node.inputs, "qkv"))
    ys, yst = _view(y, node.attrs["y_perm"])
    bh = ys[:2]
    if qst[3] != 1 or yst[3] != 1:
        raise ShapeError(f"{node.name}: attention needs contiguous query and output rows")
    st = [*_batch_strides(qs, qst, bh), qst[2], *_batch_strides(ks, kst, bh), kst[2], kst[3],
          *_batch_strides(vs, vst, bh), vst[2], vst[3]]
    mask = "0"
    if len(node.inputs) > 3:
        m = node.inputs[3]
        mshape = (1,) * (4 - len(m.type.shape)) + m.type.shape
        mst = [0 if d == 1 else s for d, s in zip(mshape, [0] * (4 - len(m.type.shape)) +
                                                   strides_of(m.type.shape))]
        st += mst[:3]
        mask = ctx.ptr(m)
    else:
        st += [0, 0, 0]
    st += yst[:3]
    ctx.use_kernel(f"f32-attention-{ATTN_ROWS}")
    ctx.parallel()  # threads split the (batch, head) pairs, each with its own scratch
    return (f"f32_attention({bh[0]}, {bh[1]}, {qs[2]}, {ks[2]}, {qs[3]}, {vs[3]}, "
            f"{', '.join(ctx.ptr(x) for x in node.inputs[:3])}, {mask}, (const int[]){{{cint_list(st)}}}, "
            f"{float(np.float32(node.attrs['scale']))!r}f, {ctx.ptr(y)}, {ctx.scratch()}, tid, nt);")


register(OpDef("attention", _attn_infer, _attn_fold, _attn_emit,
               kernels=KERNELS, scratch=_attn_scratch, dtypes=F32))
