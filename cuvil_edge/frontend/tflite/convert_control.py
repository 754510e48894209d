"""Comparisons, logic and bit ops, selection and IF. IF becomes the IR's ``if`` (only the taken branch
runs): each branch subgraph is converted into its own graph whose inputs are the run-time operands
(constant operands, weights mostly, are used directly, so the branch's convs and FCs still see build-time
weights)."""

from __future__ import annotations

from ...ir.graph import Graph, Value
from .layout import Laid, identity
from .reader import TflOperator
from .registry import ImportState, TflContext, converter

_COMPARE = {"GREATER": "gt", "GREATER_EQUAL": "ge", "LESS": "lt", "LESS_EQUAL": "le", "EQUAL": "eq"}
#: operators a branch may not hold: both branches are converted, so a side effect must not be
_STATEFUL = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"})


@converter(*_COMPARE)
def compare(ctx: TflContext) -> None:
    (a, b), perm = ctx.aligned([0, 1])
    ctx.set_output(ctx.emit1("compare", [a, b], {"kind": _COMPARE[ctx.op.op]}), perm)


@converter("NOT_EQUAL")
def not_equal(ctx: TflContext) -> None:
    (a, b), perm = ctx.aligned([0, 1])
    eq = ctx.emit1("compare", [a, b], {"kind": "eq"}, f"{ctx.name}/eq")
    ctx.set_output(ctx.emit1("logic", [eq], {"kind": "not"}), perm)


#: bool operands -> ``logic``; integer ones (the StableHLO AND, the bit ops) -> ``binary_loop``'s bit kinds
_LOGIC = {"LOGICAL_AND": "and", "LOGICAL_OR": "or", "LOGICAL_NOT": "not", "STABLEHLO_AND": "and"}
_BITS = {"STABLEHLO_AND": "bitand", "BITWISE_XOR": "bitxor", "RIGHT_SHIFT": "shr",
         "STABLEHLO_SHIFT_LEFT": "shl"}


@converter(*dict.fromkeys([*_LOGIC, *_BITS]))
def logic(ctx: TflContext) -> None:
    vals, perm = ctx.aligned(range(len(ctx.op.inputs)))
    if vals[0].type.dtype == "bool" and ctx.op.op in _LOGIC:
        ctx.set_output(ctx.emit1("logic", vals, {"kind": _LOGIC[ctx.op.op]}), perm)
    elif ctx.op.op in _BITS and len(vals) == 2:
        ctx.set_output(ctx.emit1("binary_loop", vals, {"kind": _BITS[ctx.op.op]}), perm)
    else:
        raise ctx.unsupported(f"{ctx.op.op} of {[v.type.dtype for v in vals]}")


@converter("SELECT", "SELECT_V2")
def select(ctx: TflContext) -> None:
    """``where(cond, x, y)``, broadcast (SELECT_V2; SELECT's equal shapes are a special case)."""
    (c, x, y), perm = ctx.aligned([0, 1, 2])
    ctx.set_output(ctx.emit1("where", [c, x, y]), perm)


@converter("IF")
def if_(ctx: TflContext) -> None:
    cond = ctx.input(0)
    if cond.type.dtype != "bool" or cond.type.size != 1:
        raise ctx.unsupported(f"the condition must be one bool, got {cond.type}")
    branches, captures = [], []
    for key in ("ThenSubgraphIndex", "ElseSubgraphIndex"):
        graph, caps = _branch(ctx, int(ctx.options.get(key, -1)))
        branches.append(graph)
        captures.append(caps)
    have, want = ([str(v.type) for v in g.outputs] for g in branches)
    if have != want:
        raise ctx.unsupported(f"its branches return different types ({have} vs {want})")
    if len(have) != len(ctx.op.outputs):
        raise ctx.unsupported(f"its branches return {len(have)} values for {len(ctx.op.outputs)} outputs")
    outs = ctx.emit("if", [cond, *captures[0], *captures[1]],
                    {"then": branches[0], "else": branches[1], "n_then": len(captures[0])},
                    n_outputs=len(have))
    for i, v in enumerate(outs):
        ctx.set_output(v, None, i)


def _branch(ctx: TflContext, index: int) -> tuple[Graph, list[Value]]:
    """Subgraph ``index`` as a graph over IF's operands 1..n, and the run-time operands it captures."""
    from .importer import convert_subgraph

    subgraphs = ctx.state.variables.model.subgraphs
    if not 0 <= index < len(subgraphs) or subgraphs[index] is ctx.sg:
        raise ctx.unsupported(f"branch subgraph {index} (the model has {len(subgraphs)})")
    sg = subgraphs[index]
    stateful = sorted({op.op for op in sg.operators} & _STATEFUL)
    if stateful:
        raise ctx.unsupported(f"branch subgraph {index} uses {stateful}")
    if len(sg.inputs) != len(ctx.op.inputs) - 1:
        raise ctx.unsupported(f"branch subgraph {index} takes {len(sg.inputs)} inputs, IF passes "
                              f"{len(ctx.op.inputs) - 1}")
    graph = Graph(f"{ctx.name}/branch{index}")
    sub = ImportState(ctx.state.variables, persistent=False)
    captures = []
    for k, idx in enumerate(sg.inputs, 1):
        if ctx.op.inputs[k] in ctx.state.held_quant:
            raise ctx.unsupported(f"operand {k} is quantized (IF passes real values only)")
        held = ctx.held(k)
        if held.value.is_const:
            sub.env[idx] = held
            continue
        outer = ctx.input(k)
        inner = graph.value(sg.tensors[idx].name, outer.type)
        graph.inputs.append(inner)
        captures.append(outer)
        sub.env[idx] = Laid(inner, identity(len(outer.type.shape)))
    convert_subgraph(graph, sub, sg)
    for idx in sg.outputs:
        if idx not in sub.env:
            raise ctx.unsupported(f"branch subgraph {index} never writes its output {sg.tensors[idx].name!r}")
        probe = TflOperator(-1, "OUTPUT", -1, None, [idx], [], {}, b"")
        graph.outputs.append(TflContext(graph, sub, sg, probe).input(0))
    return graph, captures
