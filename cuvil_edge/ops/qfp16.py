"""``f16w``: a float op (conv, gemm, ...) whose packed weights are stored as fp16.

The wrapped op's own emitter runs unchanged against a context whose ``weight()`` stores each large
packed constant as IEEE half and returns a scratch buffer that ``f16_f32_vcvt`` fills first: the blob
(and the bundle) halves, the math stays f32. Attrs: the inner op's attrs plus ``inner`` (its name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..ir.graph import Node, TensorType
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
    """EmitContext stand-in: float weights go to the blob as fp16 and come back widened in scratch."""

    def __init__(self, ctx: EmitContext, base: int) -> None:
        self._ctx, self._next = ctx, base
        self.prologue: list[tuple[int, str, str]] = []  # (count, fp16 source, f32 destination)

    def weight(self, array: np.ndarray, ctype: str = "float") -> str:
        if ctype != "float" or array.size < MIN_ELEMENTS:
            return self._ctx.weight(array, ctype)
        half = self._ctx.weight(np.asarray(array, np.float16), "uint16_t")
        dst = f"((float*)(A + {self._next}))"
        self._next += _ceil(array.size * 4, 64)
        self.prologue.append((array.size, half, dst))
        return dst

    def __getattr__(self, name: str):
        return getattr(self._ctx, name)


def _emit(node: Node, ctx: EmitContext) -> str:
    inner = _inner(node)
    base = ctx.plan.scratch[id(node)]
    half = _HalfWeights(ctx, base + _inner_scratch(node))
    ctx.node = inner
    ctx.plan.scratch[id(inner)] = base
    try:
        code = get(inner.op).emit(inner, half)  # type: ignore[arg-type]
        kernel = ctx.kernels_used.pop(inner.name, inner.op)
    finally:
        ctx.plan.scratch.pop(id(inner), None)
        ctx.node = node
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
