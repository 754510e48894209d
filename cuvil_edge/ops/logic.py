"""Comparison, boolean and selection ops on any element type: ``compare`` (eq/lt/gt/le/ge -> bool),
``logic`` (and/or/xor/not on bool), ``where`` (cond ? a : b), ``binary_loop`` (add/sub/mul/div/max/min
on every integer type and float64, wrapping as numpy and onnxruntime do, and the bit operations on
integers: ``binary_f32`` runs float32 on vector kernels), plus ``argreduce``
(ArgMax/ArgMin), ``cumulative`` (CumSum, CumProd) and ``topk``.

These carry masks and ids rather than bulk math, so they are emitted as C loops with every shape and
stride a build-time constant (broadcasting collapsed as in ``binary_f32``): clang vectorises the
contiguous inner loops, and no per-type kernel family is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType, Value
from .common import CTYPES, broadcast_shape
from .elementwise import binary_numpy, collapse_broadcast, outer_loops
from .reduce import reduced_shape
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

COMPARE = {"eq": ("==", np.equal), "lt": ("<", np.less), "gt": (">", np.greater),
           "le": ("<=", np.less_equal), "ge": (">=", np.greater_equal)}
LOGIC = {"and": ("&&", np.logical_and), "or": ("||", np.logical_or), "xor": ("!=", np.logical_xor)}
#: binary_loop kinds as C expressions over operands {0}, {1}; C integer division truncates like ONNX Div
BINARY_LOOP_C = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
                 "max": "({0} > {1} ? {0} : {1})", "min": "({0} < {1} ? {0} : {1})"}
BINARY_LOOP_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float64")
#: the bit operations (integer types only). Shifts as ONNX BitShift: an amount that is negative or the
#: width or more leaves the sign fill (``{fill}``: -1 for a right shift of a negative signed value, else
#: 0); left shifts run on the unsigned type (a signed left shift past the sign bit is undefined in C)
BITWISE_C = {"bitand": "{0} & {1}", "bitor": "{0} | {1}", "bitxor": "{0} ^ {1}",
             "shl": "((uint64_t){1} >= {bits} ? 0 : ({ct})(({ut}){0} << {1}))",
             "shr": "((uint64_t){1} >= {bits} ? {fill} : {0} >> {1})"}


def broadcast_loop(ctx: EmitContext, y: Value, inputs: Sequence[Value], expr: str) -> str:
    """Nested C loops writing contiguous ``y[o] = expr`` where ``expr`` names operand k as ``{k}``."""
    dims = collapse_broadcast(y.type.shape, [v.type.shape for v in inputs])
    heads, offs, yoff = outer_loops(dims, 1, [ctx.ptr(v) for v in inputs])
    reads = [f"*({o})" for o in offs]
    return "\n".join([*heads, f"  *({ctx.ptr(y)}{yoff}) = {expr.format(*reads)};", "}" * len(heads)])


def _bool_infer(node: Node) -> list[TensorType]:
    a = [v.type for v in node.inputs]
    if len({t.dtype for t in a}) != 1:
        raise ShapeError(f"{node.name}: operands are {[t.dtype for t in a]}")
    return [TensorType(broadcast_shape([t.shape for t in a], node.name), "bool")]


# -- compare ---------------------------------------------------------------------------------------
def _compare_emit(node: Node, ctx: EmitContext) -> str:
    ctx.use_kernel(f"{dtype_code(node.inputs[0].type.dtype)}-{node.attrs['kind']}")
    return broadcast_loop(ctx, node.outputs[0], node.inputs, f"{{0}} {COMPARE[node.attrs['kind']][0]} {{1}}")


register(OpDef("compare", _bool_infer, lambda n, a: [COMPARE[n.attrs["kind"]][1](a[0], a[1])], _compare_emit))


# -- logic -----------------------------------------------------------------------------------------
def _logic_fold(node: Node, args) -> list[np.ndarray]:
    if node.attrs["kind"] == "not":
        return [np.logical_not(args[0])]
    return [LOGIC[node.attrs["kind"]][1](args[0], args[1])]


def _logic_emit(node: Node, ctx: EmitContext) -> str:
    kind = node.attrs["kind"]
    ctx.use_kernel(f"b-{kind}")
    expr = "!{0}" if kind == "not" else f"({{0}} != 0) {LOGIC[kind][0]} ({{1}} != 0)"
    return broadcast_loop(ctx, node.outputs[0], node.inputs, expr)


register(OpDef("logic", _bool_infer, _logic_fold, _logic_emit))


# -- binary_loop: binary math on ids, counters, float64 tensors ----------------------------------------
def _binary_loop_infer(node: Node) -> list[TensorType]:
    a, b = node.inputs[0].type, node.inputs[1].type
    kind = node.attrs["kind"]
    known = kind in BINARY_LOOP_C or (kind in BITWISE_C and a.dtype.startswith(("int", "uint")))
    if a.dtype != b.dtype or a.dtype not in BINARY_LOOP_DTYPES or not known:
        raise ShapeError(f"{node.name}: binary_loop {kind!r} on {a.dtype} and {b.dtype}")
    return [TensorType(broadcast_shape([a.shape, b.shape], node.name), a.dtype)]


def _binary_loop_emit(node: Node, ctx: EmitContext) -> str:
    kind, y = node.attrs["kind"], node.outputs[0]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-{kind}")
    expr = BINARY_LOOP_C.get(kind) or _bitwise_c(kind, y.type.dtype)
    return broadcast_loop(ctx, y, node.inputs, expr)


def _bitwise_c(kind: str, dtype: str) -> str:
    bits, signed = 8 * np.dtype(dtype).itemsize, dtype.startswith("int")
    fill = "({0} < 0 ? -1 : 0)" if signed else "0"
    return (BITWISE_C[kind].replace("{bits}", str(bits)).replace("{fill}", fill)
            .replace("{ct}", CTYPES[dtype]).replace("{ut}", f"uint{bits}_t"))


register(OpDef("binary_loop", _binary_loop_infer, lambda n, a: [binary_numpy(n.attrs["kind"], a[0], a[1])],
               _binary_loop_emit))


# -- where(cond, a, b) -------------------------------------------------------------------------------
def _where_infer(node: Node) -> list[TensorType]:
    c, a, b = (v.type for v in node.inputs)
    if c.dtype != "bool" or a.dtype != b.dtype:
        raise ShapeError(f"{node.name}: where({c.dtype}, {a.dtype}, {b.dtype})")
    return [TensorType(broadcast_shape([c.shape, a.shape, b.shape], node.name), a.dtype)]


def _where_emit(node: Node, ctx: EmitContext) -> str:
    ctx.use_kernel(f"{dtype_code(node.outputs[0].type.dtype)}-where")
    return broadcast_loop(ctx, node.outputs[0], node.inputs, "{0} ? {1} : {2}")


register(OpDef("where", _where_infer, lambda n, a: [np.where(a[0], a[1], a[2])], _where_emit))


def outer_inner(shape: Sequence[int], axis: int) -> tuple[int, int, int]:
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


# -- argreduce (kind max/min, axis, keepdims, select_last_index) -> int64 ----------------------------
def _arg_infer(node: Node) -> list[TensorType]:
    s, ax = list(node.inputs[0].type.shape), node.attrs["axis"]
    if node.attrs["keepdims"]:
        s[ax] = 1
    else:
        del s[ax]
    return [TensorType(tuple(s), "int64")]


def _arg_fold(node: Node, args) -> list[np.ndarray]:
    x, ax = args[0], node.attrs["axis"]
    fn = np.argmax if node.attrs["kind"] == "max" else np.argmin
    if node.attrs["last"]:
        idx = x.shape[ax] - 1 - fn(np.flip(x, ax), axis=ax)
    else:
        idx = fn(x, axis=ax)
    return [np.asarray(idx, np.int64).reshape(_arg_infer(node)[0].shape)]


def _arg_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    outer, n, inner = outer_inner(x.type.shape, node.attrs["axis"])
    better = (">" if node.attrs["kind"] == "max" else "<") + ("=" if node.attrs["last"] else "")
    ctx.use_kernel(f"{dtype_code(x.type.dtype)}-arg{node.attrs['kind']}")
    return (f"for (int o = 0; o < {outer}; o++)\n"
            f"  for (int i = 0; i < {inner}; i++) {{\n"
            f"    const __typeof__({ctx.ptr(x)}[0])* p = {ctx.ptr(x)} + (size_t)o * {n * inner} + i;\n"
            f"    int best = 0;\n"
            f"    for (int j = 1; j < {n}; j++)\n"
            f"      if (p[(size_t)j * {inner}] {better} p[(size_t)best * {inner}]) best = j;\n"
            f"    {ctx.ptr(y)}[(size_t)o * {inner} + i] = best;\n  }}")


register(OpDef("argreduce", _arg_infer, _arg_fold, _arg_emit))


# -- cumulative (kind sum/prod, axis, exclusive, reverse): CumSum and CumProd -----------------------------
#: kind -> (numpy scan, C statement folding x[k] into acc, the identity an exclusive scan starts from)
CUMULATIVE = {"sum": (np.cumsum, "acc += x[k];", 0), "prod": (np.cumprod, "acc *= x[k];", 1)}


def _cumulative_infer(node: Node) -> list[TensorType]:
    if node.attrs["kind"] not in CUMULATIVE:
        raise ShapeError(f"{node.name}: cumulative kind {node.attrs['kind']!r} (sum or prod)")
    return [node.inputs[0].type]


def _cumulative_fold(node: Node, args) -> list[np.ndarray]:
    x, ax = args[0], node.attrs["axis"]
    scan, _, identity = CUMULATIVE[node.attrs["kind"]]
    if node.attrs["reverse"]:
        x = np.flip(x, ax)
    y = scan(x, axis=ax, dtype=x.dtype)
    if node.attrs["exclusive"]:
        head = np.full_like(np.take(y, [0], axis=ax), identity)
        y = np.concatenate([head, np.take(y, range(x.shape[ax] - 1), axis=ax)], axis=ax)
    return [np.flip(y, ax) if node.attrs["reverse"] else y]


def _cumulative_emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    outer, n, inner = outer_inner(x.type.shape, node.attrs["axis"])
    _, read, identity = CUMULATIVE[node.attrs["kind"]]
    ctx.use_kernel(f"{dtype_code(x.type.dtype)}-cum{node.attrs['kind']}")
    step = -inner if node.attrs["reverse"] else inner
    first = (n - 1) * inner if node.attrs["reverse"] else 0
    ct = f"{ctx.ptr(x)}[0]"
    write = "y[k] = acc;"
    body = f"{write} {read}" if node.attrs["exclusive"] else f"{read} {write}"
    return (f"for (int o = 0; o < {outer}; o++)\n"
            f"  for (int i = 0; i < {inner}; i++) {{\n"
            f"    const __typeof__({ct})* x = {ctx.ptr(x)} + (size_t)o * {n * inner} + i + {first};\n"
            f"    __typeof__({ct})* y = {ctx.ptr(y)} + (size_t)o * {n * inner} + i + {first};\n"
            f"    __typeof__({ct}) acc = {identity};\n"
            f"    for (ptrdiff_t j = 0, k = 0; j < {n}; j++, k += {step}) {{ {body} }}\n  }}")


register(OpDef("cumulative", _cumulative_infer, _cumulative_fold, _cumulative_emit))


# -- topk (axis, k, largest, sorted=1): values and int64 indices; ties keep the lower index -------------
def _topk_infer(node: Node) -> list[TensorType]:
    s = list(node.inputs[0].type.shape)
    if not 0 <= node.attrs["k"] <= s[node.attrs["axis"]]:
        raise ShapeError(f"{node.name}: topk k={node.attrs['k']} out of range for {tuple(s)}")
    s[node.attrs["axis"]] = node.attrs["k"]
    return [TensorType(tuple(s), node.inputs[0].type.dtype), TensorType(tuple(s), "int64")]


def _topk_fold(node: Node, args) -> list[np.ndarray]:
    x, ax, k = args[0], node.attrs["axis"], node.attrs["k"]
    order = np.argsort(-x if node.attrs["largest"] else x, axis=ax, kind="stable")
    idx = np.take(order, range(k), axis=ax)
    return [np.take_along_axis(x, idx, axis=ax), idx.astype(np.int64)]


def _topk_emit(node: Node, ctx: EmitContext) -> str:
    """Insertion into a sorted list of k per column: O(n k), fine for the small k of detectors."""
    x, vals, idxs = node.inputs[0], *node.outputs
    outer, n, inner = outer_inner(x.type.shape, node.attrs["axis"])
    k = node.attrs["k"]
    if k == 0:
        return ""
    beats = ">" if node.attrs["largest"] else "<"
    ctx.use_kernel(f"{dtype_code(x.type.dtype)}-topk")
    xp, vp, ip = ctx.ptr(x), ctx.ptr(vals), ctx.ptr(idxs)
    return (f"for (int o = 0; o < {outer}; o++)\n"
            f"  for (int i = 0; i < {inner}; i++) {{\n"
            f"    const size_t xb = (size_t)o * {n * inner} + i, yb = (size_t)o * {k * inner} + i;\n"
            f"    int cnt = 0;\n"
            f"    for (int j = 0; j < {n}; j++) {{\n"
            f"      const __typeof__({xp}[0]) v = {xp}[xb + (size_t)j * {inner}];\n"
            f"      int p = cnt;\n"
            f"      while (p > 0 && v {beats} {vp}[yb + (size_t)(p - 1) * {inner}]) p--;\n"
            f"      if (p >= {k}) continue;\n"
            f"      for (int q = (cnt < {k} ? cnt : {k} - 1); q > p; q--) {{\n"
            f"        {vp}[yb + (size_t)q * {inner}] = {vp}[yb + (size_t)(q - 1) * {inner}];\n"
            f"        {ip}[yb + (size_t)q * {inner}] = {ip}[yb + (size_t)(q - 1) * {inner}];\n"
            f"      }}\n"
            f"      {vp}[yb + (size_t)p * {inner}] = v; {ip}[yb + (size_t)p * {inner}] = j;\n"
            f"      if (cnt < {k}) cnt++;\n    }}\n  }}")


register(OpDef("topk", _topk_infer, _topk_fold, _topk_emit))


# -- reduce_loop: ReduceMax/Min/Sum/Prod on integers, bool and float64 ------------------------------
#: kind -> (C statement folding ``v`` into ``*acc``, numpy reduction); sums and products wrap in the type
REDUCE_LOOP = {"max": ("if (v > *acc) *acc = v;", np.max), "min": ("if (v < *acc) *acc = v;", np.min),
               "sum": ("*acc += v;", np.sum), "prod": ("*acc *= v;", np.prod)}
REDUCE_LOOP_DTYPES = (*BINARY_LOOP_DTYPES, "bool")


def _reduce_loop_infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    if x.dtype not in REDUCE_LOOP_DTYPES or node.attrs["kind"] not in REDUCE_LOOP or \
            (x.dtype == "bool" and node.attrs["kind"] not in ("max", "min")):
        raise ShapeError(f"{node.name}: reduce_loop {node.attrs['kind']!r} on {x.dtype}")
    return [TensorType(reduced_shape(node), x.dtype)]


def _reduce_loop_fold(node: Node, args) -> list[np.ndarray]:
    x = args[0]
    fn = REDUCE_LOOP[node.attrs["kind"]][1]
    kw = {"dtype": x.dtype} if node.attrs["kind"] in ("sum", "prod") else {}
    return [np.asarray(fn(x, axis=tuple(node.attrs["axes"]), keepdims=True, **kw)).astype(x.dtype)
            .reshape(reduced_shape(node))]


def _identity_c(kind: str, dtype: str) -> str:
    """The C value a reduction starts from: 0 / 1 for sums and products, the type's far end for max/min."""
    if kind in ("sum", "prod"):
        return "0" if kind == "sum" else "1"
    if dtype == "bool":
        return "0" if kind == "max" else "1"
    if dtype == "float64":
        return "-__builtin_inf()" if kind == "max" else "__builtin_inf()"
    bits, unsigned = 8 * np.dtype(dtype).itemsize, dtype.startswith("u")
    if unsigned:
        return "0" if kind == "max" else f"UINT{bits}_MAX"
    return f"INT{bits}_MIN" if kind == "max" else f"INT{bits}_MAX"


def _reduce_loop_emit(node: Node, ctx: EmitContext) -> str:
    """The output set to the reduction's identity, then every input element folded into the output
    element its kept coordinates name (a C loop: these carry ids, counts and masks, not bulk math)."""
    x, y = node.inputs[0], node.outputs[0]
    kind, dtype = node.attrs["kind"], y.type.dtype
    ctx.use_kernel(f"{dtype_code(dtype)}-reduce-{kind}")
    shape, axes = x.type.shape, set(node.attrs["axes"])
    init = _identity_c(kind, dtype)
    terms, out_stride, inner = [], 1, 1
    for d in reversed(range(len(shape))):
        if d not in axes and shape[d] > 1:
            terms.append(f"(k / {inner} % {shape[d]}) * {out_stride}")
        if d not in axes:
            out_stride *= shape[d]
        inner *= shape[d]
    at = " + ".join(terms) or "0"
    return "\n".join([
        f"for (size_t o = 0; o < {y.type.size}; o++) {ctx.ptr(y)}[o] = {init};",
        f"for (size_t k = 0; k < {x.type.size}; k++) {{",
        f"  {CTYPES[dtype]} v = {ctx.ptr(x)}[k], *acc = {ctx.ptr(y)} + ({at});",
        f"  {REDUCE_LOOP[kind][0]}",
        "}"])


register(OpDef("reduce_loop", _reduce_loop_infer, _reduce_loop_fold, _reduce_loop_emit))
