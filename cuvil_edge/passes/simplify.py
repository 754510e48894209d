"""Graph simplification passes: folding, channel_affine merging, activation fusion, dead code, output
buffers."""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ops import get as get_op

#: ops whose kernels apply a fused activation (``act`` attr) in their epilogue
FUSABLE = {"conv", "conv_transpose", "gemm", "matmul", "channel_affine", "binary_f32"}


def fold_constants(graph: Graph) -> bool:
    changed = False
    for n in list(graph.nodes):
        op = get_op(n.op)
        if op.fold is None or not all(v.is_const for v in n.inputs):
            continue
        arrays = op.fold(n, [v.const for v in n.inputs])
        for out, arr in zip(n.outputs, arrays):
            graph.replace_uses(out, graph.constant(out.name, np.asarray(arr, out.type.dtype).reshape(
                out.type.shape)))
        graph.nodes.remove(n)
        changed = True
    return changed


def _per_channel(c: Value, x: Value) -> np.ndarray | None:
    """c's values as one number per channel (axis 1 of x), if c broadcasts that way onto x."""
    rank = len(x.type.shape)
    if rank < 2 or len(c.type.shape) > rank or c.type.dtype != "float32":
        return None
    shape = (1,) * (rank - len(c.type.shape)) + c.type.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, x.type.shape[1]):
        return None
    return np.broadcast_to(c.const.reshape(-1), (x.type.shape[1],)).astype(np.float32)


def canonicalize_affine(graph: Graph) -> bool:
    """Mul/Add/Sub/Div by a per-channel constant becomes ``channel_affine`` (y = a*x + b) so that chains of
    them merge into one pass and fold into a preceding conv (Caffe2-style BN + scale layers). A node marked
    ``exact`` keeps its own rounding: its model defines the result step by step (TFLite FAKE_QUANT)."""
    changed = False
    for n in graph.nodes:
        if n.op != "binary_f32" or n.attrs.get("act") or n.attrs.get("exact") or \
                n.attrs["kind"] not in ("mul", "add", "sub", "div"):
            continue
        x, c = n.inputs
        if c.is_const and not x.is_const and x.type.shape == n.outputs[0].type.shape:
            ch = _per_channel(c, x)
            if ch is None or (n.attrs["kind"] == "div" and not ch.all()):
                continue  # (x / 0 stays a division: its inf/nan pattern is the kernel's to produce)
            ones, zeros = np.ones_like(ch), np.zeros_like(ch)
            kind = n.attrs["kind"]  # only this kind's pair is computed: 1 / ch of a mul's zeros would warn
            a, b = (ch, zeros) if kind == "mul" else (ones, ch) if kind == "add" else \
                (ones, -ch) if kind == "sub" else (1 / ch, zeros)
            n.op, n.attrs = "channel_affine", {}
            n.inputs = [x, graph.constant(f"{n.name}/a", a), graph.constant(f"{n.name}/b", b)]
            changed = True
    return changed


def _constant_affine(n: Node) -> bool:
    """A channel_affine whose a and b are constants and no activation: one that merges (a norm's
    run-time scale and bias stay a pass of their own)."""
    return n.op == "channel_affine" and not n.attrs.get("act") and all(v.is_const for v in n.inputs[1:])


def fold_channel_affine(graph: Graph) -> bool:
    changed = False
    producers, uses = graph.producers(), graph.consumers()
    for aff in [n for n in graph.nodes if _constant_affine(n)]:
        x, a, b = aff.inputs
        p = producers.get(id(x))
        if p is not None and _constant_affine(p) and graph.sole_consumer(x, uses) is aff:
            # affine after affine: one pass over the data
            pa, pb = p.inputs[1].const, p.inputs[2].const
            av, bv = a.const, b.const
            p.inputs = [p.inputs[0], graph.constant(f"{p.name}/a2", pa * av),
                        graph.constant(f"{p.name}/b2", pb * av + bv)]
            graph.replace_uses(aff.outputs[0], x)
            graph.nodes.remove(aff)
            producers, uses = graph.producers(), graph.consumers()
            changed = True
            continue
        if p is None or p.op not in ("conv", "gemm") or p.attrs.get("act") or \
                graph.sole_consumer(x, uses) is not aff or not p.inputs[1].is_const:
            continue
        if p.op == "gemm" and len(x.type.shape) != 2:
            continue
        av, bv = a.const.astype(np.float32), b.const.astype(np.float32)
        w = p.inputs[1].const.astype(np.float32)
        m = av.size
        bias = p.inputs[2].const.astype(np.float32) if len(p.inputs) > 2 else np.zeros(m, np.float32)
        w = w * (av.reshape((-1,) + (1,) * (w.ndim - 1)) if p.op == "conv" else av.reshape(1, -1))
        p.inputs = [p.inputs[0], graph.constant(f"{p.name}/w_bn", w), graph.constant(f"{p.name}/b_bn",
                                                                                    bias * av + bv)]
        graph.replace_uses(aff.outputs[0], x)
        graph.nodes.remove(aff)
        producers, uses = graph.producers(), graph.consumers()
        changed = True
    return changed


def fuse_activations(graph: Graph) -> bool:
    changed = False
    producers, uses = graph.producers(), graph.consumers()
    for act in [n for n in graph.nodes if n.op == "epilogue_act"]:
        x = act.inputs[0]
        p = producers.get(id(x))
        if p is None or p.op not in FUSABLE or p.attrs.get("act") or len(p.outputs) != 1 or \
                graph.sole_consumer(x, uses) is not act:
            continue
        p.attrs["act"] = act.attrs["act"]
        p.outputs = [act.outputs[0]]
        graph.nodes.remove(act)
        producers, uses = graph.producers(), graph.consumers()
        changed = True
    return changed


def eliminate_dead(graph: Graph) -> bool:
    live = {id(v) for v in graph.outputs}
    keep: list[Node] = []
    for n in reversed(graph.nodes):
        if any(id(o) in live for o in n.outputs):
            keep.append(n)
            live.update(id(v) for v in n.inputs)
    changed = len(keep) != len(graph.nodes)
    graph.nodes = keep[::-1]
    return changed


def materialize_outputs(graph: Graph) -> bool:
    """Outputs that are constants, graph inputs or repeated get a copy, so each has its own buffer."""
    changed = False
    seen: set[int] = set()
    inputs = {id(v) for v in graph.inputs}
    for i, v in enumerate(graph.outputs):
        if v.is_const or id(v) in inputs or id(v) in seen or _aliases_input(graph, v):
            src = v
            if v.is_const:
                src = graph.constant(f"{v.name}/const", v.const)
            out = graph.value(f"{v.name}/out", v.type)
            graph.add_node("copy", f"{v.name}/copy", [src], [out])
            graph.outputs[i] = out
            changed = True
        seen.add(id(graph.outputs[i]))
    return changed


def _aliases_input(graph: Graph, v: Value) -> bool:
    """True when v is a reshape view whose buffer is a graph input."""
    producers = graph.producers()
    inputs = {id(x) for x in graph.inputs}
    while id(v) in producers and get_op(producers[id(v)].op).alias:
        v = producers[id(v)].inputs[0]
    return id(v) in inputs
