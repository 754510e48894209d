"""Loop and If (a run-time condition; a build-time one is inlined by the importer) -> ``loop`` / ``if``.

Bounds: a Loop runs at most ``max_trips`` iterations, its trip count when that is a build-time constant,
else the one the user gives (``max_trip_count={node name: n}`` at import; the smaller of the two when
both are known). A loop with neither fails here, naming the node. A loop that may stop before its bound
(run-time trip count or condition) has scan outputs of run-time length: they are allocated for the bound,
rows past the trips run are zero, and a model output among them gets a ``<name>:length`` output.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, TensorType, Value
from .importer import import_subgraph
from .registry import ConvertContext, converter


def _scalar(ctx: ConvertContext, v: Value, dtype: str, what: str) -> Value:
    if v.type.dtype != dtype or v.type.size != 1:
        raise ctx.unsupported(f"the {what} must be one {dtype}, got {v.type}")
    return v


def _bound(ctx: ConvertContext, trips: Value | None) -> int:
    given = ctx.graph.meta.get("max_trip_count", {}).get(ctx.name)
    known = None if trips is None or not trips.is_const else max(0, int(trips.const.reshape(-1)[0]))
    if known is None and given is None:
        raise ctx.unsupported(
            "its trip count is not known at build time, so its scan outputs cannot be sized: give a bound "
            f"with max_trip_count={{{ctx.name!r}: N}} (CuvilModel.load / import_onnx)")
    return min(b for b in (known, given) if b is not None)


@converter("Loop")
def _loop(ctx: ConvertContext) -> None:
    trips = _scalar(ctx, ctx.input(0), "int64", "trip count") if ctx.has_input(0) else None
    bound = _bound(ctx, trips)
    cond = _scalar(ctx, ctx.input(1), "bool", "condition") if ctx.has_input(1) else ctx.constant(
        np.array(True), "cond")
    carried = [ctx.input(i) for i in range(2, ctx.n_inputs)]
    formal = [TensorType((), "int64"), TensorType((), "bool"), *(v.type for v in carried)]
    n = len(carried)
    declared = ctx.attr("body")
    if len(declared.input) != 2 + n or len(declared.output) < 1 + n:
        raise ctx.unsupported(f"the body takes {len(declared.input)} inputs and gives {len(declared.output)} "
                              f"outputs for {n} carried values (it takes {2 + n}, gives at least {1 + n})")
    body, captures = import_subgraph(ctx, "body", formal)
    for k, (v_in, v_out) in enumerate(zip(body.inputs[2:2 + n], body.outputs[1:1 + n])):
        if v_in.type != v_out.type:
            raise ctx.unsupported(f"loop-carried value {k} changes from {v_in.type} to {v_out.type} "
                                  "between iterations (static shapes only)")
    kept, captures, fixed = _hoist_invariants(body, carried, captures)
    trip_input = trips if trips is not None else ctx.constant(np.array(bound, np.int64), "trips")
    outs = ctx.emit("loop", [trip_input, cond, *(carried[k] for k in kept), *captures],
                    {"body": body, "max_trips": bound, "n_carried": len(kept)},
                    n_outputs=len(body.outputs) + 1)
    cont, scans = body.outputs[0], outs[len(kept):-1]
    runs_to_bound = trips is not None and trips.is_const and cond.is_const and bool(cond.const) and (
        cont is body.inputs[1] or (cont.is_const and bool(cont.const.reshape(-1)[0])))
    if not runs_to_bound:
        padded = ctx.graph.meta.setdefault("padded_scans", {})
        padded.update((id(v), (outs[-1], ctx.name)) for v in scans)
    finals = iter(outs[:len(kept)])
    ctx.set_outputs(*(fixed[k] if k in fixed else next(finals) for k in range(n)), *scans)


def _hoist_invariants(body: Graph, carried: list[Value], captures: list[Value]
                      ) -> tuple[list[int], list[Value], dict[int, Value]]:
    """Carried values the body passes through unchanged (exporters carry weights that way) leave the
    carried set: a constant is read in place, a run-time value becomes a capture (copied once, not per
    iteration), and the loop's final value is the initial one. Returns the indices still carried, the
    captures and the fixed finals by index; ``body`` is rewritten to match."""
    n = len(carried)
    kept, fixed, moved = [], {}, []
    for k, init in enumerate(carried):
        v_in = body.inputs[2 + k]
        if body.outputs[1 + k] is not v_in:
            kept.append(k)
            continue
        fixed[k] = init
        if init.is_const:
            body.replace_uses(v_in, init)
        else:
            moved.append(k)
    body.inputs = [*body.inputs[:2], *(body.inputs[2 + k] for k in kept + moved), *body.inputs[2 + n:]]
    body.outputs = [body.outputs[0], *(body.outputs[1 + k] for k in kept), *body.outputs[1 + n:]]
    return kept, [*(carried[k] for k in moved), *captures], fixed


@converter("If")
def _if(ctx: ConvertContext) -> None:
    cond = _scalar(ctx, ctx.input(0), "bool", "condition")
    then, then_caps = import_subgraph(ctx, "then_branch", [])
    other, other_caps = import_subgraph(ctx, "else_branch", [])
    have, want = [str(v.type) for v in then.outputs], [str(v.type) for v in other.outputs]
    if have != want:
        raise ctx.unsupported(f"its branches return different types ({have} vs {want}): both must have "
                              "one static shape")
    outs = ctx.emit("if", [cond, *then_caps, *other_caps],
                    {"then": then, "else": other, "n_then": len(then_caps)}, n_outputs=len(then.outputs))
    ctx.set_outputs(*outs)

