"""Elementwise float32 ops on vector kernels: ``binary_f32`` (numpy broadcasting, fused act) and ``unary``
(exp, log, sqrt, erf, ...). Binary math on int32, int64 and float64 is ``binary_loop`` (``ops/logic.py``);
``binary_f32`` folds any element type at build time.

``binary_f32`` collapses its broadcast at build time into outer C loops around an (m rows x n) kernel whose
innermost operands each have stride 1 or 0, so per-channel scales ([1,C,H,W] * [C,1,1]) run as one
vector-scalar pass per channel. Pow by a constant 2, 0.5, 1, 3 or -1 runs as a unary kernel instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError, UnsupportedOperator
from ..ir.graph import Node, TensorType
from .common import act_c, act_numpy, broadcast_shape, same_type, split_rows
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

BINARY_KINDS = ("add", "sub", "mul", "div", "pow", "max", "min")

#: pow by these constant exponents runs as the named unary kernel
POW_FAST = {2.0: "square", 0.5: "sqrt", 1.0: "copy", 3.0: "cube", -1.0: "reciprocal"}


def collapse_broadcast(out_shape: Sequence[int], in_shapes: Sequence[Sequence[int]]
                       ) -> list[tuple[int, tuple[int, ...]]]:
    """Output dims as (size, element stride of each contiguous input), size-1 dims dropped and
    neighbours merged wherever every input stays linear across both (so the innermost stride is 0 or 1)."""
    rank = len(out_shape)
    strides = []
    for s in in_shapes:
        s = (1,) * (rank - len(s)) + tuple(s)
        st, acc = [], 1
        for d in reversed(s):
            st.append(0 if d == 1 else acc)
            acc *= d
        strides.append(st[::-1])
    dims: list[tuple[int, tuple[int, ...]]] = []
    for i, size in enumerate(out_shape):
        if size == 1:
            continue
        cur = tuple(st[i] for st in strides)
        if dims and all(p == c * size for p, c in zip(dims[-1][1], cur)):
            dims[-1] = (dims[-1][0] * size, cur)
        else:
            dims.append((size, cur))
    return dims or [(1, (1,) * len(in_shapes))]


def outer_loops(dims: Sequence[tuple[int, tuple[int, ...]]], inner: int, ptrs: Sequence[str]
                ) -> tuple[list[str], list[str], str]:
    """C ``for`` headers over ``dims`` (outermost first); each input pointer offset by its strides; the
    offset of a contiguous output whose innermost block per iteration is ``inner`` elements."""
    heads, offs, yoff = [], [[p] for p in ptrs], []
    block = inner * math.prod(size for size, _ in dims)
    for d, (size, strides) in enumerate(dims):
        block //= size
        heads.append(f"for (int i{d} = 0; i{d} < {size}; i{d}++) {{")
        yoff.append(f" + (size_t)i{d} * {block}")
        for k, st in enumerate(strides):
            if st:
                offs[k].append(f" + (size_t)i{d} * {st}")
    return heads, ["".join(o) for o in offs], "".join(yoff)


# -- binary_f32 -----------------------------------------------------------------------------------
def _binary_infer(node: Node) -> list[TensorType]:
    a, b = node.inputs[0].type, node.inputs[1].type
    if node.attrs["kind"] not in BINARY_KINDS:
        raise ShapeError(f"{node.name}: unknown binary kind {node.attrs['kind']!r}")
    if a.dtype != b.dtype:
        raise ShapeError(f"{node.name}: binary operands are {a.dtype} and {b.dtype}")
    return [TensorType(broadcast_shape([a.shape, b.shape], node.name), a.dtype)]


def binary_numpy(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX semantics: integer Div truncates toward zero (numpy floors)."""
    if kind == "div" and np.issubdtype(a.dtype, np.integer):
        return np.trunc(np.true_divide(a, b)).astype(a.dtype)
    if kind in ("shl", "shr"):
        return _shift(kind, a, b)
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
          "max": np.maximum, "min": np.minimum, "bitand": np.bitwise_and, "bitor": np.bitwise_or,
          "bitxor": np.bitwise_xor}[kind]
    with np.errstate(all="ignore"):
        return fn(a, b)


def _shift(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX BitShift (opset 28 for signed types): a shift by a negative amount or by the width or more
    leaves only the sign fill (-1 for a right shift of a negative value, else 0); left shifts wrap."""
    bits = a.dtype.itemsize * 8
    wide = b.astype(np.int64)
    inside = (wide >= 0) & (wide < bits)
    amount = np.where(inside, wide, 0).astype(a.dtype)
    with np.errstate(all="ignore"):
        moved = np.left_shift(a, amount) if kind == "shl" else np.right_shift(a, amount)
    fill = np.where(a < 0, -1, 0) if kind == "shr" and a.dtype.kind == "i" else 0
    return np.where(inside, moved, fill).astype(a.dtype)


def _binary_fold(node: Node, args) -> list[np.ndarray]:
    a, b = args
    return [act_numpy(binary_numpy(node.attrs["kind"], a, b), node.attrs.get("act")).astype(a.dtype)]


def _pow_fast(node: Node) -> str | None:
    """The unary kernel for pow by a constant uniform exponent in ``POW_FAST``, if this node has one."""
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if node.attrs["kind"] != "pow" or not b.is_const or b.type.size == 0 or a.type.size != y.type.size:
        return None
    e = b.const.reshape(-1)
    return POW_FAST.get(float(e[0])) if np.all(e == e[0]) else None


def _binary_emit(node: Node, ctx: EmitContext) -> str:
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    kind = node.attrs["kind"]
    if y.type.dtype != "float32":
        raise UnsupportedOperator(kind, node.name, detail=f"runs on float32 only, not {y.type.dtype}")
    fast = _pow_fast(node)
    if fast is not None:
        ctx.use_kernel(f"f32-v{fast}-4")
        return split_rows(ctx, y.type.size, y.type.size, lambda c, i: (
            f"f32_v{fast}({c}, {ctx.ptr(a)} + {i}, {ctx.ptr(y)} + {i}, {act_c(node)});"), unit=16,
            by_row=(a, y))
    dims = collapse_broadcast(y.type.shape, [a.type.shape, b.type.shape])
    n, (ia, ib) = dims[-1]
    m, (sa, sb) = dims[-2] if len(dims) > 1 else (1, (0, 0))
    fn = {(1, 1): f"f32_v{kind}", (1, 0): f"f32_v{kind}c", (0, 1): f"f32_vr{kind}c"}[(ia, ib)]
    ctx.use_kernel(fn.replace("_", "-") + "-4")
    heads, (pa, pb), py = outer_loops(dims[:-2], m * n, [ctx.ptr(a), ctx.ptr(b)])
    # with no outer loops, row r of the result and of each operand that varies along the rows (a row of
    # n, or one element when broadcast along them) are their r-th slices
    per_row = [] if heads else [y, *(v for v, i, s in ((a, ia, sa), (b, ib, sb))
                                     if s and v.type.size == m * (n if i else 1))]
    if m > 1:  # threads split the rows
        call = split_rows(ctx, m, y.type.size, lambda c, i: (
            f"{fn}({c}, {n}, {pa} + (size_t){i} * {sa}, {sa}, {pb} + (size_t){i} * {sb}, {sb}, "
            f"{ctx.ptr(y)}{py} + (size_t){i} * {n}, {act_c(node)});"), by_row=per_row)
    else:  # or the elements of the one row (a broadcast operand stays put)
        call = split_rows(ctx, n, y.type.size, lambda c, i: (
            f"{fn}(1, {c}, {pa} + {i if ia else 0}, {sa}, {pb} + {i if ib else 0}, {sb}, "
            f"{ctx.ptr(y)}{py} + {i}, {act_c(node)});"), unit=16,
            by_row=[] if heads else [y, *(v for v, i in ((a, ia), (b, ib)) if i and v.type.size == n)])
    return "\n".join([*heads, call, "}" * len(heads)])


register(OpDef("binary_f32", _binary_infer, _binary_fold, _binary_emit,
               kernels=("f32-unary", "f32-binary"), inplace=True, dtypes=F32))


# -- unary ----------------------------------------------------------------------------------------
_erf = np.vectorize(math.erf, otypes=[np.float64])

UNARY_NUMPY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "neg": np.negative, "abs": np.abs, "erf": _erf,
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "reciprocal": np.reciprocal, "sign": np.sign,
    "square": np.square, "cube": lambda x: x * x * x, "copy": np.copy,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
}


def _unary_infer(node: Node) -> list[TensorType]:
    if node.attrs["kind"] not in UNARY_NUMPY:
        raise ShapeError(f"{node.name}: unknown unary kind {node.attrs['kind']!r}")
    return same_type(node)


def _unary_fold(node: Node, args) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        y = UNARY_NUMPY[node.attrs["kind"]](args[0])
    return [act_numpy(y, node.attrs.get("act")).astype(args[0].dtype)]


def _unary_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    kind = node.attrs["kind"]
    if y.type.dtype != "float32":
        raise UnsupportedOperator(kind, node.name, detail=f"runs on float32 only, not {y.type.dtype}")
    ctx.use_kernel(f"f32-v{kind}-4")
    return split_rows(ctx, x.type.size, x.type.size, lambda c, i: (
        f"f32_v{kind}({c}, {ctx.ptr(x)} + {i}, {ctx.ptr(y)} + {i}, {act_c(node)});"), unit=16, by_row=(x, y))


register(OpDef("unary", _unary_infer, _unary_fold, _unary_emit,
               kernels=("f32-unary",), inplace=True, dtypes=F32))
