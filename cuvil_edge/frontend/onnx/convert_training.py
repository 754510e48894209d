"""``Gradient`` (ai.onnx.preview.training): reverse-mode derivatives built at import, as IR nodes.

By the time a Gradient node is reached its forward ops are already IR, so it differentiates the IR:
the nodes between ``xs`` and ``y`` are walked backwards, each op kind mapping the gradient of its output
to those of its inputs (``_RULES``); an op without a rule fails with ``UnsupportedOperator`` naming
that op and its node. The spec leaves a non-scalar ``y`` open: it is seeded with ones (the gradient of
``sum(y)``). When the Gradient's inputs are other tensors than the ones ``xs``/``zs`` name (the gradient
at another point), the forward ops are first re-run on them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...ir.graph import Node, Value
from .registry import ConvertContext, converter


class _Backward:
    """Emits the gradient nodes of one Gradient node (named after it and the forward node)."""

    def __init__(self, ctx: ConvertContext, fwd: Node) -> None:
        self.ctx, self.fwd = ctx, fwd
        self._n = 0

    def op(self, op: str, inputs: Sequence[Value], attrs: dict) -> Value:
        self._n += 1
        return self.ctx.emit1(op, inputs, attrs, name=f"{self.ctx.name}/d_{self.fwd.name}/{self._n}")

    def bin(self, kind: str, a: Value, b: Value) -> Value:
        return self.op("binary_f32", [a, b], {"kind": kind})

    def un(self, kind: str, a: Value) -> Value:
        return self.op("unary", [a], {"kind": kind})

    def one_minus(self, v: Value) -> Value:
        return self.bin("sub", self.ctx.constant(np.ones((), np.float32), "one"), v)

    def unbroadcast(self, g: Value, shape: tuple[int, ...]) -> Value:
        """``g`` summed over the axes a binary op broadcast an operand of ``shape`` along."""
        if g.type.shape == shape:
            return g
        lead = len(g.type.shape) - len(shape)
        axes = [i for i, d in enumerate(g.type.shape) if i < lead or (shape[i - lead] == 1 and d != 1)]
        if axes:
            g = self.op("reduce", [g], {"kind": "sum", "axes": axes, "keepdims": True})
        return self.op("reshape", [g], {"shape": list(shape)})


Rule = Callable[[_Backward, Value, list[bool]], list[Value | None]]


def _binary(b: _Backward, g: Value, wants: list[bool]) -> list[Value | None]:
    x, y = b.fwd.inputs
    kind = b.fwd.attrs["kind"]
    if kind not in ("add", "sub", "mul", "div"):
        raise _no_rule(b, f"binary {kind!r}")
    gx = gy = None
    if wants[0]:
        gx = b.bin(kind, g, y) if kind in ("mul", "div") else g
    if wants[1]:
        if kind == "add":
            gy = g
        elif kind == "sub":
            gy = b.un("neg", g)
        elif kind == "mul":
            gy = b.bin("mul", g, x)
        else:  # d(x/y)/dy = -(x/y)/y
            gy = b.un("neg", b.bin("div", b.bin("mul", g, b.fwd.outputs[0]), y))
    return [None if d is None else b.unbroadcast(d, v.type.shape) for d, v in ((gx, x), (gy, y))]


#: unary kind -> d(out)/d(in) from the node's input x and output y (neg and copy pass g on directly)
_UNARY_DERIV: dict[str, Callable[[_Backward, Value, Value], Value]] = {
    "exp": lambda b, x, y: y,
    "log": lambda b, x, y: b.un("reciprocal", x),
    "sqrt": lambda b, x, y: b.un("reciprocal", b.bin("add", y, y)),
    "square": lambda b, x, y: b.bin("add", x, x),
    "reciprocal": lambda b, x, y: b.un("neg", b.un("square", y)),
}


def _unary(b: _Backward, g: Value, wants: list[bool]) -> list[Value | None]:
    kind = b.fwd.attrs["kind"]
    if kind in ("neg", "copy"):
        return [b.un(kind, g)]
    if kind not in _UNARY_DERIV:
        raise _no_rule(b, f"unary {kind!r}")
    return [b.bin("mul", g, _UNARY_DERIV[kind](b, b.fwd.inputs[0], b.fwd.outputs[0]))]


def _act(b: _Backward, g: Value, wants: list[bool]) -> list[Value | None]:
    kind, y = b.fwd.attrs["act"][0], b.fwd.outputs[0]
    if kind == "sigmoid":  # y (1 - y)
        return [b.bin("mul", g, b.bin("mul", y, b.one_minus(y)))]
    if kind == "tanh":  # 1 - y^2
        return [b.bin("mul", g, b.one_minus(b.un("square", y)))]
    raise _no_rule(b, f"activation {kind!r}")


def _reshape(b: _Backward, g: Value, wants: list[bool]) -> list[Value | None]:
    return [b.op("reshape", [g], {"shape": list(b.fwd.inputs[0].type.shape)})]


_RULES: dict[str, Rule] = {"binary_f32": _binary, "unary": _unary, "epilogue_act": _act, "reshape": _reshape}


def _no_rule(b: _Backward, what: str = "") -> Exception:
    what = f"{what} (IR op {b.fwd.op!r})" if what else f"IR op {b.fwd.op!r}"
    return b.ctx.unsupported(f"cannot differentiate {what} of node {b.fwd.name!r}")


def _replay(ctx: ConvertContext, moved: dict[int, Value]) -> None:
    """Re-run, on the values in ``moved`` (id of the old value -> new one), every node downstream of
    them; ``moved`` gains each re-run node's outputs."""
    for node in list(ctx.graph.nodes):
        if any(id(v) in moved for v in node.inputs):
            outs = ctx.emit(node.op, [moved.get(id(v), v) for v in node.inputs], node.attrs,
                            name=f"{ctx.name}/at/{node.name}", n_outputs=len(node.outputs))
            moved.update(zip(map(id, node.outputs), outs))


@converter("Gradient")
def gradient(ctx: ConvertContext) -> None:
    xs = ctx.texts("xs")
    named, y_name = xs + ctx.texts("zs"), ctx.attr("y")
    if ctx.n_inputs != len(named):
        raise ctx.unsupported(f"{ctx.n_inputs} inputs for {len(named)} names in xs and zs")
    for n in [*named, y_name]:
        if n not in ctx.env:
            raise ctx.unsupported(f"{n!r} (named in xs, zs or y) is not a tensor defined before it")
    points = [ctx.input(i) for i in range(len(named))]
    moved = {id(ctx.env[n]): p for n, p in zip(named, points) if ctx.env[n] is not p}
    if moved:
        _replay(ctx, moved)
    y = moved.get(id(ctx.env[y_name]), ctx.env[y_name])
    x_values = points[:len(xs)]
    for n, x in zip(named, x_values):
        if x.is_const:
            raise ctx.unsupported(f"the gradient with respect to {n!r}, a build-time constant, is not "
                                  "supported (its forward ops were folded at import)")
    if y.type.dtype != "float32":
        raise ctx.unsupported(f"y {y_name!r} is {y.type.dtype}: gradients are computed in float32 only")
    ctx.materialise(4 * (y.type.size + sum(x.type.size for x in x_values)))  # the seed, zero gradients
    grads = _backward(ctx, y, x_values)
    ctx.set_outputs(*(grads.get(id(x)) or ctx.constant(np.zeros(x.type.shape, np.float32), f"d_{n}")
                      for n, x in zip(named, x_values)))


def _backward(ctx: ConvertContext, y: Value, xs: Sequence[Value]) -> dict[int, Value]:
    """id(value) -> d sum(y) / d value, for every value on a path from ``xs`` to ``y``."""
    depends = {id(x) for x in xs}
    for node in ctx.graph.nodes:
        if any(id(v) in depends for v in node.inputs):
            depends.update(id(v) for v in node.outputs)
    grads: dict[int, Value] = {}
    if id(y) in depends:
        grads[id(y)] = ctx.constant(np.ones(y.type.shape, np.float32), "seed")
    for node in reversed(list(ctx.graph.nodes)):
        g = next((grads[id(v)] for v in node.outputs if id(v) in grads), None)
        if g is None:
            continue
        b = _Backward(ctx, node)
        rule = _RULES.get(node.op)
        fused = node.op != "epilogue_act" and (node.attrs.get("act") or ("none",))[0] != "none"
        if rule is None or len(node.outputs) != 1 or fused:
            raise _no_rule(b)
        wants = [id(v) in depends and v.type.dtype == "float32" for v in node.inputs]
        for v, want, gv in zip(node.inputs, wants, rule(b, g, wants)):
            if want and gv is not None:
                grads[id(v)] = b.bin("add", grads[id(v)], gv) if id(v) in grads else gv
    return grads
