"""Comparisons, logic and bit ops, selection, IF and WHILE. IF becomes the IR's ``if`` (only the taken
branch runs): each branch subgraph is converted into its own graph whose inputs are the run-time operands
(constant operands, weights mostly, are used directly, so the branch's convs and FCs still see build-time
weights). WHILE becomes the IR's ``loop`` (``while_``)."""

from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, TensorType, Value
from ..onnx.convert_control import hoist_invariants
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
    graph = Graph(f"{ctx.name}/branch{index}")
    args, captures = [], []
    for k in range(1, len(ctx.op.inputs)):
        if ctx.op.inputs[k] in ctx.state.held_quant:
            raise ctx.unsupported(f"operand {k} is quantized (IF passes real values only)")
        held = ctx.held(k)
        if held.value.is_const:
            args.append(held)
            continue
        outer = ctx.input(k)
        graph.inputs.append(graph.value(f"{ctx.name}/arg{k}", outer.type))
        captures.append(outer)
        args.append(Laid(graph.inputs[-1], identity(len(outer.type.shape))))
    graph.outputs = call_subgraph(ctx, index, graph, args, "branch")
    return graph, captures


def call_subgraph(ctx: TflContext, index: int, graph: Graph, args: list[Laid], what: str) -> list[Value]:
    """Subgraph ``index`` (a branch, a loop's cond or body, a composite's decomposition) converted into
    ``graph``, its inputs bound to ``args``; returns its outputs in TFLite order. One with side effects is
    refused: it may be converted more than once, or run a number of times only known at run time."""
    from .importer import convert_subgraph

    subgraphs = ctx.state.variables.model.subgraphs
    if not 0 <= index < len(subgraphs) or subgraphs[index] is ctx.sg:
        raise ctx.unsupported(f"{what} subgraph {index} (the model has {len(subgraphs)})")
    sg = subgraphs[index]
    stateful = sorted({op.op for op in sg.operators} & _STATEFUL)
    if stateful:
        raise ctx.unsupported(f"{what} subgraph {index} uses {stateful}")
    if len(sg.inputs) != len(args):
        raise ctx.unsupported(f"{what} subgraph {index} takes {len(sg.inputs)} inputs, {ctx.op.op} passes "
                              f"{len(args)}")
    quantized = [sg.tensors[i].name for i in sg.inputs if sg.tensors[i].quant is not None]
    if quantized:
        raise ctx.unsupported(f"{what} subgraph {index} takes quantized inputs {quantized} (real values "
                              "only)")
    sub = ImportState(ctx.state.variables, persistent=False)
    sub.env.update(zip(sg.inputs, args))
    convert_subgraph(graph, sub, sg)
    outs = []
    for idx in sg.outputs:
        if idx not in sub.env:
            raise ctx.unsupported(f"{what} subgraph {index} never writes its output {sg.tensors[idx].name!r}")
        probe = TflOperator(-1, "OUTPUT", -1, None, [idx], [], {}, b"")
        outs.append(TflContext(graph, sub, sg, probe).input(0))
    return outs


# -- WHILE: the IR's ``loop`` ----------------------------------------------------------------------------
#: the most iterations a WHILE runs: one still going then traps (``InferenceTrap``) rather than hang
WHILE_MAX_TRIPS = 1 << 20


@converter("WHILE")
def while_(ctx: TflContext) -> None:
    """``while cond(v): v = body(v)`` as a ``loop`` bounded by ``WHILE_MAX_TRIPS``: the cond subgraph runs
    once on the initial values (the loop's first condition) and again inside the body on its results
    (the next one). Values the body passes through unchanged are captured, not carried."""
    cond_sg, body_sg = (int(ctx.options[k]) for k in ("CondSubgraphIndex", "BodySubgraphIndex"))
    quantized = [k for k, t in enumerate(ctx.op.inputs) if t in ctx.state.held_quant]
    if quantized:
        raise ctx.unsupported(f"loop values {quantized} are quantized (WHILE carries real values only)")
    init = [ctx.input(k) for k in range(len(ctx.op.inputs))]
    (go,) = _condition(ctx, cond_sg, ctx.graph, init)
    body = Graph(f"{ctx.name}/body")
    body.inputs = [body.value("iteration", TensorType((), "int64")),
                   body.value("cond", TensorType((), "bool")),
                   *(body.value(f"{ctx.name}/v{k}", v.type) for k, v in enumerate(init))]
    outs = call_subgraph(ctx, body_sg, body, [_laid(v) for v in body.inputs[2:]], "body")
    have, want = [str(v.type) for v in outs], [str(v.type) for v in init]
    if have != want:
        raise ctx.unsupported(f"its body turns {want} into {have} (loop values keep their static types)")
    body.outputs = [*_condition(ctx, cond_sg, body, outs), *outs]
    kept, captures, fixed = hoist_invariants(body, init, [])
    trips = ctx.constant(np.array(WHILE_MAX_TRIPS, np.int64), "max_trips")
    loop = ctx.emit("loop", [trips, go, *(init[k] for k in kept), *captures],
                    {"body": body, "max_trips": WHILE_MAX_TRIPS, "n_carried": len(kept), "at_bound": "trap"},
                    n_outputs=len(kept) + 1)
    finals = iter(loop[:len(kept)])
    for k in range(len(init)):
        ctx.set_output(fixed[k] if k in fixed else next(finals), None, k)


def _laid(v: Value) -> Laid:
    return Laid(v, identity(len(v.type.shape)))


def _condition(ctx: TflContext, index: int, graph: Graph, values: list[Value]) -> list[Value]:
    """The cond subgraph on ``values`` in ``graph``: its one bool."""
    out = call_subgraph(ctx, index, graph, [_laid(v) for v in values], "cond")
    if len(out) != 1 or out[0].type.dtype != "bool" or out[0].type.size != 1:
        raise ctx.unsupported(f"its cond subgraph {index} returns {[str(v.type) for v in out]}, not one bool")
    return out
