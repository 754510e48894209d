"""Control flow: ``loop`` (ONNX Loop) and ``if`` (ONNX If with a run-time condition).

Each holds its bodies as IR graphs in its attrs. A body reads outer values only through its own inputs
(explicit captures: the node's trailing inputs), so passes, the verifier and the memory planner treat
it as a graph like the model's. Lowered to one C loop / branch whose body is the body nodes' own code,
emitted by their usual emitters on one thread (the node never splits, so kernels see ``nt == 1``).
Captures are copied into the body's own input buffers once per run of the node; carried values are
copied from the body's outputs back into its inputs after each step (the planner keeps body inputs and
outputs in buffers of their own, so these copies never overlap).

``loop`` inputs: trip count (int64, size 1), condition (bool, size 1), carried initial values, captures.
attrs: ``body`` (inputs: iteration, condition, carried, captures; outputs: condition, carried, scans),
``max_trips`` (static bound: scan outputs are allocated for it), ``n_carried``. Outputs: final carried
values, scan outputs ``[max_trips, ...]`` (rows past the trips run are zero) and the trips run (int64).
``at_bound="trap"`` (TFLite's WHILE, which has no trip count): a loop whose condition still holds after
``max_trips`` iterations traps instead of returning.

``if`` inputs: condition, then-branch captures, else-branch captures; attrs ``then``, ``else``,
``n_then`` (how many captures the then-branch takes). Both branches return the same static types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ShapeError
from ..ir.graph import Graph, Node, TensorType, Value
from .registry import OpDef, node_code, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _same_types(what: str, have: Sequence[Value], want: Sequence[Value]) -> None:
    if len(have) != len(want) or any(a.type != b.type for a, b in zip(have, want)):
        raise ShapeError(f"{what}: {[str(v.type) for v in have]} != {[str(v.type) for v in want]}")


def _flag(v: Value, dtype: str, what: str) -> None:
    if v.type.dtype != dtype or v.type.size != 1:
        raise ShapeError(f"{what} must be one {dtype}, got {v.type}")


def _body_code(body: Graph, ctx: EmitContext) -> list[str]:
    """The body's nodes as straight-line C for thread 0: emitted as if for a one-thread module."""
    node, threads = ctx.node, ctx.threads
    ctx.threads = 1
    try:
        codes = [node_code(n, ctx) for n in body.nodes]
    finally:
        ctx.node, ctx.threads = node, threads
    return [line for code in codes if code for line in code.strip().splitlines()]


def _copies(ctx: EmitContext, src: Sequence[Value], dst: Sequence[Value],
            used: Graph | None = None) -> list[str]:
    """``memmove`` each src into dst (only the dst inputs ``used`` reads, when given)."""
    read = None if used is None else {id(v) for v in used.outputs} | {
        id(v) for n in used.nodes for v in n.inputs}
    return [f"memmove({ctx.ptr(d, 'unsigned char')}, {ctx.ptr(s, 'unsigned char')}, {d.type.nbytes});"
            for s, d in zip(src, dst) if d.type.nbytes and (read is None or id(d) in read)]


# -- loop --------------------------------------------------------------------------------------------
def _loop_infer(node: Node) -> list[TensorType]:
    body, n = node.attrs["body"], node.attrs["n_carried"]
    _flag(node.inputs[0], "int64", f"{node.name}: the trip count")
    _flag(node.inputs[1], "bool", f"{node.name}: the condition")
    if [str(v.type) for v in body.inputs[:2]] != ["int64[]", "bool[]"]:
        raise ShapeError(f"{node.name}: body inputs start {[str(v.type) for v in body.inputs[:2]]}, "
                         "want the iteration (int64[]) and condition (bool[])")
    _same_types(f"{node.name}: body inputs vs carried values and captures", body.inputs[2:], node.inputs[2:])
    _flag(body.outputs[0], "bool", f"{node.name}: the body's condition")
    _same_types(f"{node.name}: carried values out of the body vs into it",
                body.outputs[1:1 + n], body.inputs[2:2 + n])
    scans = [TensorType((node.attrs["max_trips"], *v.type.shape), v.type.dtype) for v in body.outputs[1 + n:]]
    return [*(v.type for v in body.inputs[2:2 + n]), *scans, TensorType((), "int64")]


def _loop_emit(node: Node, ctx: EmitContext) -> str:
    body, n, bound = node.attrs["body"], node.attrs["n_carried"], node.attrs["max_trips"]
    trips, cond = node.inputs[0], node.inputs[1]
    carried_in, carried_out = body.inputs[2:2 + n], body.outputs[1:1 + n]
    scans, done = body.outputs[1 + n:], node.outputs[-1]
    ctx.use_kernel("i64-loop")
    limit = str(bound) if trips.is_const else f"*{ctx.ptr(trips)} < {bound} ? *{ctx.ptr(trips)} : {bound}"
    step = [f"memcpy({ctx.ptr(y, 'unsigned char')} + cuvil_i * {s.type.nbytes}, "
            f"{ctx.ptr(s, 'unsigned char')}, {s.type.nbytes});"
            for s, y in zip(scans, node.outputs[n:-1]) if s.type.nbytes]
    tail = [f"memset({ctx.ptr(y, 'unsigned char')} + cuvil_i * {s.type.nbytes}, 0, "
            f"(size_t)({bound} - cuvil_i) * {s.type.nbytes});"
            for s, y in zip(scans, node.outputs[n:-1]) if s.type.nbytes]
    return "\n".join([
        "{",
        *_copies(ctx, node.inputs[2:2 + n], carried_in),  # all: they are the outputs if no trip runs
        *_copies(ctx, node.inputs[2 + n:], body.inputs[2 + n:], body),
        f"int64_t cuvil_n = {limit}, cuvil_i = 0;",
        f"uint8_t cuvil_go = *{ctx.ptr(cond)} != 0;",
        "for (; cuvil_i < cuvil_n && cuvil_go; cuvil_i++) {",
        f"  *{ctx.ptr(body.inputs[0])} = cuvil_i;",
        f"  *{ctx.ptr(body.inputs[1])} = cuvil_go;",
        *("  " + line for line in _body_code(body, ctx)),
        f"  cuvil_go = *{ctx.ptr(body.outputs[0])} != 0;",
        *("  " + line for line in _copies(ctx, carried_out, carried_in)),
        *("  " + line for line in step),
        "}",
        *(["if (cuvil_go) __builtin_trap();  /* still going at its bound */"]
          if node.attrs.get("at_bound") == "trap" else []),
        *_copies(ctx, carried_in, node.outputs[:n]),
        *tail,
        f"*{ctx.ptr(done)} = cuvil_i;",
        "}",
    ])


register(OpDef("loop", _loop_infer, None, _loop_emit))


# -- if ----------------------------------------------------------------------------------------------
def _branches(node: Node) -> tuple[tuple[Graph, list[Value]], tuple[Graph, list[Value]]]:
    k = 1 + node.attrs["n_then"]
    return (node.attrs["then"], node.inputs[1:k]), (node.attrs["else"], node.inputs[k:])


def _if_infer(node: Node) -> list[TensorType]:
    _flag(node.inputs[0], "bool", f"{node.name}: the condition")
    (then, then_caps), (other, other_caps) = _branches(node)
    _same_types(f"{node.name}: then-branch inputs vs captures", then.inputs, then_caps)
    _same_types(f"{node.name}: else-branch inputs vs captures", other.inputs, other_caps)
    _same_types(f"{node.name}: then-branch outputs vs else-branch outputs", then.outputs, other.outputs)
    return [v.type for v in then.outputs]


def _if_emit(node: Node, ctx: EmitContext) -> str:
    ctx.use_kernel("b-if")
    arms = []
    for body, caps in _branches(node):
        code = [*_copies(ctx, caps, body.inputs, body), *_body_code(body, ctx),
                *_copies(ctx, body.outputs, node.outputs)]
        arms.append("\n".join("  " + line for line in code))
    return f"if (*{ctx.ptr(node.inputs[0])}) {{\n{arms[0]}\n}} else {{\n{arms[1]}\n}}"


register(OpDef("if", _if_infer, None, _if_emit))
