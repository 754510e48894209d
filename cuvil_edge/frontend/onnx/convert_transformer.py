"""Converters for transformer-era ops: LayerNormalization, Gelu, Einsum (diagonals, sums, matmuls),
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
#: the letters an ellipsis stands for (never an equation's own: those are ASCII letters)
_ELLIPSIS = "".join(chr(0x100 + i) for i in range(64))


def _transpose(ctx: ConvertContext, v: Value, perm: list[int], tag: str) -> Value:
    if perm == sorted(perm):
        return v
    return ctx.emit1("transpose", [v], {"perm": perm}, name=f"{ctx.name}/{tag}")


def _permute(ctx: ConvertContext, v: Value, have: str, want: str, tag: str) -> Value:
    return _transpose(ctx, v, [have.index(c) for c in want], tag)


def _reshape(ctx: ConvertContext, v: Value, shape: list[int], tag: str) -> Value:
    return ctx.emit1("reshape", [v], {"shape": [int(d) for d in shape]}, name=f"{ctx.name}/{tag}")


def _einsum_terms(ctx: ConvertContext, xs: list[Value]) -> tuple[list[str], str]:
    """The operands' and the output's subscripts, each ellipsis spelled out as letters of ``_ELLIPSIS``
    (right-aligned: an operand of fewer ellipsis dims takes the last ones); an implicit output is the
    ellipsis then the letters that appear once, sorted (the ONNX and numpy rule)."""
    eq = ctx.attr("equation").replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(xs) or any(t.count("...") > 1 for t in [*terms, out]):
        raise ctx.unsupported(f"equation {eq!r} does not match its {len(xs)} inputs")
    spans = [len(x.type.shape) - len(t.replace("...", "")) for t, x in zip(terms, xs)]
    if any(n < 0 or (n and "..." not in t) for n, t in zip(spans, terms)):
        raise ctx.unsupported(f"equation {eq!r} does not match the input ranks")
    dots = _ELLIPSIS[:max(spans, default=0)]
    terms = [t.replace("...", dots[len(dots) - n:]) for t, n in zip(terms, spans)]
    if not arrow:
        letters = "".join(terms)
        out = dots + "".join(sorted(c for c in set(letters) if c not in dots and letters.count(c) == 1))
    out = out.replace("...", dots)
    if len(set(out)) != len(out) or any(c not in "".join(terms) for c in out):
        raise ctx.unsupported(f"equation {eq!r} repeats an output index or names one no input has")
    return terms, out


def _diagonals(ctx: ConvertContext, v: Value, t: str, tag: str) -> tuple[Value, str]:
    """Each letter repeated in one operand taken along its diagonal: its r copies moved last, flattened to
    n^r and sliced with step 1 + n + ... + n^(r-1)."""
    for c in dict.fromkeys(c for c in t if t.count(c) > 1):
        at = [i for i, d in enumerate(t) if d == c]
        sizes = {v.type.shape[i] for i in at}
        if len(sizes) != 1:
            raise ctx.unsupported(f"index {c!r} repeated over dims of sizes {sorted(sizes)}")
        n, rest = sizes.pop(), [i for i, d in enumerate(t) if d != c]
        kept = [v.type.shape[i] for i in rest]
        flat = _reshape(ctx, _transpose(ctx, v, rest + at, f"{tag}/diag_{c}_t"), [*kept, n ** len(at)],
                        f"{tag}/diag_{c}_flat")
        v = ctx.emit1("slice", [flat], {"starts": [0] * (len(kept) + 1), "ends": [*kept, n ** len(at)],
                                         "steps": [1] * len(kept) + [sum(n ** j for j in range(len(at)))]},
                      name=f"{ctx.name}/{tag}/diag_{c}")
        t = "".join(t[i] for i in rest) + c
    return v, t


def _sum_out(ctx: ConvertContext, v: Value, t: str, keep: str, tag: str) -> tuple[Value, str]:
    """Letters of ``t`` outside ``keep`` summed out (ReduceSum): no other operand nor the output has them."""
    axes = [i for i, c in enumerate(t) if c not in keep]
    if not axes:
        return v, t
    op = "reduce" if v.type.dtype == "float32" else "reduce_loop"
    v = ctx.emit1(op, [v], {"kind": "sum", "axes": axes, "keepdims": False}, name=f"{ctx.name}/{tag}/sum")
    return v, "".join(c for c in t if c in keep)


def _contract(ctx: ConvertContext, a: tuple[Value, str], b: tuple[Value, str], keep: str,
              tag: str) -> tuple[Value, str]:
    """Two operands as one batched matmul over [batch, free-a, contracted] x [batch, contracted, free-b]
    (batch dims of size 1 broadcast there); the result is batch + free-a + free-b."""
    (va, ta), (vb, tb) = a, b
    batch = [c for c in ta if c in tb and c in keep]
    contr = [c for c in ta if c in tb and c not in keep]
    free_a, free_b = [c for c in ta if c not in tb], [c for c in tb if c not in ta]
    sa, sb = dict(zip(ta, va.type.shape)), dict(zip(tb, vb.type.shape))
    if any(sa[c] != sb[c] for c in contr):
        raise ctx.unsupported(f"summed index of sizes {[(sa[c], sb[c]) for c in contr]} (broadcast)")

    def prod(size: dict[str, int], cs: list[str]) -> int:
        return math.prod(size[c] for c in cs)

    ma = _reshape(ctx, _permute(ctx, va, ta, "".join(batch + free_a + contr), f"{tag}/a"),
                  [*(sa[c] for c in batch), prod(sa, free_a), prod(sa, contr)], f"{tag}/a3")
    mb = _reshape(ctx, _permute(ctx, vb, tb, "".join(batch + contr + free_b), f"{tag}/b"),
                  [*(sb[c] for c in batch), prod(sb, contr), prod(sb, free_b)], f"{tag}/b3")
    y = ctx.emit1("matmul", [ma, mb], name=f"{ctx.name}/{tag}/mm")
    order = batch + free_a + free_b
    size = {**sa, **sb, **{c: max(sa[c], sb[c]) for c in batch}}
    return _reshape(ctx, y, [size[c] for c in order], f"{tag}/y"), "".join(order)


@converter("Einsum")
def einsum(ctx: ConvertContext) -> None:
    """Any equation, as ONNX and numpy read it: per operand the diagonals of repeated letters, then a sum
    over letters no other operand nor the output has; operands contracted left to right by batched
    matmuls; the letters the output lacks summed; a transpose to the output order."""
    xs = ctx.inputs()
    terms, out = _einsum_terms(ctx, xs)
    ops = [_diagonals(ctx, x, t, f"in{i}") for i, (x, t) in enumerate(zip(xs, terms))]
    cur = ops[0]
    for i, nxt in enumerate(ops[1:], 1):
        rest = out + "".join(t for _, t in ops[i + 1:])
        cur = _sum_out(ctx, *cur, nxt[1] + rest, f"in{i - 1}")
        nxt = _sum_out(ctx, *nxt, cur[1] + rest, f"in{i}")
        cur = _contract(ctx, cur, nxt, rest, f"mm{i}")
    y, t = _sum_out(ctx, *cur, out, "out")
    ctx.set_outputs(_permute(ctx, y, t, out, "out"))


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
