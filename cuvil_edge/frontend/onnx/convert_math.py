"""Converters for elementwise math, softmax, reductions, LRN and Cast."""

from __future__ import annotations

import math

import numpy as np

from runtime_wasm.spec import STORED_RANGES

from ...ir.graph import Value
from ...ops.cast import HELD, RUNTIME_CASTS
from ...ops.common import broadcast_shape
from ...ops.float64 import UNARY as F64_UNARY
from ...ops.logic import BINARY_LOOP_C, BINARY_LOOP_DTYPES, REDUCE_LOOP, REDUCE_LOOP_DTYPES
from ...ops.mod import MOD_DTYPES, POW_DTYPES
from .float16 import stored_type_of
from .importer import np_dtype_of_onnx
from .registry import ConvertContext, converter, int_list

_COMMUTATIVE = ("add", "mul", "max", "min")


def emit_binary(ctx: ConvertContext, kind: str, a: Value, b: Value, name: str | None = None) -> Value:
    """One IR ``binary_f32``; the full-size run-time operand goes first so the op can run in place.
    Other element types at run time take ``binary_loop`` (Pow: ``pow_loop``); constant operands of any
    type fold."""
    if a.type.dtype != b.type.dtype:
        raise ctx.unsupported(f"operands of different types ({a.type.dtype}, {b.type.dtype})")
    if not (a.is_const and b.is_const) and a.type.dtype != "float32":
        if kind == "pow" and a.type.dtype in POW_DTYPES:
            return ctx.emit1("pow_loop", [a, b], name=name)
        if kind not in BINARY_LOOP_C or a.type.dtype not in BINARY_LOOP_DTYPES:
            raise ctx.unsupported(f"{kind} on {a.type.dtype} tensors at run time")
        return ctx.emit1("binary_loop", [a, b], {"kind": kind}, name=name)
    out = broadcast_shape([a.type.shape, b.type.shape], ctx.name)

    def rank(v: Value) -> tuple[bool, bool]:
        return v.type.shape == out, not v.is_const

    if kind in _COMMUTATIVE and rank(b) > rank(a):
        a, b = b, a
    return ctx.emit1("binary_f32", [a, b], {"kind": kind}, name=name)


@converter("Add", "Sub", "Mul", "Div")
def binary(ctx: ConvertContext) -> None:
    kind = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}[ctx.op_type]
    ctx.set_outputs(emit_binary(ctx, kind, ctx.input(0), ctx.input(1)))


def _as_type(ctx: ConvertContext, v: Value, dtype: str, tag: str) -> Value:
    """``v`` converted to ``dtype``: a constant at build time, else by a run-time ``cast``."""
    if v.type.dtype == dtype:
        return v
    if v.is_const:
        with np.errstate(all="ignore"):
            return ctx.constant(v.const.astype(dtype), tag)
    return ctx.emit1("cast", [v], {"to": dtype}, name=f"{ctx.name}/{tag}")


@converter("Pow")
def power(ctx: ConvertContext) -> None:
    """The result has the base's type, whatever the exponent's. The exponent takes the base's type when
    that loses nothing that matters (a float base; an integer exponent, which wraps into a narrower base
    type; a constant the base type holds exactly); an integer base under a float exponent runs in
    float64 and is truncated back, as numpy (and the ONNX reference) computes it."""
    a, b = ctx.input(0), ctx.input(1)
    base = a.type.dtype
    with np.errstate(all="ignore"):
        exact = b.is_const and np.array_equal(b.const, b.const.astype(base))
    if base.startswith("float") or b.type.dtype.startswith(("int", "uint")) or exact:
        ctx.set_outputs(emit_binary(ctx, "pow", a, _as_type(ctx, b, base, "exponent")))
        return
    a, b = (_as_type(ctx, v, "float64", tag) for v, tag in ((a, "base"), (b, "exponent")))
    wide = emit_binary(ctx, "pow", a, b, name=f"{ctx.name}/f64")
    ctx.set_outputs(ctx.emit1("cast", [wide], {"to": base}))


@converter("Mod")
def mod(ctx: ConvertContext) -> None:
    """fmod=1 (C fmod) or fmod=0 (the divisor's sign, numpy.mod) on float32, float64 and every integer
    type; float16 and bfloat16 run on the float32 they are held as."""
    a, b = ctx.input(0), ctx.input(1)
    fmod = int(ctx.attr("fmod", 0))
    if a.type.dtype != b.type.dtype or a.type.dtype not in MOD_DTYPES:
        raise ctx.unsupported(f"Mod of {a.type.dtype} by {b.type.dtype}")
    if not fmod and a.type.dtype.startswith("float") and ctx.opset < 28:
        raise ctx.unsupported("fmod=0 on float tensors (ONNX requires fmod=1 for floats before opset 28)")
    ctx.set_outputs(ctx.emit1("mod", [a, b], {"fmod": fmod}))


def _chain(ctx: ConvertContext, kind: str, final: bool = True) -> Value:
    """Left fold of a variadic op into binary nodes; the last one takes the node's name if ``final``."""
    xs = ctx.inputs()
    acc = xs[0]
    for i, x in enumerate(xs[1:], 1):
        last = final and i == len(xs) - 1
        acc = emit_binary(ctx, kind, acc, x, name=None if last else f"{ctx.name}/{i}")
    return acc


@converter("Max", "Min", "Sum")
def variadic(ctx: ConvertContext) -> None:
    ctx.set_outputs(_chain(ctx, {"Max": "max", "Min": "min", "Sum": "add"}[ctx.op_type]))


@converter("Mean")
def mean(ctx: ConvertContext) -> None:
    n = len(ctx.inputs())
    total = _chain(ctx, "add", final=False)
    if n > 1:
        total = emit_binary(ctx, "mul", total, ctx.constant(np.asarray(1.0 / n, total.type.dtype), "inv_n"))
    ctx.set_outputs(total)


_UNARY = {"Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Neg": "neg", "Abs": "abs",
          "Erf": "erf", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign",
          **{op: op.lower() for op in ("Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
                                       "Acosh", "Atanh")}}


@converter(*_UNARY)
def unary(ctx: ConvertContext) -> None:
    """float32 on the vector kernels; float64 at run time in double (``unary_f64``: exp, log and the exact
    ones), else computed in float32 between two casts (erf and the trigonometric ones: the kernels'
    polynomials are float32 ones, about 1e-7 relative error, and results past float32's range become inf)."""
    x = ctx.input(0)
    kind = _UNARY[ctx.op_type]
    if x.is_const or x.type.dtype == "float32":
        ctx.set_outputs(ctx.emit1("unary", [x], {"kind": kind}))
        return
    if x.type.dtype != "float64":
        raise ctx.unsupported(f"{ctx.op_type} on {x.type.dtype} at run time (float32 and float64 only)")
    if kind in F64_UNARY:
        ctx.set_outputs(ctx.emit1("unary_f64", [x], {"kind": kind}))
        return
    narrow = ctx.emit1("cast", [x], {"to": "float32"}, name=f"{ctx.name}/f32")
    y = ctx.emit1("unary", [narrow], {"kind": kind}, name=f"{ctx.name}/{kind}")
    ctx.set_outputs(ctx.emit1("cast", [y], {"to": "float64"}))


@converter("Softmax", "LogSoftmax")
def softmax(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    s = x.type.shape
    attrs = {"log": ctx.op_type == "LogSoftmax"}
    axis = int(ctx.attr("axis", 1 if ctx.opset < 13 else -1)) % max(len(s), 1)
    if ctx.opset >= 13 or axis == len(s) - 1:
        ctx.set_outputs(ctx.emit1("softmax", [x], {**attrs, "axis": axis}))
        return
    # opset < 13: softmax over the flattened trailing dims [axis:]
    flat = ctx.emit1("reshape", [x], {"shape": [math.prod(s[:axis]), math.prod(s[axis:])]},
                     name=f"{ctx.name}/2d")
    y = ctx.emit1("softmax", [flat], {**attrs, "axis": 1}, name=f"{ctx.name}/softmax")
    ctx.set_outputs(ctx.emit1("reshape", [y], {"shape": list(s)}))


_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min",
           "ReduceProd": "prod", "ReduceSumSquare": "sumsquare", "ReduceL1": "l1", "ReduceL2": "l2"}


def _reduce_axes(ctx: ConvertContext) -> list[int] | None:
    """The node's reduced axes (sorted, non-negative; every axis when none are given), or None for a
    no-op (empty axes with ``noop_with_empty_axes``). Axes are an input from opset 18 (ReduceSum: 13)."""
    x = ctx.input(0)
    rank = len(x.type.shape)
    axes_as_input = ctx.opset >= (13 if ctx.op_type == "ReduceSum" else 18)
    axes = ctx.const(1) if axes_as_input else ctx.attr("axes")
    axes = [] if axes is None else [ctx.axis(a, max(rank, 1)) for a in int_list(axes, f"{ctx.name}: axes")]
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        axes = list(range(rank))
    return sorted(set(axes))


@converter(*_REDUCE)
def reduce(ctx: ConvertContext) -> None:
    """float32 on the vector ``reduce`` kernels; Max/Min/Sum/Prod of integers, bool and float64 as
    ``reduce_loop`` (ids, counts, masks)."""
    x, axes = ctx.input(0), _reduce_axes(ctx)
    if axes is None:
        ctx.set_outputs(x)
        return
    kind = _REDUCE[ctx.op_type]
    attrs = {"kind": kind, "axes": axes, "keepdims": bool(ctx.attr("keepdims", 1))}
    if x.type.dtype == "float32" or x.is_const:
        ctx.set_outputs(ctx.emit1("reduce", [x], attrs))
    elif kind in REDUCE_LOOP and x.type.dtype in REDUCE_LOOP_DTYPES:
        ctx.set_outputs(ctx.emit1("reduce_loop", [x], attrs))
    else:
        raise ctx.unsupported(f"{ctx.op_type} on {x.type.dtype} at run time (float32 only)")


def _reduce_any(ctx: ConvertContext, x: Value, kind: str, attrs: dict, name: str) -> Value:
    """A ``reduce`` on float32 (the vector kernels), ``reduce_loop`` on the other types."""
    op = "reduce" if x.type.dtype == "float32" or x.is_const else "reduce_loop"
    return ctx.emit1(op, [x], {"kind": kind, **attrs}, name=name)


def _exp_log(ctx: ConvertContext, x: Value, kind: str, name: str | None = None) -> Value:
    """exp or log in x's precision: ``unary`` on float32, ``unary_f64`` (double throughout) on float64."""
    return ctx.emit1("unary_f64" if x.type.dtype == "float64" else "unary", [x], {"kind": kind}, name=name)


@converter("ReduceLogSum", "ReduceLogSumExp")
def reduce_log(ctx: ConvertContext) -> None:
    """log(sum(x)), and log(sum(exp(x - m))) + m with m the (finite) maximum: no overflow for large x, and
    an all -inf slice gives -inf rather than nan. float64 stays in double precision throughout."""
    x, axes = ctx.input(0), _reduce_axes(ctx)
    dtype = x.type.dtype
    if not x.is_const and dtype not in ("float32", "float64"):
        raise ctx.unsupported(f"{ctx.op_type} on {dtype} at run time (float32 and float64 only)")
    if axes is None:
        ctx.set_outputs(_exp_log(ctx, x, "log") if ctx.op_type == "ReduceLogSum" else x)
        return
    keep = {"axes": axes, "keepdims": True}
    shift = None
    if ctx.op_type == "ReduceLogSumExp":
        m = _reduce_any(ctx, x, "max", keep, f"{ctx.name}/max")
        bounds = ((np.inf, "below", "lt"), (-np.inf, "above", "gt"))
        below, above = (ctx.emit1("compare", [m, ctx.constant(np.asarray(bound, dtype), tag)], {"kind": kind},
                                  name=f"{ctx.name}/{tag}") for bound, tag, kind in bounds)
        finite = ctx.emit1("logic", [below, above], {"kind": "and"}, name=f"{ctx.name}/finite")
        shift = ctx.emit1("where", [finite, m, ctx.constant(np.asarray(0, dtype), "zero")],
                          name=f"{ctx.name}/shift")
        centred = emit_binary(ctx, "sub", x, shift, name=f"{ctx.name}/centred")
        x = _exp_log(ctx, centred, "exp", f"{ctx.name}/exp")
    total = _reduce_any(ctx, x, "sum", keep, f"{ctx.name}/sum")
    y = _exp_log(ctx, total, "log", f"{ctx.name}/log")
    if shift is not None:
        y = emit_binary(ctx, "add", y, shift, name=f"{ctx.name}/shifted")
    if not ctx.attr("keepdims", 1):
        y = ctx.emit1("reshape", [y], {"shape": [d for i, d in enumerate(y.type.shape) if i not in axes]})
    ctx.set_outputs(y)


@converter("LRN")
def lrn(ctx: ConvertContext) -> None:
    size = ctx.attr("size")
    if size is None:
        raise ctx.unsupported("LRN needs a size")
    ctx.set_outputs(ctx.emit1("lrn", [ctx.input(0)], {
        "size": int(size), "alpha": float(ctx.attr("alpha", 1e-4)), "beta": float(ctx.attr("beta", 0.75)),
        "bias": float(ctx.attr("bias", 1.0))}))


@converter("Cast", "CastLike")
def cast(ctx: ConvertContext) -> None:
    """Cast to ``to``, or (CastLike) to the type of input 1, as the type a stored type (float16, bfloat16,
    float8, int4, ...) is held as: the importer puts the result on the stored type's grid with the node's
    ``saturate`` and ``round_mode`` (float16.py). To a small integer type (int4, ...) the values wrap, as
    ml_dtypes and onnxruntime convert."""
    x = ctx.input(0)
    ctx.attr("saturate"), ctx.attr("round_mode")  # read by the importer's narrowing cast
    if ctx.op_type == "Cast":
        to = np_dtype_of_onnx(int(ctx.attr("to")), ctx.op_type, ctx.name, ctx.opset)
    else:  # a stored-type ``like`` tensor is held wider: its type is what the importer tracks
        to = stored_type_of(ctx.graph, ctx.input(1)) or ctx.input(1).type.dtype
    if to not in STORED_RANGES:  # a small integer type: made here, widened by the importer
        to = HELD.get(to, to)
    if to == x.type.dtype:
        ctx.set_outputs(x)
        return
    if not x.is_const and (x.type.dtype, to) not in RUNTIME_CASTS:
        raise ctx.unsupported(f"Cast {x.type.dtype} -> {to} at run time")
    ctx.set_outputs(ctx.emit1("cast", [x], {"to": to}))


@converter("Swish")
def swish(ctx: ConvertContext) -> None:
    """x * sigmoid(alpha * x) (opset 24): alpha 1 is SiLU, which the fusion passes know."""
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    scaled = x if alpha == 1.0 else emit_binary(ctx, "mul", x, ctx.constant(np.float32(alpha), "alpha"),
                                            name=f"{ctx.name}/scaled")
    gate = ctx.emit1("epilogue_act", [scaled], {"act": ("sigmoid", 0.0, 0.0)}, name=f"{ctx.name}/gate")
    ctx.set_outputs(emit_binary(ctx, "mul", x, gate))


@converter("RMSNormalization")
def rms_norm(ctx: ConvertContext) -> None:
    """x / sqrt(mean(x^2 over axis..last) + epsilon) * scale (opset 23), computed in float32 (stash_type
    1, the default); the scale may be a run-time input."""
    x, scale = ctx.input(0), ctx.input(1)
    if int(ctx.attr("stash_type", 1)) != 1:
        raise ctx.unsupported(f"stash_type={ctx.attr('stash_type')} (float32 only)")
    rank = len(x.type.shape)
    axis = int(ctx.attr("axis", -1)) % max(rank, 1)
    eps = ctx.constant(np.float32(ctx.attr("epsilon", 1e-5)), "epsilon")
    square = emit_binary(ctx, "mul", x, x, name=f"{ctx.name}/square")
    mean = ctx.emit1("reduce", [square], {"kind": "mean", "axes": list(range(axis, rank)), "keepdims": True},
                     name=f"{ctx.name}/mean")
    rms = ctx.emit1("unary", [emit_binary(ctx, "add", mean, eps, name=f"{ctx.name}/eps")], {"kind": "sqrt"},
                    name=f"{ctx.name}/rms")
    normed = emit_binary(ctx, "div", x, rms, name=f"{ctx.name}/normed")
    ctx.set_outputs(emit_binary(ctx, "mul", normed, scale))


_BITWISE = {"BitwiseAnd": "bitand", "BitwiseOr": "bitor", "BitwiseXor": "bitxor"}


@converter(*_BITWISE, "BitwiseNot", "BitShift")
def bitwise(ctx: ConvertContext) -> None:
    """Bit operations on integer tensors (``binary_loop``); BitwiseNot as xor with all ones."""
    a = ctx.input(0)
    if not a.type.dtype.startswith(("int", "uint")):
        raise ctx.unsupported(f"{ctx.op_type} on {a.type.dtype} (integers only)")
    if ctx.op_type == "BitwiseNot":
        kind, b = "bitxor", ctx.constant(np.array(-1).astype(a.type.dtype), "ones")
    elif ctx.op_type == "BitShift":
        direction = ctx.attr("direction")
        if direction not in ("LEFT", "RIGHT"):
            raise ctx.unsupported(f"direction {direction!r}")
        kind, b = ("shl" if direction == "LEFT" else "shr"), ctx.input(1)
    else:
        kind, b = _BITWISE[ctx.op_type], ctx.input(1)
    if a.type.dtype != b.type.dtype:
        raise ctx.unsupported(f"operands of different types ({a.type.dtype}, {b.type.dtype})")
    ctx.set_outputs(ctx.emit1("binary_loop", [a, b], {"kind": kind}))
