"""Pattern fusion for the graphs exporters write: decomposed LayerNorm, erf/tanh GELU, x*sigmoid(x),
Transpose feeding MatMul's B, scaled-dot-product attention, and MatMul + bias Add as one gemm.

Runs right after constant folding, before per-channel affine canonicalisation sees the Mul/Add of a
LayerNorm's gamma/beta. Every rewrite only adds one fused node that computes a value from the
pattern's inputs and redirects that value's uses (the bias fold, which moves an Add into its sole
producer, is the exception); the replaced nodes die in ``eliminate_dead`` (or
stay when something else still reads them), so a partial match never changes results.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ops.common import is_row_bias
from .simplify import eliminate_dead

Producers = dict[int, Node]


class _Matcher:
    """Producer/consumer lookups over one graph snapshot."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.prod: Producers = graph.producers()
        self.uses = graph.consumers()

    def node(self, v: Value, op: str, kind: str | None = None) -> Node | None:
        n = self.prod.get(id(v))
        if n is None or n.op != op or n.attrs.get("act") or (kind and n.attrs.get("kind") != kind):
            return None
        return n

    def sole_use(self, v: Value) -> Node | None:
        return self.graph.sole_consumer(v, self.uses)


def scalar(v: Value) -> float | None:
    """The value of a constant whose elements are all equal."""
    if not v.is_const or v.type.size == 0:
        return None
    flat = v.const.reshape(-1)
    return float(flat[0]) if np.all(flat == flat[0]) else None


def _other(n: Node, v: Value) -> Value | None:
    """The operand of binary ``n`` that is not ``v`` (None when v is not an operand)."""
    a, b = n.inputs
    return b if a is v else a if b is v else None


def _replace(graph: Graph, old: Value, op: str, inputs: list[Value], attrs: dict, at: Node) -> Node:
    """Add a fused node computing ``old`` right after ``at`` (all its inputs exist by then)."""
    out = graph.value(f"{old.name}/fused", old.type)
    node = graph.add_node(op, f"{at.name}/{op}", inputs, [out], attrs)
    graph.nodes.remove(node)
    graph.nodes.insert(graph.nodes.index(at) + 1, node)
    graph.replace_uses(old, out)
    return node


# -- LayerNorm ----------------------------------------------------------------------------------------
def _trailing_axes(n: Node) -> int | None:
    """First axis of a keepdims mean over trailing axes."""
    rank, axes = len(n.inputs[0].type.shape), list(n.attrs["axes"])
    if n.attrs["kind"] != "mean" or not n.attrs["keepdims"] or axes != list(range(rank - len(axes), rank)):
        return None
    return rank - len(axes)


def _fuse_layernorm(m: _Matcher, div: Node) -> bool:
    d, sd = div.inputs
    sub, sqrt = m.node(d, "binary_f32", "sub"), m.node(sd, "unary", "sqrt")
    if sub is None or sqrt is None:
        return False
    x, mean = sub.inputs
    mean_n, add = m.node(mean, "reduce"), m.node(sqrt.inputs[0], "binary_f32", "add")
    if mean_n is None or mean_n.inputs[0] is not x or add is None or _trailing_axes(mean_n) is None:
        return False
    eps = scalar(add.inputs[1])
    var_n = m.node(add.inputs[0], "reduce")
    if eps is None or var_n is None or var_n.attrs != mean_n.attrs:
        return False
    sq = m.node(var_n.inputs[0], "binary_f32")
    if sq is None or sq.inputs[0] is not d or not (
            (sq.attrs["kind"] == "pow" and scalar(sq.inputs[1]) == 2.0) or
            (sq.attrs["kind"] == "mul" and sq.inputs[1] is d)):
        return False
    axis = _trailing_axes(mean_n)
    norm_shape = x.type.shape[axis:]
    params, out, last = [], div.outputs[0], div
    for kind in ("mul", "add"):
        user = m.sole_use(out)
        c = _other(user, out) if user is not None and user.op == "binary_f32" and not user.attrs.get("act") \
            and user.attrs["kind"] == kind else None
        if c is None or not c.is_const or len(c.type.shape) > len(norm_shape) or \
                user.outputs[0].type.shape != x.type.shape:
            break
        try:
            params.append(np.broadcast_to(c.const.astype(np.float32), norm_shape).reshape(-1))
        except ValueError:
            break
        out, last = user.outputs[0], user
    n = math.prod(norm_shape)
    gamma = params[0] if params else np.ones(n, np.float32)
    beta = params[1] if len(params) > 1 else np.zeros(n, np.float32)
    g = m.graph
    consts = [g.constant(f"{div.name}/gamma", gamma), g.constant(f"{div.name}/beta", beta)]
    _replace(g, out, "layernorm", [x, *consts], {"axis": axis, "eps": eps}, last)
    return True


# -- GELU and SiLU --------------------------------------------------------------------------------------
def _near(v: Value, want: float) -> bool:
    s = scalar(v)
    return s is not None and abs(s - want) <= 1e-4 * abs(want)


def _gelu_tail(m: _Matcher, t: Value, x: Value) -> tuple[Value, Node] | None:
    """Match x * 0.5 * (1 + t) (three association orders); return the result value and its node."""
    add = m.sole_use(t)
    if add is None or add.op != "binary_f32" or add.attrs.get("act") or add.attrs["kind"] != "add" or \
            not _near(_other(add, t) or t, 1.0):
        return None
    one_p = add.outputs[0]
    m1 = m.sole_use(one_p)
    if m1 is None or m1.op != "binary_f32" or m1.attrs.get("act") or m1.attrs["kind"] != "mul":
        return None
    o = _other(m1, one_p)
    half_x = m.node(o, "binary_f32", "mul") if o is not None else None
    if half_x is not None and x in half_x.inputs and _near(_other(half_x, x), 0.5):
        return m1.outputs[0], m1
    if o is x or _near(o, 0.5):
        m2 = m.sole_use(m1.outputs[0])
        if m2 is not None and m2.op == "binary_f32" and not m2.attrs.get("act") and m2.attrs["kind"] == "mul":
            rest = _other(m2, m1.outputs[0])
            if (o is x and _near(rest, 0.5)) or (o is not x and rest is x):
                return m2.outputs[0], m2
    return None


def _fuse_gelu_erf(m: _Matcher, erf: Node) -> bool:
    pre = m.prod.get(id(erf.inputs[0]))
    if pre is None or pre.op != "binary_f32" or pre.attrs.get("act") or not (
            (pre.attrs["kind"] == "div" and _near(pre.inputs[1], math.sqrt(2))) or
            (pre.attrs["kind"] == "mul" and _near(pre.inputs[1], 1 / math.sqrt(2)))):
        return False
    x = pre.inputs[0]
    hit = _gelu_tail(m, erf.outputs[0], x)
    if hit is None:
        return False
    _replace(m.graph, hit[0], "gelu", [x], {"approximate": "none"}, hit[1])
    return True


def _fuse_gelu_tanh(m: _Matcher, th: Node) -> bool:
    """tanh(c * (x + 0.044715 * x^3)) with c = sqrt(2/pi) and x^3 as pow(x, 3) (the form exporters write)."""
    scale = m.node(th.inputs[0], "binary_f32", "mul")
    if scale is None or not _near(scale.inputs[1], math.sqrt(2 / math.pi)):
        return False
    inner = m.node(scale.inputs[0], "binary_f32", "add")
    if inner is None:
        return False
    for x, cubic in (inner.inputs, inner.inputs[::-1]):
        k = m.node(cubic, "binary_f32", "mul")
        if k is None or not _near(k.inputs[1], 0.044715):
            continue
        c3 = m.node(k.inputs[0], "binary_f32", "pow")
        if c3 is not None and c3.inputs[0] is x and scalar(c3.inputs[1]) == 3.0:
            hit = _gelu_tail(m, th.outputs[0], x)
            if hit is not None:
                _replace(m.graph, hit[0], "gelu", [x], {"approximate": "tanh"}, hit[1])
                return True
    return False


def _fuse_silu(m: _Matcher, mul: Node) -> bool:
    a, b = mul.inputs
    for x, s in ((a, b), (b, a)):
        sig = m.prod.get(id(s))
        if sig is not None and sig.op == "epilogue_act" and sig.attrs["act"][0] == "sigmoid" and \
                sig.inputs[0] is x:
            # an activation like relu: fuse_activations moves it into the producer's epilogue (a conv)
            _replace(m.graph, mul.outputs[0], "epilogue_act", [x], {"act": ("silu", 0.0, 0.0)}, mul)
            return True
    return False


# -- MatMul with a transposed B, attention ----------------------------------------------------------------
def _swaps_last_two(perm: list[int]) -> bool:
    r = len(perm)
    return r >= 2 and perm == [*range(r - 2), r - 1, r - 2]


def _fold_transpose_b(m: _Matcher, mm: Node) -> bool:
    t = m.node(mm.inputs[1], "transpose")
    if t is None or mm.inputs[1].is_const or not _swaps_last_two(list(t.attrs["perm"])):
        return False
    mm.inputs = [mm.inputs[0], t.inputs[0]]
    mm.attrs["trans_b"] = not mm.attrs.get("trans_b", False)
    return True


def _through_transpose(m: _Matcher, v: Value, perm: list[int]) -> tuple[Value, list[int]]:
    """(stored value, perm) for the logical tensor ``v.transpose(perm)``, looking through a Transpose."""
    t = m.node(v, "transpose")
    if t is not None:
        return t.inputs[0], [t.attrs["perm"][i] for i in perm]
    return v, perm


def _fuse_attention(m: _Matcher, sm: Node) -> bool:
    s = sm.inputs[0]
    rank = len(s.type.shape)
    if rank not in (3, 4) or sm.attrs["log"] or sm.attrs["axis"] != rank - 1 or s.type.dtype != "float32":
        return False
    mask, scale = None, 1.0
    add = m.node(s, "binary_f32", "add")
    if add is not None and not add.inputs[1].type.shape[-1:] == (1,) and \
            len(add.inputs[1].type.shape) <= rank and add.inputs[0].type.shape == s.type.shape:
        mask, s = add.inputs[1], add.inputs[0]
    sc = m.prod.get(id(s))
    if sc is not None and sc.op == "binary_f32" and not sc.attrs.get("act") and \
            sc.attrs["kind"] in ("mul", "div"):
        c = scalar(sc.inputs[1])
        if c is not None and sc.inputs[0].type.shape == s.type.shape:
            scale, s = (c if sc.attrs["kind"] == "mul" else 1.0 / c), sc.inputs[0]
    qk = m.node(s, "matmul")
    pv = m.sole_use(sm.outputs[0])
    if qk is None or pv is None or pv.op != "matmul" or pv.attrs.get("act") or pv.inputs[0] is not \
            sm.outputs[0] or pv.attrs.get("trans_b") or any(
            len(v.type.shape) != rank for v in (*qk.inputs, pv.inputs[1])):
        return False
    ident = list(range(rank))
    swapped = [*ident[:-2], rank - 1, rank - 2]
    q, q_perm = _through_transpose(m, qk.inputs[0], ident)
    k, k_perm = _through_transpose(m, qk.inputs[1], ident if qk.attrs.get("trans_b") else swapped)
    v, v_perm = _through_transpose(m, pv.inputs[1], ident)
    y, y_perm, last = pv.outputs[0], ident, pv
    t = m.sole_use(y)
    if t is not None and t.op == "transpose":
        y, y_perm, last = t.outputs[0], list(np.argsort(t.attrs["perm"])), t
    if q_perm[-1] != rank - 1 or (mask is not None and mask.type.dtype != "float32"):
        return False
    node = _replace(m.graph, y, "attention", [q, k, v] + ([mask] if mask is not None else []),
                    {"scale": scale, "q_perm": q_perm, "k_perm": k_perm, "v_perm": v_perm,
                     "y_perm": [int(p) for p in y_perm]}, last)
    try:
        from ..ops import get as get_op

        get_op("attention").infer(node)
    except Exception:  # a shape the kernel cannot take: undo
        m.graph.replace_uses(node.outputs[0], y)
        m.graph.nodes.remove(node)
        return False
    return True


def _fold_gemm_bias(m: _Matcher, add: Node) -> bool:
    """gemm(x, w) + c with c a constant row vector [N]: the gemm's bias (MatMul + Add of exporters)."""
    y, c = add.inputs
    p = m.node(y, "gemm")  # first: a scalar ``y`` (no gemm made it) has no last axis to read
    if p is None or len(p.inputs) > 2 or m.sole_use(y) is not add or not c.is_const or \
            add.outputs[0].type.shape != y.type.shape or not is_row_bias(c.type.shape, y.type.shape[-1]):
        return False
    n = y.type.shape[-1]
    bias = np.broadcast_to(c.const.astype(np.float32).reshape(-1), (n,)).copy()
    p.inputs = [*p.inputs, m.graph.constant(f"{p.name}/bias", bias)]
    p.outputs = [add.outputs[0]]
    m.graph.nodes.remove(add)
    return True


def fuse_patterns(graph: Graph) -> bool:
    """One sweep per pattern family (later families see the earlier rewrites)."""
    changed = False
    rules = (("binary_f32", _fuse_layernorm, {"kind": "div"}), ("unary", _fuse_gelu_erf, {"kind": "erf"}),
             ("epilogue_act", _fuse_gelu_tanh, None), ("binary_f32", _fuse_silu, {"kind": "mul"}),
             ("matmul", _fold_transpose_b, None), ("softmax", _fuse_attention, None),
             ("binary_f32", _fold_gemm_bias, {"kind": "add"}))
    for op, rule, attrs in rules:
        for n in list(graph.nodes):
            if n in graph.nodes and n.op == op and (
                    attrs is None or all(n.attrs.get(k) == v for k, v in attrs.items())) and \
                    (op != "epilogue_act" or n.attrs["act"][0] == "tanh"):
                changed |= rule(_Matcher(graph), n)
    if changed:  # the matched subgraphs are dead now: later passes (fuse_activations) want sole consumers
        eliminate_dead(graph)
    return changed
