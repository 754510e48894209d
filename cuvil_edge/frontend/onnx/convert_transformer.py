"""Converters for transformer-era ops: LayerNormalization, Gelu, Einsum (as transpose + matmul),
comparisons, boolean logic, Where, TopK, ArgMax/ArgMin, CumSum, CumProd and Hardmax."""

from __future__ import annotations

import math

import numpy as np

from ...ir.graph import Value
from ...ir.limits import charge
from ...ops.common import broadcast_shape
from .registry import ConvertContext, converter


@converter("LayerNormalization")
def layer_norm(ctx: ConvertContext) -> None:
    """The fused ``layernorm`` kernel; the optional Mean and InvStdDev outputs (shaped like the input with
    the normalized dims 1) are computed beside it from reductions, in float32 (``stash_type`` 1)."""
    x = ctx.input(0)
    if int(ctx.attr("stash_type", 1)) != 1:
        raise ctx.unsupported(f"stash_type={ctx.attr('stash_type')} (float32 only)")
    rank = len(x.type.shape)
    axis = ctx.axis(ctx.attr("axis", -1), rank)
    norm = x.type.shape[axis:]
    n = math.prod(norm)
    eps = float(ctx.attr("epsilon", 1e-5))
    params = [ctx.input(i) if ctx.has_input(i) else None for i in (1, 2)]
    for p in params:
        if p is not None and broadcast_shape([p.type.shape, norm], ctx.name) != tuple(norm):
            raise ctx.unsupported(f"scale or bias of shape {p.type.shape} for normalized dims {norm}")
    charge(2 * n * 4, ctx.name)  # gamma and beta, made below
    if all(p is None or p.is_const for p in params):  # folded into the kernel
        scale, bias = (np.full(norm, d, np.float32) if p is None else p.const for p, d in zip(params, (1, 0)))
        gamma, beta = (np.broadcast_to(np.asarray(a, np.float32), norm).reshape(-1).copy()
                       for a in (scale, bias))
        y = ctx.emit1("layernorm", [x, ctx.constant(gamma, "gamma"), ctx.constant(beta, "beta")],
                      {"axis": axis, "eps": eps})
    else:  # a run-time scale or bias: applied after the normalization, broadcast over the rows
        ones, zeros = (ctx.constant(np.full(n, v, np.float32), tag) for v, tag in ((1, "ones"), (0, "zeros")))
        y = ctx.emit1("layernorm", [x, ones, zeros], {"axis": axis, "eps": eps}, name=f"{ctx.name}/norm")
        for p, kind in zip(params, ("mul", "add")):
            if p is not None:
                y = ctx.emit1("binary_f32", [y, p], {"kind": kind}, name=f"{ctx.name}/{kind}")
    if not any(ctx.proto.output[1:]):
        ctx.set_outputs(y)
        return
    keep = {"axes": list(range(axis, rank)), "keepdims": True}
    mean = ctx.emit1("reduce", [x], {"kind": "mean", **keep}, name=f"{ctx.name}/mean")
    centred = ctx.emit1("binary_f32", [x, mean], {"kind": "sub"}, name=f"{ctx.name}/centred")
    square = ctx.emit1("binary_f32", [centred, centred], {"kind": "mul"}, name=f"{ctx.name}/square")
    var = ctx.emit1("reduce", [square], {"kind": "mean", **keep}, name=f"{ctx.name}/var")
    shifted = ctx.emit1("binary_f32", [var, ctx.constant(np.float32(eps), "eps")], {"kind": "add"},
                        name=f"{ctx.name}/var_eps")
    std = ctx.emit1("unary", [shifted], {"kind": "sqrt"}, name=f"{ctx.name}/std")
    inv = ctx.emit1("unary", [std], {"kind": "reciprocal"}, name=f"{ctx.name}/inv_std")
    ctx.set_outputs(y, mean, inv)


@converter("Gelu")
def gelu(ctx: ConvertContext) -> None:
    approx = ctx.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ctx.unsupported(f"approximate={approx!r}")
    ctx.set_outputs(ctx.emit1("gelu", [ctx.input(0)], {"approximate": approx}))


# -- Einsum -----------------------------------------------------------------------------------------
def _permute(ctx: ConvertContext, v: Value, have: str, want: str, tag: str) -> Value:
    if have == want:
        return v
    return ctx.emit1("transpose", [v], {"perm": [have.index(c) for c in want]}, name=f"{ctx.name}/{tag}")


def _reshape(ctx: ConvertContext, v: Value, shape: list[int], tag: str) -> Value:
    return ctx.emit1("reshape", [v], {"shape": [int(d) for d in shape]}, name=f"{ctx.name}/{tag}")


@converter("Einsum")
def einsum(ctx: ConvertContext) -> None:
    """Two-operand contractions (``bhid,bhjd->bhij`` and friends) become one batched matmul over
    [batch, free-a, contracted] x [batch, contracted, free-b]; one operand is a transpose."""
    eq = ctx.attr("equation").replace(" ", "")
    if "..." in eq or "->" not in eq:
        raise ctx.unsupported(f"equation {eq!r} (explicit output, no ellipsis, is supported)")
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    xs = ctx.inputs()
    if len(xs) != len(terms) or len(set(out)) != len(out) or any(c not in lhs for c in out):
        raise ctx.unsupported(f"equation {eq!r} does not match its {len(xs)} inputs or repeats an output "
                              "index")
    if any(len(set(t)) != len(t) or len(t) != len(x.type.shape) for t, x in zip(terms, xs)):
        raise ctx.unsupported(f"equation {eq!r} repeats an index or does not match the input ranks")
    if len(terms) == 1:
        if sorted(terms[0]) != sorted(out):
            raise ctx.unsupported(f"single-operand equation {eq!r} (only permutations)")
        ctx.set_outputs(_permute(ctx, xs[0], terms[0], out, "perm"))
        return
    if len(terms) != 2:
        raise ctx.unsupported(f"{len(terms)} operands")
    a, b = terms
    batch = [c for c in a if c in b and c in out]
    contr = [c for c in a if c in b and c not in out]
    free_a = [c for c in a if c not in b]
    free_b = [c for c in b if c not in a]
    if any(c not in out for c in free_a + free_b):
        raise ctx.unsupported(f"equation {eq!r} sums an index of one operand only")
    size = {c: d for t, x in zip(terms, xs) for c, d in zip(t, x.type.shape)}

    def prod(cs: list[str]) -> int:
        return math.prod(size[c] for c in cs)

    bs = [size[c] for c in batch]
    va = _reshape(ctx, _permute(ctx, xs[0], a, "".join(batch + free_a + contr), "a"),
                  [*bs, prod(free_a), prod(contr)], "a3")
    vb = _reshape(ctx, _permute(ctx, xs[1], b, "".join(batch + contr + free_b), "b"),
                  [*bs, prod(contr), prod(free_b)], "b3")
    y = ctx.emit1("matmul", [va, vb], name=f"{ctx.name}/mm")
    order = "".join(batch + free_a + free_b)
    y = _reshape(ctx, y, [size[c] for c in order], "y")
    ctx.set_outputs(_permute(ctx, y, order, out, "out") if order != out else y)


# -- comparisons, logic, where -------------------------------------------------------------------------
_COMPARE = {"Equal": "eq", "Less": "lt", "Greater": "gt", "LessOrEqual": "le", "GreaterOrEqual": "ge"}


@converter(*_COMPARE)
def compare(ctx: ConvertContext) -> None:
    a, b = ctx.input(0), ctx.input(1)
    if a.type.dtype != b.type.dtype:
        raise ctx.unsupported(f"operands of different types ({a.type.dtype}, {b.type.dtype})")
    ctx.set_outputs(ctx.emit1("compare", [a, b], {"kind": _COMPARE[ctx.op_type]}))


@converter("And", "Or", "Xor", "Not")
def logic(ctx: ConvertContext) -> None:
    ctx.set_outputs(ctx.emit1("logic", ctx.inputs(), {"kind": ctx.op_type.lower()}))


@converter("IsNaN", "IsInf")
def is_special(ctx: ConvertContext) -> None:
    """IsNaN as ``not (x == x)``; IsInf as ``x == +inf`` or ``x == -inf`` (as its flags ask): exact compares,
    no new kernel (the kernels are built without fast-math, so a NaN is unequal to itself)."""
    x = ctx.input(0)
    if x.type.dtype not in ("float32", "float64"):
        raise ctx.unsupported(f"{ctx.op_type} of {x.type.dtype}")
    if ctx.op_type == "IsNaN":
        same = ctx.emit1("compare", [x, x], {"kind": "eq"}, name=f"{ctx.name}/eq")
        ctx.set_outputs(ctx.emit1("logic", [same], {"kind": "not"}))
        return
    signs = [s for s, flag in ((1, "detect_positive"), (-1, "detect_negative")) if ctx.attr(flag, 1)]
    hits = [ctx.emit1("compare", [x, ctx.constant(np.array(s * np.inf, x.type.dtype), f"inf{s}")],
                      {"kind": "eq"}, name=f"{ctx.name}/eq{s}") for s in signs]
    if not hits:
        ctx.materialise(x.type.size)
        ctx.set_outputs(ctx.constant(np.zeros(x.type.shape, bool), "none"))
    else:
        ctx.set_outputs(hits[0] if len(hits) == 1 else ctx.emit1("logic", hits, {"kind": "or"}))


@converter("Where")
def where(ctx: ConvertContext) -> None:
    c, a, b = ctx.input(0), ctx.input(1), ctx.input(2)
    if a.type.dtype != b.type.dtype:
        raise ctx.unsupported(f"branches of different types ({a.type.dtype}, {b.type.dtype})")
    ctx.set_outputs(ctx.emit1("where", [c, a, b]))


# -- index ops ---------------------------------------------------------------------------------------------
@converter("ArgMax", "ArgMin")
def argreduce(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    ctx.set_outputs(ctx.emit1("argreduce", [x], {
        "kind": ctx.op_type[3:].lower(), "axis": ctx.axis(ctx.attr("axis", 0), len(x.type.shape)),
        "keepdims": bool(ctx.attr("keepdims", 1)), "last": bool(ctx.attr("select_last_index", 0))}))


@converter("TopK")
def topk(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    k = int(ctx.attr("k")) if ctx.opset < 10 else int(ctx.scalar(1, "k"))
    ctx.set_outputs(*ctx.emit("topk", [x], {
        "k": k, "axis": ctx.axis(ctx.attr("axis", -1), len(x.type.shape)),
        "largest": bool(ctx.attr("largest", 1))}, n_outputs=2))


@converter("CumSum", "CumProd")
def cumulative(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    axis = ctx.axis(ctx.scalar(1, "axis"), len(x.type.shape))
    ctx.set_outputs(ctx.emit1("cumulative", [x], {
        "kind": ctx.op_type[3:].lower(), "axis": axis, "exclusive": bool(ctx.attr("exclusive", 0)),
        "reverse": bool(ctx.attr("reverse", 0))}))


@converter("Hardmax")
def hardmax(ctx: ConvertContext) -> None:
    """One-hot of the first maximum: ArgMax, compare with the index ramp, cast to the input type."""
    x = ctx.input(0)
    s = x.type.shape
    axis = ctx.axis(ctx.attr("axis", -1 if ctx.opset >= 13 else 1), len(s))
    v = x if ctx.opset >= 13 else _reshape(ctx, x, [math.prod(s[:axis]), math.prod(s[axis:])], "2d")
    ax = axis if ctx.opset >= 13 else 1
    shape = v.type.shape
    idx = ctx.emit1("argreduce", [v], {"kind": "max", "axis": ax, "keepdims": True, "last": False},
                    name=f"{ctx.name}/argmax")
    ramp = np.arange(shape[ax], dtype=np.int64).reshape([-1] + [1] * (len(shape) - ax - 1))
    hot = ctx.emit1("compare", [idx, ctx.constant(ramp, "ramp")], {"kind": "eq"}, name=f"{ctx.name}/eq")
    y = ctx.emit1("cast", [hot], {"to": x.type.dtype}, name=f"{ctx.name}/cast")
    ctx.set_outputs(y if ctx.opset >= 13 else _reshape(ctx, y, list(s), "out"))
