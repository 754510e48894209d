"""Loop, Scan and If (a run-time condition; a build-time one is inlined by the importer) -> ``loop`` /
``if``. A Scan becomes a Loop over its scan axis (``_scan_loop``), so it needs no op of its own.

Bounds: a Loop runs at most ``max_trips`` iterations, its trip count when that is a build-time constant,
else the one the user gives (``max_trip_count={node name: n}`` at import; the smaller of the two when
both are known). A loop with neither fails here, naming the node. A loop that may stop before its bound
(run-time trip count or condition) has scan outputs of run-time length: they are allocated for the bound,
rows past the trips run are zero, and a model output among them gets a ``<name>:length`` output.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, TensorType, Value
from ...ir.limits import check_count
from .containers import HELD_OUTPUTS, layout, regrouped
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
        hint = ("its trip count is not known at build time, so its scan outputs cannot be sized: give a "
                f"bound with max_trip_count={{{ctx.name!r}: N}} (CuvilModel.load / import_onnx)")
        if trips is not None:  # run-time trip count: binding the inputs it comes from fixes it too
            raise ctx.not_constant(0, hint)
        raise ctx.unsupported(hint)
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
    kept, captures, fixed = hoist_invariants(body, carried, captures)
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


def hoist_invariants(body: Graph, carried: list[Value], captures: list[Value]
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


# -- Scan: a Loop over the scan axis ----------------------------------------------------------------------
def _reversed_rows(ctx: ConvertContext, x: Value, tag: str) -> Value:
    """``x`` with axis 0 reversed (a backward scan reads and writes its rows last to first)."""
    shape = x.type.shape
    norm = [slice(None, None, -1).indices(shape[0]), *((0, d, 1) for d in shape[1:])]
    return ctx.emit1("slice", [x], {"starts": [n[0] for n in norm], "ends": [n[1] for n in norm],
                                    "steps": [n[2] for n in norm]}, name=f"{ctx.name}/{tag}")


def _rows_first(ctx: ConvertContext, x: Value, axis: int, backward: bool, tag: str) -> Value:
    """Scan input ``x`` with its scan axis first, in the order the iterations read it."""
    if axis:
        rest = [d for d in range(len(x.type.shape)) if d != axis]
        x = ctx.emit1("transpose", [x], {"perm": [axis, *rest]}, name=f"{ctx.name}/{tag}_t")
    return _reversed_rows(ctx, x, f"{tag}_rev") if backward else x


def _rows_to(ctx: ConvertContext, y: Value, axis: int, backward: bool, tag: str) -> Value:
    """A scan output stacked on axis 0 (iteration order) moved to ``axis``, reversed when backward."""
    y = _reversed_rows(ctx, y, f"{tag}_rev") if backward else y
    if not axis:
        return y
    perm = [*range(1, axis + 1), 0, *range(axis + 1, len(y.type.shape))]
    return ctx.emit1("transpose", [y], {"perm": perm}, name=f"{ctx.name}/{tag}_t")


def _scan_loop(ctx: ConvertContext, states: list[Value], rows: list[Value], tag: str) -> list[Value]:
    """One scan as a ``Loop`` node built from the Scan's own body: each scan input (``rows``, scan axis
    first) is read row by row with a Gather on the iteration number ahead of the body's nodes, so the
    Loop converter imports, checks and hoists the body as it does a Loop's. Returns the final states
    then the scan outputs stacked on axis 0."""
    from onnx import GraphProto, TensorProto, helper

    n, scan = len(states), ctx.attr("body")
    env, pre = dict(ctx.env), f"{ctx.name}/{tag}"
    env.update({f"{pre}/s{k}": v for k, v in enumerate(states)})
    env.update({f"{pre}/x{j}": v for j, v in enumerate(rows)})
    env[f"{pre}/n"] = ctx.constant(np.array(rows[0].type.shape[0], np.int64), f"{tag}_trips")
    it, go = f"{pre}/i", f"{pre}/go"
    body = GraphProto()
    body.CopyFrom(scan)
    del body.input[:], body.output[:], body.node[:]
    body.input.extend([helper.make_tensor_value_info(it, TensorProto.INT64, []),
                       helper.make_tensor_value_info(go, TensorProto.BOOL, []), *scan.input[:n]])
    body.output.extend([helper.make_tensor_value_info(go, TensorProto.BOOL, []), *scan.output])
    body.node.extend([helper.make_node("Gather", [f"{pre}/x{j}", it], [inp.name], name=f"{pre}/row{j}")
                      for j, inp in enumerate(scan.input[n:])])
    body.node.extend(scan.node)
    outs = [f"{pre}/y{k}" for k in range(len(scan.output))]
    loop = helper.make_node("Loop", [f"{pre}/n", "", *(f"{pre}/s{k}" for k in range(n))], outs, name=pre,
                            body=body)
    _loop(ConvertContext(ctx.graph, env, loop, ctx.opset, ctx.declared))
    return [env[o] for o in outs]


def _scan_counts(ctx: ConvertContext, n_states: int, m: int) -> int:
    """How many scan outputs the body gives, after checking it matches the node's states and inputs."""
    scan = ctx.attr("body")
    if m < 1:
        raise ctx.unsupported(f"num_scan_inputs={m}: a scan needs an input to take its length from")
    if n_states < 0 or len(scan.input) != n_states + m or len(scan.output) < n_states:
        raise ctx.unsupported(f"its body takes {len(scan.input)} inputs and gives {len(scan.output)} outputs "
                              f"for {n_states} states and {m} scan inputs")
    return len(scan.output) - n_states


def _axes(ctx: ConvertContext, name: str, count: int, ranks: list[int]) -> list[int]:
    """Int-list attribute ``name`` as one axis per tensor (of ``ranks``), 0 each when absent."""
    got = ctx.attr(name)
    got = [0] * count if got is None else [int(a) for a in got]
    if len(got) != count:
        raise ctx.unsupported(f"{name}={got} needs {count} values")
    return [ctx.axis(a, r, name) for a, r in zip(got, ranks)]


def _directions(ctx: ConvertContext, name: str, count: int) -> list[bool]:
    """Int-list attribute ``name`` as backward flags, forward each when absent."""
    got = ctx.attr(name)
    got = [0] * count if got is None else [int(d) for d in got]
    if len(got) != count or any(d not in (0, 1) for d in got):
        raise ctx.unsupported(f"{name}={got} needs {count} values, each 0 (forward) or 1 (backward)")
    return [bool(d) for d in got]


def _trips(ctx: ConvertContext, rows: list[Value]) -> None:
    """Every scan input must give one row per iteration: their lengths agree."""
    lengths = {x.type.shape[0] for x in rows}
    if len(lengths) != 1:
        raise ctx.unsupported(f"its scan inputs have different lengths {sorted(lengths)}")


@converter("Scan")
def _scan(ctx: ConvertContext) -> None:
    """Scan as a Loop whose trip count is the scan axis' length (static). Opset 8's batched form (axis
    0 a batch, scan axis 1, ``sequence_lens`` absent or all full) runs one loop per batch row."""
    m = int(ctx.attr("num_scan_inputs"))
    if ctx.opset < 9:
        _scan8(ctx, m)
        return
    n = ctx.n_inputs - m
    k = _scan_counts(ctx, n, m)
    xs = [ctx.input(i) for i in range(n, ctx.n_inputs)]
    axes = _axes(ctx, "scan_input_axes", m, [len(x.type.shape) for x in xs])
    rows = [_rows_first(ctx, x, a, d, f"x{j}") for j, (x, a, d) in enumerate(
        zip(xs, axes, _directions(ctx, "scan_input_directions", m)))]
    _trips(ctx, rows)
    outs = _scan_loop(ctx, [ctx.input(i) for i in range(n)], rows, "loop")
    ys = outs[n:]
    out_axes = _axes(ctx, "scan_output_axes", k, [len(y.type.shape) for y in ys])
    ctx.set_outputs(*outs[:n], *(_rows_to(ctx, y, a, d, f"y{j}") for j, (y, a, d) in enumerate(
        zip(ys, out_axes, _directions(ctx, "scan_output_directions", k)))))


def _scan8(ctx: ConvertContext, m: int) -> None:
    n = ctx.n_inputs - 1 - m
    k = _scan_counts(ctx, n, m)
    states, xs = [ctx.input(i) for i in range(1, 1 + n)], [ctx.input(i) for i in range(1 + n, ctx.n_inputs)]
    if any(len(x.type.shape) < 2 for x in xs) or len({v.type.shape[0] for v in states + xs}) != 1:
        raise ctx.unsupported("its states and scan inputs must share batch axis 0 (scan inputs: [batch, "
                              f"length, ...]), got {[v.type.shape for v in states + xs]}")
    length = xs[0].type.shape[1]
    if ctx.has_input(0) and not np.array_equal(ctx.const(0), np.full(ctx.input(0).type.shape, length)):
        raise ctx.unsupported(f"sequence_lens other than the full length {length} of every batch row")
    backward = _directions(ctx, "directions", m)
    per_row = []
    for b in range(check_count(xs[0].type.shape[0], ctx.name)):
        row = ctx.constant(np.array(b, np.int64), f"b{b}")
        pick = [ctx.emit1("gather", [v, row], {"axis": 0}, name=f"{ctx.name}/b{b}_{i}")
                for i, v in enumerate(states + xs)]
        rows = [_rows_first(ctx, x, 0, d, f"b{b}_x{j}") for j, (x, d) in enumerate(zip(pick[n:], backward))]
        _trips(ctx, rows)
        per_row.append(_scan_loop(ctx, pick[:n], rows, f"b{b}"))
    ctx.set_outputs(*(_stack(ctx, [outs[i] for outs in per_row], f"out{i}") for i in range(n + k)))


def _stack(ctx: ConvertContext, parts: list[Value], tag: str) -> Value:
    """``parts`` (one per batch row) stacked on a new axis 0."""
    shape = [1, *parts[0].type.shape]
    ones = [ctx.emit1("reshape", [p], {"shape": shape}, name=f"{ctx.name}/{tag}_{b}")
            for b, p in enumerate(parts)]
    return ones[0] if len(ones) == 1 else ctx.emit1("concat", ones, {"axis": 0}, name=f"{ctx.name}/{tag}")


@converter("If")
def _if(ctx: ConvertContext) -> None:
    cond = _scalar(ctx, ctx.input(0), "bool", "condition")
    then, then_caps = import_subgraph(ctx, "then_branch", [], sequences=True)
    other, other_caps = import_subgraph(ctx, "else_branch", [], sequences=True)
    held = then.meta.pop(HELD_OUTPUTS)
    if layout(held) != layout(other.meta.pop(HELD_OUTPUTS)):  # which of them depends on the condition
        raise ctx.not_constant(0, "its branches return sequences of different lengths, or an empty and a "
                               "present optional")
    have, want = [str(v.type) for v in then.outputs], [str(v.type) for v in other.outputs]
    if have != want:
        raise ctx.unsupported(f"its branches return different types ({have} vs {want}): both must have "
                              "one static shape")
    outs = ctx.emit("if", [cond, *then_caps, *other_caps],
                    {"then": then, "else": other, "n_then": len(then_caps)}, n_outputs=len(then.outputs))
    ctx.set_outputs(*regrouped(held, outs))

