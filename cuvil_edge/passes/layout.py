"""Layout simplification: remove data movement that moves nothing.

Runs after constant folding. Consecutive transposes compose into one; identity transposes, full
slices, one-way splits and one-input concats disappear; a transpose that only moves size-1 dims is
the same bytes in a new shape, so it becomes a ``reshape`` (an alias: no code, no memory).
"""

from __future__ import annotations

from ..ir.graph import Graph, Node


def _is_noop(n: Node) -> bool:
    shape = n.inputs[0].type.shape
    if n.op == "transpose":
        return list(n.attrs["perm"]) == list(range(len(shape)))
    if n.op == "slice":
        return list(n.attrs["starts"]) == [0] * len(shape) and list(n.attrs["ends"]) == list(shape) \
            and list(n.attrs["steps"]) == [1] * len(shape)
    return n.op in ("concat", "split") and len(n.inputs) == 1 and len(n.outputs) == 1


def _moves_only_unit_dims(n: Node) -> bool:
    shape = n.inputs[0].type.shape
    order = [p for p in n.attrs["perm"] if shape[p] != 1]
    return order == sorted(order)


def simplify_layout(graph: Graph) -> bool:
    changed = False
    producers = graph.producers()
    for n in list(graph.nodes):
        if n.op == "concat" and len(n.inputs) > 1 and any(v.type.size == 0 for v in n.inputs):
            kept = [v for v in n.inputs if v.type.size] or n.inputs[:1]
            changed |= len(kept) != len(n.inputs)
            n.inputs = kept
        if n.op == "transpose":
            p = producers.get(id(n.inputs[0]))
            if p is not None and p.op == "transpose":
                n.attrs["perm"] = [p.attrs["perm"][i] for i in n.attrs["perm"]]
                n.inputs = [p.inputs[0]]
                changed = True
        if n.op in ("transpose", "slice", "concat", "split") and _is_noop(n):
            graph.replace_uses(n.outputs[0], n.inputs[0])
            graph.nodes.remove(n)
            changed = True
        elif n.op == "transpose" and _moves_only_unit_dims(n):
            n.op, n.attrs = "reshape", {"shape": list(n.outputs[0].type.shape)}
            changed = True
    return changed
