"""``f16w``: a float op (conv, gemm, ...) whose packed weights are stored as fp16.

The wrapped op's own emitter runs unchanged while the context's ``weight()`` (``weight_store``) stores each
large packed constant as IEEE half and returns a scratch buffer that ``f16_f32_vcvt`` fills first: the blob
(and the bundle) halves, the math stays f32. Attrs: the inner op's (conv or gemm) plus ``inner`` (its
name), checked by the schema below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..ir.graph import Node, TensorType
from .attrs import Attr, declare
from .qlinear import CONV_ATTRS, GEMM_ATTRS
from .registry import OpDef, get, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

MIN_ELEMENTS = 64  # smaller constants (bias, scales) stay f32


def _ceil(n: int, m: int) -> int:
    return -(-n // m) * m


def _inner(node: Node) -> Node:
    attrs = {k: v for k, v in node.attrs.items() if k != "inner"}
    return Node(node.attrs["inner"], node.name, node.inputs, node.outputs, attrs)


def _inner_scratch(node: Node) -> int:
    op = get(node.attrs["inner"])
    return _ceil(op.scratch(_inner(node)), 64) if op.scratch else 0


def _infer(node: Node) -> list[TensorType]:
    return list(get(node.attrs["inner"]).infer(_inner(node)))


def _scratch(node: Node) -> int:
    """Inner scratch, then room for every weight widened to f32 (packing pads rows to 8 at most)."""
    widened = sum(int(np.prod(v.type.shape[:-1], dtype=np.int64)) * _ceil(v.type.shape[-1], 8) * 4
                  for v in node.inputs if v.is_const and v.type.shape)
    return _inner_scratch(node) + _ceil(widened, 64) + 64


class _HalfWeights:
    """The context's weight store while the inner op emits: float weights go to the blob as fp16 and come
    back widened in scratch (from ``base`` on)."""

    def __init__(self, ctx: EmitContext, base: int) -> None:
        self._ctx, self._next = ctx, base
        self.prologue: list[tuple[int, str, str]] = []  # (count, fp16 source, f32 destination)

    def __call__(self, array: np.ndarray, ctype: str) -> str:
        if ctype != "float" or array.size < MIN_ELEMENTS:
            return f"(({ctype}*)(W + {self._ctx.const_offset(array)}))"
        half = f"((uint16_t*)(W + {self._ctx.const_offset(np.asarray(array, np.float16))}))"
        dst = f"((float*)(A + {self._next}))"
        self._next += _ceil(array.size * 4, 64)
        self.prologue.append((array.size, half, dst))
        return dst


def _emit(node: Node, ctx: EmitContext) -> str:
    inner = _inner(node)
    base = ctx.plan.scratch[id(node)]
    half = _HalfWeights(ctx, base + _inner_scratch(node))
    ctx.node, ctx.weight_store = inner, half
    ctx.plan.scratch[id(inner)] = base
    try:
        code = get(inner.op).emit(inner, ctx)
        kernel = ctx.kernels_used.pop(inner.name, inner.op)
    finally:
        ctx.plan.scratch.pop(id(inner), None)
        ctx.node, ctx.weight_store = node, None
    ctx.use_kernel(f"f16-cvt+{kernel}")
    if inner.name not in ctx.parallel_nodes:
        return "\n".join([*(f"f16_f32_vcvt({n}, {src}, {dst});" for n, src, dst in half.prologue), code])
    # split inner op: the threads widen a share each, then meet before it reads the weights
    widen = [f"{{ int lo, hi; cuvil_split({n}, 64, tid, nt, &lo, &hi); "
             f"if (lo < hi) f16_f32_vcvt(hi - lo, {src} + lo, {dst} + lo); }}"
             for n, src, dst in half.prologue]
    return "\n".join([*widen, "cuvil_barrier();", code])


register(OpDef("f16w", _infer, None, _emit, kernels=("qf16-cvt", "f32-gemm", "f32-conv", "f32-dwconv"),
               scratch=_scratch))


def _attrs(node: Node) -> dict[str, Attr]:
    return {"inner": Attr(str), **(CONV_ATTRS if node.attrs.get("inner") == "conv" else GEMM_ATTRS)}


declare("f16w", _attrs)
