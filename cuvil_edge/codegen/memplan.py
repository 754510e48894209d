"""Static memory planning: every runtime tensor gets a fixed offset in one arena.

Liveness is measured in node indices. Three kinds of buffer sharing, all links from a value to the
value that owns its buffer plus a byte offset:
- alias ops (reshape family) are views of their input;
- in-place ops reuse an input that dies at that node (same size);
- a concat whose inputs are contiguous slices of its output (all dims before the axis are 1) is
  elided: each producer writes straight into its slice of the output, nested concats included.
Persistent state (``StateVar``, TFLite resource variables) needs no planning of its own: its read value is
a graph input, pinned for the whole run like every input, so its buffer is never shared and nothing but
the end of ``run()`` (which copies the new value in) and a host-side reset writes it.
Loop/if bodies are planned on their own (recursively) and their whole arena is one region alive during
their node only (branches of an ``if`` share it: one runs). Owners are placed greedy by size (largest
first, lowest free offset not overlapping a live conflict), as TFLite's planner does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ops import get as get_op

ALIGN = 64


@dataclass
class MemoryPlan:
    offsets: dict[int, int]  # id(value) -> arena offset (links resolved)
    scratch: dict[int, int]  # id(node) -> arena offset of its scratch area
    arena_size: int
    roots: dict[int, Value]  # id(value) -> the value that owns its buffer
    elided: set[int] = field(default_factory=set)  # id(node) of nodes that need no code (concat views)

    def offset(self, v: Value) -> int:
        return self.offsets[id(v)]


@dataclass(frozen=True)
class StateVar:
    """A tensor that persists across runs: ``graph.inputs[input]`` is the value the previous run left
    (``init`` before the first and after a reset), ``graph.outputs[output]`` the value this run leaves.
    Held in ``graph.meta["states"]`` by index, so passes that replace an output value keep it."""

    name: str
    input: int
    output: int
    init: np.ndarray


def graph_states(graph: Graph) -> list[StateVar]:
    return list(graph.meta.get("states", ()))


def user_io(graph: Graph) -> tuple[list[Value], list[Value]]:
    """Graph inputs and outputs that the caller feeds and reads: all but the states'."""
    states = graph_states(graph)
    ins, outs = {s.input for s in states}, {s.output for s in states}
    return ([v for i, v in enumerate(graph.inputs) if i not in ins],
            [v for i, v in enumerate(graph.outputs) if i not in outs])


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _concat_views(graph: Graph) -> tuple[dict[int, tuple[Value, int]], set[int]]:
    """Inputs of contiguous concats that can live inside the concat output: value -> (output, offset)."""
    producers = graph.producers()
    protected = {id(v) for v in (*graph.inputs, *graph.outputs)}
    links: dict[int, tuple[Value, int]] = {}
    elided: set[int] = set()
    for n in graph.nodes:
        if n.op != "concat":
            continue
        y = n.outputs[0]
        ax = n.attrs.get("axis", 0) % len(y.type.shape)
        if int(np.prod(y.type.shape[:ax], dtype=np.int64)) != 1:
            continue
        ok = len({id(v) for v in n.inputs}) == len(n.inputs) and all(
            not v.is_const and id(v) not in protected and id(v) not in links and id(v) in producers
            and not get_op(producers[id(v)].op).alias for v in n.inputs)
        if not ok:
            continue
        off = 0
        for v in n.inputs:
            links[id(v)] = (y, off)
            off += v.type.nbytes
        elided.add(id(n))
    return links, elided


def plan_memory(graph: Graph) -> MemoryPlan:
    n_nodes = len(graph.nodes)
    link, elided = _concat_views(graph)  # id(value) -> (value it lives in, byte offset)
    no_inplace = set(link)  # a concat slice's producer must write the slice itself
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    pinned: set[int] = set()  # graph inputs/outputs: never shared in place

    def owner(v: Value) -> tuple[Value, int]:
        off = 0
        while id(v) in link:
            v, o = link[id(v)]
            off += o
        return v, off

    def touch(v: Value, t: int) -> None:
        r = id(owner(v)[0])
        first[r] = min(first.get(r, t), t)
        last[r] = max(last.get(r, t), t)

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
        out = n.outputs[0]
        if src is not None and not src.is_const and id(out) not in link and (op.alias or (
                op.inplace and id(out) not in no_inplace
                and _can_share(src, n, t, last_use, owner, pinned, graph))):
            link[id(out)] = owner(src)
        for o in n.outputs:
            touch(o, t)
    for v in graph.outputs:
        touch(v, n_nodes)
        pinned.add(id(owner(v)[0]))

    # Buffers to place: owners plus per-node scratch areas (alive only during their node).
    items: list[tuple[int, int, int, object]] = []  # (size, first, last, key)
    owners = {id(owner(v)[0]): owner(v)[0] for v in graph.values() if not v.is_const}
    for key, v in owners.items():
        if key in first:
            items.append((_align(v.type.nbytes), first[key], last[key], ("v", key)))
    bodies: dict[int, list[MemoryPlan]] = {}
    for t, n in enumerate(graph.nodes):
        op = get_op(n.op)
        if op.scratch is not None:
            size = op.scratch(n)
            if size:
                items.append((_align(size), t, t, ("s", id(n))))
        if n.subgraphs:
            bodies[id(n)] = [plan_memory(sub) for sub in n.subgraphs]
            items.append((max(p.arena_size for p in bodies[id(n)]), t, t, ("b", id(n))))

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
        r, off = owner(v)
        roots[id(v)] = r
        offsets[id(v)] = where.get(("v", id(r)), 0) + off
    scratch = {key[1]: off for key, off in where.items() if key[0] == "s"}
    for node_id, subplans in bodies.items():
        base = where[("b", node_id)]
        for sp in subplans:
            offsets.update((k, base + o) for k, o in sp.offsets.items())
            scratch.update((k, base + o) for k, o in sp.scratch.items())
            roots.update(sp.roots)
            elided |= sp.elided
    return MemoryPlan(offsets, scratch, _align(arena), roots, elided)


def _can_share(src: Value, node: Node, t: int, last_use: dict[int, int], owner, pinned: set[int],
               graph: Graph) -> bool:
    """In place is legal when the input's whole buffer dies here, has the output's exact size, and no
    other input of the node reads a different view of it (a kernel writing element i may still read
    another input's element j: Add(concat(a, b), a) broadcasts a over the buffer it overwrites)."""
    r, off = owner(src)
    if off or id(r) in pinned or r.type.nbytes != node.outputs[0].type.nbytes:
        return False
    for v in node.inputs[1:]:
        if not v.is_const and owner(v)[0] is r and (owner(v)[1], v.type.shape) != (0, src.type.shape):
            return False
    return all(last_use.get(id(v), -1) <= t for v in graph.values() if owner(v)[0] is r)


__all__ = ["ALIGN", "MemoryPlan", "StateVar", "graph_states", "plan_memory", "user_io"]
