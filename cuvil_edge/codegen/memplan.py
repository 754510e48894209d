"""Static memory planning: every runtime tensor gets a fixed offset in one arena.

Liveness is measured in node indices. Alias ops (reshape family) share their input's buffer and
extend its lifetime; in-place ops reuse an input that dies at that node. Placement is greedy by
size (largest first, lowest free offset not overlapping a live conflict), as TFLite's planner does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import Graph, Node, Value
from ..ops import get as get_op

ALIGN = 64


@dataclass
class MemoryPlan:
    offsets: dict[int, int]  # id(value) -> arena offset (aliases resolved)
    scratch: dict[int, int]  # id(node) -> arena offset of its scratch area
    arena_size: int
    roots: dict[int, Value]  # id(value) -> the value that owns its buffer

    def offset(self, v: Value) -> int:
        return self.offsets[id(v)]


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(graph: Graph) -> MemoryPlan:
    n_nodes = len(graph.nodes)
    root: dict[int, Value] = {}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    pinned: set[int] = set()  # graph inputs/outputs: never shared in place

    def owner(v: Value) -> Value:
        return root.get(id(v), v)

    def touch(v: Value, t: int) -> None:
        r = owner(v)
        first[id(r)] = min(first.get(id(r), t), t)
        last[id(r)] = max(last.get(id(r), t), t)

    for v in graph.inputs:  # inputs stay intact for the whole run: callers may run() again on them
        touch(v, -1)
        touch(v, n_nodes)
        pinned.add(id(v))
    last_use: dict[int, int] = {}
    for t, n in enumerate(graph.nodes):
        for v in n.inputs:
            if not v.is_const:
                last_use[id(v)] = t
    for v in graph.outputs:
        last_use[id(v)] = n_nodes

    for t, n in enumerate(graph.nodes):
        op = get_op(n.op)
        for v in n.inputs:
            if not v.is_const:
                touch(v, t)
        src = n.inputs[0] if n.inputs else None
        if src is not None and not src.is_const and (op.alias or (
                op.inplace and _can_share(src, n, t, last_use, owner, pinned, graph))):
            root[id(n.outputs[0])] = owner(src)
            if op.alias and id(owner(src)) in pinned:
                pass  # reading through a view of an input is fine
            for o in n.outputs[1:]:
                touch(o, t)
        else:
            for o in n.outputs:
                touch(o, t)
        for o in n.outputs:
            touch(o, t)
    for v in graph.outputs:
        touch(v, n_nodes)
        pinned.add(id(owner(v)))

    # Buffers to place: owners plus per-node scratch areas (alive only during their node).
    items: list[tuple[int, int, int, object]] = []  # (size, first, last, key)
    owners = {id(owner(v)): owner(v) for v in graph.values() if not v.is_const}
    for key, v in owners.items():
        if key in first:
            items.append((_align(v.type.nbytes), first[key], last[key], ("v", key)))
    for t, n in enumerate(graph.nodes):
        op = get_op(n.op)
        if op.scratch is not None:
            size = op.scratch(n)
            if size:
                items.append((_align(size), t, t, ("s", id(n))))

    items.sort(key=lambda it: (-it[0], it[1]))
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    where: dict[object, int] = {}
    for size, lo, hi, key in items:
        conflicts = sorted((o, s) for o, s, f, l_ in placed if not (l_ < lo or f > hi))
        off = 0
        for o, s in conflicts:
            if off + size <= o:
                break
            off = max(off, o + s)
        placed.append((off, size, lo, hi))
        where[key] = off
    arena = max((o + s for o, s, _, _ in placed), default=0)

    offsets: dict[int, int] = {}
    roots: dict[int, Value] = {}
    for v in graph.values():
        if v.is_const:
            continue
        r = owner(v)
        roots[id(v)] = r
        offsets[id(v)] = where.get(("v", id(r)), 0)
    scratch = {key[1]: off for key, off in where.items() if key[0] == "s"}
    return MemoryPlan(offsets, scratch, _align(arena), roots)


def _can_share(src: Value, node: Node, t: int, last_use: dict[int, int], owner, pinned: set[int],
               graph: Graph) -> bool:
    """In place is legal when the input's buffer dies here and has the output's exact size."""
    r = owner(src)
    if id(r) in pinned or r.type.nbytes != node.outputs[0].type.nbytes:
        return False
    # every value sharing r's buffer must be dead after this node
    return all(last_use.get(id(v), -1) <= t for v in graph.values() if owner(v) is r)
